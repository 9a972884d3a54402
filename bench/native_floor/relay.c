/* The native floor's relay: bench.grpc_ceiling's REMOTING_SERVER for FERRY_PRODUCE, in C.
 * Each remoting request's body goes to every slave (argv: their ports) as one frame (u32
 * length, body); once each acknowledged (8 bytes) the request is answered SUCCESS with an
 * empty body and a JSON header carrying its opaque, which is all the SDK's channel reads.
 * One client at a time, blocking reads: the least a relay can do on this kernel. */
#include "link.h"

#define MAX_SLAVES 8

/* The request's opaque, from its header: at byte 5 of RocketMQ's binary header (code i16,
 * language i8, version i16, opaque i32), after "opaque": in a JSON one. */
static int opaque_of(const unsigned char *header, uint32_t length, int serialize_type) {
    if (serialize_type == 1) {
        int32_t opaque;
        if (length < 9) return 0;
        memcpy(&opaque, header + 5, 4);
        return (int)ntohl(opaque);
    }
    const char *found = memmem(header, length, "\"opaque\":", 9);
    return found ? atoi(found + 9) : 0;
}

static int answer(int client, int opaque) {
    char header[160];
    unsigned char frame[8 + sizeof header];
    int length = snprintf(header, sizeof header,
                          "{\"code\":0,\"extFields\":{},\"flag\":1,\"language\":\"JAVA\","
                          "\"opaque\":%d,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":0}",
                          opaque);
    uint32_t total = htonl(4 + length), mark = htonl(length); /* JSON: type 0 */
    memcpy(frame, &total, 4);
    memcpy(frame + 4, &mark, 4);
    memcpy(frame + 8, header, length);
    return write_all(client, frame, 8 + length);
}

int main(int argc, char **argv) {
    static unsigned char request[1 << 22];
    int slaves[MAX_SLAVES], count = argc - 1;
    if (count > MAX_SLAVES) return 2;
    for (int i = 0; i < count; i++) slaves[i] = dial(atoi(argv[i + 1]));
    int listener = listen_and_tell();
    for (;;) {
        int client = accept(listener, 0, 0);
        uint32_t total, mark;
        no_delay(client);
        while (read_all(client, &total, 4) == 0) {
            total = ntohl(total);
            if (total < 4 || total > sizeof request || read_all(client, request, total)) break;
            memcpy(&mark, request, 4);
            mark = ntohl(mark);
            uint32_t header_length = mark & 0xffffff;
            if (header_length > total - 4) break;
            uint32_t body_length = total - 4 - header_length;
            uint32_t head = htonl(body_length);
            char ack[8];
            for (int i = 0; i < count; i++) {
                struct iovec parts[2] = {{&head, 4}, {request + 4 + header_length, body_length}};
                if (writev(slaves[i], parts, 2) != (ssize_t)(4 + body_length)) return 1;
            }
            for (int i = 0; i < count; i++)
                if (read_all(slaves[i], ack, sizeof ack)) return 1;
            if (answer(client, opaque_of(request + 4, header_length, mark >> 24))) break;
        }
        close(client);
    }
}
