/* The planner's one sort of cr_plan_items by key: rates for rule 2, owners
 * for the replan's orders and the estimator's snapshot. One scatter by the
 * top 11 bits that differ between keys (out of cache, into 2048 buckets of
 * about n/2048), then each bucket, while it sits in cache, by MSD radix on
 * 8-bit digits of the bits below, down to insertion sorts of a few items.
 * Two passes over memory instead of the six of an 11-bit LSD sort of 64-bit
 * keys; stable, and at most 8 levels of O(n) whatever the keys (about 4 KB
 * of stack a level). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TOP_BITS 11
#define LOW_BITS 8
#define SMALL 16 /* buckets this small are insertion-sorted */

static void insertion_sort(cr_plan_item *a, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        cr_plan_item x = a[i];
        size_t j = i;
        for (; j > 0 && a[j - 1].key > x.key; j--)
            a[j] = a[j - 1];
        a[j] = x;
    }
}

/* Sorts a[0, n) by the key bits below bits (the ones above are the same
 * for all), through scratch s: MSD, 8 bits a level, down to buckets small
 * enough to insertion-sort (keys that are all equal cost one pass there). */
static void sort_low(cr_plan_item *a, cr_plan_item *s, size_t n, unsigned bits)
{
    if (n <= SMALL || bits == 0) {
        insertion_sort(a, n);
        return;
    }
    unsigned shift = bits > LOW_BITS ? bits - LOW_BITS : 0;
    size_t start[(1u << LOW_BITS) + 1] = {0}, next[1u << LOW_BITS];
    for (size_t i = 0; i < n; i++)
        start[((a[i].key >> shift) & ((1u << LOW_BITS) - 1)) + 1]++;
    for (unsigned d = 0; d < (1u << LOW_BITS); d++) {
        next[d] = start[d];
        start[d + 1] += start[d];
    }
    for (size_t i = 0; i < n; i++)
        s[next[(a[i].key >> shift) & ((1u << LOW_BITS) - 1)]++] = a[i];
    memcpy(a, s, n * sizeof *a); /* a bucket of the top scatter: usually in cache */
    for (unsigned d = 0; d < (1u << LOW_BITS); d++)
        sort_low(a + start[d], s + start[d], start[d + 1] - start[d], shift);
}

cr_plan_item *cr_plan_radix_sort(cr_plan_item *a, cr_plan_item *tmp, size_t n)
{
    uint64_t differ = 0;
    for (size_t i = 1; i < n; i++)
        differ |= a[i].key ^ a[0].key;
    unsigned high = differ ? 64 - (unsigned)__builtin_clzll(differ) : 0; /* bits that differ */
    unsigned shift = high > TOP_BITS ? high - TOP_BITS : 0;
    size_t *start = calloc((1u << TOP_BITS) + 1, sizeof *start);
    if (!start)
        return NULL;
    for (size_t i = 0; i < n; i++)
        start[((a[i].key >> shift) & ((1u << TOP_BITS) - 1)) + 1]++;
    for (unsigned d = 0; d < (1u << TOP_BITS); d++)
        start[d + 1] += start[d];
    size_t *next = malloc((1u << TOP_BITS) * sizeof *next);
    if (!next) {
        free(start);
        return NULL;
    }
    memcpy(next, start, (1u << TOP_BITS) * sizeof *next);
    for (size_t i = 0; i < n; i++)
        tmp[next[(a[i].key >> shift) & ((1u << TOP_BITS) - 1)]++] = a[i];
    for (unsigned d = 0; d < (1u << TOP_BITS); d++)
        sort_low(tmp + start[d], a + start[d], start[d + 1] - start[d], shift);
    free(next);
    free(start);
    return tmp;
}
