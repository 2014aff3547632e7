/* cr_replay_run: the virtual-time event loop (the model is in replay.h).
 *
 * Requests are taken in trace order, which is arrival order. Each shard is
 * a single server with a FIFO queue, so all a shard needs is when it is
 * busy until and the completion times of what it holds (a ring, in
 * order): at an arrival, requests whose completion is at or before now
 * have left, the rest are "queued" (in service or waiting), and the
 * backlog is the time until the shard is idle. Decode is not simulated: it
 * runs elsewhere (prefill/decode disaggregation, as in Mooncake) and does
 * not delay the next prefill. Per request the loop allocates nothing once
 * the rings and caches have grown to their working size.
 *
 * The view also carries the trace's block pool, each cache's size and a
 * read-only lookup of the true hit (for the one policy told the truth).
 *
 * Membership events (replay.h) are applied in time order before the first
 * request at or after each: every per-shard array is sized for all the
 * slots the events can open, and the view shows the slots opened so far
 * and which of them serve. A fail's queue is walked once, so each shard's
 * ring also keeps which request each completion is.
 *
 * Noise is drawn per request index from the seed, so every policy run over
 * the same trace and cluster sees the same noise on the same request.
 *
 * Defaults (cr_replay_cluster_default): a = 4 ms, b = 0.02 ms/token and
 * c = 5e-7 ms/token^2 make a 10k-token prompt cost about 250 ms cold and
 * about 20 ms when all but one new block is a hit, so a shard serves about
 * 50 such requests per second, the planner's default qcap. KV at 0.002
 * ms/token is ten times cheaper than prefilling the same tokens, plus 2 ms
 * to set up; noise 0.1 is a 10% spread. A shard caches 1024 blocks (512k
 * tokens: the KV room of an 80 GB GPU serving an 8B model, at 128 KiB a
 * token), 64 of them: the default generator's working set (1000 sessions
 * of up to 32 blocks) fits in the cluster only when sessions stick to
 * shards, not in any one shard. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define NOISE_STREAM 0x6e6f697365ULL /* "noise": apart from the policies' draws */
#define FOREIGN_STREAM 0x666f726569676eULL /* "foreign": apart from the noise's */

void cr_replay_cluster_default(cr_replay_cluster *c)
{
    *c = (cr_replay_cluster){
        .shards = 64, .shard_blocks = 1024, .block_tokens = CR_REPLAY_BLOCK_TOKENS,
        .truth = {.prefill = {4, 0.02, 5e-7}, .noise = 0.1,
                  .kv_ms_per_token = 0.002, .kv_fixed_ms = 2},
        .scale = 1, .seed = 1,
    };
}

cr_status cr_replay_cluster_check(const cr_replay_cluster *c, cr_error *err)
{
    const cr_replay_cost *k = &c->truth;
    if (c->shards < 1 || c->shards > CR_MAX_SHARDS)
        return cr_fail(err, CR_EINVAL, "shards must be in 1..%u, got %u", CR_MAX_SHARDS,
                       c->shards);
    if (c->shard_blocks < 1)
        return cr_fail(err, CR_EINVAL, "shard_blocks must be >= 1, got 0");
    if (c->block_tokens < 1)
        return cr_fail(err, CR_EINVAL, "block_tokens must be >= 1, got 0");
    const struct {
        const char *name;
        double v;
    } costs[] = {{"prefill.fixed_ms", k->prefill.fixed_ms},
                 {"prefill.ms_per_token", k->prefill.ms_per_token},
                 {"prefill.ms_per_token2", k->prefill.ms_per_token2}, {"noise", k->noise},
                 {"kv_ms_per_token", k->kv_ms_per_token}, {"kv_fixed_ms", k->kv_fixed_ms}};
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++)
        if (!cr_replay_finite_ge0(costs[i].v))
            return cr_fail(err, CR_EINVAL, "truth.%s must be finite and >= 0, got %g",
                           costs[i].name, costs[i].v);
    if (!(isfinite(c->scale) && c->scale > 0))
        return cr_fail(err, CR_EINVAL, "scale must be finite and > 0, got %g", c->scale);
    if (c->events && c->events->shards != c->shards)
        return cr_fail(err, CR_EINVAL, "events were parsed for %u shards, the cluster has %u",
                       c->events->shards, c->shards);
    if (!(c->foreign_share >= 0 && c->foreign_share < 1))
        return cr_fail(err, CR_EINVAL, "foreign_share must be in [0, 1), got %g",
                       c->foreign_share);
    if (c->foreign_share > 0 && c->events)
        return cr_fail(err, CR_EINVAL, "foreign_share does not go with events");
    if (!cr_replay_finite_ge0(c->scrape_interval_s))
        return cr_fail(err, CR_EINVAL, "scrape_interval_s must be finite and >= 0, got %g",
                       c->scrape_interval_s);
    return CR_OK;
}

