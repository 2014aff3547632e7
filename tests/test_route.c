/* Routes in motion, at library level in virtual time: weighted arrivals
 * (rates by hand, the weights' checks), --route-by bounded with outstanding
 * work set by hand (under the bound, over it to the session's next shard,
 * then its ring; the walk always ending under the bound), live, expiry and
 * release, memory under an owner flood, determinism, plan unchanged,
 * batched lookups (one call of many owners routing as one-owner calls),
 * one threaded case, and the ttft rule's prefix index at its bound (it
 * keeps taking new blocks; its memory stays put). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "core_config.h"
#include "cunit_main.h"
#include "ring.h"
#include "route.h"

#define SHARDS 8

typedef struct vclock {
    double t; /* seconds */
} vclock;

static double vclock_now(void *ctx) { return ((vclock *)ctx)->t; }

typedef struct fixture {
    vclock clock;
    _Atomic uint64_t arrivals; /* what the recorded hook saw */
    cr_core *core;
    cr_ring *ring; /* the core's: 8 shards */
} fixture;

static void on_record(void *ctx, uint64_t n) { atomic_fetch_add(&((fixture *)ctx)->arrivals, n); }

/* 8 shards, qcap 50, W 200, H = 20 s, no replanner, a quiet probe. */
static void open_with(fixture *f, cr_route_by by, double load_bound, double ttl_s, uint64_t max)
{
    memset(f, 0, sizeof *f);
    cr_core_config cfg;
    cr_test_core_config(&cfg, SHARDS);
    cfg.route.by = by;
    cfg.route.load_bound = load_bound;
    cfg.route.inflight_ttl_s = ttl_s;
    cfg.route.inflight_max = max;
    cr_core_hooks hooks = {.recorded = on_record, .ctx = f};
    cr_clock_source clock = {vclock_now, &f->clock};
    cr_error err;
    f->core = cr_core_new(&cfg, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
    f->ring = cr_ring_new(SHARDS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->ring);
}

static void open_bounded(fixture *f) { open_with(f, CR_ROUTE_BOUNDED, 1.25, 60, 1000); }

static void fixture_close(fixture *f)
{
    cr_core_free(f->core);
    cr_ring_free(f->ring);
}

/* One arrival of owner weighing w; its route's shard. */
static uint32_t arrive(fixture *f, int64_t owner, double w)
{
    cr_route_answer r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_record(f->core, &owner, 1, &w, 1, &r, NULL, &err), CR_OK);
    return r.shard;
}

static uint32_t ring_first(const fixture *f, int64_t owner)
{
    return cr_ring_shard(f->ring, cr_ring_start(f->ring, owner));
}

/* The first owner after `after` whose ring starts at shard s. */
static int64_t owner_after(const fixture *f, uint32_t s, int64_t after)
{
    int64_t o = after + 1;
    while (ring_first(f, o) != s)
        o++;
    return o;
}

/* An owner (not admitted: ids from 10^6) whose ring starts at shard s. */
static int64_t owner_at(const fixture *f, uint32_t s) { return owner_after(f, s, 1000000); }

/* Outstanding work set by hand: one arrival of loads[s] on each shard s
 * with some (an empty shard always takes its own owner's route). */
static void set_loads(fixture *f, const double *loads)
{
    for (uint32_t s = 0; s < SHARDS; s++)
        if (loads[s] > 0)
            CU_ASSERT_EQUAL(arrive(f, owner_at(f, s), loads[s]), s);
    double work[SHARDS];
    cr_route_stats st;
    cr_core_route_stats_read(f->core, &st, work, SHARDS);
    CU_ASSERT_EQUAL(memcmp(work, loads, sizeof work), 0);
}

/* Installs a table admitting owner 7 at rate 150 = 3 qcap: kb = 3. */
static const cr_placement *install_hot(fixture *f, cr_core_plan_result *res)
{
    cr_session_rate rates[] = {{7, 150}};
    cr_core_plan_request req = {.rates = rates, .n_rates = 1, .install = 1};
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_plan(f->core, &req, res, &err), CR_OK);
    const cr_placement *p = cr_table_find(res->table, 7);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(p->kb, 3);
    return p;
}

/* ---- weighted arrivals ---- */

