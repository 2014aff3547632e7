/* Outstanding work (route.h): a FIFO ring of items in arrival order, each
 * also linked, oldest first, into its shard's chain.
 *
 * Why a chain per shard is enough: expiry and the cap retire the FIFO's
 * head, the oldest item of all, which is then also the oldest of its
 * shard, its chain's head. A release looks for the owner's oldest item
 * from its shard's chain head, at most CR_ROUTE_RELEASE_DEPTH items
 * deep: a shard serves roughly in arrival order, so the item done is at or
 * near the head, and nothing is hashed on the route's path. A released
 * item stays in the FIFO, marked, until it reaches the head (it still
 * takes a place under the cap).
 *
 * Sums of doubles drift as work is added and taken away, so a shard's
 * load is reset to exactly 0 when its last item goes, and the total when
 * the last of all goes.
 *
 * The ttft rule also reads each shard's predicted timeline: when the work
 * routed there so far should be done, if each item takes its weight in ms
 * one after another. A route extends it; a release (an outcome: the item
 * is done now, the next one starts) resets it to now plus the work still
 * outstanding there, which corrects every earlier prediction at once. An
 * expiry leaves it: by then the timeline has passed the item anyway.
 * Items routed with a request id are found by it through the shared
 * open-addressing index (htable.h), twice the cap, made on the first such
 * item.
 *
 * Callers (request.h cr_route_request.caller): an identified caller holds at
 * most caller_max items, and at the cap the oldest item goes only when it
 * is the new item's caller's or nobody's (caller 0), so no caller evicts
 * another's work; otherwise the new item is not kept (refused). The
 * callers are few (the identities authorization lists), so their counts
 * are a short array searched in order. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "htable.h"

#define NONE UINT32_MAX /* no item; as an item's shard: released */

typedef struct item {
    double expires, weight;
    int64_t owner;
    uint64_t id;          /* the request id's key; 0 = none */
    uint64_t caller;      /* who routed it; 0 = nobody in particular */
    uint32_t shard;
    uint32_t next, prev;  /* the shard's chain, oldest first; NONE at its ends */
    uint32_t cached;      /* the cached tokens predicted for it */
} item;

typedef struct caller_count {
    uint64_t caller;
    uint32_t live; /* its outstanding items; 0: the entry is free */
} caller_count;

typedef struct chain {
    uint32_t head, tail; /* NONE when the shard has none */
} chain;

struct cr_inflight {
    double ttl_s;
    item *items; /* the FIFO: count items from head, wrapping at cap */
    uint32_t cap, head, count;
    double *loads;  /* per shard: outstanding work */
    double *busy;   /* per shard: when its work should be done, seconds */
    uint32_t *live; /* per shard: outstanding items */
    chain *chains;  /* per shard */
    uint32_t n_shards;
    double total;
    uint64_t outstanding, released, expired, evicted;
    cr_htable ids;  /* items by id, 2 cap slots; none until an id comes */
    caller_count *callers; /* identified callers with items; live 0 = free */
    uint32_t n_callers, callers_cap;
    uint32_t caller_max; /* items one identified caller may hold */
    uint64_t refused;    /* items not kept: over a quota, or the cap another's */
};

cr_inflight *cr_inflight_new(uint64_t cap, double ttl_s)
{
    cr_inflight *w = calloc(1, sizeof *w);
    if (!w || !(w->items = malloc(cap * sizeof *w->items))) {
        free(w);
        return NULL;
    }
    w->ttl_s = ttl_s;
    w->cap = (uint32_t)cap;
    w->caller_max = (uint32_t)cap;
    return w;
}

void cr_inflight_free(cr_inflight *w)
{
    if (!w)
        return;
    free(w->items);
    cr_htable_free(&w->ids);
    free(w->busy);
    free(w->loads);
    free(w->live);
    free(w->chains);
    free(w->callers);
    free(w);
}

void cr_inflight_set_caller_max(cr_inflight *w, uint64_t most)
{
    w->caller_max = most && most < w->cap ? (uint32_t)most : w->cap;
}

/* caller's count (caller != 0); with make, a free or new entry for it when
 * it has none. NULL when it has none (and, with make, out of memory). */
static caller_count *caller_of(cr_inflight *w, uint64_t caller, int make)
{
    caller_count *free_one = NULL;
    for (uint32_t i = 0; i < w->n_callers; i++) {
        if (w->callers[i].live && w->callers[i].caller == caller)
            return &w->callers[i];
        if (!w->callers[i].live && !free_one)
            free_one = &w->callers[i];
    }
    if (!make)
        return NULL;
    if (free_one) {
        *free_one = (caller_count){caller, 0};
        return free_one;
    }
    if (w->n_callers == w->callers_cap) {
        uint32_t n = w->callers_cap ? 2 * w->callers_cap : 8;
        caller_count *a = realloc(w->callers, n * sizeof *a);
        if (!a)
            return NULL;
        w->callers = a;
        w->callers_cap = n;
    }
    w->callers[w->n_callers] = (caller_count){caller, 0};
    return &w->callers[w->n_callers++];
}

