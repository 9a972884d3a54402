/* What the native floor's relay and slave share: a loopback listener, a dial, and whole
 * reads and writes on blocking sockets. Scratch-grade on purpose: one peer at a time, and
 * any error ends the process (the benchmark kills it anyway). */
#ifndef NATIVE_FLOOR_LINK_H
#define NATIVE_FLOOR_LINK_H
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static inline void no_delay(int s) {
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A listener on 127.0.0.1 at a port the OS picks; its port is printed on the first line
 * of stdout, as the Python helpers of bench.grpc_ceiling print theirs. */
static inline int listen_and_tell(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (s < 0 || bind(s, (void *)&a, sizeof a) || listen(s, 16) || getsockname(s, (void *)&a, &n)) {
        perror("listen");
        exit(1);
    }
    printf("%d\n", ntohs(a.sin_port));
    fflush(stdout);
    return s;
}

static inline int dial(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || connect(s, (void *)&a, sizeof a)) {
        perror("connect");
        exit(1);
    }
    no_delay(s);
    return s;
}

static inline int read_all(int s, void *into, size_t n) {
    char *at = into;
    while (n) {
        ssize_t got = read(s, at, n);
        if (got <= 0) return -1;
        at += got;
        n -= got;
    }
    return 0;
}

static inline int write_all(int s, const void *from, size_t n) {
    const char *at = from;
    while (n) {
        ssize_t put = write(s, at, n);
        if (put <= 0) return -1;
        at += put;
        n -= put;
    }
    return 0;
}
#endif
