/* Per-request routes (route.h): the ttft rule, and Route under the other
 * rules. Everything here runs under the router's lock. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "internal.h"

uint64_t cr_route_text_key(const char *s, size_t n)
{
    if (!n)
        return 0;
    uint64_t k = XXH3_64bits(s, n);
    return k ? k : 1;
}

uint64_t cr_route_request_key(const char *s, size_t n, uint64_t caller)
{
    uint64_t k = cr_route_text_key(s, n);
    if (!k || !caller)
        return k;
    k = cr_mix64(k ^ caller);
    return k ? k : 1;
}

void cr_router_set_model(cr_router *r, const cr_prefill_model *m)
{
    pthread_mutex_lock(&r->lock);
    r->model = *m;
    pthread_mutex_unlock(&r->lock);
}

/* r locked: the prefill of L tokens of which s are cached, cpu of those on
 * the CPU tier: their load added. */
static double prefill_with_load(const cr_router *r, double s, double cpu, double l)
{
    const cr_prefill_model *m = &r->model;
    return cr_prefill_ms(&m->prefill, s, l) + cr_load_ms(&m->load, cpu * m->kv_bytes_per_token);
}

/* What the rule sees of one request (request.h): what it derives from it
 * before the lock (its L and its texts' keys), then, under the lock, every
 * shard's side of it. */
typedef struct view {
    const cr_route_request *q;
    uint32_t tokens;          /* L */
    uint32_t n_hashes;        /* q's, checked by the caller */
    uint64_t space, id;       /* its namespace's and request id's keys; 0 = none */
    uint64_t adapter;         /* its adapter's key (route.h, "The engines' own load") */
    int lora;                 /* a fresh engine load lists its adapter loaded */
    const uint64_t *keys;     /* its blocks' keys in the index; NULL: none */
    const cr_session *session; /* its owner's, when it has no hashes */
    uint32_t indexed;         /* shards the match covered */
    int kept;                 /* 1: placed and remembered; 0: only predicted,
                               * so counted nowhere (cr_router_predict) */
} view;

/* The key of the adapter namespace space (n bytes) names: the bytes before
 * its first 0x1f (decisions.md, "Namespaces"); space_key when it has none. */
static uint64_t adapter_key(const char *space, size_t n, uint64_t space_key)
{
    const char *sep = n ? memchr(space, 0x1f, n) : NULL;
    return sep ? cr_route_text_key(space, (size_t)(sep - space)) : space_key;
}

/* What the rule derives from q before the lock: L given, or its hashes'
 * tokens (at most CR_REQUEST_MAX_TOKENS), and its texts' keys. */
static view view_of(const cr_router *r, const cr_route_request *q)
{
    uint64_t hashed = (uint64_t)q->n_hashes * r->block_tokens;
    const char *id = q->request_id;
    uint64_t space = cr_route_text_key(q->space, q->space_len);
    return (view){
        .q = q,
        .tokens = q->prompt_tokens          ? q->prompt_tokens
                  : hashed < CR_REQUEST_MAX_TOKENS ? (uint32_t)hashed
                                                   : CR_REQUEST_MAX_TOKENS,
        .n_hashes = (uint32_t)q->n_hashes,
        .space = space,
        .adapter = adapter_key(q->space, q->space_len, space),
        .id = id ? cr_route_request_key(id, strlen(id), q->caller) : 0,
        .kept = 1,
    };
}

/* r locked: x's keys in the index (its hashes mixed with its namespace,
 * in the router's scratch) matched against the first min(n, 64) shards
 * into r->depth (the other shards' 0), and with a CPU tier its blocks
 * right after into r->extra (the matched shards' only). */