static void test_weighted_rates_by_hand(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_PLAN, 1.25, 60, 1000);
    /* Ten arrivals of 1000 tokens, 1 s apart: r = 1000 ln2/H sum 2^(-k/H). */
    double inc = log(2) / 20, want = 0, rate = 0;
    for (int k = 0; k < 10; k++) {
        f.clock.t = k;
        int64_t o = 5;
        double w = 1000;
        cr_route_answer r;
        cr_error err;
        CU_ASSERT_EQUAL(cr_core_record(f.core, &o, 1, &w, 1, &r, NULL, &err), CR_OK);
        rate = r.rate;
    }
    for (int k = 0; k < 10; k++)
        want += 1000 * inc * pow(2, -k / 20.0);
    CU_ASSERT_DOUBLE_EQUAL(rate, want, want * 1e-12);
    /* One half-life later, half of it: tokens per second decay like requests. */
    f.clock.t = 29;
    int64_t o = 5;
    cr_session_rate *got;
    size_t n;
    uint64_t tracked;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_rates(f.core, &o, 1, &got, &n, &tracked, &err), CR_OK);
    CU_ASSERT_DOUBLE_EQUAL(got[0].rate, want / 2, want * 1e-12);
    free(got);
    fixture_close(&f);
}

/* Steady arrivals of 2/s at 1500 tokens converge to w / (1 - 2^(-dt/H))
 * times ln2/H, about 3000 tokens/s; the same stream unweighted to 2/s. */
static void test_weighted_stream_converges(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_PLAN, 1.25, 60, 1000);
    int64_t owners[] = {1, 2};
    double w[] = {1500, 1}, rate[2];
    for (int k = 0; k < 2000; k++) {
        f.clock.t = k * 0.5;
        cr_route_answer r[2];
        cr_error err;
        CU_ASSERT_EQUAL(cr_core_record(f.core, owners, 2, w, 2, r, NULL, &err), CR_OK);
        rate[0] = r[0].rate;
        rate[1] = r[1].rate;
    }
    double steady = log(2) / 20 / (1 - pow(2, -0.5 / 20));
    CU_ASSERT_DOUBLE_EQUAL(rate[0], 1500 * steady, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(rate[1], steady, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rate[0] / 3000, 1, 0.01);
    fixture_close(&f);
}

/* No weights and weights of 1 are the same, bit for bit: rates and routes. */
static void test_unit_weights_change_nothing(void)
{
    fixture a, b;
    open_with(&a, CR_ROUTE_PLAN, 1.25, 60, 1000);
    open_with(&b, CR_ROUTE_PLAN, 1.25, 60, 1000);
    int64_t owners[] = {3, 9, 3, 12, 3};
    double ones[] = {1, 1, 1, 1, 1};
    for (int k = 0; k < 50; k++) {
        a.clock.t = b.clock.t = k * 0.37;
        cr_route_answer ra[5], rb[5];
        cr_error err;
        CU_ASSERT_EQUAL(cr_core_record(a.core, owners, 5, NULL, 0, ra, NULL, &err), CR_OK);
        CU_ASSERT_EQUAL(cr_core_record(b.core, owners, 5, ones, 5, rb, NULL, &err), CR_OK);
        CU_ASSERT_EQUAL(memcmp(ra, rb, sizeof ra), 0);
    }
    fixture_close(&a);
    fixture_close(&b);
}

static void expect_refused(fixture *f, const int64_t *owners, size_t n, const double *w,
                           size_t n_w, const char *msg)
{
    cr_route_answer r[4];
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_record(f->core, owners, n, w, n_w, r, NULL, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
}

static void test_weight_checks(void)
{
    fixture f;
    open_bounded(&f);
    int64_t owners[] = {1, 2, 3, 4};
    double ok[] = {1, 2, 3, 1e9};
    expect_refused(&f, owners, 0, ok, 4, "owners must not be empty"); /* field order */
    expect_refused(&f, owners, 4, ok, 3, "weights must be empty or one per owner (4), got 3");
    expect_refused(&f, owners, 2, ok, 4, "weights must be empty or one per owner (2), got 4");
    const double bad[] = {-1, 0, NAN, INFINITY, 1e9 + 1, -0.0};
    const char *got[] = {"-1", "0", "nan", "inf", "1000000001", "-0"};
    for (int k = 0; k < 6; k++) {
        double w[] = {1, 2, bad[k], 4};
        char msg[96];
        snprintf(msg, sizeof msg, "weights[2] must be in (0, 1e+09], got %s", got[k]);
        expect_refused(&f, owners, 4, w, 4, msg);
    }
    /* Nothing recorded, nothing routed, no hook: */
    cr_session_rate *all;
    size_t n;
    uint64_t tracked;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_rates(f.core, NULL, 0, &all, &n, &tracked, &err), CR_OK);
    CU_ASSERT_EQUAL(tracked, 0);
    free(all);
    CU_ASSERT_EQUAL(atomic_load(&f.arrivals), 0);
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.outstanding + st.queued, 0);
    /* The largest weight is fine; so is the smallest positive double. */
    double tiny[] = {1, 2, 3, 4.9e-324};
    cr_route_answer r[4];
    CU_ASSERT_EQUAL(cr_core_record(f.core, owners, 4, ok, 4, r, NULL, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_record(f.core, owners, 4, tiny, 4, r, NULL, &err), CR_OK);
    CU_ASSERT_TRUE(r[3].rate > 0);
    fixture_close(&f);
}

