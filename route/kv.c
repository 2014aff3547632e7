/* What the engines hold (route.h, "KV events"): their stored and removed
 * blocks applied to the prefix index, through a per-shard map from the
 * engine's hashes to the router's chained keys. */
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "internal.h"

uint64_t cr_route_block_hash(uint64_t parent, const uint32_t *tokens, size_t n)
{
    uint8_t le[4 * 256];
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, parent);
    /* little-endian whatever the host, a chunk at a time */
    for (size_t at = 0; at < n; at += 256) {
        size_t k = n - at < 256 ? n - at : 256;
        for (size_t i = 0; i < k; i++) {
            uint32_t t = tokens[at + i];
            le[4 * i] = (uint8_t)t;
            le[4 * i + 1] = (uint8_t)(t >> 8);
            le[4 * i + 2] = (uint8_t)(t >> 16);
            le[4 * i + 3] = (uint8_t)(t >> 24);
        }
        XXH3_64bits_update(&st, le, 4 * k);
    }
    return XXH3_64bits_digest(&st);
}

/* ---- the map: engine hash -> the router's index key ---------------------
 *
 * The key is the block's chained hash mixed with its namespace, as Route
 * mixes its callers' hashes: a removal (which names no namespace) finds
 * the key itself, and a child (in its parent's namespace) unmixes its
 * parent's chain from it. Buckets of WAYS places: a new mapping takes the
 * place of the same engine hash, else an empty one, else one whose block
 * the shard no longer holds (the index aged it out), else one by the hash's
 * top bits; with twice the index's blocks in places, a block the shard
 * still holds rarely loses its mapping. */

#define WAYS 4

typedef struct place {
    uint64_t engine;
    uint64_t key; /* 0: empty (a key of 0 is kept as 1) */
    uint64_t mix; /* the namespace's mix in key: a child's is its parent's */
} place;

struct cr_kvmap {
    place *at;
    uint64_t buckets; /* a power of two */
};

static place *bucket_of(const cr_kvmap *m, uint64_t engine)
{
    return &m->at[(cr_mix64(engine) & (m->buckets - 1)) * WAYS];
}

/* engine's place, or NULL. */
static place *lookup(const cr_kvmap *m, uint64_t engine)
{
    place *b = m ? bucket_of(m, engine) : NULL;
    for (int w = 0; b && w < WAYS; w++)
        if (b[w].key && b[w].engine == engine)
            return &b[w];
    return NULL;
}

/* r locked: whether shard holds key in either tier. */
static int held(const cr_router *r, uint32_t shard, uint64_t key)
{
    return (r->index && cr_prefix_holds(r->index, shard, key)) ||
           (r->cpu && cr_prefix_holds(r->cpu, shard, key));
}

/* r locked: the place for engine's new mapping on shard (see above). */
static place *place_for(const cr_router *r, const cr_kvmap *m, uint64_t engine, uint32_t shard)
{
    place *b = bucket_of(m, engine), *empty = NULL, *stale = NULL;
    for (int w = 0; w < WAYS; w++) {
        if (b[w].key && b[w].engine == engine)
            return &b[w];
        if (!b[w].key)
            empty = empty ? empty : &b[w];
        else if (!stale && !held(r, shard, b[w].key))
            stale = &b[w];
    }
    return empty ? empty : stale ? stale : &b[engine >> 62];
}

/* r locked: shard's map, made on its first event; NULL when out of memory. */
static cr_kvmap *map_of(cr_router *r, uint32_t shard)
{
    if (r->kvmaps[shard])
        return r->kvmaps[shard];
    uint64_t buckets = 1;
    while (buckets * WAYS < 2 * (uint64_t)r->index_blocks)
        buckets *= 2;
    cr_kvmap *m = malloc(sizeof *m);
    if (!m || !(m->at = calloc(buckets * WAYS, sizeof *m->at))) {
        free(m);
        return NULL;
    }
    m->buckets = buckets;
    return r->kvmaps[shard] = m;
}

void cr_kvmap_free(cr_kvmap *m)
{
    if (m)
        free(m->at);
    free(m);
}

uint64_t cr_kvmap_bytes(const cr_kvmap *m)
{
    return m ? sizeof *m + m->buckets * WAYS * sizeof *m->at : 0;
}

/* ---- events ---------------------------------------------------------------- */

