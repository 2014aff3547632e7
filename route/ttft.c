/* Per-request routes (route.h): the ttft rule, and Route under the other
 * rules. Everything here runs under the router's lock. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "internal.h"

static const char *const WHY[CR_ROUTE_N_WHY] = {"prefix", "session", "planned", "spill",
                                                "least_loaded", "rule"};

const char *cr_route_reason_name(cr_route_reason r)
{
    return (unsigned)r < CR_ROUTE_N_WHY ? WHY[r] : "unknown";
}

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

double cr_prefill_predict(const cr_prefill_model *m, double s, double l)
{
    s = s < l ? s : l;
    double ms = m->a_ms + m->b_ms_per_token * (l - s) + m->c_ms_per_token2 * (l * l - s * s);
    return ms > 0 ? ms : 0;
}

/* The prefill of L tokens of which s are cached, cpu of those on the CPU
 * tier: their load added. */
static double prefill_with_load(const cr_prefill_model *m, double s, double cpu, double l)
{
    double load = cpu > 0 ? m->load_fixed_ms + m->cpu_ms_per_token * cpu : 0;
    return cr_prefill_predict(m, s, l) + (load > 0 ? load : 0);
}

/* What one request looks like to the rule, every shard's side of it. */
typedef struct request {
    const cr_route_query *q;
    const uint64_t *keys;     /* its blocks' keys in the index; NULL: none */
    const cr_session *session; /* its owner's, when it has no hashes */
    uint32_t indexed;         /* shards the match covered */
} request;

/* r locked: the index, made on first use; NULL when out of memory. */
static cr_prefix *index_of(cr_router *r)
{
    if (!r->index)
        r->index = cr_prefix_new(CR_ROUTE_INDEX_MAX_SHARDS, r->index_blocks);
    return r->index;
}

/* r locked: the request's keys in the index (its hashes mixed with its
 * namespace, in the router's scratch) matched against the first min(n, 64)
 * shards into r->depth (the other shards' 0), and with a CPU tier its
 * blocks right after into r->extra (the matched shards' only). */
static request look(cr_router *r, const cr_route_query *q, uint32_t n, uint64_t *scratch)
{
    request x = {q, NULL, NULL, 0};
    memset(r->depth, 0, n * sizeof *r->depth);
    if (q->n_hashes && index_of(r)) {
        if (q->space) {
            uint64_t mix = cr_mix64(q->space);
            for (uint32_t i = 0; i < q->n_hashes; i++)
                scratch[i] = q->hashes[i] ^ mix;
            x.keys = scratch;
        } else {
            x.keys = q->hashes;
        }
        x.indexed = n < CR_ROUTE_INDEX_MAX_SHARDS ? n : CR_ROUTE_INDEX_MAX_SHARDS;
        cr_prefix_match(r->index, x.keys, q->n_hashes, x.indexed, r->depth);
        for (uint32_t s = 0; r->cpu && s < x.indexed; s++) { /* the CPU tier's after them */
            uint32_t e = r->depth[s];
            while (e < q->n_hashes && cr_prefix_holds(r->cpu, s, x.keys[e]))
                e++;
            r->extra[s] = e - r->depth[s];
        }
    } else if (!q->n_hashes && q->has_owner) {
        x.session = cr_sessions_find(&r->sessions, q->owner);
    }
    return x;
}

/* The tokens shard s holds of the request, as predicted: on its GPU and,
 * through *cpu (NULL: not wanted), how many of them on its CPU tier. */
