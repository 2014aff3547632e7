/* A repeated sub-message of {int64 1; double 2} (PlanRequest.rates: a
 * million SessionRates in a big Plan), or a repeated int64 field
 * (RecordArrivalRequest.owners: a thousand in a gateway's batch), decoded
 * straight from the wire into the caller's array, without protobuf-c's
 * per-element message, pointer and scan table, or its generic packed
 * parse; the other fields' bytes are gathered for protobuf-c.
 *
 * It parses as protobuf-c 1.4.1's unpack does (protobuf-c.c:
 * parse_tag_and_wiretype, scan_length_prefixed_data, the varint scan,
 * parse_uint64, the wire-type check of parse_required_member), and what it
 * is not sure of it refuses, so that the caller hands the whole message to
 * protobuf-c: refusing costs time, never a different answer. */
#include "wire.h"

#include <limits.h>
#include <string.h>

#include "internal.h"

/* A key: at most 5 bytes, the number in 32 bits; a first byte without
 * number bits (a 1-byte key numbered 0) is refused. Number 0 written in
 * more bytes protobuf-c takes, and the string check refuses later: 0 here,
 * for the caller to refuse. */
static int read_key(const uint8_t **p, const uint8_t *end, uint32_t *number, unsigned *type)
{
    const uint8_t *s = *p;
    size_t max = (size_t)(end - s) < 5 ? (size_t)(end - s) : 5;
    if (max == 0 || (s[0] & 0xf8) == 0)
        return -1;
    *type = s[0] & 7;
    uint32_t n = (s[0] & 0x7f) >> 3;
    for (size_t i = 0; i < max; i++) {
        if (i > 0)
            n |= (uint32_t)(s[i] & 0x7f) << (4 + 7 * (i - 1));
        if (!(s[i] & 0x80)) {
            *number = n;
            *p = s + i + 1;
            return 0;
        }
    }
    return -1;
}

/* A varint of at most max bytes (bits past 64 dropped); *p is moved only
 * when it ends within them and within the input. */
static int read_varint(const uint8_t **p, const uint8_t *end, size_t max, uint64_t *v)
{
    const uint8_t *s = *p;
    uint64_t x = 0;
    if ((size_t)(end - s) < max)
        max = (size_t)(end - s);
    for (size_t i = 0; i < max; i++) {
        x |= (uint64_t)(s[i] & 0x7f) << (7 * i);
        if (!(s[i] & 0x80)) {
            *v = x;
            *p = s + i + 1;
            return 0;
        }
    }
    return -1;
}

/* A varint value: at most 10 bytes. */
static int read_value(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    return read_varint(p, end, 10, v);
}

/* A length prefix: at most 5 bytes, at most INT_MAX, within the input. */
static int read_length(const uint8_t **p, const uint8_t *end, size_t *len)
{
    const uint8_t *s = *p;
    uint64_t v;
    if (read_varint(&s, end, 5, &v) != 0 || v > INT_MAX || v > (uint64_t)(end - s))
        return -1;
    *len = (size_t)v;
    *p = s;
    return 0;
}

/* Past one field's value of wire type type; value and vlen span it (a
 * length-delimited one's payload, without its prefix). */
static int skip_value(const uint8_t **p, const uint8_t *end, unsigned type,
                      const uint8_t **value, size_t *vlen)
{
    uint64_t v;
    size_t n;
    switch (type) {
    case 0:
        *value = *p;
        if (read_value(p, end, &v) != 0)
            return -1;
        *vlen = (size_t)(*p - *value);
        return 0;
    case 1:
    case 5:
        n = type == 1 ? 8 : 4;
        if ((size_t)(end - *p) < n)
            return -1;
        *value = *p;
        *vlen = n;
        *p += n;
        return 0;
    case 2:
        if (read_length(p, end, &n) != 0)
            return -1;
        *value = *p;
        *vlen = n;
        *p += n;
        return 0;
    default: /* groups and 6, 7: protobuf-c refuses them */
        return -1;
    }
}

/* 8 bytes little-endian, whatever the host: one load (gcc did not merge
 * a byte loop into one here, and it is a million of them in a Plan). */