/* Grows one per-shard array to n entries, the new ones from fill. */
static int grow(void **array, size_t size, uint32_t old, uint32_t n, int fill)
{
    char *a = realloc(*array, (size_t)n * size);
    if (!a)
        return -1;
    memset(a + (size_t)old * size, fill, (size_t)(n - old) * size);
    *array = a;
    return 0;
}

int cr_inflight_reserve(cr_inflight *w, uint32_t n)
{
    if (n <= w->n_shards)
        return 0;
    if (grow((void **)&w->loads, sizeof *w->loads, w->n_shards, n, 0) != 0 ||
        grow((void **)&w->busy, sizeof *w->busy, w->n_shards, n, 0) != 0 ||
        grow((void **)&w->live, sizeof *w->live, w->n_shards, n, 0) != 0 ||
        grow((void **)&w->chains, sizeof *w->chains, w->n_shards, n, 0xff) != 0)
        return -1; /* n_shards unchanged: the grown arrays are merely longer */
    w->n_shards = n;
    return 0;
}

static int is_id(const void *ctx, uint32_t idx, const void *id)
{
    return ((const cr_inflight *)ctx)->items[idx].id == *(const uint64_t *)id;
}

static uint64_t id_hash(const void *ctx, uint32_t idx)
{
    return cr_mix64(((const cr_inflight *)ctx)->items[idx].id);
}

/* The slot holding id's item, or the empty one where it would go. */
static uint64_t id_find(const cr_inflight *w, uint64_t id)
{
    return cr_htable_slot(&w->ids, cr_mix64(id), is_id, w, &id);
}

/* Takes item idx out of the work and its shard's chain. */
static void retire(cr_inflight *w, uint32_t idx, uint64_t *counter)
{
    item *it = &w->items[idx];
    chain *ch = &w->chains[it->shard];
    if (it->prev == NONE)
        ch->head = it->next;
    else
        w->items[it->prev].next = it->next;
    if (it->next == NONE)
        ch->tail = it->prev;
    else
        w->items[it->next].prev = it->prev;
    w->loads[it->shard] = --w->live[it->shard] ? w->loads[it->shard] - it->weight : 0;
    w->total = --w->outstanding ? w->total - it->weight : 0;
    if (it->id) {
        cr_htable_remove(&w->ids, cr_mix64(it->id), idx, (cr_htable_keys){id_hash, w});
        it->id = 0;
    }
    caller_count *cc = it->caller ? caller_of(w, it->caller, 0) : NULL;
    if (cc)
        cc->live--;
    it->shard = NONE;
    (*counter)++;
}

/* Drops the FIFO's head, retiring it first when it is outstanding. */
static void pop(cr_inflight *w, uint64_t *counter)
{
    if (w->items[w->head].shard != NONE)
        retire(w, w->head, counter);
    w->head = w->head + 1 == w->cap ? 0 : w->head + 1;
    w->count--;
}

void cr_inflight_expire(cr_inflight *w, double now)
{
    while (w->count &&
           (w->items[w->head].shard == NONE || w->items[w->head].expires <= now))
        pop(w, &w->expired);
}

/* The id index, made on the first id; -1 when out of memory. */
static int want_ids(cr_inflight *w)
{
    if (w->ids.slots)
        return 0;
    uint64_t n = 2;
    while (n < 2 * (uint64_t)w->cap)
        n *= 2;
    return cr_htable_reset(&w->ids, n);
}

int cr_inflight_add(cr_inflight *w, int64_t owner, uint32_t shard, double weight, double now,
                    uint64_t caller)
{
    return cr_inflight_add_id(w, owner, 0, 0, shard, weight, now, caller);
}

/* 1 when caller may add an item now: under its quota, and at the cap the
 * oldest item is released, its own or nobody's. */
static int may_add(cr_inflight *w, uint64_t caller, caller_count **cc)
{
    *cc = caller ? caller_of(w, caller, 1) : NULL;
    if (caller && (!*cc || (*cc)->live >= w->caller_max))
        return 0;
    const item *oldest = &w->items[w->head];
    return w->count < w->cap || oldest->shard == NONE || !oldest->caller ||
           oldest->caller == caller;
}

