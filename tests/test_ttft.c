/* Route and the ttft rule on the core, in virtual time, with a prefill
 * model set by hand (a = 0, b = 1 ms a token, c = 0, no calibration), so
 * every prediction is worked out in the case: a prefix goes where it was
 * sent; namespaces never match; a queue longer than the extra prefill
 * spills; a request id's outcome restarts its shard's timeline; the index
 * stays within --index-blocks and keeps what was just sent; an owner's
 * session stands for its prefix without hashes (RecordArrival too);
 * --route-planned keeps an admitted owner among its shards; bad requests
 * name the field and record nothing; the same calls give the same routes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "core_config.h"
#include "cunit_main.h"
#include "route.h"

#define SHARDS 4
#define BT 16 /* --block-tokens */

typedef struct fixture {
    double t; /* the core's clock, seconds */
    uint64_t arrivals;
    cr_core *core;
} fixture;

static double now_of(void *ctx) { return ((fixture *)ctx)->t; }
static void on_record(void *ctx, uint64_t n) { ((fixture *)ctx)->arrivals += n; }

/* 4 shards, ttft with miss weight g, index_blocks per shard, the model
 * above, no replanner. */
static void ttft_config(cr_core_config *cfg, double g, uint32_t index_blocks, int planned)
{
    cr_test_core_config(cfg, SHARDS);
    cfg->route.by = CR_ROUTE_TTFT;
    cfg->route.miss_weight = g;
    cfg->route.block_tokens = BT;
    cfg->route.index_blocks = index_blocks;
    cfg->route.planned = planned;
    cfg->inject.prefill_coeffs = (cr_prefill_cost){.fixed_ms = 0, .ms_per_token = 1};
    cfg->inject.set |= CR_INJECT_SET_PREFILL_COEFFS;
    cfg->inject.calibrate = 0;
}