static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* One {int64 1; double 2} message: the last of each wins, others skipped. */
static int read_pair(const uint8_t *p, const uint8_t *end, int64_t *key, double *value)
{
    uint64_t k = 0, bits = 0;
    const uint8_t *q = p + 1;
    /* What every encoder writes: owner, then rate, once each. */
    if (end - p >= 11 && p[0] == 0x08 && read_value(&q, end, &k) == 0 && end - q == 9 &&
        q[0] == 0x11) {
        bits = load_le64(q + 1);
        *key = (int64_t)k;
        memcpy(value, &bits, sizeof *value);
        return 0;
    }
    k = 0;
    while (p < end) {
        uint32_t number;
        unsigned type;
        const uint8_t *v;
        size_t vlen;
        if (read_key(&p, end, &number, &type) != 0 || number == 0)
            return -1;
        if (number == 1 && type == 0) {
            if (read_value(&p, end, &k) != 0)
                return -1;
        } else if (number == 2 && type == 1) {
            if (end - p < 8)
                return -1;
            bits = load_le64(p);
            p += 8;
        } else if (number == 1 || number == 2) {
            return -1; /* the wrong wire type: protobuf-c refuses it */
        } else if (skip_value(&p, end, type, &v, &vlen) != 0) {
            return -1;
        }
    }
    *key = (int64_t)k;
    memcpy(value, &bits, sizeof *value);
    return 0;
}

/* One occurrence of the split field, of wire type type, its value (a
 * length-delimited one's payload) v..v+vlen: 1 taken into ctx's output, 0
 * left for rest (protobuf-c refuses it there), -1 unsure. */
typedef int (*take_fn)(void *ctx, unsigned type, const uint8_t *v, size_t vlen);

/* Takes a run of the split field's occurrences in the shape encoders write
 * them, faster than take one by one would; returns where it stopped (p
 * when it took none): the general loop goes on from there. */
typedef const uint8_t *(*run_fn)(void *ctx, const uint8_t *p, const uint8_t *end,
                                 uint32_t field);

/* data's fields in order: those numbered field offered to run (when not
 * NULL) and then to take, the others (and the ones take leaves) copied into
 * rest. */
static int split(const uint8_t *data, size_t len, uint32_t field, run_fn run, take_fn take,
                 void *ctx, uint8_t *rest, size_t *rest_len)
{
    const uint8_t *p = data, *end = data + len;
    size_t r = 0;
    while (p < end) {
        if (run && (p = run(ctx, p, end, field)) == end)
            break;
        const uint8_t *at = p, *v;
        uint32_t number;
        unsigned type;
        size_t vlen;
        int took = 0;
        if (read_key(&p, end, &number, &type) != 0 ||
            skip_value(&p, end, type, &v, &vlen) != 0 ||
            (number == field && (took = take(ctx, type, v, vlen)) < 0))
            return -1;
        if (!took) {
            memcpy(rest + r, at, (size_t)(p - at));
            r += (size_t)(p - at);
        }
    }
    *rest_len = r;
    return 0;
}

static int take_pair(void *ctx, unsigned type, const uint8_t *v, size_t vlen)
{
    cr_wire_pairs *out = ctx;
    int64_t key;
    double value;
    if (type != 2)
        return 0;
    if (out->n == out->max || read_pair(v, v + vlen, &key, &value) != 0)
        return -1;
    uint8_t *e = (uint8_t *)out->base + out->n++ * out->stride;
    memcpy(e + out->key_at, &key, sizeof key);
    memcpy(e + out->value_at, &value, sizeof value);
    return 1;
}

/* An entry in the shape every encoder writes (read_pair's fast case): the
 * key, a one-byte length l, 0x08, the owner's varint of L = l - 10 bytes
 * (1 to 10), 0x11, the rate's 8 bytes. The owner is read 8 + 2 bytes at a
 * time, its width checked and its bits gathered by masks for its L, so a
 * million owners of random width (9 or 10 bytes for a hash) cost no
 * mispredicted branch each. Byte i of the masks is the owner's byte i. */
#define HIGH_BITS 0x8080808080808080u
static const uint64_t FIRST8[11] = { /* bytes 0..min(L, 8) - 1 */
    0, 0xff, 0xffff, 0xffffff, 0xffffffff, 0xffffffffffu, 0xffffffffffffu, 0xffffffffffffffu,
    UINT64_MAX, UINT64_MAX, UINT64_MAX};
static const uint16_t LAST2[11] = {[9] = 0xff, [10] = 0xffff}; /* bytes 8, 9 */

/* The 7-bit groups of the low 8 bytes of x (high bits clear) joined. */
static uint64_t gather7(uint64_t x)
{
    x = (x & 0x007f007f007f007fu) | (x & 0x7f007f007f007f00u) >> 1;
    x = (x & 0x00003fff00003fffu) | (x & 0x3fff00003fff0000u) >> 2;
    return (x & 0x000000000fffffffu) | (x & 0x0fffffff00000000u) >> 4;
}

