/* Protobuf's wire encoding written by hand, for the answers that skip
 * protobuf-c's descriptor walk (plan_answer.c, answers.c): a key is the
 * field number << 3 | the wire type (0 varint, 1 fixed64, 2
 * length-delimited). Fields numbered 1..15 only:
 * their key is one byte. */
#ifndef CR_ANSWER_INTERNAL_H
#define CR_ANSWER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KEY_VARINT(n) ((uint8_t)((n) << 3))
#define KEY_FIXED64(n) ((uint8_t)((n) << 3 | 1))
#define KEY_LEN(n) ((uint8_t)((n) << 3 | 2))

/* Bytes of v as a varint: 1..10, by its leading zero bits (7 bits a
 * byte), with no branch on its width (an owner's hash: 9 or 10 bytes at
 * random, a million times in a Plan's answer). */
static inline size_t varint_len(uint64_t v)
{
    static const uint8_t by_clz[64] = {
        10, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 5,
        5,  5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
        1,  1, 1, 1};
    return by_clz[__builtin_clzll(v | 1)];
}

/* Writes v as a varint at p (room for varint_len(v) bytes); returns the
 * byte after it. */
static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Writes d's 8 bytes at p, little-endian as protobuf's fixed64 is,
 * whatever the host; returns the byte after them. */
static inline uint8_t *put_double(uint8_t *p, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(bits >> (8 * i));
    return p;
}

#endif