int cr_replay_foreign(const cr_replay_cluster *c, size_t i)
{
    if (c->foreign_share <= 0)
        return 0;
    uint64_t x = cr_replay_draw(cr_mix64(c->seed ^ FOREIGN_STREAM), (uint64_t)i);
    return cr_replay_unit(x) < c->foreign_share;
}

/* Every request in time order, with blocks inside the pool and its
 * knowledge inside its prompt: what the loop relies on. */
static cr_status check_trace(const cr_replay_trace *t, cr_error *err)
{
    if (t->n == 0)
        return cr_fail(err, CR_EINVAL, "trace has no requests");
    for (size_t i = 0; i < t->n; i++) {
        const cr_replay_request *r = &t->reqs[i];
        if (!(cr_replay_finite_ge0(r->t_ms) && (i == 0 || r->t_ms >= t->reqs[i - 1].t_ms)))
            return cr_fail(err, CR_EINVAL, "trace request %zu: t_ms %g is out of order", i,
                           r->t_ms);
        if (r->n_blocks < 1 || r->first_block > t->n_blocks ||
            r->n_blocks > t->n_blocks - r->first_block)
            return cr_fail(err, CR_EINVAL, "trace request %zu: blocks outside the pool", i);
        if (r->input_tokens < 1 || r->knowledge_tokens > r->input_tokens)
            return cr_fail(err, CR_EINVAL,
                           "trace request %zu: input_tokens %u must be >= 1 and >= "
                           "knowledge_tokens %u", i, r->input_tokens, r->knowledge_tokens);
    }
    return CR_OK;
}

/* A shard's FIFO: completion times (s) of what it holds, oldest first,
 * and which requests they are. */
typedef struct held {
    double done;
    size_t request;
} held;

typedef struct fifo {
    held *done;
    size_t head, n, cap; /* cap a power of two */
} fifo;

static int fifo_push(fifo *q, double done, size_t request)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 16;
        held *d = malloc(cap * sizeof *d);
        if (!d)
            return -1;
        for (size_t i = 0; i < q->n; i++)
            d[i] = q->done[(q->head + i) & (q->cap - 1)];
        free(q->done);
        *q = (fifo){d, 0, q->n, cap};
    }
    q->done[(q->head + q->n++) & (q->cap - 1)] = (held){done, request};
    return 0;
}

/* Lets go of what is done by now; how many of those were foreign (its
 * flags per request; NULL: none is). */
static uint32_t fifo_drain(fifo *q, double now, const uint8_t *foreign)
{
    uint32_t gone = 0;
    while (q->n && q->done[q->head].done <= now) {
        gone += foreign && foreign[q->done[q->head].request];
        q->head = (q->head + 1) & (q->cap - 1);
        q->n--;
    }
    return gone;
}

/* How many it holds past at (completions are in order: a shard serves
 * its queue one at a time). */
static uint32_t fifo_after(const fifo *q, double at)
{
    size_t done = 0;
    while (done < q->n && q->done[(q->head + done) & (q->cap - 1)].done <= at)
        done++;
    return (uint32_t)(q->n - done);
}

/* What a slot is doing (events). */
typedef enum slot_state { SLOT_SERVING, SLOT_DRAINING, SLOT_GONE } slot_state;

