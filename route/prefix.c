/* The prefix index (route.h): which shards were sent which prompt blocks,
 * aged out per shard, sized like a shard's KV cache.
 *
 * One table of entries, one per distinct block key, each with the set of
 * shards that hold it (a 64-bit mask) and a reference bit per shard; the
 * shared open-addressing index (htable.h) finds an entry from its key.
 * Each shard ages its blocks with a CLOCK ring of entry numbers: a block
 * touched again gets its reference bit and survives one sweep of the hand
 * (second chance); a full shard evicts the first block the hand finds
 * unreferenced. CLOCK keeps LRU's order closely enough for a prediction
 * and costs 4 bytes a block, where a list would cost 8 more.
 *
 * Why a mask rather than a table per shard: a match then costs one lookup
 * per block for every shard at once (the running intersection of the
 * masks), where tables per shard would cost one per block per shard.
 *
 * An engine's KV events can take a block away before the hand reaches it
 * (cr_prefix_forget): its place in the ring cannot be found without a
 * search, so the block stays there as a ghost, not held but still
 * referenced (its ref bit set without its held bit), until the hand comes
 * by and takes the place back at once; a block sent again meanwhile is
 * held again in the same place. An entry is free when no shard holds or
 * references it.
 *
 * Memory: 24 B an entry, 4 B a ring place, and a slot array kept at most
 * 3/4 full (4 to 5.3 B an entry once it has grown to fit): 32 to 36 B a
 * block when no two shards share it, less when they do. Everything grows
 * geometrically up to the bound, so an idle index costs nothing. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "htable.h"

typedef struct entry {
    uint64_t key;  /* the block's key; on the free list, the next free entry */
    uint64_t held; /* shards holding it */
    uint64_t ref;  /* per shard: held, touched since the hand last passed;
                    * not held, a ghost in that shard's ring */
} entry;

/* Whether some shard's ring refers to x: else it is free. */
static int in_use(const entry *x) { return (x->held | x->ref) != 0; }

typedef struct ring {
    uint32_t *at; /* entry numbers, a CLOCK's places */
    uint32_t n, alloc, hand;
    uint32_t cap; /* blocks it holds at most (cr_prefix_set_cap), <= the index's */
} ring;

struct cr_prefix {
    uint32_t n_shards;
    uint32_t cap;       /* blocks per shard at most */
    entry *entries;
    uint32_t n_entries; /* used or on the free list */
    uint32_t alloc;
    uint32_t free_head; /* UINT32_MAX: none */
    cr_htable index;     /* entries in use by key; no slots before the first insert */
    uint64_t held;      /* blocks held over all shards */
    ring rings[];
};

cr_prefix *cr_prefix_new(uint32_t n_shards, uint32_t blocks_per_shard)
{
    if (n_shards < 1 || n_shards > CR_ROUTE_INDEX_MAX_SHARDS || blocks_per_shard < 1)
        return NULL;
    cr_prefix *p = calloc(1, sizeof *p + n_shards * sizeof p->rings[0]);
    if (!p)
        return NULL;
    p->n_shards = n_shards;
    p->cap = blocks_per_shard;
    p->free_head = UINT32_MAX;
    for (uint32_t s = 0; s < n_shards; s++)
        p->rings[s].cap = blocks_per_shard;
    return p;
}

void cr_prefix_free(cr_prefix *p)
{
    if (!p)
        return;
    for (uint32_t s = 0; s < p->n_shards; s++)
        free(p->rings[s].at);
    free(p->entries);
    cr_htable_free(&p->index);
    free(p);
}

uint32_t cr_prefix_shards(const cr_prefix *p) { return p->n_shards; }

static int is_key(const void *ctx, uint32_t e, const void *key)
{
    return ((const cr_prefix *)ctx)->entries[e].key == *(const uint64_t *)key;
}

static uint64_t hash_of(const void *ctx, uint32_t e)
{
    return cr_mix64(((const cr_prefix *)ctx)->entries[e].key);
}

/* The entry number of key, or UINT32_MAX. */
static uint32_t find(const cr_prefix *p, uint64_t key)
{
    return cr_htable_find(&p->index, cr_mix64(key), is_key, p, &key);
}