static void test_route_rows(void)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    CU_ASSERT_EQUAL(cfg.route.by, CR_ROUTE_TTFT);
    CU_ASSERT_EQUAL(cfg.route.miss_weight, 32);
    CU_ASSERT_EQUAL(cfg.route.load_bound, 1.25);
    CU_ASSERT_EQUAL(cfg.route.inflight_ttl_s, 60);
    CU_ASSERT_EQUAL(cfg.route.inflight_max, 100000);
    const cr_option *o = cr_option_find(&cr_route_options, "route-by", 8);
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_option_set(&cr_route_options, o, &cfg.route, "bounded", &err), CR_OK);
    CU_ASSERT_EQUAL(cfg.route.by, CR_ROUTE_BOUNDED);
    CU_ASSERT_EQUAL(cr_option_set(&cr_route_options, o, &cfg.route, "least", &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "--route-by must be one of plan, bounded, live, ttft, got \"least\"");
    cfg.route.load_bound = 0.99;
    CU_ASSERT_PTR_NULL(cr_core_new(&cfg, NULL, NULL, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "load_bound must be in 1..100, got 0.99");
    cfg.route.load_bound = 2;
    cfg.route.inflight_ttl_s = 0;
    CU_ASSERT_PTR_NULL(cr_core_new(&cfg, NULL, NULL, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "inflight_ttl_s must be in (0, 86400], got 0");
    cfg.route.inflight_ttl_s = 1;
    cfg.route.inflight_max = 0;
    CU_ASSERT_PTR_NULL(cr_core_new(&cfg, NULL, NULL, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "inflight_max must be in 1..10000000, got 0");
}

/* ---- bounded ---- */

/* Where the hot owner's walk goes with these loads (its weight 1). */
static uint32_t hot_route(const double *loads)
{
    fixture f;
    open_bounded(&f);
    cr_core_plan_result res;
    install_hot(&f, &res);
    set_loads(&f, loads);
    uint32_t s = arrive(&f, 7, 1);
    cr_core_plan_result_free(&res);
    fixture_close(&f);
    return s;
}

/* The hot owner's shards, its preferred one's index among them, and the
 * shards of its ring walk that are not its own, in order. */
typedef struct hot_shape {
    uint32_t own[3], at, others[SHARDS], n_others;
} hot_shape;

static hot_shape hot_shape_of(void)
{
    fixture f;
    open_bounded(&f);
    cr_core_plan_result res;
    const cr_placement *p = install_hot(&f, &res);
    hot_shape h = {.at = 0};
    memcpy(h.own, cr_table_shards(res.table, p), sizeof h.own);
    while (h.own[h.at] != p->preferred_shard)
        h.at++;
    int taken[SHARDS] = {0};
    for (int k = 0; k < 3; k++)
        taken[h.own[k]] = 1;
    size_t start = cr_ring_start(f.ring, 7);
    for (size_t i = 0; h.n_others < SHARDS - 3; i++) {
        uint32_t s = cr_ring_shard(f.ring, start + i);
        if (!taken[s]) {
            taken[s] = 1;
            h.others[h.n_others++] = s;
        }
    }
    cr_core_plan_result_free(&res);
    fixture_close(&f);
    return h;
}

static void test_bounded_walk(void)
{
    hot_shape h = hot_shape_of();
    uint32_t pref = h.own[h.at];
    double loads[SHARDS];
    /* Under the bound: equal loads, the preferred shard (10 <= 1.25 x 81 / 8). */
    for (int s = 0; s < SHARDS; s++)
        loads[s] = 10;
    CU_ASSERT_EQUAL(hot_route(loads), pref);
    /* Over it (100 > 1.25 x 171 / 8): the next own shard after it by id. */
    loads[pref] = 100;
    CU_ASSERT_EQUAL(hot_route(loads), h.own[(h.at + 1) % 3]);
    /* That one over too: the one after it. */
    loads[h.own[(h.at + 1) % 3]] = 100;
    CU_ASSERT_EQUAL(hot_route(loads), h.own[(h.at + 2) % 3]);
    /* Every own shard over (100 > 1.25 x 351 / 8): its ring's first other. */
    loads[h.own[(h.at + 2) % 3]] = 100;
    CU_ASSERT_EQUAL(hot_route(loads), h.others[0]);
    /* Six shards over (100 > 1.25 x 601 / 8), the most there can be: the
     * walk passes them all to the first of the two empty ones. */
    for (int k = 0; k < 3; k++)
        loads[h.others[k]] = 100;
    loads[h.others[3]] = loads[h.others[4]] = 0;
    CU_ASSERT_EQUAL(hot_route(loads), h.others[3]);
}

static void test_bounded_cold_owner_walks_its_ring(void)
{
    fixture f;
    open_bounded(&f);
    int64_t u = 4242;
    uint32_t first = ring_first(&f, u), second = first;
    size_t start = cr_ring_start(f.ring, u);
    for (size_t i = 1; second == first; i++)
        second = cr_ring_shard(f.ring, start + i);
    /* A stable cold shard, its ring's first, not owner mod R. */
    CU_ASSERT_EQUAL(arrive(&f, u, 1), first);
    CU_ASSERT_EQUAL(arrive(&f, u, 1), second); /* 1 > 1.25 x 2 / 8 */
    fixture_close(&f);
    /* Every shard at the mean: nothing over, the first shard again. */
    open_bounded(&f);
    double loads[SHARDS] = {5, 5, 5, 5, 5, 5, 5, 5};
    set_loads(&f, loads);
    CU_ASSERT_EQUAL(arrive(&f, u, 1), first);
    fixture_close(&f);
}

/* Random owners and weights (0.9k..126k tokens): each route lands on a
 * shard whose work, just before, was at most c x the mean (this arrival
 * counted in it). */
static void test_bounded_always_under_the_bound(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_BOUNDED, 1.25, 3, 100000);
    uint64_t x = 1;
    uint32_t diverted = 0;
    for (int k = 0; k < 3000; k++) {
        x = cr_mix64(x);
        f.clock.t = k * 0.01;
        double before[SHARDS], total = 0, w = 900 + (double)(x % 125000);
        cr_route_stats st;
        cr_core_route_stats_read(f.core, &st, before, SHARDS);
        for (int s = 0; s < SHARDS; s++)
            total += before[s];
        int64_t owner = (int64_t)(x >> 40) % 50;
        uint32_t s = arrive(&f, owner, w);
        CU_ASSERT_TRUE(before[s] <= 1.25 * (total + w) / SHARDS);
        diverted += s != ring_first(&f, owner);
    }
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.diverted, diverted);
    CU_ASSERT_TRUE(st.expired > 0);
    fixture_close(&f);
}

/* ---- live ---- */

static void test_live_least_loaded(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_LIVE, 1.25, 60, 1000);
    cr_core_plan_result res;
    const cr_placement *p = install_hot(&f, &res);
    uint32_t pref = p->preferred_shard;
    /* A tie at 0 everywhere keeps the first choice. */
    CU_ASSERT_EQUAL(arrive(&f, 7, 1), pref);
    /* Then shard pref has 1: the lowest id of the empty ones. */
    CU_ASSERT_EQUAL(arrive(&f, 7, 1), pref == 0 ? 1u : 0u);
    cr_core_plan_result_free(&res);
    fixture_close(&f);
    /* A cold owner's first choice is its ring's first shard. */
    open_with(&f, CR_ROUTE_LIVE, 1.25, 60, 1000);
    CU_ASSERT_EQUAL(arrive(&f, 4242, 1), ring_first(&f, 4242));
    fixture_close(&f);
    /* Each filler's first choice is an empty shard, so set_loads works here. */
    open_with(&f, CR_ROUTE_LIVE, 1.25, 60, 1000);
    double loads[SHARDS] = {9, 8, 7, 3, 7, 8, 9, 9};
    set_loads(&f, loads);
    CU_ASSERT_EQUAL(arrive(&f, 4242, 1), 3);
    fixture_close(&f);
}