/* Everything one run holds, per shard and per request. */
typedef struct sim {
    const cr_replay_trace *t;
    const cr_replay_cluster *c;
    const cr_replay_policy *p;
    uint64_t noise_seed;
    uint32_t slots, n_slots; /* allocated for; opened so far */
    /* The serving set (events only, else NULL): per slot its state and
     * usable (the view's), and the serving ones in index order. */
    uint8_t *state, *usable;
    uint32_t *serving, n_serving;
    size_t next_event;
    cr_replay_cache *caches;
    fifo *queues;
    double *busy_until; /* s */
    double *backlog_ms; /* the view */
    uint32_t *queued;
    uint32_t *blocks_held;
    /* Foreign traffic (else 0 and NULL): the foreign requests each shard
     * holds (its queued less them is the policy's), and the serving
     * shard the next one goes to, round-robin. */
    uint32_t *foreign_held;
    uint32_t next_foreign;
    /* Scrapes (else NULL): the last one, its arrays per slot, and the
     * grid point the next is due at. */
    cr_replay_scrape scrape;
    uint32_t *scraped; /* waiting, running, blocks held: 3 x slots */
    double next_scrape_s;
    cr_replay_tally tally;
    uint8_t *door; /* with admission: per request, CR_REPLAY_DOOR_* */
    double *left_s; /* with admission: per request, when it left the door */
} sim;

static void sim_free(sim *s)
{
    for (uint32_t k = 0; s->caches && k < s->slots; k++)
        cr_replay_cache_free(&s->caches[k]);
    for (uint32_t k = 0; s->queues && k < s->slots; k++)
        free(s->queues[k].done);
    free(s->state);
    free(s->usable);
    free(s->serving);
    free(s->caches);
    free(s->queues);
    free(s->busy_until);
    free(s->backlog_ms);
    free(s->queued);
    free(s->blocks_held);
    free(s->door);
    free(s->left_s);
    free(s->foreign_held);
    free(s->scraped);
    cr_replay_tally_free(&s->tally);
}

/* A shard's cache evicted id: the policy hears of it as of an engine's
 * BlockRemoved. */
static void evicted(void *ctx, const cr_replay_cache *c, uint64_t id)
{
    const sim *s = ctx;
    s->p->evicted(s->p->state, (uint32_t)(c - s->caches), id);
}

/* The initial serving set: shards 0 .. shards - 1; 0 or -1 when out of
 * memory. */
static int members_init(sim *s)
{
    s->state = calloc(s->slots, sizeof *s->state);
    s->usable = calloc(s->slots, sizeof *s->usable);
    s->serving = calloc(s->slots, sizeof *s->serving);
    if (!s->state || !s->usable || !s->serving)
        return -1;
    for (uint32_t k = 0; k < s->c->shards; k++) {
        s->usable[k] = 1;
        s->serving[k] = k;
    }
    s->n_serving = s->c->shards;
    return 0;
}

/* What foreign traffic and scrapes need (neither: nothing); 0, or -1
 * when out of memory. After the tally's init. */
static int outside_init(sim *s)
{
    uint32_t R = s->slots;
    if (s->c->foreign_share > 0) {
        s->foreign_held = calloc(R, sizeof *s->foreign_held);
        s->tally.foreign = calloc(s->t->n, sizeof *s->tally.foreign);
        if (!s->foreign_held || !s->tally.foreign)
            return -1;
        for (size_t i = 0; i < s->t->n; i++)
            s->tally.foreign[i] = (uint8_t)cr_replay_foreign(s->c, i);
    }
    if (s->c->scrape_interval_s > 0) {
        s->scraped = calloc(3 * (size_t)R, sizeof *s->scraped);
        if (!s->scraped)
            return -1;
        s->scrape = (cr_replay_scrape){.waiting = s->scraped, .running = s->scraped + R,
                                       .blocks_held = s->scraped + 2 * (size_t)R};
    }
    return 0;
}

