/* The cacheroute policy: the sidecar's own core (core/) in-process, on a
 * virtual clock. Every request is one cr_core_route (its owner, prompt
 * tokens, chained block hashes and a request id; --call record: one
 * cr_core_record of its owner instead), sent to the shard the core answers
 * (so a route here is exactly what a sidecar would answer for the same
 * calls and plans); cr_core_tick before
 * each request lets the core's replanner install a plan every
 * replan_interval_s of virtual time; knowledge goes through cr_core_select.
 * Each arrival weighs 1 or its input tokens (--weight). Every served
 * request is reported to the core (cr_core_report, as an engine's
 * ReportOutcome) when its prefill ends, at the first tick at or after it
 * (finishes.c keeps them): the simulator knows a request's finish at
 * dispatch. That releases the route's outstanding work under --route-by
 * bounded or live (exact, where --inflight-ttl is a guess), counts served
 * hits and feeds the core's calibration, so the injection decisions use
 * a prefill model fitted to the simulated GPUs. A finish that cannot be
 * kept (out of memory) is not reported.
 *
 * Churn: after each install the new table is compared with the one before
 * it (cr_core_current). An owner's shard set is its placement's shards when
 * admitted, else {its home shard} (cr_core_home_shard: the fallback under
 * --route-by plan, its ring's first shard otherwise): that is where its
 * requests went (bounded and live aside, when a shard was over) and where
 * its blocks are cached. The share recorded is, of the sessions the new
 * table admits, those whose shard set changed.
 *
 * KV events (--kv-events on, replay.h): Route's hashes are then the
 * router's own chain over 2-token pseudo-blocks of the block ids, the keys
 * an engine's events are indexed under, and the core hears the simulated
 * caches as an engine would publish them: a STORED event of a request's
 * blocks when its prefill ends (with its outcome) and a REMOVED event for
 * every block its shard evicts, gathered while the simulator serves a
 * request and sent when it is served, before the next route. Under
 * --kv-events dispatch the STORED is sent when the request is served
 * instead (replay.h says why).
 *
 * Membership events (the cluster's events, replay.h): the core is given
 * the endpoints as a sidecar's operator would give them, only in runs
 * with events (a run without is as before they existed). At the start,
 * cr_core_set_endpoints with e0 .. e{R-1} (address "sim:K" for shard K);
 * a join, the set with the new endpoint; a drain, cr_core_drain_endpoint;
 * a fail, the set without it, and the outcomes of what it held are never
 * reported (the requests were lost with it). The core numbers its slots
 * itself (a join may reuse a slot freed long enough ago), so the policy
 * maps the core's slots to the simulator's shards by address after each
 * change, both ways.
 *
 * Scrapes (the cluster's scrape_interval_s): each new scrape of the
 * engines' /metrics is given to the core before the next route, one
 * cr_core_engine_load per serving shard, as the sidecar's scraper would
 * (its time the scrape's, on the core's virtual clock). The core's own
 * view still counts every route it made; the scrape is how it sees the
 * traffic it did not route (foreign, replay.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A request held at the door: the handle its dispatch will carry. */
typedef struct held_at {
    uint64_t handle;
    const cr_replay_request *r;
} held_at;

typedef struct policy_state {
    cr_core_config cfg;   /* as given; probe quiet, n_shards, block_tokens and
                           * index_blocks the cluster's; kv_sources our own
                           * copy (for a reset) */
    cr_replay_weight weight;
    cr_replay_call call;
    cr_replay_kv_events events;
    uint64_t *hashes;      /* scratch: one request's chained hashes */
    size_t n_hashes;
    uint32_t *tokens;      /* scratch: its pseudo-blocks' tokens (events) */
    size_t n_tokens;
    const uint64_t *pool;  /* the trace's block ids, from the last route */
    uint64_t *gone;        /* blocks evicted on gone_shard, not yet sent */
    size_t n_gone, cap_gone;
    uint32_t gone_shard;
    uint32_t predicted;    /* the last Route answer's cached_tokens */
    cr_replay_finishes finishes; /* served, not yet reported */
    cr_core *core;
    double now_s;         /* the clock the core reads */
    cr_core_plan_result last; /* the newest installed table seen, held */
    size_t n_replans, cap;
    double *changed, *at_s;
    /* With events (else NULL): the endpoints, which of their shards the
     * core's set lists (joined, not failed), and the shard <-> core slot
     * maps (UINT32_MAX: none). */
    const cr_replay_events *membership;
    uint8_t *listed;
    uint32_t *to_sim, *to_core;
    /* cacheroute-door (else NULL): the objectives, and the requests held
     * at the core's door by handle (at most its bound of them) */
    const cr_replay_admission *door;
    held_at *held;
    size_t n_held;
    uint64_t scrape_seq;    /* the last scrape given to the core; 0: none yet */
    uint32_t block_tokens;  /* the cluster's, for the scrapes */
    uint64_t gpu_blocks;
} policy_state;