int cr_inflight_add_id(cr_inflight *w, int64_t owner, uint64_t id, uint32_t cached,
                       uint32_t shard, double weight, double now, uint64_t caller)
{
    caller_count *cc;
    if (!may_add(w, caller, &cc)) {
        w->refused++;
        return 0;
    }
    if (id && (want_ids(w) != 0 || cr_htable_at(&w->ids, id_find(w, id)) != CR_HTABLE_NONE))
        id = 0; /* no index, or the id is outstanding already: this one by owner */
    if (w->count == w->cap)
        pop(w, &w->evicted); /* may retire the caller's oldest: cc stays its */
    uint32_t idx = w->head + w->count; /* < 2 cap, no overflow */
    idx -= idx >= w->cap ? w->cap : 0;
    w->items[idx] = (item){now + w->ttl_s, weight, owner, id, caller, shard, NONE, NONE, cached};
    w->count++;
    if (cc)
        cc->live++;
    if (id)
        cr_htable_put(&w->ids, id_find(w, id), idx);
    w->busy[shard] = (w->busy[shard] > now ? w->busy[shard] : now) + weight / 1e3;
    chain *ch = &w->chains[shard];
    if (ch->tail == NONE)
        ch->head = idx;
    else
        w->items[ch->tail].next = idx;
    w->items[idx].prev = ch->tail;
    ch->tail = idx;
    w->loads[shard] += weight;
    w->live[shard]++;
    w->total += weight;
    w->outstanding++;
    return 1;
}

/* Releases item idx, done at now: the shard's next item starts now. */
static void done(cr_inflight *w, uint32_t idx, double now)
{
    uint32_t s = w->items[idx].shard;
    retire(w, idx, &w->released);
    w->busy[s] = now + w->loads[s] / 1e3;
}

void cr_inflight_clear_shard(cr_inflight *w, uint32_t shard)
{
    if (shard >= w->n_shards)
        return;
    while (w->chains[shard].head != NONE)
        retire(w, w->chains[shard].head, &w->evicted);
    w->busy[shard] = 0;
}

int cr_inflight_release(cr_inflight *w, int64_t owner, uint32_t shard, double now,
                        uint64_t caller)
{
    if (shard >= w->n_shards)
        return 0;
    uint32_t idx = w->chains[shard].head;
    for (int k = 0; idx != NONE && k < CR_ROUTE_RELEASE_DEPTH; k++) {
        if (w->items[idx].owner == owner && !w->items[idx].id &&
            w->items[idx].caller == caller) {
            done(w, idx, now);
            return 1;
        }
        idx = w->items[idx].next;
    }
    return 0;
}

int cr_inflight_release_id(cr_inflight *w, uint64_t id, double now, uint32_t *shard,
                           uint32_t *cached)
{
    uint32_t idx = id ? cr_htable_find(&w->ids, cr_mix64(id), is_id, w, &id) : CR_HTABLE_NONE;
    if (idx == CR_HTABLE_NONE)
        return 0;
    *shard = w->items[idx].shard;
    *cached = w->items[idx].cached;
    done(w, idx, now);
    return 1;
}

double cr_inflight_wait_ms(const cr_inflight *w, uint32_t shard, double now)
{
    /* never more than the work still outstanding there: without outcomes
     * the timeline alone would keep what --inflight-ttl already let go */
    double left = (w->busy[shard] - now) * 1e3;
    left = left < w->loads[shard] ? left : w->loads[shard];
    return left > 0 ? left : 0;
}

const double *cr_inflight_loads(const cr_inflight *w) { return w->loads; }
uint32_t cr_inflight_shards(const cr_inflight *w) { return w->n_shards; }
uint32_t cr_inflight_items_by(const cr_inflight *w, uint32_t shard, double t)
{
    if (shard >= w->n_shards)
        return 0;
    uint32_t n = w->live[shard];
    for (uint32_t idx = w->chains[shard].tail; idx != NONE && w->items[idx].expires - w->ttl_s > t;
         idx = w->items[idx].prev)
        n--; /* a chain is in arrival order: its newest are at its tail */
    return n;
}
double cr_inflight_total(const cr_inflight *w) { return w->total; }

void cr_inflight_stats(const cr_inflight *w, cr_route_stats *out)
{
    out->outstanding = w->outstanding;
    out->queued = w->count;
    out->capacity = w->cap;
    out->work = w->total;
    out->released = w->released;
    out->expired = w->expired;
    out->evicted = w->evicted;
    out->refused = w->refused;
    out->bytes = sizeof *w + (uint64_t)w->cap * sizeof *w->items +
                 cr_htable_bytes(&w->ids) +
                 (uint64_t)w->callers_cap * sizeof *w->callers +
                 (uint64_t)w->n_shards *
                     (sizeof *w->loads + sizeof *w->busy + sizeof *w->live + sizeof *w->chains);
}
