/* Owner -> position index shared by duplicate detection and table lookups.
 * Keys are not stored in the slots: the owner is read back from the records,
 * which keeps a slot at 4 bytes (the plan's memory budget is per session).
 * The bits of a slot that its position does not need hold a tag, bits of
 * the owner's hash that its home slot does not use, so a probe reads a
 * record only when the tag matches: a miss rarely leaves the slots, and a
 * hit reads one record. Not on htable.h, whose slots have no room for a tag. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Where a lookup reads owners: ix's records, or others in their order. */
typedef struct records {
    const char *base;
    size_t stride;
} records;

static int64_t owner_in(records r, size_t pos)
{
    int64_t owner;
    memcpy(&owner, r.base + pos * r.stride, sizeof owner);
    return owner;
}

static records own(const cr_owner_index *ix) { return (records){ix->base, ix->stride}; }

static int64_t owner_at(const cr_owner_index *ix, size_t pos) { return owner_in(own(ix), pos); }

cr_status cr_owner_index_init(cr_owner_index *ix, size_t n, size_t records, const void *base,
                              size_t stride)
{
    size_t cap = 16;
    unsigned bits = 4;
    while (cap < 2 * n)
        cap <<= 1, bits++;
    while (bits < 32 && (uint64_t)records >> bits)
        bits++; /* position + 1 <= records must fit */
    ix->slots = cr_plan_alloc_lookup(cap * sizeof *ix->slots);
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
    free(ix->slots);
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

/* From slot i on: the slot holding owner (compared in r), or the empty one
 * where it would go. */
static uint64_t probe_from(const cr_owner_index *ix, records r, int64_t owner, uint32_t tag,
                           uint64_t i)
{
    for (;; i = (i + 1) & ix->mask) {
        i = next_candidate(ix, tag, i);
        uint32_t s = ix->slots[i];
        if (s == 0 || owner_in(r, pos_of(ix, s)) == owner)
            return i;
    }
}

size_t cr_owner_index_insert(cr_owner_index *ix, size_t pos)
{
    int64_t owner = owner_at(ix, pos);
    uint64_t h = cr_mix64((uint64_t)owner);
    uint32_t tag = tag_of(ix, h);
    uint32_t *s = &ix->slots[probe_from(ix, own(ix), owner, tag, h & ix->mask)];
    if (*s)
        return pos_of(ix, *s);
    *s = tag | (uint32_t)(pos + 1);
    return pos;
}

size_t cr_owner_index_find(const cr_owner_index *ix, int64_t owner)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    uint32_t s = ix->slots[probe_from(ix, own(ix), owner, tag_of(ix, h), h & ix->mask)];
    return s ? pos_of(ix, s) : SIZE_MAX;
}

/* Both ends of the record a slot names in r: it may straddle two lines. */
static void prefetch_record(const cr_owner_index *ix, records r, uint32_t slot)
{
    const char *p = r.base + pos_of(ix, slot) * r.stride;
    __builtin_prefetch(p);
    __builtin_prefetch(p + r.stride - 1);
}

void cr_owner_index_prefetch(const cr_owner_index *ix, int64_t owner, int stage)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    const uint32_t *slot = &ix->slots[h & ix->mask];
    if (stage == 0)
        __builtin_prefetch(slot);
    else if (*slot && (*slot & ~ix->pos_mask) == tag_of(ix, h))
        prefetch_record(ix, own(ix), *slot);
}

void cr_owner_index_find_group(const cr_owner_index *ix, const int64_t *owners, size_t n,
                               size_t *pos, const void *base, size_t stride)
{
    records r = {base, stride};
    uint64_t at[CR_OWNER_INDEX_GROUP];
    uint32_t tag[CR_OWNER_INDEX_GROUP];
    for (size_t j = 0; j < n; j++) { /* every home slot on its way */
        uint64_t h = cr_mix64((uint64_t)owners[j]);
        at[j] = h & ix->mask;
        tag[j] = tag_of(ix, h);
        __builtin_prefetch(&ix->slots[at[j]]);
    }
    for (size_t j = 0; j < n; j++) { /* then every first candidate's record */
        at[j] = next_candidate(ix, tag[j], at[j]);
        if (ix->slots[at[j]])
            prefetch_record(ix, r, ix->slots[at[j]]);
    }
    for (size_t j = 0; j < n; j++) {
        uint32_t s = ix->slots[probe_from(ix, r, owners[j], tag[j], at[j])];
        pos[j] = s ? pos_of(ix, s) : SIZE_MAX;
    }
}

int cr_owner_index_remap(cr_owner_index *ix, const cr_owner_index *from, const uint32_t *remap)
{
    if (ix->mask != from->mask || ix->pos_mask != from->pos_mask)
        return -1;
    uint64_t start = 0;
    while (from->slots[start]) /* load <= 1/2: there is an empty slot */
        start++;
    int lost = 0; /* in this run */
    for (uint64_t k = 1; k <= ix->mask + 1; k++) {
        uint64_t s = (start + k) & ix->mask;
        uint32_t old = from->slots[s], now = old ? remap[pos_of(from, old)] : 0;
        if (!old || !now)
            lost = old != 0; /* an empty slot ends the run */
        else if (!lost)
            ix->slots[s] = (old & ~from->pos_mask) | now; /* same owner: same tag, slot, run */
        else
            cr_owner_index_insert(ix, now - 1); /* lands at or before s */
    }
    return 0;
}
