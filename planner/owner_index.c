/* Owner -> position index shared by duplicate detection and table lookups.
 * Keys are not stored in the slots: the owner is read back from the records,
 * which keeps a slot at 4 bytes (the plan's memory budget is per session). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static int64_t owner_at(const cr_owner_index *ix, size_t pos)
{
    int64_t owner;
    memcpy(&owner, ix->base + pos * ix->stride, sizeof owner);
    return owner;
}

cr_status cr_owner_index_init(cr_owner_index *ix, size_t n, const void *base, size_t stride)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return CR_ENOMEM;
    ix->mask = cap - 1;
    ix->base = base;
    ix->stride = stride;
    return CR_OK;
}

void cr_owner_index_free(cr_owner_index *ix)
{
    free(ix->slots);
    ix->slots = NULL;
}

/* Slot of owner (holding it), or of the empty slot where it would go. */
static uint32_t *probe(const cr_owner_index *ix, int64_t owner)
{
    for (uint64_t i = cr_mix64((uint64_t)owner) & ix->mask;; i = (i + 1) & ix->mask) {
        uint32_t s = ix->slots[i];
        if (s == 0 || owner_at(ix, s - 1) == owner)
            return &ix->slots[i];
    }
}

size_t cr_owner_index_insert(cr_owner_index *ix, size_t pos)
{
    uint32_t *s = probe(ix, owner_at(ix, pos));
    if (*s)
        return *s - 1;
    *s = (uint32_t)(pos + 1);
    return pos;
}

size_t cr_owner_index_find(const cr_owner_index *ix, int64_t owner)
{
    uint32_t s = *probe(ix, owner);
    return s ? s - 1 : SIZE_MAX;
}

void cr_owner_index_prefetch(const cr_owner_index *ix, int64_t owner, int stage)
{
    const uint32_t *slot = &ix->slots[cr_mix64((uint64_t)owner) & ix->mask];
    if (stage == 0)
        __builtin_prefetch(slot);
    else if (*slot)
        __builtin_prefetch(ix->base + (*slot - 1) * ix->stride);
}

int cr_owner_index_remap(cr_owner_index *ix, const cr_owner_index *from, const uint32_t *remap)
{
    if (ix->mask != from->mask)
        return -1;
    uint64_t start = 0;
    while (from->slots[start]) /* load <= 1/2: there is an empty slot */
        start++;
    int lost = 0; /* in this run */
    for (uint64_t k = 1; k <= ix->mask + 1; k++) {
        uint64_t s = (start + k) & ix->mask;
        uint32_t old = from->slots[s], now = old ? remap[old - 1] : 0;
        if (!old || !now)
            lost = old != 0; /* an empty slot ends the run */
        else if (!lost)
            ix->slots[s] = now; /* same owner, same slot, same run */
        else
            cr_owner_index_insert(ix, now - 1); /* lands at or before s */
    }
    return 0;
}