static double virtual_now(void *ctx) { return ((const policy_state *)ctx)->now_s; }

/* cfg with the parts the replay decides replaced; kv_sources deep-copied
 * so the caller may free its config at once. */
static cr_status copy_config(const cr_core_config *cfg, const cr_replay_cluster *c,
                             cr_core_config *out, cr_error *err)
{
    *out = *cfg;
    cr_core_quiet_probe(&out->probe); /* the replay models a cluster, not this host */
    out->planner.n_shards = c->shards;
    out->route.block_tokens = c->block_tokens;
    if (c->scrape_interval_s > 0) /* a load is stale after two of the cluster's intervals */
        out->route.scrape_interval_s = c->scrape_interval_s;
    out->route.index_blocks = c->shard_blocks < CR_ROUTE_MAX_INDEX_BLOCKS
                                  ? (uint32_t)c->shard_blocks
                                  : CR_ROUTE_MAX_INDEX_BLOCKS;
    size_t n = cfg->inject.n_kv_sources;
    out->inject.kv_sources = NULL;
    if (n) {
        out->inject.kv_sources = malloc(n * sizeof *out->inject.kv_sources);
        if (!out->inject.kv_sources)
            return cr_fail(err, CR_ENOMEM, "out of memory copying the kv sources");
        memcpy(out->inject.kv_sources, cfg->inject.kv_sources, n * sizeof *cfg->inject.kv_sources);
    }
    return CR_OK;
}

/* ---- membership -------------------------------------------------------------- */

/* The core's slot of a simulated shard and back; the identity without
 * events. */
static uint32_t core_slot(const policy_state *s, uint32_t shard)
{
    return s->to_core ? s->to_core[shard] : shard;
}

static uint32_t sim_shard(const policy_state *s, uint32_t slot)
{
    return s->to_sim ? (slot < CR_ENDPOINTS_MAX ? s->to_sim[slot] : UINT32_MAX) : slot;
}

/* The maps from the core's set as it is now: each endpoint's address
 * names its shard. */
static void map_slots(policy_state *s)
{
    uint32_t slots = s->membership->slots;
    for (uint32_t k = 0; k < CR_ENDPOINTS_MAX; k++)
        s->to_sim[k] = UINT32_MAX;
    for (uint32_t k = 0; k < slots; k++)
        s->to_core[k] = UINT32_MAX;
    const cr_endpoints *e = cr_core_endpoints(s->core);
    for (uint32_t k = 0; e && k < e->n_slots; k++) {
        unsigned shard;
        if (e->slot[k].state == CR_ENDPOINT_GONE ||
            sscanf(e->slot[k].address, "sim:%u", &shard) != 1 || shard >= slots)
            continue;
        s->to_sim[k] = shard;
        s->to_core[shard] = k;
    }
    cr_endpoints_release(e);
}

/* Gives the core every listed endpoint (cr_core_set_endpoints) and maps
 * its slots. The events were checked when parsed, so a refusal is the
 * core's: said, and the run goes on with the set it kept. */