/* Room for one more entry in use in the slots (at most 3/4 full); -1 when
 * out of memory. */
static int grow_slots(cr_prefix *p)
{
    uint64_t n = p->index.mask + 1;
    if (p->index.slots && (p->index.used + 1) * 4 <= n * 3)
        return 0;
    if (cr_htable_reset(&p->index, p->index.slots ? 2 * n : 1024) != 0)
        return -1;
    for (uint32_t e = 0; e < p->n_entries; e++) /* in entry order: reads them in a row */
        if (in_use(&p->entries[e]))
            cr_htable_insert(&p->index, cr_mix64(p->entries[e].key), e);
    return 0;
}

/* Deletes e's slot. */
static void drop_slot(cr_prefix *p, uint32_t e)
{
    cr_htable_remove(&p->index, cr_mix64(p->entries[e].key), e, (cr_htable_keys){hash_of, p});
}

/* A free entry for key, slotted; UINT32_MAX when out of memory. */
static uint32_t add(cr_prefix *p, uint64_t key)
{
    if (grow_slots(p) != 0)
        return UINT32_MAX;
    uint32_t e = p->free_head;
    if (e != UINT32_MAX) {
        p->free_head = (uint32_t)p->entries[e].key;
    } else {
        if (p->n_entries == p->alloc) {
            uint64_t most = (uint64_t)p->n_shards * p->cap;
            uint64_t want = p->alloc ? 2 * (uint64_t)p->alloc : 1024;
            want = want < most ? want : most;
            if (want <= p->alloc)
                return UINT32_MAX; /* cannot happen: every entry holds a block */
            entry *grown = realloc(p->entries, want * sizeof *grown);
            if (!grown)
                return UINT32_MAX;
            p->entries = grown;
            p->alloc = (uint32_t)want;
        }
        e = p->n_entries++;
    }
    p->entries[e] = (entry){key, 0, 0};
    cr_htable_insert(&p->index, cr_mix64(key), e);
    return e;
}

/* Entry e, in no shard's ring, back to the free list. */
static void free_entry(cr_prefix *p, uint32_t e)
{
    drop_slot(p, e);
    p->entries[e].key = p->free_head;
    p->free_head = e;
}

/* Takes entry e out of shard bit b's ring, held or a ghost there; the
 * entry goes when no ring refers to it. */
static void unring(cr_prefix *p, uint32_t e, uint64_t b)
{
    entry *x = &p->entries[e];
    p->held -= (x->held & b) != 0;
    x->held &= ~b;
    x->ref &= ~b;
    if (!in_use(x))
        free_entry(p, e);
}

/* Evicts the first unreferenced block (or ghost) shard s's hand meets in
 * its full ring, the hand past it: that block's place, now to be filled.
 * Ends: each pass clears the bits it meets. */
static uint32_t evict(cr_prefix *p, uint32_t s)
{
    ring *r = &p->rings[s];
    uint64_t b = 1ull << s;
    for (;;) {
        uint32_t at = r->hand, v = r->at[at];
        r->hand = r->hand + 1 == r->n ? 0 : r->hand + 1;
        const entry *x = &p->entries[v];
        if ((x->held & b) && (x->ref & b)) { /* a second chance */
            p->entries[v].ref &= ~b;
            continue;
        }
        unring(p, v, b); /* the unreferenced block, or a ghost */
        return at;
    }
}

/* A place in shard s's ring for one more block, its index in the ring:
 * appended while under the cap, else the place of the first unreferenced
 * block the hand meets, that block evicted now (so that its entry is free
 * before the new block's is taken: a full index of distinct blocks needs
 * no entry more). The caller fills the place. UINT32_MAX when out of
 * memory. */
static uint32_t room(cr_prefix *p, uint32_t s)
{
    ring *r = &p->rings[s];
    if (r->n < r->cap) {
        if (r->n == r->alloc) {
            uint64_t want = r->alloc ? 2 * (uint64_t)r->alloc : 256;
            want = want < r->cap ? want : r->cap;
            uint32_t *at = realloc(r->at, want * sizeof *at);
            if (!at)
                return UINT32_MAX;
            r->at = at;
            r->alloc = (uint32_t)want;
        }
        return r->n++;
    }
    return evict(p, s);
}

