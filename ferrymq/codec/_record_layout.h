/* The CommitLog record's layout (ferrymq/codec/commitlog_record.py, byte for byte), for the
 * C that reads or writes records: one source, included by both extension modules
 * (tests/codec/test_speedups.py checks the exported values against the Python ones).
 */
#ifndef FERRYMQ_CODEC_RECORD_LAYOUT_H
#define FERRYMQ_CODEC_RECORD_LAYOUT_H

#define RECORD_HEADER_SIZE 88 /* everything up to and including BODYLENGTH */
#define RECORD_MIN_SIZE (RECORD_HEADER_SIZE + 3) /* empty body, topic and properties */
#define MESSAGE_MAGIC 0xDAA320A7u
#define BLANK_MAGIC 0xCBD43194u

/* Big-endian fields of the header, by offset. */
#define OFFSET_MAGIC 4
#define OFFSET_BODY_CRC 8
#define OFFSET_QUEUE_ID 12
#define OFFSET_QUEUE_OFFSET 20
#define OFFSET_BORN_TIMESTAMP 40
#define OFFSET_STORE_TIMESTAMP 56
#define OFFSET_BODY_LENGTH 84

#include <stddef.h>
#include <stdint.h>

/* The big-endian int64 at p: a record's offsets and times, a replication frame's header. */
static inline int64_t
read_int64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

/* Whether p[0:length) is a run of whole records, a blank one only last, the sizes adding up
 * to exactly `length`: the rule of chunk_problem_in_python (ferrymq/codec/commitlog_record.py),
 * which a slave applies before it appends a master's bytes (chunk_is_whole in
 * ferrymq/codec/_speedups.c, and the replica lane, ha/_replica_lane.c). */
static inline int
records_are_whole(const unsigned char *p, size_t length)
{
    size_t position = 0;
    while (position < length) {
        if (length - position < 8)
            return 0;
        int32_t size = (int32_t)(((uint32_t)p[position] << 24) | ((uint32_t)p[position + 1] << 16) |
                                 ((uint32_t)p[position + 2] << 8) | p[position + 3]);
        uint32_t magic = ((uint32_t)p[position + 4] << 24) | ((uint32_t)p[position + 5] << 16) |
                         ((uint32_t)p[position + 6] << 8) | p[position + 7];
        if (magic == BLANK_MAGIC) {
            if (size < 0 || position + (size_t)size != length)
                return 0;
        } else if (magic != MESSAGE_MAGIC || size < RECORD_MIN_SIZE) {
            return 0;
        }
        if ((size_t)size > length - position)
            return 0;
        position += (size_t)size;
    }
    return 1;
}

#endif