/* Under a rule other than ttft the rule picks the shard; the alternatives
 * asked for are the other shards, each once; an `only` list that leaves
 * the rule's shard out gets the best of the list instead. */
static void test_rule_alternatives_and_only(void)
{
    cr_route_config cfg = {.by = CR_ROUTE_BOUNDED, .load_bound = 1.25, .inflight_ttl_s = 60,
                           .inflight_max = 1000, .block_tokens = 16, .index_blocks = 64,
                           .max_hashes = 8, .miss_weight = 2};
    cr_router *r = cr_router_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    cr_route_request q = {.has_owner = 1, .owner = 7, .prompt_tokens = 64, .alternatives = 8};
    cr_route_answer a;
    cr_router_place(r, NULL, SHARDS, &q, &a, 1, 1.0);
    CU_ASSERT_EQUAL(a.reason, CR_ROUTE_WHY_RULE);
    CU_ASSERT_EQUAL_FATAL(a.n_alternatives, SHARDS - 1);
    uint8_t seen[SHARDS] = {0};
    seen[a.shard] = 1;
    for (uint32_t i = 0; i < a.n_alternatives; i++) {
        CU_ASSERT_FATAL(a.alternative[i] < SHARDS);
        CU_ASSERT_EQUAL(seen[a.alternative[i]], 0);
        seen[a.alternative[i]] = 1;
    }
    uint32_t only[2] = {(a.shard + 1) % SHARDS, (a.shard + 2) % SHARDS};
    cr_route_request p = q;
    p.only = only;
    p.n_only = 2;
    cr_route_answer b;
    cr_router_place(r, NULL, SHARDS, &p, &b, 1, 2.0);
    CU_ASSERT(b.shard == only[0] || b.shard == only[1]);
    CU_ASSERT_EQUAL(b.n_alternatives, 1);
    cr_router_free(r);
}