/* Gives back shard s's place at, left empty: the ring's last place moves
 * into it. */
static void unroom(cr_prefix *p, uint32_t s, uint32_t at)
{
    ring *r = &p->rings[s];
    r->at[at] = r->at[--r->n];
    if (r->hand >= r->n)
        r->hand = 0;
}

int cr_prefix_insert(cr_prefix *p, uint32_t shard, const uint64_t *keys, uint32_t n)
{
    uint64_t b = 1ull << shard;
    for (uint32_t i = n; i-- > 0;) { /* last first: a prefix ages from its tail */
        uint32_t e = find(p, keys[i]);
        if (e != UINT32_MAX && ((p->entries[e].held | p->entries[e].ref) & b)) {
            /* held (touched now), or a ghost held again in its place */
            p->held += (p->entries[e].held & b) == 0;
            p->entries[e].held |= b;
            p->entries[e].ref |= b;
            continue;
        }
        /* room first, then the entry: an eviction cannot take e, which is
         * not in shard's ring, and frees the entry the new key may need */
        uint32_t at = room(p, shard);
        if (at == UINT32_MAX)
            return -1;
        if (e == UINT32_MAX && (e = add(p, keys[i])) == UINT32_MAX) {
            unroom(p, shard, at);
            return -1;
        }
        p->rings[shard].at[at] = e;
        p->entries[e].held |= b;
        p->held++;
    }
    return 0;
}

int cr_prefix_holds(const cr_prefix *p, uint32_t shard, uint64_t key)
{
    uint32_t e = find(p, key);
    return e != UINT32_MAX && (p->entries[e].held >> shard & 1);
}

int cr_prefix_forget(cr_prefix *p, uint32_t shard, uint64_t key)
{
    uint64_t b = 1ull << shard;
    uint32_t e = find(p, key);
    if (e == UINT32_MAX || !(p->entries[e].held & b))
        return 0;
    p->entries[e].held &= ~b; /* a ghost in its ring until the hand comes */
    p->entries[e].ref |= b;
    p->held--;
    return 1;
}

void cr_prefix_set_cap(cr_prefix *p, uint32_t shard, uint32_t blocks)
{
    ring *r = &p->rings[shard];
    r->cap = blocks < 1 ? 1 : blocks < p->cap ? blocks : p->cap;
    while (r->n > r->cap)
        unroom(p, shard, evict(p, shard)); /* CLOCK's victims, as a full ring's */
}

void cr_prefix_clear(cr_prefix *p, uint32_t shard)
{
    ring *r = &p->rings[shard];
    for (uint32_t i = 0; i < r->n; i++)
        unring(p, r->at[i], 1ull << shard);
    r->n = r->hand = 0;
}

uint32_t cr_prefix_match(const cr_prefix *p, const uint64_t *keys, uint32_t n, uint32_t n_shards,
                         uint32_t *depth)
{
    n_shards = n_shards < p->n_shards ? n_shards : p->n_shards;
    uint64_t alive = n_shards == 64 ? ~0ull : (1ull << n_shards) - 1;
    memset(depth, 0, n_shards * sizeof *depth);
    uint32_t i = 0;
    for (; i < n && alive; i++) {
        uint32_t e = find(p, keys[i]);
        uint64_t held = e == UINT32_MAX ? 0 : p->entries[e].held;
        for (uint64_t gone = alive & ~held; gone; gone &= gone - 1)
            depth[__builtin_ctzll(gone)] = i;
        alive &= held;
    }
    for (; alive; alive &= alive - 1)
        depth[__builtin_ctzll(alive)] = i;
    uint32_t best = 0;
    for (uint32_t s = 0; s < n_shards; s++)
        best = depth[s] > best ? depth[s] : best;
    return best;
}

void cr_prefix_stats(const cr_prefix *p, uint64_t *blocks, uint64_t *bytes)
{
    uint64_t b = sizeof *p + p->n_shards * sizeof p->rings[0] +
                 (uint64_t)p->alloc * sizeof *p->entries +
                 cr_htable_bytes(&p->index);
    for (uint32_t s = 0; s < p->n_shards; s++)
        b += (uint64_t)p->rings[s].alloc * sizeof *p->rings[s].at;
    *blocks = p->held;
    *bytes = b;
}