static double hit_on(const cr_router *r, const request *x, uint32_t s, double *cpu)
{
    double l = x->q->prompt_tokens;
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

/* The request's home: the first shard of its owner's ring, or of its first
 * hash's, or of its request id's. */
static uint32_t home_of(cr_router *r, const cr_route_query *q, uint32_t n)
{
    int64_t key = q->has_owner ? q->owner
                  : q->n_hashes ? (int64_t)q->hashes[0]
                                : (int64_t)q->request;
    uint32_t s = cr_router_ring_home(r, key, n);
    s = s != UINT32_MAX ? s : cr_route_fallback_shard(key, n);
    return cr_router_usable_from(r, key, s, n);
}

/* The miss weight for x: --miss-weight g for a prefix of its own (a
 * session's), less for one many requests share (a document, a system
 * prompt), whose copies on more shards many will reuse: 1 + (g - 1) H /
 * (H + n), n the requests that lately matched up to the deepest block any
 * shard holds of it. Counts that request. */
static double miss_weight(cr_router *r, const request *x)
{
    uint32_t d = 0;
    for (uint32_t s = 0; x->keys && s < x->indexed; s++)
        d = r->depth[s] > d ? r->depth[s] : d;
    if (!d)
        return r->g;
    uint32_t n = cr_popular_count(&r->popular, x->keys[d - 1]);
    cr_popular_touch(&r->popular, x->keys[d - 1]);
    return 1 + (r->g - 1) * CR_ROUTE_SHARED_HALF / (CR_ROUTE_SHARED_HALF + n);
}

/* The ttft choice among the candidates (cand NULL: every shard), with miss
 * weight g. */
static void choose(cr_router *r, const request *x, const cr_prefill_model *m, double g,
                   const uint32_t *cand, uint32_t n_cand, uint32_t home, double now,
                   cr_route_answer *out)
{
    double l = x->q->prompt_tokens, best_cost = INFINITY, most = 0, least = INFINITY;
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i <= n_cand; i++) {
        /* the home first, so that a tie keeps it; then in id order */
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
        if (!cr_router_usable(r, s))
            continue; /* draining, down or gone */
        double cpu, hit = hit_on(r, x, s, &cpu);
        double cost = (cr_inflight_wait_ms(r->work, s, now) +
                       g * prefill_with_load(m, hit, cpu, l)) /
                      cr_router_speed(r, s);
        most = hit > most ? hit : most;
        least = hit < least ? hit : least;
        if (cost < best_cost) {
            best_cost = cost;
            best = s;
        }
    }
    if (best == UINT32_MAX && cand) /* every planned shard left service */
        return choose(r, x, m, g, NULL, cr_ring_n_shards(r->ring), home, now, out);
    best = best != UINT32_MAX ? best : home;
    double cpu, hit = hit_on(r, x, best, &cpu);
    out->shard = best;
    out->cached_tokens = (uint32_t)hit;
    out->queue_wait_ms = cr_inflight_wait_ms(r->work, best, now);
    out->prefill_ms = prefill_with_load(m, hit, cpu, l);
    out->reason = cand                  ? CR_ROUTE_WHY_PLANNED
                  : most <= least       ? CR_ROUTE_WHY_LEAST_LOADED
                  : hit < most          ? CR_ROUTE_WHY_SPILL
                  : x->session          ? CR_ROUTE_WHY_SESSION
                                        : CR_ROUTE_WHY_PREFIX;
}

/* r locked, prepared for n shards: the request's answer under ttft. */
static void place_ttft(cr_router *r, const cr_table *t, uint32_t n, const cr_prefill_model *m,
                       const request *x, double now, cr_route_answer *out)
{
    const cr_route_query *q = x->q;
    const cr_placement *p = t && q->has_owner ? cr_table_find(t, q->owner) : NULL;
    const uint32_t *cand = r->planned && p ? cr_table_shards(t, p) : NULL;
    choose(r, x, m, miss_weight(r, x), cand, cand ? p->kb : n, home_of(r, q, n), now, out);
    out->admitted = p != NULL;
}

/* r locked, prepared for n shards: the request's answer under plan,
 * bounded or live (its owner, or a key standing in for one). */
