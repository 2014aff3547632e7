/* The one sort (common.h, "sorting"): 16-byte records by their leading
 * uint64 key. One scatter by the top 11 bits that differ between keys (out
 * of cache, into 2048 buckets of about n/2048), then each bucket, while it
 * sits in cache, by MSD radix on 8-bit digits of the bits below, down to
 * insertion sorts of a few records. Two passes over memory instead of the
 * six of an 11-bit LSD sort of 64-bit keys; stable, and at most 8 levels of
 * O(n) whatever the keys (about 4 KB of stack a level). Records move by
 * memcpy, so any 16-byte struct with the key first can be sorted here
 * without aliasing it as another type. */
#include "common.h"

#include <stdlib.h>
#include <string.h>

#define TOP_BITS 11
#define LOW_BITS 8
#define SMALL 16 /* buckets this small are insertion-sorted */
#define REC CR_SORT_RECORD_BYTES

static uint64_t key_at(const unsigned char *a, size_t i)
{
    uint64_t k;
    memcpy(&k, a + i * REC, sizeof k);
    return k;
}

static void insertion_sort(unsigned char *a, size_t n)
{
    unsigned char x[REC];
    for (size_t i = 1; i < n; i++) {
        memcpy(x, a + i * REC, REC);
        uint64_t kx = key_at(x, 0);
        size_t j = i;
        for (; j > 0 && key_at(a, j - 1) > kx; j--)
            memcpy(a + j * REC, a + (j - 1) * REC, REC);
        memcpy(a + j * REC, x, REC);
    }
}

/* Sorts a[0, n) by the key bits below bits (the ones above are the same
 * for all), through scratch s: MSD, 8 bits a level, down to buckets small
 * enough to insertion-sort (keys that are all equal cost one pass there). */
static void sort_low(unsigned char *a, unsigned char *s, size_t n, unsigned bits)
{
    if (n <= SMALL || bits == 0) {
        insertion_sort(a, n);
        return;
    }
    unsigned shift = bits > LOW_BITS ? bits - LOW_BITS : 0;
    size_t start[(1u << LOW_BITS) + 1] = {0}, next[1u << LOW_BITS];
    for (size_t i = 0; i < n; i++)
        start[((key_at(a, i) >> shift) & ((1u << LOW_BITS) - 1)) + 1]++;
    for (unsigned d = 0; d < (1u << LOW_BITS); d++) {
        next[d] = start[d];
        start[d + 1] += start[d];
    }
    for (size_t i = 0; i < n; i++)
        memcpy(s + next[(key_at(a, i) >> shift) & ((1u << LOW_BITS) - 1)]++ * REC, a + i * REC,
               REC);
    memcpy(a, s, n * REC); /* a bucket of the top scatter: usually in cache */
    for (unsigned d = 0; d < (1u << LOW_BITS); d++)
        sort_low(a + start[d] * REC, s + start[d] * REC, start[d + 1] - start[d], shift);
}

void *cr_sort_records(void *records, void *tmp, size_t n)
{
    unsigned char *a = records, *t = tmp;
    uint64_t differ = 0, first = n ? key_at(a, 0) : 0;
    for (size_t i = 1; i < n; i++)
        differ |= key_at(a, i) ^ first;
    unsigned high = differ ? 64 - (unsigned)__builtin_clzll(differ) : 0; /* bits that differ */
    unsigned shift = high > TOP_BITS ? high - TOP_BITS : 0;
    size_t *start = calloc((1u << TOP_BITS) + 1, sizeof *start);
    size_t *next = malloc((1u << TOP_BITS) * sizeof *next);
    if (!start || !next) {
        free(start);
        free(next);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        start[((key_at(a, i) >> shift) & ((1u << TOP_BITS) - 1)) + 1]++;
    for (unsigned d = 0; d < (1u << TOP_BITS); d++)
        start[d + 1] += start[d];
    memcpy(next, start, (1u << TOP_BITS) * sizeof *next);
    for (size_t i = 0; i < n; i++)
        memcpy(t + next[(key_at(a, i) >> shift) & ((1u << TOP_BITS) - 1)]++ * REC, a + i * REC,
               REC);
    for (unsigned d = 0; d < (1u << TOP_BITS); d++)
        sort_low(t + start[d] * REC, a + start[d] * REC, start[d + 1] - start[d], shift);
    free(next);
    free(start);
    return t;
}

uint64_t cr_sort_key_i64(int64_t v) { return (uint64_t)v ^ (UINT64_C(1) << 63); }

cr_sorted_i64 *cr_sort_i64(const void *base, size_t stride, size_t n)
{
    size_t bytes = (n ? n : 1) * sizeof(cr_sorted_i64);
    cr_sorted_i64 *rec = malloc(bytes), *tmp = malloc(bytes);
    cr_sorted_i64 *sorted = NULL;
    if (rec && tmp) {
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, (const unsigned char *)base + i * stride, sizeof v);
            rec[i] = (cr_sorted_i64){cr_sort_key_i64(v), i};
        }
        sorted = cr_sort_records(rec, tmp, n);
    }
    if (sorted != rec)
        free(rec);
    if (sorted != tmp)
        free(tmp);
    return sorted;
}
