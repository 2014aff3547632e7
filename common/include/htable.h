/* cacheroute htable: the one open-addressing hash index. Every hash table
 * in the project that finds its entries by key through slots uses it.
 *
 * The entries, and their keys, are the caller's: an array, a pool, a
 * ring. The table holds only slots, each an entry number + 1 (0 = empty),
 * 4 bytes a slot, a power of two of them. A key lives at its hash's home
 * slot (hash & mask) or further on (linear probing, wrapping at the end),
 * and a deletion shifts the rest of its run back into the gap (backward
 * shift), so there are no tombstones and every lookup still meets its entry
 * before an empty slot.
 *
 * The caller keeps the table from filling (at least one empty slot, which
 * ends every probe) and chooses when to resize: the table has no policy.
 * A slot's place depends only on the hash, the slot count and the order of
 * the insertions, so a table that keeps these keeps its slots exactly.
 * Not thread-safe. */
#ifndef CR_HTABLE_H
#define CR_HTABLE_H

#include <stdint.h>

typedef struct cr_htable {
    uint32_t *slots; /* entry + 1, 0 = empty; NULL until a resize or reset */
    uint64_t mask;   /* slots - 1; 0 while slots is NULL */
    uint64_t used;   /* slots not empty */
} cr_htable;

/* The caller's entries as the table sees them: hash(ctx, e) is the hash of
 * entry e's key, the same the caller probes with (its home is hash & mask).
 * Deletion and resizing move entries by it. */
typedef struct cr_htable_keys {
    uint64_t (*hash)(const void *ctx, uint32_t e);
    const void *ctx;
} cr_htable_keys;

/* Whether entry e is key (the caller's key, any shape). */
typedef int (*cr_htable_is)(const void *ctx, uint32_t e, const void *key);

#define CR_HTABLE_NONE UINT32_MAX /* no entry */

/* An empty table without slots: lookups miss until a resize or reset. */
#define CR_HTABLE_EMPTY ((cr_htable){NULL, 0, 0})

/* Gives t a new array of n_slots slots (a power of two >= 2, more than
 * t->used; t may have none yet) and places every entry it holds again, in
 * the order of its old slots, at the first empty slot from its home. 0, or
 * -1 when out of memory or n_slots is out of range, t then unchanged. */
int cr_htable_resize(cr_htable *t, uint64_t n_slots, cr_htable_keys keys);

/* Gives t n_slots empty slots (a power of two >= 2) in place of its own,
 * for a caller that puts its entries in again itself, in its own order
 * (cr_htable_insert). 0, or -1 when out of memory or n_slots is not a
 * power of two, t then unchanged. */
int cr_htable_reset(cr_htable *t, uint64_t n_slots);

/* Frees t's slots; t is then CR_HTABLE_EMPTY. */
void cr_htable_free(cr_htable *t);

/* Empties every slot, keeping their number. */
void cr_htable_clear(cr_htable *t);

/* Empties slot i (not empty) and shifts back the run after it, so every
 * other entry stays reachable from its home. keys must hash every entry in
 * t. O(run length). */
void cr_htable_delete(cr_htable *t, uint64_t i, cr_htable_keys keys);

/* Takes entry e, which t holds under hash, out of t (cr_htable_delete of
 * its slot, found by entry number: no key is read on the way). */
void cr_htable_remove(cr_htable *t, uint64_t hash, uint32_t e, cr_htable_keys keys);

/* Bytes of slots t holds. */
static inline uint64_t cr_htable_bytes(const cr_htable *t)
{
    return t->slots ? (t->mask + 1) * sizeof *t->slots : 0;
}

/* The slot holding the entry is(ctx, e, key) accepts, probing from hash's
 * home, or the empty slot where it would go. t has slots and at least one
 * of them is empty. Inline, so that is() inlines into the probe loop. */
static inline uint64_t cr_htable_slot(const cr_htable *t, uint64_t hash, cr_htable_is is,
                                      const void *ctx, const void *key)
{
    uint64_t i = hash & t->mask;
    for (uint32_t v; (v = t->slots[i]) != 0 && !is(ctx, v - 1, key); i = (i + 1) & t->mask)
        ;
    return i;
}

/* The entry is(ctx, e, key) accepts, or CR_HTABLE_NONE; none when t has no
 * slots yet. */
static inline uint32_t cr_htable_find(const cr_htable *t, uint64_t hash, cr_htable_is is,
                                      const void *ctx, const void *key)
{
    return t->slots ? t->slots[cr_htable_slot(t, hash, is, ctx, key)] - 1 : CR_HTABLE_NONE;
}

/* The entry in slot i, or CR_HTABLE_NONE when it is empty. */
static inline uint32_t cr_htable_at(const cr_htable *t, uint64_t i) { return t->slots[i] - 1; }

/* Puts entry e (< CR_HTABLE_NONE) into slot i, which must be empty and
 * where its key would go (cr_htable_slot's miss), and counts it. */
static inline void cr_htable_put(cr_htable *t, uint64_t i, uint32_t e)
{
    t->slots[i] = e + 1;
    t->used++;
}

/* Puts entry e, whose key t does not hold, at the first empty slot from
 * hash's home. t has slots and at least one of them is empty. */
void cr_htable_insert(cr_htable *t, uint64_t hash, uint32_t e);

#endif