static void set_endpoints(policy_state *s)
{
    uint32_t n = 0, slots = s->membership->slots;
    cr_endpoint_spec *v = malloc(slots * sizeof *v);
    char (*text)[2][CR_REPLAY_ENDPOINT_ID_MAX + 1] = malloc(slots * sizeof *text);
    cr_error err = {{0}};
    cr_status st = v && text ? CR_OK : cr_fail(&err, CR_ENOMEM, "out of memory for %u", slots);
    for (uint32_t k = 0; st == CR_OK && k < slots; k++) {
        if (!s->listed[k])
            continue;
        cr_replay_endpoint_id(s->membership, k, text[n][0], sizeof text[n][0]);
        snprintf(text[n][1], sizeof text[n][1], "sim:%u", k);
        v[n] = (cr_endpoint_spec){.id = text[n][0], .address = text[n][1], .weight = 1};
        n++;
    }
    if (st == CR_OK)
        st = cr_core_set_endpoints(s->core, v, n, NULL, &err);
    if (st != CR_OK)
        fprintf(stderr, "cacheroute-replay: SetEndpoints refused: %s\n", err.msg);
    free(v);
    free(text);
    map_slots(s);
}

/* The initial endpoints, e0 .. e{R-1}, in a fresh core. */
static void initial_endpoints(policy_state *s)
{
    memset(s->listed, 0, s->membership->slots);
    memset(s->listed, 1, s->membership->shards);
    set_endpoints(s);
}

/* A fresh core at virtual time 0, no table, no replans recorded, nothing
 * in service; with events, the initial endpoints. */
/* cacheroute-door: the core's door with the objectives' table and bounds,
 * and room for every request it may hold. */
static cr_status open_door(policy_state *s, cr_error *err)
{
    char text[128];
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n;
    cr_replay_admission_table(s->door, text, sizeof text);
    cr_status st = cr_admit_objectives_parse(text, t, &n, err);
    if (st == CR_OK)
        st = cr_core_set_door(s->core, &s->door->door, t, n, err);
    free(s->held);
    s->held = st == CR_OK ? malloc((s->door->door.max_queued + 1) * sizeof *s->held) : NULL;
    if (st == CR_OK && !s->held)
        st = cr_fail(err, CR_ENOMEM, "out of memory for %u held requests",
                     s->door->door.max_queued);
    return st;
}

/* The objective and tenant of a request of owner's session. */
static cr_admit_ask ask_of(const policy_state *s, int64_t owner)
{
    unsigned cls, tenant;
    cr_replay_admission_of(s->door, owner, &cls, &tenant);
    return (cr_admit_ask){.has_objective = 1, .objective = cls, .priority = cls ? -1 : 0,
                          .slo_ms = cls ? s->door->batch_slo_ms : s->door->interactive_slo_ms,
                          .fairness = tenant ? "light" : "heavy", .fairness_len = 5,
                          .can_wait = !s->door->shed_at_once};
}

static cr_status open_core(policy_state *s, cr_error *err)
{
    cr_core_free(s->core);
    cr_core_plan_result_free(&s->last);
    cr_replay_finishes_free(&s->finishes);
    s->n_replans = 0;
    s->n_gone = 0;
    s->now_s = 0;
    s->scrape_seq = 0;
    cr_clock_source clock = {virtual_now, s};
    s->core = cr_core_new(&s->cfg, NULL, &clock, err);
    if (s->core && s->membership)
        initial_endpoints(s);
    s->n_held = 0;
    if (s->core && s->door && open_door(s, err) != CR_OK)
        return CR_EINVAL;
    return s->core ? CR_OK : CR_EINVAL;
}

static uint32_t home_of(void *ctx, int64_t owner, uint32_t n_shards)
{
    return cr_core_home_shard(ctx, owner, n_shards);
}

/* The share of now's sessions whose shard set a replan changed (their
 * cache moved): cr_table_churn_homed's moved + left_home over them. */
static double changed_share(cr_core *core, const cr_table *old, const cr_table *now)
{
    size_t n = cr_table_n_placements(now);
    cr_churn c = cr_table_churn_homed(old, now, home_of, core);
    return n ? (double)(c.moved + c.left_home) / (double)n : 0.0;
}

static int grow_replans(policy_state *s)
{
    if (s->n_replans < s->cap)
        return 0;
    size_t cap = s->cap ? 2 * s->cap : 64;
    double *changed = realloc(s->changed, cap * sizeof *changed);
    if (changed)
        s->changed = changed;
    double *at = changed ? realloc(s->at_s, cap * sizeof *at) : NULL;
    if (!at)
        return -1;
    s->at_s = at;
    s->cap = cap;
    return 0;
}