static void look(cr_router *r, view *x, uint32_t n, uint64_t *scratch, double now)
{
    const cr_route_request *q = x->q;
    memset(r->depth, 0, n * sizeof *r->depth);
    if (x->n_hashes && cr_router_gpu_index(r)) {
        if (x->space) {
            uint64_t mix = cr_mix64(x->space);
            for (uint32_t i = 0; i < x->n_hashes; i++)
                scratch[i] = q->hashes[i] ^ mix;
            x->keys = scratch;
        } else {
            x->keys = q->hashes;
        }
        x->indexed = n < CR_ROUTE_INDEX_MAX_SHARDS ? n : CR_ROUTE_INDEX_MAX_SHARDS;
        cr_prefix_match(r->index, x->keys, x->n_hashes, x->indexed, r->depth);
        for (uint32_t s = 0; r->cpu && s < x->indexed; s++) { /* the CPU tier's after them */
            uint32_t e = r->depth[s];
            while (e < x->n_hashes && cr_prefix_holds(r->cpu, s, x->keys[e]))
                e++;
            r->extra[s] = e - r->depth[s];
        }
    } else if (!x->n_hashes && q->has_owner) {
        x->session = cr_sessions_find(&r->sessions, q->owner);
    }
    x->lora = r->engines && cr_engine_adapter_seen(r, x->adapter, n, now);
}

/* The tokens shard s holds of the request, as predicted: on its GPU and,
 * through *cpu (NULL: not wanted), how many of them on its CPU tier. */
static double hit_on(const cr_router *r, const view *x, uint32_t s, double *cpu)
{
    double l = x->tokens;
    if (cpu)
        *cpu = 0;
    if (x->keys) {
        if (s >= x->indexed)
            return 0;
        uint32_t extra = r->cpu ? r->extra[s] : 0; /* look() wrote it only then */
        double gpu = fmin((double)r->depth[s] * r->block_tokens, l);
        double both = fmin((double)(r->depth[s] + extra) * r->block_tokens, l);
        if (cpu)
            *cpu = floor((both - gpu) * r->trust[s]);
        return floor(both * r->trust[s]);
    }
    if (x->session && x->session->shard == s)
        return x->session->tokens < l ? x->session->tokens : l;
    return 0;
}

/* The key standing for x's owner: its owner, or without one its first
 * hash, or its request id's key. */
static int64_t owner_key(const view *x)
{
    const cr_route_request *q = x->q;
    return q->has_owner ? q->owner : x->n_hashes ? (int64_t)q->hashes[0] : (int64_t)x->id;
}

/* The request's home: the first shard of its owner key's ring. */
static uint32_t home_of(cr_router *r, const view *x, uint32_t n)
{
    int64_t key = owner_key(x);
    uint32_t s = cr_router_ring_home(r, key, n);
    s = s != UINT32_MAX ? s : cr_route_fallback_shard(key, n);
    return cr_router_usable_from(r, key, s, n);
}

/* The miss weight for x: --miss-weight g for a prefix of its own (a
 * session's), less for one many requests share (a document, a system
 * prompt), whose copies on more shards many will reuse: 1 + (g - 1) H /
 * (H + n), n the requests that lately matched up to the deepest block any
 * shard holds of it. Counts that request, when it is kept. */
static double miss_weight(cr_router *r, const view *x)
{
    uint32_t d = 0;
    for (uint32_t s = 0; x->keys && s < x->indexed; s++)
        d = r->depth[s] > d ? r->depth[s] : d;
    if (!d)
        return r->g;
    uint32_t n = cr_popular_count(&r->popular, x->keys[d - 1]);
    if (x->kept)
        cr_popular_touch(&r->popular, x->keys[d - 1]);
    return 1 + (r->g - 1) * CR_ROUTE_SHARED_HALF / (CR_ROUTE_SHARED_HALF + n);
}

/* The best shards of one request, cheapest first: at most cap of them (the
 * best and the alternatives it asked for). */
typedef struct ranked {
    uint32_t n, cap;
    uint32_t shard[1 + CR_ROUTE_MAX_ALTERNATIVES];
    double cost[1 + CR_ROUTE_MAX_ALTERNATIVES];
} ranked;

static ranked ranked_for(const cr_route_request *q)
{
    uint32_t more = q->alternatives < CR_ROUTE_MAX_ALTERNATIVES ? q->alternatives
                                                                : CR_ROUTE_MAX_ALTERNATIVES;
    return (ranked){.cap = 1 + more};
}

/* Puts shard s of cost c in k, after the ones that cost as much (so a tie
 * keeps the shard seen first). */
static void ranked_put(ranked *k, uint32_t s, double c)
{
    uint32_t i = k->n < k->cap ? k->n++ : k->cap;
    while (i > 0 && k->cost[i - 1] > c) {
        if (i < k->cap) {
            k->cost[i] = k->cost[i - 1];
            k->shard[i] = k->shard[i - 1];
        }
        i--;
    }
    if (i < k->cap) {
        k->cost[i] = c;
        k->shard[i] = s;
    }
}

