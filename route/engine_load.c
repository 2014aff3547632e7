/* The engines' own load (route.h, "The engines' own load"): what a scrape
 * says each engine holds, kept per shard for the ttft rule's wait, the
 * prefix index's bound and the adapters' slots.
 *
 * Why foreign requests rather than the engine's count as the queue: the
 * router's own routes reach the engine at once, its scrapes only every
 * interval. Taking the engine's count alone would forget every route made
 * since the last scrape (a burst would pile onto the shard the scrape
 * showed emptiest); taking the router's alone misses what others send.
 * So the engine's count is split, at the scrape, into the router's own
 * requests then (which the shard's queue already follows, route by route
 * and outcome by outcome) and the rest, the foreign ones, which are held
 * as they were until the next scrape: other traffic is seen within one
 * interval, the router's own at once, and neither twice.
 *
 * Why a foreign request is priced as a blind placement: its prompt is not
 * known, so the prompts of the rule's own recent routes stand for it, but
 * not their work: the rule sends a request where its prefix is cached,
 * while a request the router did not place lands wherever (round-robin,
 * another gateway's choice) and mostly misses. Priced at the rule's own
 * mean work, it was priced at the hits the rule earns, a fraction of what
 * it costs (the replay measures foreign prefills 1.4 to 3.4 times the
 * rule's own, bench/README.md). So each route notes what its prompt would
 * cost on a shard picked without looking (the mean over the usable shards
 * of its predicted prefill there), and a foreign request costs their
 * moving mean. Not a cold prefill: where prompts share much (documents,
 * system prompts) a blind request still hits, and pricing it cold
 * overpriced it there (docs: p99 5% worse than this, bench/README.md).
 *
 * Nothing it keeps is read until the first load, so without scrapes every
 * route is the same as before; the moving mean alone is kept up on every
 * ttft route (an O(shards) pass), so that the first scrape finds it ready.
 * Everything under the router's lock. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Routes the moving mean of blind prefills spans, about. */
#define MEAN_ROUTES 64.0

/* r locked: shard s's view, the array grown to hold it (new ones empty);
 * NULL when out of memory. */
static cr_engine_view *view_for(cr_router *r, uint32_t s)
{
    if (s >= r->n_engines) {
        uint32_t n = r->n_engines ? r->n_engines : 8;
        while (n <= s)
            n *= 2;
        cr_engine_view *v = realloc(r->engines, n * sizeof *v);
        if (!v)
            return NULL;
        memset(v + r->n_engines, 0, (n - r->n_engines) * sizeof *v);
        r->engines = v;
        r->n_engines = n;
    }
    return &r->engines[s];
}

/* r locked: shard s's view while its load is fresh at now, else NULL (a
 * load found stale here is counted, once). */
static cr_engine_view *fresh(cr_router *r, uint32_t s, double now)
{
    cr_engine_view *v = s < r->n_engines ? &r->engines[s] : NULL;
    if (!v || !v->fresh)
        return NULL;
    if (now - v->at_s > r->stale_s) {
        v->fresh = 0;
        r->engine_stale++;
        return NULL;
    }
    return v;
}

/* The index's blocks an engine's gpu_blocks hold: its tokens over
 * --block-tokens when it says its block size; 0: not said. */
static uint64_t index_blocks_of(const cr_router *r, const cr_engine_load *l)
{
    if (!l->block_size)
        return l->gpu_blocks;
    return (uint64_t)((double)l->gpu_blocks * l->block_size / r->block_tokens);
}

cr_prefix *cr_router_gpu_index(cr_router *r)
{
    if (r->index)
        return r->index;
    r->index = cr_prefix_new(CR_ROUTE_INDEX_MAX_SHARDS, r->index_blocks);
    for (uint32_t s = 0; r->index && s < r->n_engines && s < CR_ROUTE_INDEX_MAX_SHARDS; s++)
        if (r->engines[s].index_cap)
            cr_prefix_set_cap(r->index, s, r->engines[s].index_cap);
    return r->index;
}