static void place_rule(cr_router *r, const cr_table *t, uint32_t n, const cr_prefill_model *m,
                       const request *x, double now, cr_route_answer *out)
{
    const cr_route_query *q = x->q;
    int64_t owner = q->has_owner ? q->owner
                    : q->n_hashes ? (int64_t)q->hashes[0]
                                  : (int64_t)q->request;
    out->shard = cr_router_rule_one(r, t, n, owner, 1.0, now, &out->admitted, q->caller);
    double cpu, hit = hit_on(r, x, out->shard, &cpu);
    out->cached_tokens = (uint32_t)hit;
    out->queue_wait_ms = r->work ? cr_inflight_wait_ms(r->work, out->shard, now) : 0;
    out->prefill_ms = prefill_with_load(m, hit, cpu, q->prompt_tokens);
    out->reason = CR_ROUTE_WHY_RULE;
}

/* r locked: what a placed request leaves behind: its blocks in the
 * index, its session, its predicted prefill as outstanding work. */
static void remember(cr_router *r, const request *x, const cr_route_answer *a, double now)
{
    const cr_route_query *q = x->q;
    if (x->keys && a->shard < x->indexed)
        cr_prefix_insert(r->index, a->shard, x->keys, q->n_hashes); /* out of memory: less kept */
    if (q->has_owner) {
        const cr_session *was = cr_sessions_find(&r->sessions, q->owner);
        if (was && was->shard != a->shard)
            r->moved[!cr_router_usable(r, was->shard)]++;
        cr_sessions_put(&r->sessions, q->owner, a->shard, q->prompt_tokens);
    }
    /* the work one route may add is bounded, however many tokens it names */
    double work = r->max_work_ms > 0 && a->prefill_ms > r->max_work_ms ? r->max_work_ms
                                                                        : a->prefill_ms;
    if (r->by == CR_ROUTE_TTFT)
        cr_inflight_add_id(r->work, q->has_owner ? q->owner : 0, q->request, a->cached_tokens,
                           a->shard, work, now, q->caller);
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

void cr_router_place(cr_router *r, const cr_table *t, uint32_t n_shards,
                     const cr_prefill_model *m, const cr_route_query *q, cr_route_answer *out,
                     size_t n, double now)
{
    uint32_t most = 0;
    for (size_t i = 0; i < n; i++)
        most = q[i].n_hashes > most ? q[i].n_hashes : most;
    pthread_mutex_lock(&r->lock);
    uint64_t *scratch = NULL;
    int ok = cr_router_prepare(r, n_shards) == 0 && scratch_for(r, n_shards, &scratch, most) == 0;
    if (ok && r->work)
        cr_inflight_expire(r->work, now);
    for (size_t i = 0; i < n; i++) {
        if (!ok) { /* out of memory: the owner's fallback, nothing predicted */
            int64_t key = q[i].has_owner ? q[i].owner : (int64_t)q[i].request;
            out[i] = (cr_route_answer){.shard = cr_route_fallback_shard(key, n_shards),
                                       .reason = CR_ROUTE_WHY_RULE};
            continue;
        }
        request x = look(r, &q[i], n_shards, scratch);
        if (r->by == CR_ROUTE_TTFT)
            place_ttft(r, t, n_shards, m, &x, now, &out[i]);
        else
            place_rule(r, t, n_shards, m, &x, now, &out[i]);
        remember(r, &x, &out[i], now);
    }
    pthread_mutex_unlock(&r->lock);
}

void cr_router_route_ttft(cr_router *r, const cr_table *t, uint32_t n_shards,
                          const cr_prefill_model *m, const double *weights, cr_route *routes,
                          size_t n, double now, uint64_t caller)
{
    enum { CHUNK = 64 };
    cr_route_query q[CHUNK];
    cr_route_answer a[CHUNK];
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        for (size_t i = 0; i < k; i++) {
            double w = weights ? weights[at + i] : 1;
            q[i] = (cr_route_query){.has_owner = 1, .owner = routes[at + i].owner,
                                    .prompt_tokens = w < UINT32_MAX ? (uint32_t)w : UINT32_MAX,
                                    .caller = caller};
        }
        cr_router_place(r, t, n_shards, m, q, a, k, now);
        for (size_t i = 0; i < k; i++) {
            routes[at + i].admitted = a[i].admitted;
            routes[at + i].preferred_shard = a[i].shard;
        }
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
