/* The native floor's slave: bench.grpc_ceiling's SLAVE in C. Frames in (u32 length, then
 * the payload), 8 bytes back for each, one link at a time. */
#include "link.h"

int main(void) {
    static char payload[1 << 22];
    char ack[8] = {0};
    int listener = listen_and_tell();
    for (;;) {
        int link = accept(listener, 0, 0);
        uint32_t length;
        no_delay(link);
        while (read_all(link, &length, 4) == 0) {
            length = ntohl(length);
            if (length > sizeof payload || read_all(link, payload, length)) break;
            if (write_all(link, ack, sizeof ack)) break;
        }
        close(link);
    }
}