static void open_core(fixture *f, const cr_core_config *cfg)
{
    memset(f, 0, sizeof *f);
    cr_core_hooks hooks = {.recorded = on_record, .ctx = f};
    cr_clock_source clock = {now_of, f};
    cr_error err;
    f->core = cr_core_new(cfg, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

static void open_ttft(fixture *f, double g, uint32_t index_blocks, int planned)
{
    cr_core_config cfg;
    ttft_config(&cfg, g, index_blocks, planned);
    open_core(f, &cfg);
}

/* hashes[i] = base + i: distinct per base, a prefix of a longer run. */
static void run_of(uint64_t *h, uint32_t n, uint64_t base)
{
    for (uint32_t i = 0; i < n; i++)
        h[i] = base + i;
}

/* One Route of n hashes (no owner unless owner >= 0), its answer. */
static cr_route_answer route_full(fixture *f, const uint64_t *h, uint32_t n, int64_t owner,
                                  const char *space, const char *id)
{
    cr_route_request q = {.has_owner = owner >= 0, .owner = owner, .hashes = h, .n_hashes = n,
                            .space = space, .space_len = space ? strlen(space) : 0,
                            .request_id = id};
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_route(f->core, &q, 1, &a, NULL, &err), CR_OK);
    return a;
}

static cr_route_answer route(fixture *f, const uint64_t *h, uint32_t n)
{
    return route_full(f, h, n, -1, NULL, NULL);
}

static const char *why(const cr_route_answer *a) { return cr_route_reason_name(a->reason); }

static void test_prefix_goes_where_it_was_sent(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    uint64_t h[16];
    run_of(h, 8, 100);
    cr_route_answer a = route(&f, h, 8);
    CU_ASSERT_STRING_EQUAL(why(&a), "least_loaded");
    CU_ASSERT_EQUAL(a.cached_tokens, 0);
    CU_ASSERT_DOUBLE_EQUAL(a.prefill_ms, 8 * BT, 1e-9); /* L = 8 blocks */
    CU_ASSERT_DOUBLE_EQUAL(a.queue_wait_ms, 0, 1e-9);
    f.t = 10; /* its prefill (128 ms) is long done */
    run_of(h + 4, 4, 900); /* 4 blocks in common, then others */
    cr_route_answer b = route(&f, h, 8);
    CU_ASSERT_EQUAL(b.shard, a.shard);
    CU_ASSERT_STRING_EQUAL(why(&b), "prefix");
    CU_ASSERT_EQUAL(b.cached_tokens, 4 * BT);
    CU_ASSERT_DOUBLE_EQUAL(b.prefill_ms, 4 * BT, 1e-9);
    /* a prompt shorter than what is held: its whole length hits */
    f.t = 20;
    cr_route_answer c = route_full(&f, h, 2, -1, NULL, NULL);
    CU_ASSERT_EQUAL(c.shard, a.shard);
    CU_ASSERT_EQUAL(c.cached_tokens, 2 * BT);
    cr_core_free(f.core);
}

static void test_namespaces_never_match(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    uint64_t h[8];
    run_of(h, 8, 100);
    route_full(&f, h, 8, -1, "llama-8b", NULL);
    f.t = 10;
    cr_route_answer same = route_full(&f, h, 8, -1, "llama-8b", NULL);
    CU_ASSERT_EQUAL(same.cached_tokens, 8 * BT);
    cr_route_answer other = route_full(&f, h, 8, -1, "llama-8b:lora-7", NULL);
    CU_ASSERT_EQUAL(other.cached_tokens, 0);
    CU_ASSERT_STRING_EQUAL(why(&other), "least_loaded");
    cr_route_answer none = route_full(&f, h, 8, -1, NULL, NULL);
    CU_ASSERT_EQUAL(none.cached_tokens, 0);
    cr_core_free(f.core);
}

/* The miss weight a request is charged with: g for a prefix of its own,
 * 1 + (g - 1) 32 / (32 + n) for one that n earlier requests matched up to
 * the same block (CR_ROUTE_SHARED_HALF). */
static double g_for(double g, int n) { return 1 + (g - 1) * 32 / (32 + n); }

/* At one instant, requests pile onto the shard holding their prefix until
 * its queue outweighs g times the extra prefill elsewhere (a tie, to the
 * rounding of the sums of seconds, may go either way). shared: every
 * request is the same 64 blocks plus one of its own, so the n-th of them
 * is charged g_for(g, n); else each is the one before plus one block (a
 * conversation's turns), the deepest block held its own, charged g. */
static void pile_until_spill(int shared, double g, int *spilled_at)
{
    fixture f;
    open_ttft(&f, g, 10000, 0);
    uint64_t h[300];
    run_of(h, 300, 7);
    cr_route_answer first = route(&f, h, 64); /* 1024 ms on its shard */
    double wait = first.prefill_ms;
    *spilled_at = -1;
    for (int k = 0; k < 200 && *spilled_at < 0; k++) {
        uint32_t n = shared ? 65 : 65 + (uint32_t)k;
        if (shared)
            h[64] = 5000 + (uint64_t)k; /* its own last block */
        double gk = shared ? g_for(g, k) : g, miss = 16 * (n - 1); /* elsewhere: all but 16 */
        cr_route_answer a = route(&f, h, n);
        if (a.shard == first.shard) {
            CU_ASSERT_STRING_EQUAL(why(&a), "prefix");
            CU_ASSERT_DOUBLE_EQUAL(a.queue_wait_ms, wait, 1e-6);
            CU_ASSERT_TRUE(wait + gk * 16 <= gk * (miss + 16) + 1e-6);
            wait += a.prefill_ms;
            continue;
        }
        *spilled_at = k;
        CU_ASSERT_STRING_EQUAL(why(&a), "spill");
        CU_ASSERT_TRUE(wait + gk * 16 >= gk * (miss + 16) - 1e-6);
        CU_ASSERT_EQUAL(a.cached_tokens, 0);
        CU_ASSERT_DOUBLE_EQUAL(a.queue_wait_ms, 0, 1e-9);
    }
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.placed[CR_ROUTE_WHY_SPILL], *spilled_at >= 0);
    CU_ASSERT_EQUAL(st.placed[CR_ROUTE_WHY_PREFIX], *spilled_at >= 0 ? (uint64_t)*spilled_at : 200);
    cr_core_free(f.core);
}