/* Called when a tick replanned: records the churn of what is installed now
 * against the table before, and keeps the new one. A replan that failed
 * (out of memory) leaves the table as it was and is not counted. */
static void note_install(policy_state *s)
{
    cr_core_plan_result now;
    cr_core_current(s->core, &now);
    if (!now.table || now.generation == s->last.generation || grow_replans(s) != 0) {
        cr_core_plan_result_free(&now);
        return;
    }
    s->changed[s->n_replans] = changed_share(s->core, s->last.table, now.table);
    s->at_s[s->n_replans++] = s->now_s;
    cr_core_plan_result_free(&s->last);
    s->last = now;
}

/* A request's id: its first block's index in the pool, in decimal. */
static void request_id(size_t first_block, char *buf, size_t len)
{
    snprintf(buf, len, "%zu", first_block);
}

/* buf with room for n items of size bytes: itself when *cap holds them,
 * else grown to at least twice *cap (updated); NULL when out of memory
 * (buf is then untouched). */
static void *grown(void *buf, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return buf;
    size_t want = n > 2 * *cap ? n : 2 * *cap;
    void *p = realloc(buf, want * size);
    if (p)
        *cap = want;
    return p;
}

/* ids[0 .. n) as 2-token pseudo-blocks {low, high 32 bits} into s->tokens
 * (the tokens an engine would hash): -1 when out of memory. */
static int pseudo_tokens(policy_state *s, const uint64_t *ids, uint32_t n)
{
    uint32_t *t = grown(s->tokens, &s->n_tokens, 2 * (size_t)n, sizeof *t);
    if (!t)
        return -1;
    s->tokens = t;
    for (uint32_t i = 0; i < n; i++) {
        t[2 * i] = (uint32_t)ids[i];
        t[2 * i + 1] = (uint32_t)(ids[i] >> 32);
    }
    return 0;
}

/* Applies one engine event to the core; built valid, so only memory can
 * fail it (then the index holds less). */
static void send_event(policy_state *s, const cr_kv_event *ev)
{
    cr_kv_applied applied;
    cr_error err;
    if (cr_core_kv_events(s->core, ev, 1, &applied, &err) != CR_OK)
        fprintf(stderr, "cacheroute-replay: KV event refused: %s\n", err.msg);
}

/* The blocks of f's request stored on its shard, as an engine publishes
 * them once its prefill is done: all of them, from its first block (no
 * parent), at most --max-route-hashes (what Route indexes of it). */
static void send_stored(policy_state *s, const cr_replay_finish *f)
{
    uint32_t most = s->cfg.route.max_hashes;
    uint32_t n = f->n_blocks < most ? f->n_blocks : most;
    const uint64_t *ids = s->pool + f->first_block;
    if (pseudo_tokens(s, ids, n) != 0)
        return; /* out of memory: not stored, as an event lost */
    cr_kv_event ev = {.kind = CR_KV_STORED, .shard = core_slot(s, f->shard), .engine = ids, .n = n,
                      .tokens = s->tokens, .n_tokens = 2 * (size_t)n, .block_size = 2};
    send_event(s, &ev);
}

/* The evictions gathered so far, as REMOVED events of at most
 * --max-route-hashes blocks each. */
static void send_removed(policy_state *s)
{
    size_t most = s->cfg.route.max_hashes;
    for (size_t at = 0; at < s->n_gone; at += most) {
        size_t n = s->n_gone - at < most ? s->n_gone - at : most;
        cr_kv_event ev = {.kind = CR_KV_REMOVED, .shard = core_slot(s, s->gone_shard),
                          .engine = s->gone + at, .n = n};
        send_event(s, &ev);
    }
    s->n_gone = 0;
}

/* The simulator's eviction hook: gathered per shard, sent at served. */
static void evicted(void *state, uint32_t shard, uint64_t id)
{
    policy_state *s = state;
    if (s->n_gone && shard != s->gone_shard)
        send_removed(s);
    uint64_t *g = grown(s->gone, &s->cap_gone, s->n_gone + 1, sizeof *g);
    if (!g)
        return; /* out of memory: lost, as an event; the index ages it out */
    s->gone = g;
    s->gone_shard = shard;
    s->gone[s->n_gone++] = id;
}

