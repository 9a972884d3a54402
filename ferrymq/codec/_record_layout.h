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

#endif