static cr_status sim_init(sim *s, cr_error *err)
{
    uint32_t R = s->slots = cr_replay_slots(s->c);
    s->n_slots = s->c->shards;
    uint64_t cap = s->c->shard_blocks < s->t->n_blocks ? s->c->shard_blocks : s->t->n_blocks;
    if (cap > CR_REPLAY_CACHE_MAX)
        return cr_fail(err, CR_ENOMEM, "shard_blocks %llu: the cache holds at most %u blocks",
                       (unsigned long long)s->c->shard_blocks, CR_REPLAY_CACHE_MAX);
    s->noise_seed = cr_mix64(s->c->seed ^ NOISE_STREAM);
    s->caches = calloc(R, sizeof *s->caches);
    s->queues = calloc(R, sizeof *s->queues);
    s->busy_until = calloc(R, sizeof *s->busy_until);
    s->backlog_ms = calloc(R, sizeof *s->backlog_ms);
    s->queued = calloc(R, sizeof *s->queued);
    s->blocks_held = calloc(R, sizeof *s->blocks_held);
    if (!s->caches || !s->queues || !s->busy_until || !s->backlog_ms || !s->queued ||
        !s->blocks_held ||
        cr_replay_tally_init(&s->tally, s->t->n, R, s->c->events || s->c->admission) != 0 ||
        (s->c->admission && (!(s->door = calloc(s->t->n, sizeof *s->door)) ||
                             !(s->left_s = calloc(s->t->n, sizeof *s->left_s)))) ||
        (s->c->events && members_init(s) != 0) || outside_init(s) != 0)
        return cr_fail(err, CR_ENOMEM, "out of memory for %u shards", R);
    s->tally.warmup = s->c->warmup;
    for (uint32_t k = 0; k < R; k++) {
        cr_replay_cache_init(&s->caches[k], (uint32_t)(cap ? cap : 1));
        s->caches[k].on_evict = s->p->evicted ? evicted : NULL;
        s->caches[k].evict_ctx = s;
    }
    return CR_OK;
}

/* The engines' /metrics at the last grid point at or before now, when
 * one has passed since the last scrape. Every request before now arrived
 * before that point (else an earlier call would have scraped it), so
 * the queues and caches as they stand, less what was done by then, are
 * the engines' at that point exactly. */
static void scrape(sim *s, double now)
{
    double every = s->c->scrape_interval_s;
    if (!s->scraped || now < s->next_scrape_s)
        return;
    double point = floor(now / every);
    s->scrape.at_s = point * every;
    s->next_scrape_s = (point + 1) * every;
    s->scrape.seq++;
    uint32_t *waiting = s->scraped, *running = s->scraped + s->slots,
             *held = s->scraped + 2 * (size_t)s->slots;
    for (uint32_t k = 0; k < s->n_slots; k++) {
        uint32_t n = fifo_after(&s->queues[k], s->scrape.at_s);
        running[k] = n > 0;
        waiting[k] = n - running[k];
        held[k] = s->caches[k].n;
    }
}

/* The cluster as a policy sees it at now. A draining shard with no work
 * left is gone, and its cache with it. */
static void refresh_view(sim *s, double now)
{
    scrape(s, now);
    for (uint32_t k = 0; k < s->n_slots; k++) {
        uint32_t gone = fifo_drain(&s->queues[k], now, s->tally.foreign);
        if (s->state && s->state[k] == SLOT_DRAINING && s->queues[k].n == 0) {
            s->state[k] = SLOT_GONE;
            cr_replay_cache_free(&s->caches[k]);
        }
        if (s->foreign_held)
            s->foreign_held[k] -= gone;
        s->queued[k] = (uint32_t)s->queues[k].n - (s->foreign_held ? s->foreign_held[k] : 0);
        double left = s->busy_until[k] - now;
        s->backlog_ms[k] = left > 0 ? left * 1000.0 : 0.0;
        s->blocks_held[k] = s->caches[k].n;
    }
}

/* The view's hit_blocks: the prefix of r's blocks the shard's true cache
 * holds, looked up as serve will look it up. */
static uint32_t true_hit_blocks(const void *ctx, uint32_t shard, const cr_replay_request *r)
{
    const sim *s = ctx;
    if (shard >= s->n_slots)
        return 0;
    return cr_replay_cache_prefix(&s->caches[shard], s->t->blocks + r->first_block, r->n_blocks);
}

