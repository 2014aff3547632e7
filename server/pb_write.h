/* Protobuf's wire encoding written by hand, for the answers that skip
 * protobuf-c's descriptor walk (plan_answer.c, record_answer.c): a key is
 * the field number << 3 | the wire type (0 varint, 1 fixed64, 2
 * length-delimited). Fields numbered 1..15 only: their key is one byte. */
#ifndef CR_PB_WRITE_H
#define CR_PB_WRITE_H

#include <stddef.h>
#include <stdint.h>

#define KEY_VARINT(n) ((uint8_t)((n) << 3))
#define KEY_FIXED64(n) ((uint8_t)((n) << 3 | 1))
#define KEY_LEN(n) ((uint8_t)((n) << 3 | 2))

/* Bytes of v as a varint: 1..10. */
static inline size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
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

#endif
