/* The little-endian writer and the bounds-checked reader. */
#include "bytes.h"

#include <stdlib.h>
#include <string.h>

void cr_buf_free(cr_buf *b)
{
    free(b->p);
    *b = (cr_buf)CR_BUF_INIT;
}

int cr_buf_reserve(cr_buf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (n <= b->cap - b->len)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
        if (cap > SIZE_MAX / 2) {
            b->failed = 1;
            return -1;
        }
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void cr_buf_put(cr_buf *b, const void *src, size_t n)
{
    if (n && cr_buf_reserve(b, n) == 0) {
        memcpy(b->p + b->len, src, n);
        b->len += n;
    }
}

static void le(uint8_t *out, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

void cr_buf_u8(cr_buf *b, uint8_t v) { cr_buf_put(b, &v, 1); }

void cr_buf_u32(cr_buf *b, uint32_t v)
{
    uint8_t x[4];
    le(x, v, 4);
    cr_buf_put(b, x, 4);
}

void cr_buf_u64(cr_buf *b, uint64_t v)
{
    uint8_t x[8];
    le(x, v, 8);
    cr_buf_put(b, x, 8);
}

void cr_buf_f64(cr_buf *b, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    cr_buf_u64(b, bits);
}

void cr_buf_patch_u64(cr_buf *b, size_t off, uint64_t v)
{
    if (!b->failed && off <= b->len && b->len - off >= 8)
        le(b->p + off, v, 8);
}

cr_cursor cr_cursor_of(const void *p, size_t len) { return (cr_cursor){p, len, 0}; }

const uint8_t *cr_get_bytes(cr_cursor *c, size_t n)
{
    if (c->failed || n > c->left) {
        c->failed = 1;
        return NULL;
    }
    const uint8_t *p = c->p;
    c->p += n;
    c->left -= n;
    return p;
}

static uint64_t get_le(cr_cursor *c, int n)
{
    const uint8_t *p = cr_get_bytes(c, (size_t)n);
    uint64_t v = 0;
    for (int i = 0; p && i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint8_t cr_get_u8(cr_cursor *c) { return (uint8_t)get_le(c, 1); }
uint32_t cr_get_u32(cr_cursor *c) { return (uint32_t)get_le(c, 4); }
uint64_t cr_get_u64(cr_cursor *c) { return get_le(c, 8); }

double cr_get_f64(cr_cursor *c)
{
    uint64_t bits = get_le(c, 8);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

int cr_cursor_holds(const cr_cursor *c, uint64_t n, size_t size)
{
    return !c->failed && size && n <= c->left / size;
}