/* The value of a varint of n bytes (1..10, its width already checked)
 * whose first 8 bytes are w and bytes 8 and 9 hi: bits 56..62, then 63. */
static uint64_t varint_value(uint64_t w, unsigned hi, size_t n)
{
    unsigned top = hi & LAST2[n];
    return gather7(w & FIRST8[n] & ~HIGH_BITS) | (uint64_t)(top & 0x7f) << 56 |
           (uint64_t)(top >> 8 & 1) << 63;
}

static const uint8_t *pair_run(void *ctx, const uint8_t *p, const uint8_t *end, uint32_t field)
{
    cr_wire_pairs *out = ctx;
    uint8_t key = (uint8_t)(field << 3 | 2);
    if (field == 0 || field > 15)
        return p; /* a key of more than one byte */
    while (end - p >= 13 && p[0] == key && p[1] >= 11 && p[1] <= 20 &&
           end - p - 2 >= p[1] && p[2] == 0x08 && out->n < out->max) {
        size_t l = p[1], n = l - 10;
        uint64_t w = load_le64(p + 3);
        unsigned hi = p[11] | (unsigned)p[12] << 8; /* in the entry: l >= 11 */
        /* continuation bits on bytes 0..L-2, off on byte L-1 */
        uint64_t cont = FIRST8[n - 1] & HIGH_BITS;
        unsigned cont_hi = LAST2[n - 1] & 0x8080u;
        if ((w & FIRST8[n] & HIGH_BITS) != cont || (hi & LAST2[n] & 0x8080u) != cont_hi ||
            p[3 + n] != 0x11)
            break;
        int64_t owner = (int64_t)varint_value(w, hi, n);
        uint64_t bits = load_le64(p + 4 + n);
        uint8_t *e = (uint8_t *)out->base + out->n++ * out->stride;
        memcpy(e + out->key_at, &owner, sizeof owner);
        memcpy(e + out->value_at, &bits, sizeof bits);
        p += 2 + l;
    }
    return p;
}

int cr_wire_split_pairs(const uint8_t *data, size_t len, uint32_t field, cr_wire_pairs *out,
                        uint8_t *rest, size_t *rest_len)
{
    out->n = 0;
    return split(data, len, field, pair_run, take_pair, out, rest, rest_len);
}

/* read_value with at least 10 bytes readable at *p: the 8 + 2 bytes are
 * loaded at once, the end found from the continuation bits and the bits
 * gathered by masks, so owners of random width (9 or 10 bytes for a hash)
 * cost no mispredicted branch each. */
static int read_value10(const uint8_t **p, uint64_t *v)
{
    const uint8_t *s = *p;
    uint64_t w = load_le64(s), ends = ~w & HIGH_BITS;
    unsigned hi = s[8] | (unsigned)s[9] << 8, ends_hi = ~hi & 0x8080u;
    size_t n = ends ? (size_t)__builtin_ctzll(ends) / 8 + 1
                    : ends_hi ? (size_t)__builtin_ctz(ends_hi) / 8 + 9 : 0;
    if (n == 0)
        return -1; /* more than 10 bytes */
    *v = varint_value(w, hi, n);
    *p = s + n;
    return 0;
}

int cr_wire_take_packed(cr_wire_varints *out, const uint8_t *v, size_t vlen)
{
    const uint8_t *end = v + vlen;
    while (v < end) {
        uint64_t x;
        int rc = end - v >= 10 ? read_value10(&v, &x) : read_value(&v, end, &x);
        if (out->n == out->max || rc != 0)
            return -1;
        out->values[out->n++] = (int64_t)x;
    }
    return 0;
}

/* A repeated int64 field's occurrence: one varint (wire type 0) or packed
 * ones (2), as cr_wire_take_packed takes them. */
static int take_varints(void *ctx, unsigned type, const uint8_t *v, size_t vlen)
{
    if (type != 0 && type != 2)
        return 0;
    return cr_wire_take_packed(ctx, v, vlen) == 0 ? 1 : -1;
}

int cr_wire_split_varints(const uint8_t *data, size_t len, uint32_t field, cr_wire_varints *out,
                          uint8_t *rest, size_t *rest_len)
{
    out->n = 0;
    return split(data, len, field, NULL, take_varints, out, rest, rest_len);
}
