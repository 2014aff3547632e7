/* Owner -> position index for the duplicate checks over a plan's input.
 * Keys are not stored in the slots: the owner is read back from the records,
 * which keeps a slot at 4 bytes (the plan's memory budget is per session).
 * The bits of a slot that its position does not need hold a tag, bits of
 * the owner's hash that its home slot does not use, so a probe reads a
 * record only when the tag matches: a miss rarely leaves the slots, and a
 * hit reads one record. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static int64_t owner_at(const cr_owner_index *ix, size_t pos)
{
    int64_t owner;
    memcpy(&owner, ix->base + pos * ix->stride, sizeof owner);
    return owner;
}

cr_status cr_owner_index_init(cr_owner_index *ix, size_t n, size_t records, const void *base,
                              size_t stride)
{
    size_t cap = 16;
    unsigned bits = 4;
    while (cap < 2 * n)
        cap <<= 1, bits++;
    while (bits < 32 && (uint64_t)records >> bits)
        bits++; /* position + 1 <= records must fit */
    ix->slots = cr_plan_alloc(cap * sizeof *ix->slots);
    if (!ix->slots)
        return CR_ENOMEM;
    memset(ix->slots, 0, cap * sizeof *ix->slots);
    ix->mask = cap - 1;
    ix->pos_mask = bits >= 32 ? UINT32_MAX : (UINT32_C(1) << bits) - 1;
    ix->base = base;
    ix->stride = stride;
    return CR_OK;
}

void cr_owner_index_free(cr_owner_index *ix)
{
    cr_plan_free(ix->slots);
    ix->slots = NULL;
}

/* The tag of a hash: its top bits, which the home slot (the low bits,
 * fewer than the position's) never uses. */
static uint32_t tag_of(const cr_owner_index *ix, uint64_t h)
{
    return (uint32_t)(h >> 32) & ~ix->pos_mask;
}

static size_t pos_of(const cr_owner_index *ix, uint32_t slot)
{
    return (slot & ix->pos_mask) - 1;
}

/* From slot i on: the first slot that is empty or carries tag. */
static uint64_t next_candidate(const cr_owner_index *ix, uint32_t tag, uint64_t i)
{
    uint32_t s;
    while ((s = ix->slots[i]) != 0 && (s & ~ix->pos_mask) != tag)
        i = (i + 1) & ix->mask;
    return i;
}

/* From slot i on: the slot holding owner, or the empty one where it would
 * go. */
static uint64_t probe_from(const cr_owner_index *ix, int64_t owner, uint32_t tag, uint64_t i)
{
    for (;; i = (i + 1) & ix->mask) {
        i = next_candidate(ix, tag, i);
        uint32_t s = ix->slots[i];
        if (s == 0 || owner_at(ix, pos_of(ix, s)) == owner)
            return i;
    }
}

size_t cr_owner_index_insert(cr_owner_index *ix, size_t pos)
{
    int64_t owner = owner_at(ix, pos);
    uint64_t h = cr_mix64((uint64_t)owner);
    uint32_t tag = tag_of(ix, h);
    uint32_t *s = &ix->slots[probe_from(ix, owner, tag, h & ix->mask)];
    if (*s)
        return pos_of(ix, *s);
    *s = tag | (uint32_t)(pos + 1);
    return pos;
}