int cr_router_engine_load(cr_router *r, uint32_t shard, const cr_engine_load *load, double now)
{
    uint64_t keys[CR_ENGINE_LORA_MAX];
    uint32_t n_lora = load->n_lora < CR_ENGINE_LORA_MAX ? load->n_lora : CR_ENGINE_LORA_MAX;
    for (uint32_t i = 0; i < n_lora; i++) /* hashed outside the lock */
        keys[i] = cr_route_text_key(load->lora[i], strlen(load->lora[i]));
    double engine = (isnan(load->waiting) ? 0 : load->waiting) +
                    (isnan(load->running) ? 0 : load->running);
    int counted = !isnan(load->waiting) || !isnan(load->running);
    pthread_mutex_lock(&r->lock);
    cr_engine_view *v = view_for(r, shard);
    if (!v) {
        pthread_mutex_unlock(&r->lock);
        return -1;
    }
    double ours = 0; /* the router's requests there when the engine was scraped */
    if (r->work) {
        cr_inflight_expire(r->work, now);
        ours = cr_inflight_items_by(r->work, shard, load->at_s);
    }
    v->at_s = load->at_s;
    v->foreign = counted && engine > ours ? engine - ours : 0;
    v->fresh = 1;
    v->max_lora = load->max_lora;
    v->n_lora = n_lora;
    memcpy(v->lora, keys, n_lora * sizeof *keys);
    r->lora_listed |= n_lora > 0;
    uint64_t blocks = index_blocks_of(r, load);
    blocks = load->gpu_blocks && !blocks ? 1 : blocks; /* fewer tokens than one block */
    uint32_t cap = blocks < r->index_blocks ? (uint32_t)blocks : 0; /* 0: the flag's */
    if (cap != v->index_cap && shard < CR_ROUTE_INDEX_MAX_SHARDS) {
        v->index_cap = cap;
        if (r->index)
            cr_prefix_set_cap(r->index, shard, cap ? cap : r->index_blocks);
    }
    int first = load->block_size && load->block_size != r->block_tokens && !v->mismatch;
    v->mismatch |= first;
    r->engine_mismatch += first;
    r->engine_loads++;
    pthread_mutex_unlock(&r->lock);
    return first;
}

double cr_engine_foreign_ms(cr_router *r, uint32_t s, double now)
{
    const cr_engine_view *v = fresh(r, s, now);
    return v ? v->foreign * r->blind_ms : 0;
}

int cr_engine_adapter_seen(cr_router *r, uint64_t adapter, uint32_t n, double now)
{
    if (!r->lora_listed) /* engines without adapters: no request looks */
        return 0;
    for (uint32_t s = 0; adapter && s < n && s < r->n_engines; s++) {
        const cr_engine_view *v = fresh(r, s, now);
        for (uint32_t i = 0; v && i < v->n_lora; i++)
            if (v->lora[i] == adapter)
                return 1;
    }
    return 0;
}

int cr_engine_must_evict(cr_router *r, uint32_t s, uint64_t adapter, double now)
{
    const cr_engine_view *v = fresh(r, s, now);
    if (!v || !v->max_lora || v->n_lora < v->max_lora)
        return 0; /* no load (or a stale one), no slots said, or a free slot */
    for (uint32_t i = 0; i < v->n_lora; i++)
        if (v->lora[i] == adapter)
            return 0;
    return 1;
}

void cr_engine_note_blind(cr_router *r, double ms)
{
    r->blind_ms = r->blind_ms > 0 ? r->blind_ms + (ms - r->blind_ms) / MEAN_ROUTES : ms;
}

void cr_engine_forget(cr_router *r, uint32_t s)
{
    if (s < r->n_engines)
        r->engines[s] = (cr_engine_view){0};
    if (r->index && s < CR_ROUTE_INDEX_MAX_SHARDS)
        cr_prefix_set_cap(r->index, s, r->index_blocks);
}