/* ---- expiry, release, memory ---- */

static void test_expiry_in_virtual_time(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_BOUNDED, 1.25, 5, 1000);
    uint32_t s = arrive(&f, 11, 100);
    f.clock.t = 2;
    arrive(&f, 12, 50);
    cr_route_stats st;
    double work[SHARDS];
    f.clock.t = 4.999;
    cr_core_route_stats_read(f.core, &st, work, SHARDS);
    CU_ASSERT_EQUAL(st.outstanding, 2);
    CU_ASSERT_EQUAL(st.work, 150);
    f.clock.t = 5; /* 0 + ttl: the first is done */
    cr_core_route_stats_read(f.core, &st, work, SHARDS);
    CU_ASSERT_EQUAL(st.outstanding, 1);
    CU_ASSERT_EQUAL(st.expired, 1);
    CU_ASSERT_EQUAL(st.work, 50);
    CU_ASSERT_EQUAL(work[s], 0); /* 12 went elsewhere: to its own first, or past s */
    f.clock.t = 7;
    cr_core_route_stats_read(f.core, &st, work, SHARDS);
    CU_ASSERT_EQUAL(st.outstanding + st.queued, 0);
    CU_ASSERT_EQUAL(st.work, 0);
    CU_ASSERT_EQUAL(st.expired, 2);
    fixture_close(&f);
}

static cr_outcome_counts report_done(fixture *f, int64_t owner, uint32_t shard)
{
    cr_outcome o = {.has = CR_OUT_OWNER | CR_OUT_SHARD, .owner = owner, .shard = shard};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f->core, &o, 1, &counts, &err), CR_OK);
    return counts;
}

static void test_release_by_outcome(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_BOUNDED, 100, 60, 1000); /* c = 100: all stay on one shard */
    arrive(&f, 22, 5);
    uint32_t s = arrive(&f, 21, 30);
    CU_ASSERT_EQUAL(arrive(&f, 21, 70), s);
    /* The wrong shard releases nothing: rejected (nothing else to use). */
    CU_ASSERT_EQUAL(report_done(&f, 21, (s + 1) % SHARDS).rejected, 1);
    /* The right one, the oldest first: 30, then 70. */
    cr_outcome_counts c = report_done(&f, 21, s);
    CU_ASSERT_EQUAL(c.accepted, 1);
    CU_ASSERT_EQUAL(c.rejected, 0);
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.work, 75);
    CU_ASSERT_EQUAL(st.released, 1);
    CU_ASSERT_EQUAL(st.queued, 3); /* released, not yet at the FIFO's head */
    report_done(&f, 21, s);
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.work, 5);
    CU_ASSERT_EQUAL(st.outstanding, 1);
    CU_ASSERT_EQUAL(report_done(&f, 21, s).rejected, 1); /* none left */
    fixture_close(&f);
}

/* A release looks CR_ROUTE_RELEASE_DEPTH items deep into the shard. */
static void test_release_depth(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_BOUNDED, 100, 60, 1000); /* c = 100: one shard takes all */
    uint32_t s = 2;
    int64_t a = owner_at(&f, s), b = owner_after(&f, s, a), z = owner_after(&f, s, b);
    CU_ASSERT_EQUAL(arrive(&f, a, 1), s);
    for (int k = 0; k < CR_ROUTE_RELEASE_DEPTH + 44; k++)
        CU_ASSERT_EQUAL(arrive(&f, b, 1), s);
    CU_ASSERT_EQUAL(arrive(&f, z, 1), s); /* 301 items before it: past the depth */
    CU_ASSERT_EQUAL(report_done(&f, z, s).rejected, 1);
    CU_ASSERT_EQUAL(report_done(&f, a, s).rejected, 0); /* the oldest: found at once */
    for (int k = 0; k < 100; k++)
        report_done(&f, b, s);
    CU_ASSERT_EQUAL(report_done(&f, z, s).rejected, 0); /* 200 deep now */
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.released, 102);
    CU_ASSERT_EQUAL(st.outstanding, CR_ROUTE_RELEASE_DEPTH + 44 - 100);
    fixture_close(&f);
}

/* The cold home: plan's fallback, else the ring's first (for another
 * shard count too, from a ring kept for it). */