static void test_spill_when_the_queue_outweighs_the_miss(void)
{
    int own, shared;
    pile_until_spill(0, 2, &own);
    pile_until_spill(1, 2, &shared);
    /* own: the queue grows by 16 ms a turn and the miss by g x 16: never;
     * shared: 1024 + 16 k > g_for(2, k) x 1024 first at k = 33, where a
     * weight of 2 throughout would wait until k = 65 */
    CU_ASSERT_EQUAL(own, -1);
    CU_ASSERT_TRUE(shared >= 32 && shared <= 34);
}

static cr_outcome outcome_for(const char *id, uint32_t cached)
{
    return (cr_outcome){.request_id = id, .has = CR_OUT_CACHED_TOKENS | CR_OUT_PROMPT_TOKENS,
                        .prompt_tokens = 1024, .cached_tokens = cached};
}

static void test_outcome_by_request_id_restarts_the_timeline(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    uint64_t h[64];
    run_of(h, 64, 1);
    cr_route_answer a = route_full(&f, h, 64, -1, NULL, "req-a"); /* 1024 ms */
    cr_route_answer b = route_full(&f, h, 64, -1, NULL, "req-b"); /* behind it, all cached */
    CU_ASSERT_EQUAL(b.shard, a.shard);
    CU_ASSERT_DOUBLE_EQUAL(b.queue_wait_ms, 1024, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(b.prefill_ms, 0, 1e-9);
    /* req-a done early, at 0.5 s: req-b (0 ms predicted) starts then */
    f.t = 0.5;
    cr_outcome o = outcome_for("req-a", 0);
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.rejected, 0);
    cr_route_answer c = route(&f, h, 64);
    CU_ASSERT_EQUAL(c.shard, a.shard);
    CU_ASSERT_DOUBLE_EQUAL(c.queue_wait_ms, 0, 1e-9);
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.released, 1);
    /* the same id again finds nothing outstanding */
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.released, 1);
    cr_core_free(f.core);
}

/* An engine that holds less than the index says lowers that shard's
 * predicted hits: req-x found 0 of its 1024 predicted tokens. */
static void test_measured_hits_correct_the_prediction(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    uint64_t h[64];
    run_of(h, 64, 1);
    cr_route_answer a = route(&f, h, 64);
    f.t = 10;
    cr_route_answer x = route_full(&f, h, 64, -1, NULL, "req-x");
    CU_ASSERT_EQUAL(x.shard, a.shard);
    CU_ASSERT_EQUAL(x.cached_tokens, 1024);
    cr_outcome o = outcome_for("req-x", 0);
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    f.t = 20;
    cr_route_answer y = route(&f, h, 64);
    CU_ASSERT_EQUAL(y.shard, a.shard);
    CU_ASSERT_TRUE(y.cached_tokens < 1024); /* 0.8 of it: trusted less */
    CU_ASSERT_TRUE(y.cached_tokens >= 800);
    cr_core_free(f.core);
}

/* Within its bound, and what was just sent is held: each route of 8 fresh
 * blocks is matched in full right after, on every shard the rule picks. */
static void test_index_within_its_bound(void)
{
    fixture f;
    open_ttft(&f, 2, 64, 0);
    uint64_t h[8];
    for (int k = 0; k < 500; k++) {
        f.t += 10;
        run_of(h, 8, 1000 + 8 * (uint64_t)k);
        cr_route_answer a = route(&f, h, 8);
        f.t += 10;
        cr_route_answer b = route(&f, h, 8);
        CU_ASSERT_EQUAL(b.shard, a.shard);
        CU_ASSERT_EQUAL(b.cached_tokens, 8 * BT);
    }
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.index_blocks, SHARDS * 64); /* full, never more */
    CU_ASSERT_TRUE(st.index_bytes > 0);
    CU_ASSERT_TRUE(st.index_bytes < 200000);
    /* the oldest blocks are gone */
    run_of(h, 8, 1000);
    cr_route_answer old = route(&f, h, 8);
    CU_ASSERT_EQUAL(old.cached_tokens, 0);
    cr_core_free(f.core);
}

/* RecordArrival under ttft: a weight is the prompt's tokens and the
 * owner's last shard holds its conversation. */
