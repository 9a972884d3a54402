/* CRC32C (Castagnoli), as the crc32c package computes it (BODYCRC): table-driven in
 * software, with SSE4.2's crc32 instruction where the CPU has it. One source, included by
 * both extension modules that check bodies (store/_speedups.c writes and replays records,
 * ferrymq/codec/_speedups.c decodes Fetch answers for Spark). Everything here is static:
 * each module gets its own copy and calls crc32c_choose() once when it is imported.
 */
#ifndef FERRYMQ_CODEC_CRC32C_H
#define FERRYMQ_CODEC_CRC32C_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc32c_table[8][256];

static void
crc32c_init_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][n] = (crc32c_table[t - 1][n] >> 8) ^
                                 crc32c_table[0][crc32c_table[t - 1][n] & 0xFF];
}

static uint32_t
crc32c_software(uint32_t crc, const unsigned char *p, Py_ssize_t n)
{
    crc = ~crc;
    while (n >= 8) {
        uint32_t low = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                              (uint32_t)p[3] << 24);
        crc = crc32c_table[7][low & 0xFF] ^ crc32c_table[6][(low >> 8) & 0xFF] ^
              crc32c_table[5][(low >> 16) & 0xFF] ^ crc32c_table[4][low >> 24] ^
              crc32c_table[3][p[4]] ^ crc32c_table[2][p[5]] ^ crc32c_table[1][p[6]] ^
              crc32c_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc32c_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t
crc32c_sse42(uint32_t crc, const unsigned char *p, Py_ssize_t n)
{
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __builtin_ia32_crc32di(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}
#endif

static uint32_t (*crc32c_of)(uint32_t, const unsigned char *, Py_ssize_t) = crc32c_software;

static void
crc32c_choose(void)
{
    crc32c_init_table();
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc32c_of = crc32c_sse42;
#endif
}

#endif