static double noise_factor(const sim *s, size_t i)
{
    double sigma = s->c->truth.noise;
    if (sigma <= 0)
        return 1.0;
    uint64_t x1 = cr_replay_draw(s->noise_seed, 2 * (uint64_t)i);
    uint64_t x2 = cr_replay_draw(s->noise_seed, 2 * (uint64_t)i + 1);
    return exp(sigma * cr_replay_normal(x1, x2));
}

/* Serves and caches request i on shard k at now, held held_ms at a door
 * before: its hit, then (kv: the policy's kv hook, NULL for none) its
 * path, its prefill and queue. */
static cr_status dispatch(sim *s, size_t i, uint32_t k, double now, double held_ms,
                          const cr_replay_view *v, const cr_replay_policy *kv,
                          cr_replay_outcome *o, cr_error *err)
{
    const cr_replay_request *r = &s->t->reqs[i];
    const uint64_t *ids = s->t->blocks + r->first_block;
    uint64_t hit = (uint64_t)cr_replay_cache_prefix(&s->caches[k], ids, r->n_blocks) *
                   s->c->block_tokens;
    *o = (cr_replay_outcome){.shard = k,
                             .hit_tokens = (uint32_t)(hit < r->input_tokens ? hit : r->input_tokens)};
    o->used_kv = r->knowledge_tokens > 0 && kv && kv->kv &&
                 kv->kv(kv->state, r, v, k, o->hit_tokens) != 0;
    double L = r->input_tokens, have = o->hit_tokens;
    if (o->used_kv) {
        have = fmin(L, have + r->knowledge_tokens);
        o->kv_ms = s->c->truth.kv_fixed_ms + s->c->truth.kv_ms_per_token * r->knowledge_tokens;
    }
    o->prefill_ms = cr_prefill_ms(&s->c->truth.prefill, have, L) * noise_factor(s, i);
    double start = fmax(now, s->busy_until[k]);
    o->queue_wait_ms = (start - now) * 1000.0;
    o->ttft_ms = held_ms + o->queue_wait_ms + o->prefill_ms + o->kv_ms; /* from its arrival */
    s->busy_until[k] = start + o->prefill_ms / 1000.0;
    if (fifo_push(&s->queues[k], s->busy_until[k], i) != 0 ||
        cr_replay_cache_insert(&s->caches[k], ids, r->n_blocks) != 0)
        return cr_fail(err, CR_ENOMEM, "out of memory at request %zu", i);
    return CR_OK;
}

/* Serves request i on shard k, the policy's choice, held held_ms at a
 * door before; a shard the policy may not choose is an error. */
static cr_status serve_on(sim *s, size_t i, uint32_t k, double now, double held_ms,
                          const cr_replay_view *v, cr_replay_outcome *o, cr_error *err)
{
    const cr_replay_policy *p = s->p;
    if (k >= s->n_slots)
        return cr_fail(err, CR_EINVAL, "policy %s routed request %zu to shard %u of %u",
                       p->name ? p->name : "?", i, k, s->n_slots);
    if (!cr_replay_usable(v, k))
        return cr_fail(err, CR_EINVAL,
                       "policy %s routed request %zu to shard %u, which takes no requests",
                       p->name ? p->name : "?", i, k);
    return dispatch(s, i, k, now, held_ms, v, p, o, err);
}

/* Foreign request i at now: the next serving shard, round-robin, as text
 * (no policy decides its path); the policy is not told. */
static cr_status serve_foreign(sim *s, size_t i, double now, const cr_replay_view *v,
                               cr_error *err)
{
    uint32_t k = cr_replay_serving_at(v, s->next_foreign++ % cr_replay_n_serving(v));
    cr_replay_outcome o;
    s->foreign_held[k]++;
    return dispatch(s, i, k, now, 0, v, NULL, &o, err);
}

/* ---- membership events ---------------------------------------------------------- */

/* Shard k takes no more requests. */
static void stop_serving(sim *s, uint32_t k)
{
    uint32_t n = 0;
    s->usable[k] = 0;
    for (uint32_t j = 0; j < s->n_serving; j++)
        if (s->serving[j] != k)
            s->serving[n++] = s->serving[j];
    s->n_serving = n;
}