/* Reports every prefill that has ended by now, as an engine's ReportOutcome
 * would, each at its own finish (the core's clock set to it): it releases
 * the route's outstanding work (bounded, live, ttft), counts served hits
 * and feeds the core's calibration. A failed shard's are never reported:
 * they were not served. */
static void report_finishes(policy_state *s)
{
    double now = s->now_s;
    cr_replay_finish f;
    while (cr_replay_finishes_pop_due(&s->finishes, now, &f)) {
        if (s->listed && !s->listed[f.shard])
            continue;
        char id[24];
        request_id(f.request, id, sizeof id);
        cr_outcome o = {
                .has = CR_OUT_OWNER | CR_OUT_SHARD | CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS |
                       CR_OUT_QUEUE_WAIT | CR_OUT_PREFILL | CR_OUT_PREFILLED_FROM |
                       CR_OUT_PREFILLED_TO | CR_OUT_TTFT | CR_OUT_GPU,
                .owner = f.owner,
                .shard = core_slot(s, f.shard),
                .prompt_tokens = f.prompt_tokens,
                .cached_tokens = f.cached_tokens,
                .queue_wait_ms = f.queue_wait_ms,
                .prefill_ms = f.prefill_ms,
                .prefilled_from = f.prefilled_from,
                .prefilled_to = f.prompt_tokens,
                .ttft_ms = f.ttft_ms,
                .gpu = 0,
                .request_id = s->call == CR_REPLAY_CALL_ROUTE ? id : NULL};
        cr_outcome_counts counts;
        cr_error err;
        s->now_s = f.at_s > s->now_s ? f.at_s : s->now_s;
        if (s->events == CR_REPLAY_KV_EVENTS_ON)
            send_stored(s, &f);
        if (cr_core_report(s->core, &o, 1, &counts, &err) != CR_OK) /* valid by construction */
            fprintf(stderr, "cacheroute-replay: outcomes refused: %s\n", err.msg);
        if (s->door) {
            cr_admit_ask q = ask_of(s, f.owner);
            cr_admit_outcome(cr_core_door(s->core), &q, f.ttft_ms);
        }
    }
    s->now_s = now;
}

/* A fresh core for another run over the same policy, as a fresh sidecar
 * would be. */
static void reopen(policy_state *s)
{
    cr_error err;
    if (open_core(s, &err) != CR_OK) { /* the config passed once: only memory */
        fprintf(stderr, "cacheroute-replay: cannot reset the core: %s\n", err.msg);
        abort();
    }
}

/* A clock running backwards is the start of another run. */
static void tick(void *state, double now_s)
{
    policy_state *s = state;
    if (now_s < s->now_s)
        reopen(s);
    s->now_s = now_s;
    report_finishes(s);
    if (cr_core_tick(s->core))
        note_install(s);
}

/* A run with events starts (ev NULL: a fresh core, its initial
 * endpoints), or the set changes at ev->at_s: what ended before is
 * reported on the set before, then the core is told as an operator
 * would tell a sidecar (the file's comment). */
static void members(void *state, const uint8_t *usable, uint32_t n_slots,
                    const cr_replay_member_event *ev)
{
    policy_state *s = state;
    (void)usable;
    (void)n_slots;
    if (!ev) {
        reopen(s);
        return;
    }
    s->now_s = ev->at_s > s->now_s ? ev->at_s : s->now_s;
    report_finishes(s);
    if (ev->kind == CR_REPLAY_DRAIN) {
        cr_error err;
        if (cr_core_drain_endpoint(s->core, ev->id, 1, NULL, &err) != CR_OK)
            fprintf(stderr, "cacheroute-replay: DrainEndpoint refused: %s\n", err.msg);
        return;
    }
    s->listed[ev->slot] = ev->kind == CR_REPLAY_JOIN;
    set_endpoints(s);
}