static void test_home_shard(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_PLAN, 1.25, 60, 1000);
    for (int64_t o = 0; o < 100; o++)
        CU_ASSERT_EQUAL(cr_core_home_shard(f.core, o, 5), cr_route_fallback_shard(o, 5));
    fixture_close(&f);
    open_with(&f, CR_ROUTE_BOUNDED, 1.25, 0.5, 1000);
    cr_ring *five = cr_ring_new(5);
    for (int64_t o = 0; o < 100; o++) {
        CU_ASSERT_EQUAL(cr_core_home_shard(f.core, o, SHARDS), ring_first(&f, o));
        CU_ASSERT_EQUAL(cr_core_home_shard(f.core, o, 5),
                        cr_ring_shard(five, cr_ring_start(five, o)));
        f.clock.t += 1; /* the last one's work has expired: every shard empty */
        CU_ASSERT_EQUAL(arrive(&f, o, 1), ring_first(&f, o));
    }
    cr_ring_free(five);
    fixture_close(&f);
}

static void test_memory_bounded_under_owner_flood(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_BOUNDED, 1.25, 3600, 64);
    cr_route_stats st;
    uint64_t bytes = 0;
    for (int64_t o = 0; o < 200000; o++) {
        arrive(&f, 5000000 + o, 1 + (double)(o % 3));
        if (o == 999) {
            cr_core_route_stats_read(f.core, &st, NULL, 0);
            bytes = st.bytes;
        }
    }
    double work[SHARDS], sum = 0;
    cr_core_route_stats_read(f.core, &st, work, SHARDS);
    CU_ASSERT_EQUAL(st.outstanding, 64);
    CU_ASSERT_EQUAL(st.queued, 64);
    CU_ASSERT_EQUAL(st.capacity, 64);
    CU_ASSERT_EQUAL(st.evicted, 200000 - 64);
    for (int s = 0; s < SHARDS; s++)
        sum += work[s];
    CU_ASSERT_DOUBLE_EQUAL(sum, st.work, 1e-9);
    /* Nothing grew after the first thousand; the bound as route.h states it:
     * 64 items of 56 B, 28 B a shard (and 4 of walk marks), the ring. */
    CU_ASSERT_EQUAL(st.bytes, bytes);
    CU_ASSERT_TRUE(st.bytes <= 256 + 64 * 56 + SHARDS * (28 + 4) + cr_ring_bytes(f.ring));
    fixture_close(&f);
}

/* ---- determinism, plan, threads ---- */

static void test_same_calls_same_routes(void)
{
    fixture a, b;
    open_with(&a, CR_ROUTE_BOUNDED, 1.25, 0.5, 100);
    open_with(&b, CR_ROUTE_BOUNDED, 1.25, 0.5, 100);
    uint64_t x = 7;
    for (int k = 0; k < 5000; k++) {
        x = cr_mix64(x);
        a.clock.t = b.clock.t = k * 1e-3;
        int64_t owner = (int64_t)(x % 300);
        double w = 1 + (double)(x >> 50);
        CU_ASSERT_EQUAL(arrive(&a, owner, w), arrive(&b, owner, w));
        if (k % 7 == 0) {
            report_done(&a, owner, (uint32_t)(x >> 8) % SHARDS);
            report_done(&b, owner, (uint32_t)(x >> 8) % SHARDS);
        }
    }
    fixture_close(&a);
    fixture_close(&b);
}

/* plan keeps no state and answers today's rule whatever the weights. */
static void test_plan_unchanged(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_PLAN, 1.25, 60, 1000);
    cr_core_plan_result res;
    const cr_placement *p = install_hot(&f, &res);
    for (int k = 0; k < 20; k++) {
        CU_ASSERT_EQUAL(arrive(&f, 7, 1e6), p->preferred_shard);
        CU_ASSERT_EQUAL(arrive(&f, 100 + k, 1e6), cr_route_fallback_shard(100 + k, SHARDS));
    }
    cr_route_stats st;
    double work[SHARDS];
    cr_core_route_stats_read(f.core, &st, work, SHARDS);
    CU_ASSERT_EQUAL(st.by, CR_ROUTE_PLAN);
    CU_ASSERT_EQUAL(st.outstanding + st.diverted + st.bytes + st.capacity, 0);
    CU_ASSERT_EQUAL(work[0], 0);
    CU_ASSERT_EQUAL(report_done(&f, 7, p->preferred_shard).rejected, 1);
    cr_core_plan_result_free(&res);
    fixture_close(&f);
}

/* Installs a table of 3,000 sessions (owners 1..3000, kb 1) of which the
 * budget (8 x 200) admits 1,600. */
static void install_many(fixture *f, cr_core_plan_result *res)
{
    cr_session_rate rates[3000];
    for (int i = 0; i < 3000; i++)
        rates[i] = (cr_session_rate){i + 1, 1.0 + i % 40};
    cr_core_plan_request req = {.rates = rates, .n_rates = 3000, .install = 1};
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_plan(f->core, &req, res, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_table_n_placements(res->table), 1600);
}

/* 700 owners for one call (more than a lookup chunk, no multiple of it):
 * admitted, planned but left out, never planned, and repeats. */