/* r locked: how long a request sent to s now would wait, ms: its own
 * queue, and once engines' loads come what the engine holds besides. */
static double wait_on(cr_router *r, uint32_t s, double now)
{
    double wait = r->work ? cr_inflight_wait_ms(r->work, s, now) : 0;
    return r->engines ? wait + cr_engine_foreign_ms(r, s, now) : wait;
}

int cr_router_any_idle(cr_router *r, uint32_t n_shards, double now)
{
    pthread_mutex_lock(&r->lock);
    uint32_t tracked = r->work ? cr_inflight_shards(r->work) : n_shards;
    int idle = 0;
    for (uint32_t s = 0; s < n_shards && !idle; s++) /* past tracked: never sent to */
        idle = cr_router_usable(r, s) && (s >= tracked || wait_on(r, s, now) <= 0);
    pthread_mutex_unlock(&r->lock);
    return idle;
}

/* r locked: what sending x to s costs besides its wait and prefill, ms
 * before the miss weight: an adapter's eviction there. */
static double extra_on(cr_router *r, const view *x, uint32_t s, double now)
{
    return x->lora && cr_engine_must_evict(r, s, x->adapter, now) ? CR_ROUTE_LORA_EVICT_MS : 0;
}

/* r locked: what sending x to s now costs under miss weight g (its wait,
 * plus its prefill weighed g times and an adapter's eviction there, over
 * the shard's speed): what the rule orders shards by. The tokens s holds
 * of x into *hit; its predicted TTFT (wait plus prefill) into *ttft. */
static double cost_on(cr_router *r, const view *x, double g, uint32_t s, double now,
                      double *hit, double *ttft)
{
    double cpu;
    *hit = hit_on(r, x, s, &cpu);
    double wait = wait_on(r, s, now), prefill = prefill_with_load(r, *hit, cpu, x->tokens);
    double cost = (wait + g * prefill) / cr_router_speed(r, s);
    if (x->lora) /* apart: without loads the cost is computed as it always was */
        cost += g * extra_on(r, x, s, now) / cr_router_speed(r, s);
    *ttft = wait + prefill;
    return cost;
}

/* r locked: the usable shards among the candidates (cand NULL: 0..n-1),
 * the home first (when it is one) so that a tie keeps it, ranked into *k by
 * their predicted cost with miss weight g, skipping skip; the most and
 * fewest tokens any of them holds of x into *most and *least. */
static void rank(cr_router *r, const view *x, double g, const uint32_t *cand, uint32_t n_cand,
                 uint32_t n, uint32_t home, uint32_t skip, double now, ranked *k, double *most,
                 double *least)
{
    *most = 0;
    *least = INFINITY;
    for (uint32_t i = 0; i <= n_cand; i++) {
        uint32_t s = i == 0 ? home : cand ? cand[i - 1] : i - 1;
        if (i > 0 && s == home)
            continue;
        if (i == 0 && cand) { /* the home counts only when it is a candidate */
            uint32_t j = 0;
            while (j < n_cand && cand[j] != home)
                j++;
            if (j == n_cand)
                continue;
        }
        if (s >= n || s == skip || !cr_router_usable(r, s))
            continue; /* no such shard; draining, down or gone */
        double hit, ttft, cost = cost_on(r, x, g, s, now, &hit, &ttft);
        *most = hit > *most ? hit : *most;
        *least = hit < *least ? hit : *least;
        ranked_put(k, s, cost);
    }
}

/* r locked: out's shard set, its predictions on that shard. */
static void predict(cr_router *r, const view *x, uint32_t s, double now, cr_route_answer *out)
{
    double cpu, hit = hit_on(r, x, s, &cpu);
    out->shard = s;
    out->cached_tokens = (uint32_t)hit;
    out->queue_wait_ms = wait_on(r, s, now);
    out->prefill_ms = prefill_with_load(r, hit, cpu, x->tokens);
}

/* The shards in k but out's own, best first, as its alternatives (as
 * many as it asked for). */
static void alternatives_from(const ranked *k, cr_route_answer *out)
{
    out->n_alternatives = 0;
    for (uint32_t i = 0; i < k->n && out->n_alternatives + 1 < k->cap; i++)
        if (k->shard[i] != out->shard)
            out->alternative[out->n_alternatives++] = k->shard[i];
}