static void test_session_stands_for_the_prefix(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    int64_t owner = 42;
    double w = 1000;
    cr_route_answer r1, r2, r3;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_record(f.core, &owner, 1, &w, 1, &r1, NULL, &err), CR_OK);
    /* another owner piles 900 ms onto that shard at once; owner 42's next
     * turn (1100 tokens, 1000 of them cached there) still goes back: 900 +
     * 2 x 100 < 2 x 1100 */
    f.t = 5;
    cr_route_answer a;
    cr_route_request q = {.has_owner = 1, .owner = 7, .prompt_tokens = 900};
    CU_ASSERT_EQUAL(cr_core_route(f.core, &q, 1, &a, NULL, &err), CR_OK);
    w = 1100;
    CU_ASSERT_EQUAL(cr_core_record(f.core, &owner, 1, &w, 1, &r2, NULL, &err), CR_OK);
    CU_ASSERT_EQUAL(r2.shard, r1.shard);
    /* the same through Route without hashes: reason "session" */
    f.t = 10;
    q = (cr_route_request){.has_owner = 1, .owner = owner, .prompt_tokens = 1200};
    CU_ASSERT_EQUAL(cr_core_route(f.core, &q, 1, &a, NULL, &err), CR_OK);
    CU_ASSERT_EQUAL(a.shard, r1.shard);
    CU_ASSERT_STRING_EQUAL(why(&a), "session");
    CU_ASSERT_EQUAL(a.cached_tokens, 1100);
    (void)r3;
    cr_core_free(f.core);
}

static void test_planned_owner_stays_among_its_shards(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 1);
    cr_session_rate rates[] = {{7, 150}}; /* 3 x qcap: kb = 3 */
    cr_core_plan_request req = {.rates = rates, .n_rates = 1, .install = 1};
    cr_core_plan_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_plan(f.core, &req, &res, &err), CR_OK);
    const cr_placement *p = cr_table_find(res.table, 7);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(p->kb, 3);
    const uint32_t *own = cr_table_shards(res.table, p);
    uint64_t h[32];
    int used[SHARDS] = {0};
    for (int k = 0; k < 30; k++) { /* at one instant: the queues spread them */
        run_of(h, 32, 100 + 1000 * (uint64_t)k);
        cr_route_answer a = route_full(&f, h, 32, 7, NULL, NULL);
        CU_ASSERT_TRUE(a.admitted);
        CU_ASSERT_STRING_EQUAL(why(&a), "planned");
        CU_ASSERT_TRUE(a.shard == own[0] || a.shard == own[1] || a.shard == own[2]);
        used[a.shard]++;
    }
    CU_ASSERT_TRUE(used[own[0]] && used[own[1]] && used[own[2]]);
    cr_route_answer other = route_full(&f, h, 4, 8, NULL, NULL);
    CU_ASSERT_FALSE(other.admitted);
    CU_ASSERT_STRING_NOT_EQUAL(why(&other), "planned");
    cr_core_plan_result_free(&res);
    cr_core_free(f.core);
}

