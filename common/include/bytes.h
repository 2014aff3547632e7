/* cacheroute bytes: a growable little-endian writer and a bounds-checked
 * reader, for binary files whose parts several components write (the state
 * file). Every number is stored little-endian whatever the host, doubles as
 * their IEEE-754 bits, so a file reads back bit for bit on any platform.
 *
 * Errors are sticky: a failed put or get marks the buffer or cursor, later
 * calls do nothing, and the caller checks once at the end. Not thread-safe
 * on one object. */
#ifndef CR_BYTES_H
#define CR_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* A writer. Zero-initialise (CR_BUF_INIT), put, then take p and len (the
 * caller owns p and frees it) unless failed; cr_buf_free drops it. */
typedef struct cr_buf {
    uint8_t *p;
    size_t len, cap;
    int failed; /* out of memory: p holds what was written before */
} cr_buf;

#define CR_BUF_INIT {NULL, 0, 0, 0}

void cr_buf_free(cr_buf *b);
/* Makes room for n more bytes; -1 (and failed) when out of memory. */
int cr_buf_reserve(cr_buf *b, size_t n);
void cr_buf_put(cr_buf *b, const void *src, size_t n);
void cr_buf_u8(cr_buf *b, uint8_t v);
void cr_buf_u32(cr_buf *b, uint32_t v);
void cr_buf_u64(cr_buf *b, uint64_t v);
void cr_buf_f64(cr_buf *b, double v);
/* Overwrites 8 bytes at off (< len - 7) with v: a length known only once
 * what it measures is written. */
void cr_buf_patch_u64(cr_buf *b, size_t off, uint64_t v);

/* A reader over len bytes at p (not owned). A get past the end reads 0
 * and sets failed. */
typedef struct cr_cursor {
    const uint8_t *p;
    size_t left;
    int failed;
} cr_cursor;

cr_cursor cr_cursor_of(const void *p, size_t len);
uint8_t cr_get_u8(cr_cursor *c);
uint32_t cr_get_u32(cr_cursor *c);
uint64_t cr_get_u64(cr_cursor *c);
double cr_get_f64(cr_cursor *c);
/* The next n bytes, consumed, or NULL (and failed) when fewer are left. */
const uint8_t *cr_get_bytes(cr_cursor *c, size_t n);
/* 1 when at least n records of size bytes each are left: the check before
 * allocating for a count read from the data. */
int cr_cursor_holds(const cr_cursor *c, uint64_t n, size_t size);

#endif
