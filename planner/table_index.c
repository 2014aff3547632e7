/* A table's owner index: open addressing with linear probing over 16-byte
 * slots that hold the owner itself, its placement's position and its
 * preferred shard. A route under the plan rule needs only that shard, so
 * it reads one slot (one cache line, seldom two) and no placement; a
 * replan's lookup of an incumbent reads one slot, not a slot and then the
 * owner it names. Capacity is 3/2 of the placements (load 2/3: a hit
 * probes 2 slots on average, a miss 5), 24 bytes per placement. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(cr_table_slot) == 16, "four slots to a cache line");

static size_t home(const cr_table_index *ix, int64_t owner)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    return (size_t)(((unsigned __int128)h * ix->cap) >> 64);
}

static size_t next(const cr_table_index *ix, size_t i)
{
    return i + 1 == ix->cap ? 0 : i + 1;
}

cr_status cr_table_index_init(cr_table_index *ix, size_t n)
{
    ix->cap = n + n / 2 + 16; /* an empty slot always ends a probe */
    ix->slots = cr_plan_alloc(ix->cap * sizeof *ix->slots);
    if (!ix->slots)
        return CR_ENOMEM;
    memset(ix->slots, 0, ix->cap * sizeof *ix->slots);
    return CR_OK;
}

void cr_table_index_free(cr_table_index *ix)
{
    cr_plan_free(ix->slots);
    ix->slots = NULL;
}

/* From owner's home: its slot, or the empty one where it would go. */
static cr_table_slot *probe(const cr_table_index *ix, int64_t owner, size_t i)
{
    for (;; i = next(ix, i)) {
        cr_table_slot *s = &ix->slots[i];
        if (!s->pos1 || s->owner == owner)
            return s;
    }
}

const cr_table_slot *cr_table_index_find(const cr_table_index *ix, int64_t owner)
{
    const cr_table_slot *s = probe(ix, owner, home(ix, owner));
    return s->pos1 ? s : NULL;
}

void cr_table_index_prefetch(const cr_table_index *ix, int64_t owner)
{
    __builtin_prefetch(&ix->slots[home(ix, owner)]);
}

void cr_table_index_find_group(const cr_table_index *ix, const int64_t *owners, size_t n,
                               const cr_table_slot **out)
{
    size_t at[CR_TABLE_INDEX_GROUP];
    for (size_t j = 0; j < n; j++) { /* every home slot on its way first */
        at[j] = home(ix, owners[j]);
        __builtin_prefetch(&ix->slots[at[j]]);
    }
    for (size_t j = 0; j < n; j++) {
        const cr_table_slot *s = probe(ix, owners[j], at[j]);
        out[j] = s->pos1 ? s : NULL;
    }
}

size_t cr_table_index_build(cr_table_index *ix, const cr_placement *p, size_t n, size_t *earlier)
{
    enum { AHEAD = 16 }; /* random writes: the next homes load meanwhile */
    for (size_t i = 0; i < n; i++) {
        if (i + AHEAD < n)
            cr_table_index_prefetch(ix, p[i + AHEAD].owner);
        cr_table_slot *s = probe(ix, p[i].owner, home(ix, p[i].owner));
        if (s->pos1) {
            *earlier = s->pos1 - 1;
            return i;
        }
        *s = (cr_table_slot){p[i].owner, (uint32_t)(i + 1), p[i].preferred_shard};
    }
    return SIZE_MAX;
}