/* Shard k failed at now: what it still held is not served, and its cache
 * is lost (without eviction hooks: the policy hears of the fail itself). */
static void fail_shard(sim *s, uint32_t k, double now)
{
    fifo *q = &s->queues[k];
    fifo_drain(q, now, NULL); /* no foreign traffic with events */
    for (size_t i = 0; i < q->n; i++)
        s->tally.failed[q->done[(q->head + i) & (q->cap - 1)].request] = 1;
    q->n = 0;
    s->busy_until[k] = now;
    s->state[k] = SLOT_GONE;
    cr_replay_cache_free(&s->caches[k]);
}

static void apply_event(sim *s, const cr_replay_member_event *ev)
{
    uint32_t k = ev->slot;
    if (ev->kind == CR_REPLAY_JOIN) { /* the next slot, by the parser's numbering */
        s->n_slots = k + 1;
        s->usable[k] = 1;
        s->serving[s->n_serving++] = k; /* the highest slot yet: still in order */
        return;
    }
    stop_serving(s, k);
    if (ev->kind == CR_REPLAY_FAIL)
        fail_shard(s, k, ev->at_s);
    else
        s->state[k] = SLOT_DRAINING;
}

/* Every event due by now, each told to the policy; v shows the set after
 * them. */
static void apply_events(sim *s, double now, cr_replay_view *v)
{
    const cr_replay_events *e = s->c->events;
    const cr_replay_policy *p = s->p;
    for (; e && s->next_event < e->n && e->ev[s->next_event].at_s <= now; s->next_event++) {
        if (e->ev[s->next_event].kind == CR_REPLAY_MARK)
            continue; /* nothing changes: only measured */
        apply_event(s, &e->ev[s->next_event]);
        if (p->members)
            p->members(p->state, s->usable, s->n_slots, &e->ev[s->next_event]);
    }
    v->shards = s->n_slots;
    v->n_serving = s->n_serving;
}

/* Request i has its outcome o: counted, and the policy hears of it. */
static void served(sim *s, size_t i, const cr_replay_outcome *o, int predicted)
{
    const cr_replay_policy *p = s->p;
    const cr_replay_request *r = &s->t->reqs[i];
    cr_replay_tally_add(&s->tally, i, r, o);
    uint32_t tokens;
    if (predicted && p->predicted && p->predicted(p->state, &tokens))
        cr_replay_tally_predicted(&s->tally, i, r, tokens, o->hit_tokens);
    if (p->served)
        p->served(p->state, r, o);
}

/* Request i refused at a door (dropped: after it was held): never served. */
static void refused(sim *s, size_t i, int dropped)
{
    s->tally.failed[i] = 1;
    s->door[i] = dropped ? CR_REPLAY_DOOR_DROPPED : CR_REPLAY_DOOR_SHED;
}

/* The held requests the policy sends at now; 1 when some are still held. */
static cr_status dispatch_held(sim *s, double now, const cr_replay_view *v, int *held,
                              cr_error *err)
{
    const cr_replay_policy *p = s->p;
    const cr_replay_request *r;
    uint32_t k;
    double held_ms;
    int got;
    while ((got = p->dispatch(p->state, &r, &k, &held_ms)) == 1) {
        size_t i = (size_t)(r - s->t->reqs);
        s->left_s[i] = now;
        if (k == CR_REPLAY_SHED) {
            refused(s, i, 1);
            continue;
        }
        cr_replay_outcome o;
        refresh_view(s, now);
        cr_status st = serve_on(s, i, k, now, held_ms, v, &o, err);
        if (st != CR_OK)
            return st;
        served(s, i, &o, 0);
    }
    *held = got == 0;
    return CR_OK;
}

/* After the last arrival: time runs on in steps until nothing is held
 * (each held request goes or is dropped at its deadline). */
static cr_status drain(sim *s, double now, cr_replay_view *v, cr_error *err)
{
    const cr_replay_policy *p = s->p;
    int held = 1;
    for (double t = now; held; t += 0.05) {
        if (p->tick)
            p->tick(p->state, t);
        refresh_view(s, t);
        v->now_s = t;
        cr_status st = dispatch_held(s, t, v, &held, err);
        if (st != CR_OK)
            return st;
    }
    return CR_OK;
}