static void many_owners(int64_t *owners, double *weights)
{
    uint64_t x = 3;
    for (int i = 0; i < 700; i++) {
        x = cr_mix64(x);
        owners[i] = i % 5 == 4 ? owners[i / 2] : (int64_t)(x % 4000) + 1;
        weights[i] = 1 + (double)(x >> 54);
    }
}

/* Under plan, one call's routes are each owner's own lookup. */
static void test_plan_batch_routes_are_lookups(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_PLAN, 1.25, 60, 1000);
    cr_core_plan_result res;
    install_many(&f, &res);
    int64_t owners[700];
    double weights[700];
    many_owners(owners, weights);
    cr_route_answer r[700];
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_record(f.core, owners, 700, weights, 700, r, NULL, &err), CR_OK);
    int wrong = 0, admitted = 0, repeats = 0;
    for (int i = 0; i < 700; i++) {
        const cr_placement *p = cr_table_find(res.table, owners[i]);
        wrong += r[i].owner != owners[i] || r[i].admitted != (p != NULL) ||
                 r[i].shard !=
                     (p ? p->preferred_shard : cr_route_fallback_shard(owners[i], SHARDS));
        admitted += p != NULL;
        repeats += i % 5 == 4 && p != NULL;
    }
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_TRUE(admitted > 100 && admitted < 600); /* hits and misses both */
    CU_ASSERT_TRUE(repeats > 10);
    cr_core_plan_result_free(&res);
    fixture_close(&f);
}

/* Under bounded, one call of many owners routes as the same arrivals one
 * call each, in order: the batch lookups change no walk. */
static void test_bounded_batch_routes_in_order(void)
{
    fixture a, b;
    open_with(&a, CR_ROUTE_BOUNDED, 1.25, 60, 100000);
    open_with(&b, CR_ROUTE_BOUNDED, 1.25, 60, 100000);
    cr_core_plan_result ra, rb;
    install_many(&a, &ra);
    install_many(&b, &rb);
    int64_t owners[700];
    double weights[700];
    many_owners(owners, weights);
    cr_route_answer r[700];
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_record(a.core, owners, 700, weights, 700, r, NULL, &err), CR_OK);
    int wrong = 0;
    for (int i = 0; i < 700; i++) {
        cr_route_answer one;
        CU_ASSERT_EQUAL_FATAL(
            cr_core_record(b.core, &owners[i], 1, &weights[i], 1, &one, NULL, &err), CR_OK);
        wrong += one.shard != r[i].shard || one.admitted != r[i].admitted;
    }
    CU_ASSERT_EQUAL(wrong, 0);
    cr_route_stats sa, sb;
    cr_core_route_stats_read(a.core, &sa, NULL, 0);
    cr_core_route_stats_read(b.core, &sb, NULL, 0);
    CU_ASSERT_EQUAL(sa.diverted, sb.diverted);
    CU_ASSERT_TRUE(sa.diverted > 0); /* walks were taken */
    CU_ASSERT_EQUAL(sa.outstanding, 700);
    cr_core_plan_result_free(&ra);
    cr_core_plan_result_free(&rb);
    fixture_close(&a);
    fixture_close(&b);
}

typedef struct worker {
    fixture *f;
    int id;
    int failures; /* counted here, asserted by the main thread (CUnit is not thread-safe) */
} worker;

#define ROUNDS 4000

static void *record_many(void *arg)
{
    worker *w = arg;
    uint64_t x = (uint64_t)w->id + 1;
    for (int k = 0; k < ROUNDS; k++) {
        x = cr_mix64(x);
        int64_t owners[4] = {(int64_t)(x % 97), (int64_t)(x % 89), (int64_t)(x % 83), w->id};
        double weights[4] = {1, 2, 3, 4};
        cr_route_answer r[4];
        cr_error err;
        w->failures += cr_core_record(w->f->core, owners, 4, weights, 4, r, NULL, &err) != CR_OK;
        for (int j = 0; j < 4; j++) { /* one of the owner's there: this one's, or another's */
            cr_outcome o = {.has = CR_OUT_OWNER | CR_OUT_SHARD, .owner = r[j].owner,
                            .shard = r[j].shard};
            cr_outcome_counts counts;
            w->failures += cr_core_report(w->f->core, &o, 1, &counts, &err) != CR_OK ||
                           counts.accepted != 1;
        }
    }
    return NULL;
}

/* Four threads routing and releasing at once (TSan); every route's work is
 * released once, and nothing is left. */
static void test_threads_account_for_every_route(void)
{
    fixture f;
    open_with(&f, CR_ROUTE_BOUNDED, 1.25, 60, 100000); /* no evictions, no expiry */
    pthread_t t[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){&f, i, 0};
        pthread_create(&t[i], NULL, record_many, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(w[i].failures, 0);
    }
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.released, 4 * ROUNDS * 4);
    CU_ASSERT_EQUAL(st.outstanding + st.expired + st.evicted, 0);
    fixture_close(&f);
}