/* r locked, out the pick's prediction: when x must meet an SLO its pick
 * would miss, the cheapest of the candidates (cand NULL: every shard) by
 * the rule's cost (cost_on, miss weight g) among those predicted to meet
 * it, into out; none meets it: out as it is. The cache is still preferred
 * among those that meet it; it is only not bought with the request's own
 * SLO. */
static void meet(cr_router *r, const view *x, double g, const uint32_t *cand, uint32_t n_cand,
                 uint32_t n, double now, cr_route_answer *out)
{
    double slo = x->q->meet_ms;
    if (!(slo > 0) || out->queue_wait_ms + out->prefill_ms <= slo)
        return;
    uint32_t best = UINT32_MAX;
    double best_cost = INFINITY;
    for (uint32_t i = 0; i < (cand ? n_cand : n); i++) {
        uint32_t s = cand ? cand[i] : i;
        if (s >= n || !cr_router_usable(r, s))
            continue;
        double hit, ttft, cost = cost_on(r, x, g, s, now, &hit, &ttft);
        if (ttft <= slo && cost < best_cost) {
            best = s;
            best_cost = cost;
        }
    }
    if (best != UINT32_MAX)
        predict(r, x, best, now, out);
}

/* The ttft choice among the candidates (cand NULL: every shard), with miss
 * weight g, and the alternatives the request asked for. With the request's
 * `only` list as the candidates, nothing else is tried: no usable one
 * answers CR_ROUTE_NO_SHARD. */
static void choose(cr_router *r, const view *x, double g, const uint32_t *cand,
                   uint32_t n_cand, uint32_t n, uint32_t home, double now,
                   cr_route_answer *out)
{
    ranked k = ranked_for(x->q);
    double most, least;
    rank(r, x, g, cand, n_cand, n, home, UINT32_MAX, now, &k, &most, &least);
    if (!k.n && x->q->only) {
        out->shard = CR_ROUTE_NO_SHARD;
        out->n_alternatives = 0;
        return;
    }
    if (!k.n && cand) /* every planned shard left service */
        return choose(r, x, g, NULL, n, n, home, now, out);
    predict(r, x, k.n ? k.shard[0] : home, now, out);
    if (k.n)
        meet(r, x, g, cand, n_cand, n, now, out);
    alternatives_from(&k, out);
    double hit = out->cached_tokens;
    out->reason = cand && !x->q->only ? CR_ROUTE_WHY_PLANNED
                  : most <= least     ? CR_ROUTE_WHY_LEAST_LOADED
                  : hit < most        ? CR_ROUTE_WHY_SPILL
                  : x->session        ? CR_ROUTE_WHY_SESSION
                                      : CR_ROUTE_WHY_PREFIX;
}

/* r locked, prepared for n shards: the request's answer under ttft. */
static void place_ttft(cr_router *r, const cr_table *t, uint32_t n, const view *x,
                       double now, cr_route_answer *out)
{
    const cr_route_request *q = x->q;
    const cr_placement *p = t && q->has_owner ? cr_table_find(t, q->owner) : NULL;
    const uint32_t *cand = q->only               ? q->only
                           : r->planned && p     ? cr_table_shards(t, p)
                                                 : NULL;
    uint32_t n_cand = q->only ? q->n_only : cand ? p->kb : n;
    choose(r, x, miss_weight(r, x), cand, n_cand, n, home_of(r, x, n), now, out);
    out->admitted = p != NULL;
}

/* 1 when s is among the request's `only` shards (or it has none). */
static int allowed(const cr_route_request *q, uint32_t s)
{
    for (uint32_t i = 0; q->only && i < q->n_only; i++)
        if (q->only[i] == s)
            return 1;
    return !q->only;
}

/* r locked, prepared for n shards: the request's answer under plan,
 * bounded or live (its owner, or a key standing in for one). A shard
 * outside its `only` list gives way to the ttft choice among the list;
 * the alternatives are the other shards by the ttft rule's cost. */