static cr_status loop(sim *s, cr_error *err)
{
    const cr_replay_policy *p = s->p;
    cr_replay_view v = {.shards = s->n_slots, .usable = s->usable, .serving = s->serving,
                        .n_serving = s->n_serving, .backlog_ms = s->backlog_ms,
                        .queued = s->queued, .blocks = s->t->blocks,
                        .blocks_held = s->blocks_held, .shard_blocks = s->c->shard_blocks,
                        .hit_blocks = true_hit_blocks, .hit_ctx = s,
                        .scrape = s->scraped ? &s->scrape : NULL};
    if (s->c->events && p->members)
        p->members(p->state, s->usable, s->n_slots, NULL);
    for (size_t i = 0; i < s->t->n; i++) {
        const cr_replay_request *r = &s->t->reqs[i];
        double now = cr_replay_arrival_s(r, s->c);
        if (s->tally.foreign && s->tally.foreign[i]) {
            refresh_view(s, now);
            cr_status st = serve_foreign(s, i, now, &v, err);
            if (st != CR_OK)
                return st;
            continue;
        }
        apply_events(s, now, &v);
        if (p->tick)
            p->tick(p->state, now);
        refresh_view(s, now);
        v.now_s = now;
        int held;
        cr_status st = p->dispatch ? dispatch_held(s, now, &v, &held, err) : CR_OK;
        if (st != CR_OK)
            return st;
        uint32_t k = p->route(p->state, r, &v);
        if (s->left_s)
            s->left_s[i] = now; /* a held one's is its dispatch or drop */
        if (p->dispatch && (k == CR_REPLAY_SHED || k == CR_REPLAY_HELD)) {
            if (k == CR_REPLAY_SHED)
                refused(s, i, 0);
            else
                s->door[i] = CR_REPLAY_DOOR_HELD;
            continue;
        }
        cr_replay_outcome o;
        st = serve_on(s, i, k, now, 0, &v, &o, err);
        if (st != CR_OK)
            return st;
        served(s, i, &o, 1);
    }
    return p->dispatch ? drain(s, cr_replay_arrival_s(&s->t->reqs[s->t->n - 1], s->c), &v, err)
                       : CR_OK;
}

cr_status cr_replay_run(const cr_replay_trace *t, const cr_replay_cluster *c,
                        const cr_replay_policy *p, double window_s, cr_replay_result *out,
                        cr_error *err)
{
    memset(out, 0, sizeof *out);
    cr_status st = cr_replay_cluster_check(c, err);
    if (st == CR_OK && !p->route)
        st = cr_fail(err, CR_EINVAL, "policy %s has no route", p->name ? p->name : "?");
    if (st == CR_OK)
        st = check_trace(t, err);
    if (st == CR_OK)
        st = cr_replay_window_check(t, c, window_s, err);
    if (st == CR_OK && c->warmup >= t->n)
        st = cr_fail(err, CR_EINVAL, "warmup must be below the trace's %zu requests, got %llu",
                     t->n, (unsigned long long)c->warmup);
    if (st != CR_OK)
        return st;
    sim s = {.t = t, .c = c, .p = p};
    st = sim_init(&s, err);
    if (st == CR_OK && p->dispatch && !c->admission)
        st = cr_fail(err, CR_EINVAL, "policy %s has a door: the cluster needs admission",
                     p->name ? p->name : "?");
    if (st == CR_OK)
        st = loop(&s, err);
    cr_replay_admission_result *adm = NULL;
    if (st == CR_OK && c->admission &&
        !(adm = cr_replay_admission_figures(t, c, s.tally.ttft_ms, s.tally.shard,
                                                 s.door, s.left_s)))
        st = cr_fail(err, CR_ENOMEM, "out of memory for the admission figures");
    if (st == CR_OK)
        st = cr_replay_summarize(t, c, p, window_s, &s.tally, out, err);
    if (st == CR_OK)
        out->admission = adm;
    else
        free(adm);
    sim_free(&s);
    return st;
}