/* ---- the prefix index at its bound (--route-by ttft) ---------------------- */

#define INDEX_HASHES 8

/* Request i of INDEX_HASHES hashes of its own, placed at *now over n
 * shards; the clock moves a tenth of a second first. */
static cr_route_answer place_fresh(cr_router *r, uint32_t n, uint64_t i, double *now)
{
    uint64_t h[INDEX_HASHES];
    for (uint32_t j = 0; j < INDEX_HASHES; j++)
        h[j] = cr_mix64(i * INDEX_HASHES + j + 1);
    cr_route_request q = {.prompt_tokens = INDEX_HASHES * 16, .hashes = h,
                        .n_hashes = INDEX_HASHES};
    cr_route_answer a;
    *now += 0.1;
    cr_router_place(r, NULL, n, &q, &a, 1, *now); /* 1 ms a token */
    return a;
}

/* Fills n shards' index of per blocks each with distinct blocks, routes
 * as many requests again, then the last one once more once every queue
 * has drained: it must find its whole prompt where it went. bytes_at and
 * bytes_after: the index's allocation at the bound and after. */
static void index_at_bound(uint32_t n, uint32_t per, uint64_t *bytes_at, uint64_t *bytes_after)
{
    cr_route_config cfg = {.by = CR_ROUTE_TTFT, .load_bound = 1.25, .inflight_ttl_s = 1,
                           .inflight_max = 1000, .block_tokens = 16, .index_blocks = per,
                           .max_hashes = INDEX_HASHES, .miss_weight = 2};
    cr_router *r = cr_router_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    uint64_t want = (uint64_t)n * per, blocks = 0, i = 0;
    double now = 0;
    for (; blocks < want && i < 100 * want; i++) {
        place_fresh(r, n, i, &now);
        cr_router_index_stats(r, &blocks, bytes_at);
    }
    CU_ASSERT_EQUAL(blocks, want);
    for (uint64_t k = i + want / INDEX_HASHES; i < k; i++)
        place_fresh(r, n, i, &now);
    cr_router_index_stats(r, &blocks, bytes_after);
    CU_ASSERT_EQUAL(blocks, want);
    now += 100; /* every queue drained: only the hits differ */
    cr_route_answer a = place_fresh(r, n, i - 1, &now);
    CU_ASSERT_EQUAL(a.cached_tokens, INDEX_HASHES * 16);
    CU_ASSERT_EQUAL(a.reason, CR_ROUTE_WHY_PREFIX);
    cr_router_free(r);
}

/* 64 shards full of distinct blocks use every entry the index may have:
 * a new block's entry must come from the block it evicts (it once came
 * first, found none, and the index stopped taking blocks). */
static void test_index_at_bound_keeps_taking_blocks(void)
{
    uint64_t at, after;
    index_at_bound(CR_ROUTE_INDEX_MAX_SHARDS, 64, &at, &after);
}

/* 8 shards of 128 blocks fill the entries' first allocation (1,024)
 * exactly: a new block must not double it (it once did, 60 B a block
 * instead of 36). */
static void test_index_at_bound_memory_stays(void)
{
    uint64_t at, after;
    index_at_bound(8, 128, &at, &after);
    CU_ASSERT_EQUAL(after, at);
}

static const cr_test_case route_tests[] = {
    {"weighted rates by hand", test_weighted_rates_by_hand},
    {"weighted stream converges", test_weighted_stream_converges},
    {"unit weights change nothing", test_unit_weights_change_nothing},
    {"weight checks", test_weight_checks},
    {"route option rows", test_route_rows},
    {"bounded walk", test_bounded_walk},
    {"bounded cold owner walks its ring", test_bounded_cold_owner_walks_its_ring},
    {"bounded always under the bound", test_bounded_always_under_the_bound},
    {"live least loaded", test_live_least_loaded},
    {"rule alternatives and only", test_rule_alternatives_and_only},
    {"expiry in virtual time", test_expiry_in_virtual_time},
    {"release by outcome", test_release_by_outcome},
    {"release depth", test_release_depth},
    {"home shard", test_home_shard},
    {"memory bounded under an owner flood", test_memory_bounded_under_owner_flood},
    {"same calls same routes", test_same_calls_same_routes},
    {"plan unchanged", test_plan_unchanged},
    {"plan: batch routes are lookups", test_plan_batch_routes_are_lookups},
    {"bounded: batch routes in order", test_bounded_batch_routes_in_order},
    {"threads account for every route", test_threads_account_for_every_route},
    {"ttft: the index at its bound keeps taking blocks", test_index_at_bound_keeps_taking_blocks},
    {"ttft: the index at its bound keeps its memory", test_index_at_bound_memory_stays},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"route", route_tests}};
CR_TEST_MAIN(suites)