/* r's blocks' chained hashes into s->hashes: the splitmix chain, or with
 * events the router's chain over the pseudo-blocks (what the events'
 * blocks are keyed by); -1 when out of memory. */
static int chain_hashes(policy_state *s, const cr_replay_request *r, const uint64_t *pool)
{
    uint64_t *h = grown(s->hashes, &s->n_hashes, r->n_blocks, sizeof *h);
    if (!h)
        return -1;
    s->hashes = h;
    const uint64_t *ids = pool + r->first_block;
    if (s->events == CR_REPLAY_KV_EVENTS_OFF) {
        for (uint32_t i = 0; i < r->n_blocks; i++)
            h[i] = cr_mix64((i ? h[i - 1] : 0) ^ ids[i]);
        return 0;
    }
    if (pseudo_tokens(s, ids, r->n_blocks) != 0)
        return -1;
    for (uint32_t i = 0; i < r->n_blocks; i++)
        h[i] = cr_route_block_hash(i ? h[i - 1] : 0, s->tokens + 2 * (size_t)i, 2);
    return 0;
}

/* Route for r, as a serving stack's gateway would call it. */
static uint32_t route_call(policy_state *s, const cr_replay_request *r, const cr_replay_view *v)
{
    char id[24];
    request_id(r->first_block, id, sizeof id);
    int hashed = chain_hashes(s, r, v->blocks) == 0; /* out of memory: routed without hashes */
    uint32_t most = s->cfg.route.max_hashes;
    cr_route_request item = {
        .has_owner = 1,
        .owner = r->owner,
        .prompt_tokens = r->input_tokens,
        .hashes = hashed ? s->hashes : NULL,
        .n_hashes = hashed ? (r->n_blocks < most ? r->n_blocks : most) : 0,
        .request_id = id,
    };
    if (s->door) { /* its objective by name, its tenant as the fairness id */
        cr_admit_ask q = ask_of(s, r->owner);
        item.objective = q.objective ? "batch" : "interactive";
        item.objective_len = strlen(item.objective);
        item.fairness = q.fairness;
        item.fairness_len = q.fairness_len;
        item.can_wait = q.can_wait; /* the gateway waits for a dispatch, unless CR_ADMIT_SHED */
    }
    cr_route_answer a;
    cr_error err;
    if (cr_core_route(s->core, &item, 1, &a, NULL, &err) != CR_OK) { /* valid by construction */
        fprintf(stderr, "cacheroute-replay: Route refused: %s\n", err.msg);
        abort();
    }
    s->predicted = a.cached_tokens;
    if (a.door == CR_ROUTE_DOOR_QUEUED) { /* the door holds at most max_queued */
        s->held[s->n_held++] = (held_at){a.held, r};
        return CR_REPLAY_HELD;
    }
    if (a.door == CR_ROUTE_DOOR_SHED)
        return CR_REPLAY_SHED;
    return sim_shard(s, a.shard);
}

/* The cluster's last scrape, once: each serving shard's waiting, running
 * and KV usage (blocks held over the shard's), with the cluster's block
 * size and blocks. Built valid, so a refusal is the core's: said. */
static void feed_scrape(policy_state *s, const cr_replay_view *v)
{
    const cr_replay_scrape *m = v->scrape;
    if (!m || m->seq == s->scrape_seq)
        return;
    s->scrape_seq = m->seq;
    CR_REPLAY_FOR_SERVING(v, k) {
        double used = (double)m->blocks_held[k] / (double)s->gpu_blocks;
        cr_engine_load load = {.at_s = m->at_s, .waiting = m->waiting[k],
                               .running = m->running[k], .kv_usage = used < 1 ? used : 1,
                               .block_size = s->block_tokens, .gpu_blocks = s->gpu_blocks};
        cr_error err;
        if (cr_core_engine_load(s->core, core_slot(s, k), &load, &err) != CR_OK)
            fprintf(stderr, "cacheroute-replay: engine load refused: %s\n", err.msg);
    }
}