static void place_rule(cr_router *r, const cr_table *t, uint32_t n, const view *x,
                       double now, cr_route_answer *out)
{
    const cr_route_request *q = x->q;
    uint32_t s = cr_router_rule_one(r, t, n, owner_key(x), 1.0, now, &out->admitted, q->caller);
    out->n_alternatives = 0;
    if (!allowed(q, s)) {
        int admitted = out->admitted;
        choose(r, x, r->g, q->only, q->n_only, n, s, now, out);
        out->admitted = admitted;
    } else {
        predict(r, x, s, now, out);
        if (q->alternatives) {
            ranked k = ranked_for(q);
            double most, least;
            rank(r, x, r->g, q->only, q->only ? q->n_only : n, n, s, s, now, &k, &most, &least);
            alternatives_from(&k, out); /* s skipped: the rule's shard is the best */
        }
    }
    out->reason = CR_ROUTE_WHY_RULE;
}

/* r locked: work ms as one route may add it: bounded, however many tokens
 * it names. */
static double bounded_work(const cr_router *r, double ms)
{
    return r->max_work_ms > 0 && ms > r->max_work_ms ? r->max_work_ms : ms;
}

/* r locked: x's prefill on a shard picked without looking, ms: the mean,
 * over the usable shards below n, of its prefill there. */
static double blind_prefill(const cr_router *r, const view *x, uint32_t n)
{
    double sum = 0;
    uint32_t usable = 0;
    for (uint32_t s = 0; s < n; s++) {
        if (!cr_router_usable(r, s))
            continue;
        double cpu, hit = hit_on(r, x, s, &cpu);
        sum += prefill_with_load(r, hit, cpu, x->tokens);
        usable++;
    }
    return usable ? sum / usable : prefill_with_load(r, 0, 0, x->tokens);
}

/* r locked: what a placed request leaves behind: its blocks in the
 * index, its session, its predicted prefill as outstanding work. */
static void remember(cr_router *r, const view *x, const cr_route_answer *a, uint32_t n_shards,
                     double now)
{
    const cr_route_request *q = x->q;
    if (x->keys && a->shard < x->indexed)
        cr_prefix_insert(r->index, a->shard, x->keys, x->n_hashes); /* out of memory: less kept */
    if (q->has_owner) {
        const cr_session *was = cr_sessions_find(&r->sessions, q->owner);
        if (was && was->shard != a->shard)
            r->moved[!cr_router_usable(r, was->shard)]++;
        cr_sessions_put(&r->sessions, q->owner, a->shard, x->tokens);
    }
    if (r->by == CR_ROUTE_TTFT) {
        cr_inflight_add_id(r->work, q->has_owner ? q->owner : 0, x->id, a->cached_tokens,
                           a->shard, bounded_work(r, a->prefill_ms), now, q->caller);
        /* what a foreign request stands for (engine_load.c says why) */
        cr_engine_note_blind(r, bounded_work(r, blind_prefill(r, x, n_shards)));
    }
    r->why[a->reason]++;
}

/* r locked: scratch room for n keys and n_shards depths; -1 when out of
 * memory. */
static int scratch_for(cr_router *r, uint32_t n_shards, uint64_t **keys, uint32_t n_keys)
{
    if (r->n_depth < n_shards) {
        uint32_t *d = realloc(r->depth, n_shards * sizeof *d);
        if (d)
            r->depth = d;
        uint32_t *e = d ? realloc(r->extra, n_shards * sizeof *e) : NULL;
        if (!e)
            return -1; /* n_depth unchanged: the grown one is merely longer */
        r->extra = e;
        r->n_depth = n_shards;
    }
    if (r->n_keys < n_keys) {
        uint64_t *k = realloc(r->keys, n_keys * sizeof *k);
        if (!k)
            return -1;
        r->keys = k;
        r->n_keys = n_keys;
    }
    *keys = r->keys;
    return 0;
}

/* Requests placed per lock, their views on the stack. */
#define CHUNK 64

/* r locked: places v[0..n) into out[0..n), or out of memory (ok 0) each
 * at its owner key's fallback, nothing predicted; a view not kept is only
 * answered, nothing of it remembered or counted. */
