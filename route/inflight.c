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
 * the last of all goes. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define NONE UINT32_MAX /* no item; as an item's shard: released */

typedef struct item {
    double expires, weight;
    int64_t owner;
    uint32_t shard, next; /* next: the shard's next item, NONE = last */
} item;

typedef struct chain {
    uint32_t head, tail; /* NONE when the shard has none */
} chain;

struct cr_inflight {
    double ttl_s;
    item *items; /* the FIFO: count items from head, wrapping at cap */
    uint32_t cap, head, count;
    double *loads;  /* per shard: outstanding work */
    uint32_t *live; /* per shard: outstanding items */
    chain *chains;  /* per shard */
    uint32_t n_shards;
    double total;
    uint64_t outstanding, released, expired, evicted;
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
    return w;
}

void cr_inflight_free(cr_inflight *w)
{
    if (!w)
        return;
    free(w->items);
    free(w->loads);
    free(w->live);
    free(w->chains);
    free(w);
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
        grow((void **)&w->live, sizeof *w->live, w->n_shards, n, 0) != 0 ||
        grow((void **)&w->chains, sizeof *w->chains, w->n_shards, n, 0xff) != 0)
        return -1; /* n_shards unchanged: the grown arrays are merely longer */
    w->n_shards = n;
    return 0;
}

/* Takes item idx (after prev in its shard's chain; NONE: it is the head)
 * out of the work and the chain. */
static void retire(cr_inflight *w, uint32_t idx, uint32_t prev, uint64_t *counter)
{
    item *it = &w->items[idx];
    chain *ch = &w->chains[it->shard];
    if (prev == NONE)
        ch->head = it->next;
    else
        w->items[prev].next = it->next;
    if (ch->tail == idx)
        ch->tail = prev;
    w->loads[it->shard] = --w->live[it->shard] ? w->loads[it->shard] - it->weight : 0;
    w->total = --w->outstanding ? w->total - it->weight : 0;
    it->shard = NONE;
    (*counter)++;
}

/* Drops the FIFO's head, retiring it first when it is outstanding. */
static void pop(cr_inflight *w, uint64_t *counter)
{
    if (w->items[w->head].shard != NONE)
        retire(w, w->head, NONE, counter);
    w->head = w->head + 1 == w->cap ? 0 : w->head + 1;
    w->count--;
}

void cr_inflight_expire(cr_inflight *w, double now)
{
    while (w->count &&
           (w->items[w->head].shard == NONE || w->items[w->head].expires <= now))
        pop(w, &w->expired);
}

void cr_inflight_add(cr_inflight *w, int64_t owner, uint32_t shard, double weight, double now)
{
    if (w->count == w->cap)
        pop(w, &w->evicted);
    uint32_t idx = w->head + w->count; /* < 2 cap, no overflow */
    idx -= idx >= w->cap ? w->cap : 0;
    w->items[idx] = (item){now + w->ttl_s, weight, owner, shard, NONE};
    w->count++;
    chain *ch = &w->chains[shard];
    if (ch->tail == NONE)
        ch->head = idx;
    else
        w->items[ch->tail].next = idx;
    ch->tail = idx;
    w->loads[shard] += weight;
    w->live[shard]++;
    w->total += weight;
    w->outstanding++;
}

int cr_inflight_release(cr_inflight *w, int64_t owner, uint32_t shard)
{
    if (shard >= w->n_shards)
        return 0;
    uint32_t prev = NONE, idx = w->chains[shard].head;
    for (int k = 0; idx != NONE && k < CR_ROUTE_RELEASE_DEPTH; k++) {
        if (w->items[idx].owner == owner) {
            retire(w, idx, prev, &w->released);
            return 1;
        }
        prev = idx;
        idx = w->items[idx].next;
    }
    return 0;
}

const double *cr_inflight_loads(const cr_inflight *w) { return w->loads; }
uint32_t cr_inflight_shards(const cr_inflight *w) { return w->n_shards; }
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
    out->bytes = sizeof *w + (uint64_t)w->cap * sizeof *w->items +
                 (uint64_t)w->n_shards * (sizeof *w->loads + sizeof *w->live + sizeof *w->chains);
}