static uint32_t route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    policy_state *s = state;
    s->pool = v->blocks; /* the trace's, for the events at its finishes */
    feed_scrape(s, v);
    if (s->call == CR_REPLAY_CALL_ROUTE)
        return route_call(s, r, v);
    cr_route_answer out;
    cr_error err;
    double w = r->input_tokens; /* >= 1 and < 2^32: a valid weight */
    int tokens = s->weight == CR_REPLAY_WEIGHT_TOKENS;
    /* Fails only for 0 owners or a bad weight. */
    cr_core_record(s->core, &r->owner, 1, tokens ? &w : NULL, tokens, &out, NULL, &err);
    return sim_shard(s, out.shard);
}

/* The shard is busy with r until its queue wait and prefill have passed;
 * the outcome is reported then. The prefill computed [s, L): s is the
 * prefix hit, plus the knowledge when it came as KV. */
static void served(void *state, const cr_replay_request *r, const cr_replay_outcome *o)
{
    policy_state *s = state;
    send_removed(s); /* its dispatch's evictions, before the next route */
    uint32_t from = o->hit_tokens + (o->used_kv ? r->knowledge_tokens : 0);
    cr_replay_finish f = {
        .at_s = s->now_s + (o->queue_wait_ms + o->prefill_ms) / 1000.0,
        .request = r->first_block,
        .owner = r->owner,
        .shard = o->shard,
        .prompt_tokens = r->input_tokens,
        .cached_tokens = o->hit_tokens,
        .prefilled_from = from < r->input_tokens ? from : r->input_tokens,
        .queue_wait_ms = o->queue_wait_ms,
        .prefill_ms = o->prefill_ms,
        .ttft_ms = o->ttft_ms,
        .first_block = r->first_block,
        .n_blocks = r->n_blocks,
    };
    if (s->events == CR_REPLAY_KV_EVENTS_DISPATCH)
        send_stored(s, &f);
    cr_replay_finishes_push(&s->finishes, f); /* out of memory: not reported */
}

/* SelectInjection as an engine would call it: the whole knowledge cached
 * at one store, the shard's own queue as the wait, and no prefix hit (the
 * request has no field for one). A dry run: the simulated cluster has no
 * link queues, so reserved transfers would make the core wait for
 * congestion that never happens there. */
static int kv(void *state, const cr_replay_request *r, const cr_replay_view *v, uint32_t shard,
              uint32_t hit_tokens)
{
    policy_state *s = state;
    (void)hit_tokens;
    cr_kv_source src = {"kvstore", r->knowledge_tokens};
    cr_inject_request req = {
        .prompt_tokens = r->input_tokens - r->knowledge_tokens,
        .knowledge_tokens = r->knowledge_tokens,
        .sources = &src,
        .n_sources = 1,
        .has_queue_wait = 1,
        .queue_wait_ms = v->backlog_ms[shard],
        .dry_run = 1,
    };
    cr_inject_response resp;
    cr_error err;
    if (cr_core_select(s->core, NULL, &req, &resp, &err) != CR_OK)
        return 0; /* out of the injector's range (10^7 tokens): text, as a sidecar's caller would */
    return resp.mode == CR_INJECT_KV_CACHE;
}

/* Route's prediction for the request just routed; RecordArrival makes
 * none. */
static int predicted(void *state, uint32_t *tokens)
{
    const policy_state *s = state;
    *tokens = s->predicted;
    return s->call == CR_REPLAY_CALL_ROUTE;
}

/* cacheroute-door: the next held request the core's door lets go (or
 * drops) now. */
static int dispatch(void *state, const cr_replay_request **r, uint32_t *shard, double *held_ms)
{
    policy_state *s = state;
    if (!s->n_held)
        return -1;
    cr_core_dispatched d;
    if (cr_core_admit_dispatch(s->core, &d, 1) == 0)
        return 0;
    size_t j = 0;
    while (j < s->n_held && s->held[j].handle != d.held)
        j++;
    if (j == s->n_held) { /* cannot happen: every handle answered is kept */
        fprintf(stderr, "cacheroute-replay: the door dispatched an unknown request\n");
        abort();
    }
    *r = s->held[j].r;
    s->held[j] = s->held[--s->n_held];
    *shard = d.dropped ? CR_REPLAY_SHED : sim_shard(s, d.answer.shard);
    *held_ms = d.held_ms;
    s->predicted = d.answer.cached_tokens;
    return 1;
}