/* r locked: tier's index, made on first use; NULL when out of memory. */
static cr_prefix *index_for(cr_router *r, cr_kv_tier tier)
{
    if (tier != CR_KV_CPU)
        return cr_router_gpu_index(r);
    if (!r->cpu)
        r->cpu = cr_prefix_new(CR_ROUTE_INDEX_MAX_SHARDS, r->index_blocks);
    return r->cpu;
}

/* r locked: ev's blocks' index keys into keys (the router's chain, mixed
 * with the namespace) and the namespace's mix into *mix; how many: all, or
 * 0 when the parent is unknown (the chain cannot be made). Blocks after a
 * parent are in the parent's namespace, whatever the event says: vLLM
 * names a request's cache salt in its first block's keys only. */
static size_t chain_blocks(const cr_kvmap *m, const cr_kv_event *ev, uint64_t *keys,
                           uint64_t *mix)
{
    uint64_t space = cr_route_text_key(ev->space, ev->space_len), chain = 0;
    *mix = space ? cr_mix64(space) : 0;
    if (ev->has_parent) {
        const place *parent = lookup(m, ev->parent);
        if (!parent)
            return 0;
        *mix = parent->mix;
        chain = parent->key ^ *mix;
    }
    for (size_t i = 0; i < ev->n; i++) {
        chain = cr_route_block_hash(chain, ev->tokens + i * ev->block_size, ev->block_size);
        keys[i] = chain ^ *mix;
        keys[i] += !keys[i];
    }
    return ev->n;
}

/* r locked: room for n keys in the router's scratch; NULL when out of
 * memory. */
static uint64_t *keys_for(cr_router *r, size_t n)
{
    if (r->n_keys < n) {
        uint64_t *k = realloc(r->keys, n * sizeof *k);
        if (!k)
            return NULL;
        r->keys = k;
        r->n_keys = (uint32_t)n;
    }
    return r->keys;
}

/* r locked: one STORED. */
static int stored(cr_router *r, const cr_kv_event *ev, cr_kv_applied *out)
{
    cr_kvmap *m = map_of(r, ev->shard);
    uint64_t *keys = keys_for(r, ev->n);
    cr_prefix *p = index_for(r, ev->tier);
    if (!m || !keys || !p)
        return -1;
    uint64_t mix;
    size_t k = chain_blocks(m, ev, keys, &mix);
    out->orphans += ev->n - k;
    if (k && cr_prefix_insert(p, ev->shard, keys, (uint32_t)k) != 0)
        return -1;
    /* mapped once held, so that no block of this event looks stale to
     * the places the others take */
    for (size_t i = 0; i < k; i++)
        *place_for(r, m, ev->engine[i], ev->shard) = (place){ev->engine[i], keys[i], mix};
    out->stored += k;
    return 0;
}

/* r locked: one REMOVED. */
static void removed(cr_router *r, const cr_kv_event *ev, cr_kv_applied *out)
{
    for (size_t i = 0; i < ev->n; i++) {
        place *p = lookup(r->kvmaps[ev->shard], ev->engine[i]);
        if (!p) {
            out->unknown++;
            continue;
        }
        uint64_t key = p->key;
        cr_prefix *tier = ev->tier == CR_KV_CPU ? r->cpu : r->index;
        out->removed += tier && cr_prefix_forget(tier, ev->shard, key);
        if (!held(r, ev->shard, key)) /* the other tier may still hold it */
            *p = (place){0, 0, 0};
    }
}

/* r locked: one CLEARED. */
static void cleared(cr_router *r, uint32_t shard)
{
    if (r->index)
        cr_prefix_clear(r->index, shard);
    if (r->cpu)
        cr_prefix_clear(r->cpu, shard);
    if (r->kvmaps[shard])
        memset(r->kvmaps[shard]->at, 0, r->kvmaps[shard]->buckets * WAYS * sizeof(place));
}

int cr_router_kv_apply(cr_router *r, const cr_kv_event *ev, size_t n, cr_kv_applied *out)
{
    int st = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < n; i++) {
        const cr_kv_event *e = &ev[i];
        if (e->shard >= CR_ROUTE_INDEX_MAX_SHARDS) {
            out->orphans += e->kind == CR_KV_STORED ? e->n : 0;
            out->unknown += e->kind == CR_KV_REMOVED ? e->n : 0;
        } else if (e->kind == CR_KV_STORED && e->n) {
            st |= stored(r, e, out);
        } else if (e->kind == CR_KV_REMOVED) {
            removed(r, e, out);
        } else if (e->kind == CR_KV_CLEARED) {
            cleared(r, e->shard);
        }
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}
