/* How popular a prefix is (internal.h): a count-min sketch of the block
 * keys that requests matched up to, halved every CR_POPULAR_HALF counts, so
 * a count is about the requests of the last few tens of thousands. Four
 * rows of 2^14 16-bit counters: 128 KB, whatever the traffic. */
#include <stdlib.h>

#include "internal.h"

#define ROW (1u << 14)

int cr_popular_init(cr_popular *p)
{
    p->counts = calloc(CR_POPULAR_ROWS * ROW, sizeof *p->counts);
    p->n = 0;
    return p->counts ? 0 : -1;
}

void cr_popular_free(cr_popular *p)
{
    free(p->counts);
    p->counts = NULL;
}

static uint16_t *cell(const cr_popular *p, int row, uint64_t key)
{
    return &p->counts[row * ROW + (cr_mix64(key + (uint64_t)row * 0x9e3779b97f4a7c15ULL) &
                                   (ROW - 1))];
}

uint32_t cr_popular_count(const cr_popular *p, uint64_t key)
{
    uint32_t least = UINT16_MAX;
    for (int row = 0; p->counts && row < CR_POPULAR_ROWS; row++) {
        uint16_t v = *cell(p, row, key);
        least = v < least ? v : least;
    }
    return p->counts ? least : 0;
}

void cr_popular_touch(cr_popular *p, uint64_t key)
{
    if (!p->counts)
        return;
    for (int row = 0; row < CR_POPULAR_ROWS; row++) {
        uint16_t *v = cell(p, row, key);
        *v += *v < UINT16_MAX;
    }
    if (++p->n < CR_POPULAR_HALF)
        return;
    p->n = 0;
    for (uint32_t i = 0; i < CR_POPULAR_ROWS * ROW; i++)
        p->counts[i] /= 2;
}