static int replans(void *state, size_t *n, const double **changed_share_out, const double **at_s)
{
    const policy_state *s = state;
    *n = s->n_replans;
    *changed_share_out = s->changed;
    *at_s = s->at_s;
    return 0;
}

static void policy_free(void *state)
{
    policy_state *s = state;
    if (!s)
        return;
    cr_core_plan_result_free(&s->last);
    cr_core_free(s->core);
    cr_replay_finishes_free(&s->finishes);
    free(s->cfg.inject.kv_sources);
    free(s->hashes);
    free(s->tokens);
    free(s->gone);
    free(s->changed);
    free(s->at_s);
    free(s->listed);
    free(s->to_sim);
    free(s->to_core);
    free(s->held);
    free(s);
}

/* With events: the membership tables (CR_ENDPOINTS_MAX core slots, one
 * per shard); CR_EINVAL when the core's set could not hold them. */
static cr_status members_init(policy_state *s, const cr_replay_cluster *c, cr_error *err)
{
    s->membership = c->events;
    if (!s->membership)
        return CR_OK;
    if (s->membership->slots > CR_ENDPOINTS_MAX)
        return cr_fail(err, CR_EINVAL, "cacheroute takes at most %u endpoints, the events open %u",
                       CR_ENDPOINTS_MAX, s->membership->slots);
    s->listed = calloc(s->membership->slots, sizeof *s->listed);
    s->to_core = calloc(s->membership->slots, sizeof *s->to_core);
    s->to_sim = calloc(CR_ENDPOINTS_MAX, sizeof *s->to_sim);
    if (!s->listed || !s->to_core || !s->to_sim)
        return cr_fail(err, CR_ENOMEM, "out of memory for %u endpoints", s->membership->slots);
    return CR_OK;
}

cr_status cr_replay_cacheroute_policy(const cr_core_config *cfg, cr_replay_weight weight,
                                      cr_replay_call call, cr_replay_kv_events events,
                                      const cr_replay_cluster *c, cr_replay_policy *out,
                                      cr_error *err)
{
    memset(out, 0, sizeof *out);
    if (c->shards < 1 || c->shards > CR_MAX_SHARDS)
        return cr_fail(err, CR_EINVAL, "shards must be in 1..%u, got %u", CR_MAX_SHARDS,
                       c->shards);
    policy_state *s = calloc(1, sizeof *s);
    if (!s)
        return cr_fail(err, CR_ENOMEM, "out of memory for the cacheroute policy");
    s->weight = weight;
    s->call = call;
    s->events = events;
    s->block_tokens = c->block_tokens;
    s->gpu_blocks = c->shard_blocks;
    cr_status st = copy_config(cfg, c, &s->cfg, err);
    if (st == CR_OK)
        st = members_init(s, c, err);
    if (st == CR_OK)
        st = open_core(s, err);
    if (st != CR_OK) {
        policy_free(s);
        return st;
    }
    *out = (cr_replay_policy){.name = "cacheroute", .state = s, .route = route, .kv = kv,
                              .served = served, .tick = tick, .free = policy_free,
                              .replans = replans, .predicted = predicted,
                              .evicted = events != CR_REPLAY_KV_EVENTS_OFF ? evicted : NULL,
                              .members = c->events ? members : NULL};
    return CR_OK;
}

cr_status cr_replay_cacheroute_door_policy(const cr_core_config *cfg, const cr_replay_cluster *c,
                                           cr_replay_policy *out, cr_error *err)
{
    if (!c->admission)
        return cr_fail(err, CR_EINVAL, "cacheroute-door needs the cluster's admission");
    cr_status st = cr_replay_cacheroute_policy(cfg, CR_REPLAY_WEIGHT_REQUESTS, CR_REPLAY_CALL_ROUTE,
                                               CR_REPLAY_KV_EVENTS_OFF, c, out, err);
    if (st != CR_OK)
        return st;
    policy_state *s = out->state;
    s->door = c->admission;
    if ((st = open_core(s, err)) != CR_OK) {
        policy_free(s);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->name = "cacheroute-door";
    out->dispatch = dispatch;
    return CR_OK;
}