static void expect_refused(fixture *f, const cr_route_request *q, size_t n, const char *msg)
{
    cr_route_answer a[2];
    cr_error err;
    uint64_t before = f->arrivals;
    cr_route_stats st0, st1;
    cr_core_route_stats_read(f->core, &st0, NULL, 0);
    CU_ASSERT_EQUAL(cr_core_route(f->core, q, n, a, NULL, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
    cr_core_route_stats_read(f->core, &st1, NULL, 0);
    CU_ASSERT_EQUAL(f->arrivals, before);
    CU_ASSERT_EQUAL(st1.index_blocks, st0.index_blocks);
    CU_ASSERT_EQUAL(st1.outstanding, st0.outstanding);
}

static void test_bad_requests_name_the_field(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    static uint64_t many[8193];
    char space[300], id[200];
    memset(space, 'n', sizeof space - 1);
    space[sizeof space - 1] = '\0';
    memset(id, 'i', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    cr_route_request ok = {.has_owner = 1, .owner = 1, .hashes = many, .n_hashes = 4};
    cr_route_request q[2] = {ok, ok};
    expect_refused(&f, q, 0, "requests must not be empty");
    q[1].n_hashes = 8193;
    expect_refused(&f, q, 2,
                   "requests[1].block_hashes has 8193 hashes, at most 8192 (--max-route-hashes)");
    q[1] = ok;
    q[1].prompt_tokens = 10000001;
    expect_refused(&f, q, 2, "requests[1].prompt_tokens must be at most 10000000, got 10000001");
    q[1] = ok;
    q[1].space = space;
    q[1].space_len = strlen(space);
    expect_refused(&f, q, 2, "requests[1].namespace must be at most 256 bytes, got 299");
    q[1] = ok;
    q[1].request_id = id;
    expect_refused(&f, q, 2, "requests[1].request_id must be at most 128 bytes, got 199");
    q[1] = ok;
    q[1].objective = space;
    q[1].objective_len = 64;
    expect_refused(&f, q, 2, "requests[1].objective must be at most 63 bytes, got 64");
    q[1] = ok;
    q[1].has_priority = 1;
    q[1].priority = -1001;
    expect_refused(&f, q, 2, "requests[1].priority must be in [-1000, 1000], got -1001");
    q[1] = ok;
    q[1].slo_ttft_ms = -1;
    expect_refused(&f, q, 2, "requests[1].ttft_slo_ms must be in [0, 86400000], got -1");
    q[1].slo_ttft_ms = NAN;
    expect_refused(&f, q, 2, "requests[1].ttft_slo_ms must be in [0, 86400000], got nan");
    q[1] = ok;
    q[1].fairness = id;
    q[1].fairness_len = 64;
    expect_refused(&f, q, 2, "requests[1].fairness_id must be at most 63 bytes, got 64");
    /* the bounds themselves pass, and an unset priority's value */
    q[1] = (cr_route_request){.has_owner = 1, .owner = 1, .hashes = many, .n_hashes = 4,
                              .objective = space, .objective_len = 63, .fairness = id,
                              .fairness_len = 63, .has_priority = 1, .priority = -1000,
                              .slo_ttft_ms = 86400000};
    cr_route_answer two[2];
    cr_error e2;
    CU_ASSERT_EQUAL(cr_core_route(f.core, q, 2, two, NULL, &e2), CR_OK);
    q[1].has_priority = 0;
    q[1].priority = INT32_MIN;
    CU_ASSERT_EQUAL(cr_core_route(f.core, q, 2, two, NULL, &e2), CR_OK);
    static cr_route_request lots[CR_CORE_MAX_ROUTES + 1];
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_route(f.core, lots, CR_CORE_MAX_ROUTES + 1, &a, NULL, &err),
                    CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "requests must be at most 4096, got 4097");
    cr_core_free(f.core);
}

/* Two cores fed the same calls at the same times answer the same. */
static void test_same_calls_same_answers(void)
{
    fixture a, b;
    open_ttft(&a, 2, 50, 0);
    open_ttft(&b, 2, 50, 0);
    uint64_t h[12];
    for (int k = 0; k < 400; k++) {
        a.t = b.t = k * 0.05;
        run_of(h, 12, (uint64_t)(k % 37) * 7);
        cr_route_answer x = route_full(&a, h, 4 + (uint32_t)(k % 9), k % 11, NULL, NULL);
        cr_route_answer y = route_full(&b, h, 4 + (uint32_t)(k % 9), k % 11, NULL, NULL);
        CU_ASSERT_EQUAL(x.shard, y.shard);
        CU_ASSERT_EQUAL(x.cached_tokens, y.cached_tokens);
        CU_ASSERT_EQUAL(x.reason, y.reason);
    }
    cr_core_free(a.core);
    cr_core_free(b.core);
}

/* Routes predict with GPU 0's calibrated model: once outcomes move the
 * fit, the next route uses it (the router's copy is converted anew then,
 * not on every route). */
static void test_routes_follow_the_calibration(void)
{
    fixture f;
    cr_core_config cfg;
    ttft_config(&cfg, 1, 1024, 0);
    cfg.inject.calibrate = 1;
    cfg.inject.calibration_min_samples = 3;
    open_core(&f, &cfg);
    uint64_t h[8];
    run_of(h, 8, 1000);
    CU_ASSERT_DOUBLE_EQUAL(route(&f, h, 8).prefill_ms, 8 * BT, 1e-9); /* the flag's 1 ms a token */
    cr_outcome_counts counts;
    cr_error err;
    for (uint32_t i = 0; i < 40; i++) { /* a GPU 3x slower, L from 100 to 3200 */
        uint32_t l = 100u << (i % 6);
        cr_outcome o = {.has = CR_OUT_PREFILL | CR_OUT_PREFILLED_FROM | CR_OUT_PREFILLED_TO |
                               CR_OUT_GPU,
                        .prefill_ms = 3.0 * l, .prefilled_to = l};
        f.t += 0.01;
        CU_ASSERT_EQUAL_FATAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    }
    const cr_node_snapshot *snap;
    cr_inject_model m;
    CU_ASSERT_EQUAL_FATAL(cr_core_profile(f.core, &snap, &m, &err), CR_OK);
    cr_node_snapshot_release(snap);
    CU_ASSERT(m.prefill.ms_per_token > 2); /* the fit was adopted */
    run_of(h, 8, 2000);
    CU_ASSERT_DOUBLE_EQUAL(route(&f, h, 8).prefill_ms, cr_prefill_ms(&m.prefill, 0, 8 * BT), 1e-9);
    cr_core_free(f.core);
}

/* One Route asking for k alternatives, limited to only[0..n_only) when
 * only is given. */
static cr_route_answer route_ranked(fixture *f, const uint64_t *h, uint32_t n, uint32_t k,
                                    const uint32_t *only, uint32_t n_only)
{
    cr_route_request q = {.hashes = h, .n_hashes = n, .alternatives = k, .only = only,
                          .n_only = n_only};
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_route(f->core, &q, 1, &a, NULL, &err), CR_OK);
    return a;
}

/* The alternatives are the next cheapest shards, in order of cost: with one
 * prefix held on shard x and queues of 1, 2 and 3 prefills behind the
 * others, the best is x (its hit), then the shortest queue, and so on;
 * asking for none changes nothing; asking for more than there are gives
 * what there is, never the best twice. */
static void test_alternatives_in_order_of_cost(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    uint64_t h[8], other[8];
    run_of(h, 8, 100);
    cr_route_answer first = route(&f, h, 8);
    uint32_t x = first.shard;
    f.t = 10; /* its prefill is done */
    /* queues: the three other shards get 1, 2 and 3 prefills of 8 blocks */
    uint32_t load[SHARDS] = {0};
    for (uint32_t want = 1; want <= 3; want++)
        for (uint32_t s = 0; s < SHARDS; s++) {
            if (s == x || load[s])
                continue;
            for (uint32_t i = 0; i < want; i++) {
                run_of(other, 8, 1000 * (10 * s + want) + 50 * i);
                uint32_t only = s;
                CU_ASSERT_EQUAL(route_ranked(&f, other, 8, 0, &only, 1).shard, s);
            }
            load[s] = want;
            break;
        }
    cr_route_answer plain = route_ranked(&f, h, 8, 0, NULL, 0);
    CU_ASSERT_EQUAL(plain.shard, x);
    CU_ASSERT_EQUAL(plain.n_alternatives, 0);
    cr_route_answer a = route_ranked(&f, h, 8, 8, NULL, 0);
    CU_ASSERT_EQUAL(a.shard, x);
    CU_ASSERT_EQUAL_FATAL(a.n_alternatives, SHARDS - 1);
    for (uint32_t i = 0; i < a.n_alternatives; i++) {
        CU_ASSERT_NOT_EQUAL(a.alternative[i], x);
        CU_ASSERT_EQUAL(load[a.alternative[i]], i + 1); /* shortest queue first */
    }
    cr_route_answer two = route_ranked(&f, h, 8, 2, NULL, 0);
    CU_ASSERT_EQUAL(two.n_alternatives, 2);
    CU_ASSERT_EQUAL(two.alternative[0], a.alternative[0]);
    cr_core_free(f.core);
}

/* `only` (a gateway's subset hint) keeps the route and its alternatives
 * among the listed shards, even away from the prefix; shards that do not
 * exist are ignored, and a list with none usable answers no shard and
 * leaves nothing behind (the next free choice is unchanged). */
static void test_only_limits_the_choice(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    uint64_t h[8];
    run_of(h, 8, 100);
    uint32_t x = route(&f, h, 8).shard;
    f.t = 10;
    uint32_t away[2] = {(x + 1) % SHARDS, (x + 2) % SHARDS};
    cr_route_answer a = route_ranked(&f, h, 8, 4, away, 2);
    CU_ASSERT(a.shard == away[0] || a.shard == away[1]);
    CU_ASSERT_EQUAL(a.cached_tokens, 0);
    CU_ASSERT_EQUAL_FATAL(a.n_alternatives, 1);
    CU_ASSERT(a.alternative[0] != a.shard &&
              (a.alternative[0] == away[0] || a.alternative[0] == away[1]));
    uint32_t none[2] = {SHARDS, 4000}; /* no such shards */
    cr_route_answer b = route_ranked(&f, h, 8, 2, none, 2);
    CU_ASSERT_EQUAL(b.shard, CR_ROUTE_NO_SHARD);
    CU_ASSERT_EQUAL(b.n_alternatives, 0);
    f.t = 20;
    cr_route_answer c = route(&f, h, 8);
    CU_ASSERT_EQUAL(c.shard, x); /* still its prefix */
    CU_ASSERT_EQUAL(c.cached_tokens, 8 * BT);
    cr_core_free(f.core);
}

/* A route's receipt holds its prediction, and the outcome of its request
 * id is matched to it: the TTFT measured against the queue wait plus the
 * prefill predicted. No id: nothing kept. */
static void test_route_receipt_matches_its_outcome(void)
{
    fixture f;
    open_ttft(&f, 2, 1000, 0);
    uint64_t h[8];
    run_of(h, 8, 100);
    cr_route_request q = {.hashes = h, .n_hashes = 8, .request_id = "epp-1"};
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_route(f.core, &q, 1, &a, NULL, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_receipt_route(f.core, &q, &a), 0);
    cr_receipt r;
    CU_ASSERT_EQUAL_FATAL(cr_core_decision(f.core, "epp-1", &r), 1);
    CU_ASSERT_EQUAL(r.prompt_tokens, 8 * BT);
    CU_ASSERT_EQUAL(r.decision.mode, CR_INJECT_TEXT);
    CU_ASSERT_DOUBLE_EQUAL(r.decision.text.total_ms, a.queue_wait_ms + a.prefill_ms, 1e-9);
    cr_outcome o = {.request_id = "epp-1", .has = CR_OUT_TTFT | CR_OUT_SHARD, .shard = a.shard,
                    .ttft_ms = a.prefill_ms + 10};
    cr_outcome_counts counts;
    CU_ASSERT_EQUAL_FATAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.matched, 1);
    CU_ASSERT_EQUAL_FATAL(cr_core_decision(f.core, "epp-1", &r), 1);
    CU_ASSERT_EQUAL(r.outcomes, 1);
    cr_route_request none = q;
    none.request_id = NULL;
    CU_ASSERT_EQUAL(cr_core_receipt_route(f.core, &none, &a), -1);
    cr_core_free(f.core);
}

static const cr_test_case ttft_tests[] = {
    {"a prefix goes where it was sent", test_prefix_goes_where_it_was_sent},
    {"namespaces never match", test_namespaces_never_match},
    {"spill when the queue outweighs the miss", test_spill_when_the_queue_outweighs_the_miss},
    {"outcome by request id restarts the timeline",
     test_outcome_by_request_id_restarts_the_timeline},
    {"measured hits correct the prediction", test_measured_hits_correct_the_prediction},
    {"index within its bound", test_index_within_its_bound},
    {"session stands for the prefix", test_session_stands_for_the_prefix},
    {"planned owner stays among its shards", test_planned_owner_stays_among_its_shards},
    {"bad requests name the field", test_bad_requests_name_the_field},
    {"same calls same answers", test_same_calls_same_answers},
    {"routes follow the calibration", test_routes_follow_the_calibration},
    {"alternatives in order of cost", test_alternatives_in_order_of_cost},
    {"only limits the choice", test_only_limits_the_choice},
    {"route receipt matches its outcome", test_route_receipt_matches_its_outcome},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"ttft", ttft_tests}};
CR_TEST_MAIN(suites)