static void place_locked(cr_router *r, const cr_table *t, uint32_t n_shards, view *v,
                         cr_route_answer *out, size_t n, double now)
{
    uint32_t most = 0;
    for (size_t i = 0; i < n; i++)
        most = v[i].n_hashes > most ? v[i].n_hashes : most;
    uint64_t *scratch = NULL;
    int ok = cr_router_prepare(r, n_shards) == 0 && scratch_for(r, n_shards, &scratch, most) == 0;
    if (ok && r->work)
        cr_inflight_expire(r->work, now);
    for (size_t i = 0; i < n; i++) {
        cr_route_answer *a = &out[i];
        if (!ok) {
            int64_t key = v[i].q->has_owner ? v[i].q->owner : (int64_t)v[i].id;
            a->shard = cr_route_fallback_shard(key, n_shards);
            a->admitted = 0;
            a->cached_tokens = 0;
            a->queue_wait_ms = a->prefill_ms = 0;
            a->n_alternatives = 0;
            a->reason = CR_ROUTE_WHY_RULE;
            continue;
        }
        look(r, &v[i], n_shards, scratch, now);
        if (r->by == CR_ROUTE_TTFT)
            place_ttft(r, t, n_shards, &v[i], now, a);
        else
            place_rule(r, t, n_shards, &v[i], now, a);
        if (v[i].kept && a->shard != CR_ROUTE_NO_SHARD) /* nowhere to go: nothing to remember */
            remember(r, &v[i], a, n_shards, now);
    }
}

void cr_router_place(cr_router *r, const cr_table *t, uint32_t n_shards,
                     const cr_route_request *q, cr_route_answer *out, size_t n, double now)
{
    view v[CHUNK]; /* on the stack: a Route mallocs nothing here */
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        for (size_t i = 0; i < k; i++)
            v[i] = view_of(r, &q[at + i]); /* the texts hashed outside the lock */
        pthread_mutex_lock(&r->lock);
        place_locked(r, t, n_shards, v, out + at, k, now);
        pthread_mutex_unlock(&r->lock);
    }
}

void cr_router_predict(cr_router *r, const cr_table *t, uint32_t n_shards,
                       const cr_route_request *q, cr_route_answer *out, double now)
{
    view v = view_of(r, q);
    v.kept = 0;
    pthread_mutex_lock(&r->lock);
    place_locked(r, t, n_shards, &v, out, 1, now);
    pthread_mutex_unlock(&r->lock);
}

void cr_router_place_arrivals(cr_router *r, const cr_table *t, uint32_t n_shards,
                              const double *weights, cr_route_answer *routes, size_t n,
                              double now, uint64_t caller)
{
    cr_route_request q[CHUNK];
    view v[CHUNK];
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        for (size_t i = 0; i < k; i++) {
            double w = weights ? weights[at + i] : 1;
            q[i] = (cr_route_request){.has_owner = 1, .owner = routes[at + i].owner,
                                      .prompt_tokens = w < UINT32_MAX ? (uint32_t)w : UINT32_MAX,
                                      .caller = caller};
            v[i] = view_of(r, &q[i]);
        }
        pthread_mutex_lock(&r->lock);
        place_locked(r, t, n_shards, v, routes + at, k, now);
        pthread_mutex_unlock(&r->lock);
    }
}

int cr_router_release_request(cr_router *r, uint64_t request, double now, int has_cached,
                              uint32_t cached_tokens, uint32_t *shard)
{
    if (!r->work || !request)
        return 0;
    uint32_t predicted = 0;
    pthread_mutex_lock(&r->lock);
    cr_inflight_expire(r->work, now);
    int found = cr_inflight_release_id(r->work, request, now, shard, &predicted);
    if (found && has_cached) {
        int events = *shard < CR_ROUTE_INDEX_MAX_SHARDS && r->kvmaps[*shard];
        r->hit_checked[events]++;
        r->hit_error[events] += fabs((double)cached_tokens - predicted);
    }
    if (found && has_cached && predicted > 0 && *shard < CR_ROUTE_INDEX_MAX_SHARDS) {
        /* a shard whose engine holds less than its index says is trusted less */
        double ratio = cached_tokens >= predicted ? 1.0 : (double)cached_tokens / predicted;
        r->trust[*shard] = 0.8 * r->trust[*shard] + 0.2 * ratio;
    }
    pthread_mutex_unlock(&r->lock);
    return found;
}

void cr_router_index_stats(cr_router *r, uint64_t *blocks, uint64_t *bytes)
{
    *blocks = *bytes = 0;
    pthread_mutex_lock(&r->lock);
    if (r->index)
        cr_prefix_stats(r->index, blocks, bytes);
    pthread_mutex_unlock(&r->lock);
}
