/* Routes and outcomes by caller (issue 30, R3-1 and R3-2), on the core in
 * virtual time with the prefill model set by hand (1 ms a token): a
 * caller's request ids are its own, so another's route with the same id
 * neither takes its outcome nor keeps its work; an outcome by owner and
 * shard releases only the reporting caller's route; one caller holds at
 * most --inflight-per-caller routes and never evicts another's at
 * --inflight-max; the work one route adds is at most --max-reservation-ms;
 * callers routing and reporting at once keep every count (TSan). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "core_config.h"
#include "cunit_main.h"
#include "route.h"

#define SHARDS 4
#define GATEWAY 0x1111u /* two callers' tags */
#define SQUATTER 0x2222u

typedef struct fixture {
    double t;
    cr_core *core;
} fixture;

static double now_of(void *ctx) { return ((fixture *)ctx)->t; }

/* by (ttft, bounded), inflight_max, per_caller and the most work a route
 * adds, ms (0: the default). */
static void open_core(fixture *f, cr_route_by by, uint64_t max, uint64_t per_caller,
                      double max_ms)
{
    memset(f, 0, sizeof *f);
    cr_core_config cfg;
    cr_test_core_config(&cfg, SHARDS);
    cfg.route.by = by;
    cfg.route.inflight_max = max;
    cfg.route.inflight_per_caller = per_caller;
    if (max_ms > 0) /* else the default's */
        cfg.inject.max_reservation_ms = max_ms;
    cfg.inject.prefill_coeffs = (cr_prefill_cost){.ms_per_token = 1};
    cfg.inject.set |= CR_INJECT_SET_PREFILL_COEFFS;
    cfg.inject.calibrate = 0;
    cr_clock_source clock = {now_of, f};
    cr_error err;
    f->core = cr_core_new(&cfg, NULL, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

/* One Route by caller of tokens prompt tokens with request id id. */
static cr_route_answer route_as(fixture *f, uint64_t caller, uint32_t tokens, const char *id)
{
    cr_route_request q = {.prompt_tokens = tokens, .request_id = id, .caller = caller};
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_route(f->core, &q, 1, &a, NULL, &err), CR_OK);
    return a;
}

static cr_route_stats stats(fixture *f)
{
    cr_route_stats st;
    cr_core_route_stats_read(f->core, &st, NULL, 0);
    return st;
}

/* An outcome by caller for request id id; 1 when it released a route. */
static int report_as(fixture *f, uint64_t caller, const char *id)
{
    uint64_t before = stats(f).released;
    cr_outcome o = {.request_id = id, .has = CR_OUT_PROMPT_TOKENS, .prompt_tokens = 1};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report_as(f->core, caller, &o, 1, &counts, &err), CR_OK);
    return stats(f).released > before;
}

/* R3-2: the squatter routes the gateway's next id first; the gateway's
 * outcome releases the gateway's route, and the squatter's stays. */
static void test_ids_are_the_callers_own(void)
{
    fixture f;
    open_core(&f, CR_ROUTE_TTFT, 1000, 0, 0);
    route_as(&f, SQUATTER, 100, "req-1");
    cr_route_answer g = route_as(&f, GATEWAY, 5000, "req-1");
    CU_ASSERT_EQUAL(stats(&f).outstanding, 2);
    CU_ASSERT_TRUE(report_as(&f, GATEWAY, "req-1"));
    CU_ASSERT_DOUBLE_EQUAL(stats(&f).work, 100, 1e-9); /* the gateway's 5000 ms went */
    CU_ASSERT_FALSE(report_as(&f, GATEWAY, "req-1"));  /* never the squatter's */
    CU_ASSERT_FALSE(report_as(&f, 0, "req-1"));        /* nor an anonymous outcome */
    CU_ASSERT_TRUE(report_as(&f, SQUATTER, "req-1"));
    CU_ASSERT_EQUAL(stats(&f).outstanding, 0);
    (void)g;
    cr_core_free(f.core);
}

/* Under bounded, an outcome by owner and shard releases only the route the
 * reporting caller made for that owner. */
static void test_owner_outcomes_are_the_callers_own(void)
{
    fixture f;
    open_core(&f, CR_ROUTE_BOUNDED, 1000, 0, 0);
    int64_t owner = 42;
    cr_route_answer r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_record_as(f.core, GATEWAY, &owner, 1, NULL, 0, &r, NULL, &err),
                          CR_OK);
    cr_outcome o = {.owner = owner, .shard = r.shard,
                    .has = CR_OUT_OWNER | CR_OUT_SHARD};
    cr_outcome_counts counts;
    CU_ASSERT_EQUAL(cr_core_report_as(f.core, SQUATTER, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(stats(&f).outstanding, 1);
    CU_ASSERT_EQUAL(cr_core_report_as(f.core, GATEWAY, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(stats(&f).outstanding, 0);
    cr_core_free(f.core);
}

/* R3-2: at --inflight-per-caller 5 the squatter's sixth route adds no
 * work; at --inflight-max 8, full, no other caller evicts the gateway's,
 * and the gateway at the cap evicts its own oldest. */
static void test_one_caller_never_evicts_another(void)
{
    fixture f;
    open_core(&f, CR_ROUTE_TTFT, 8, 5, 0);
    for (int i = 0; i < 3; i++)
        route_as(&f, GATEWAY, 10, NULL);
    for (int i = 0; i < 100; i++)
        route_as(&f, SQUATTER, 1000, NULL);
    cr_route_stats st = stats(&f);
    CU_ASSERT_EQUAL(st.outstanding, 8);
    CU_ASSERT_EQUAL(st.evicted, 0);
    CU_ASSERT_EQUAL(st.refused, 95);
    CU_ASSERT_DOUBLE_EQUAL(st.work, 3 * 10 + 5 * 1000, 1e-9);
    route_as(&f, 0x3333u, 1, NULL); /* a third caller evicts neither */
    CU_ASSERT_EQUAL(stats(&f).refused, 96);
    route_as(&f, 0, 1, NULL); /* nor does an anonymous one */
    CU_ASSERT_EQUAL(stats(&f).refused, 97);
    route_as(&f, GATEWAY, 10, NULL);
    CU_ASSERT_EQUAL(stats(&f).evicted, 1);
    CU_ASSERT_DOUBLE_EQUAL(stats(&f).work, 3 * 10 + 5 * 1000, 1e-9);
    cr_core_free(f.core);
}

/* Anonymous routes (authorization off: caller 0) share --inflight-max as
 * before: no quota, the oldest evicted at the cap. */
static void test_anonymous_routes_share_the_cap(void)
{
    fixture f;
    open_core(&f, CR_ROUTE_TTFT, 8, 2, 0);
    for (int i = 0; i < 20; i++)
        route_as(&f, 0, 10, NULL);
    cr_route_stats st = stats(&f);
    CU_ASSERT_EQUAL(st.outstanding, 8);
    CU_ASSERT_EQUAL(st.evicted, 12);
    CU_ASSERT_EQUAL(st.refused, 0);
    cr_core_free(f.core);
}

/* R3-1: a route of 10,000,000 tokens predicts 10,000,000 ms of prefill,
 * and adds at most --max-reservation-ms (here 60,000) to its shard. */
static void test_one_route_adds_bounded_work(void)
{
    fixture f;
    open_core(&f, CR_ROUTE_TTFT, 1000, 0, 60000);
    cr_route_answer a = route_as(&f, GATEWAY, 10000000, "big");
    CU_ASSERT_DOUBLE_EQUAL(a.prefill_ms, 1e7, 1e-3);
    CU_ASSERT_DOUBLE_EQUAL(stats(&f).work, 60000, 1e-9);
    cr_route_answer b = route_as(&f, GATEWAY, 1, NULL);
    CU_ASSERT_TRUE(b.shard != a.shard || b.queue_wait_ms <= 60000);
    cr_core_free(f.core);
}

typedef struct racer {
    fixture *f;
    uint64_t caller;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    char id[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(id, sizeof id, "r-%d", i % 50);
        route_as(r->f, r->caller, 10, id);
        if (i % 3 == 0)
            report_as(r->f, r->caller, id);
    }
    return NULL;
}

/* 4 callers at once, quota 64 each, cap 1024: no caller ever holds more
 * than its quota (released routes keep their FIFO places until the oldest
 * goes, so at the cap a caller may evict its own oldest). */
static void test_callers_at_once(void)
{
    fixture f;
    open_core(&f, CR_ROUTE_TTFT, 1024, 64, 0);
    pthread_t t[4];
    racer r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){&f, 0x100u + (uint64_t)i};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    cr_route_stats st = stats(&f);
    CU_ASSERT_TRUE(st.outstanding <= 4 * 64);
    CU_ASSERT_TRUE(st.queued <= 1024);
    CU_ASSERT_TRUE(st.refused > 0);
    cr_core_free(f.core);
}

static const cr_test_case caller_tests[] = {
    {"ids are the caller's own", test_ids_are_the_callers_own},
    {"owner outcomes are the caller's own", test_owner_outcomes_are_the_callers_own},
    {"one caller never evicts another", test_one_caller_never_evicts_another},
    {"anonymous routes share the cap", test_anonymous_routes_share_the_cap},
    {"one route adds bounded work", test_one_route_adds_bounded_work},
    {"callers at once", test_callers_at_once},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"callers", caller_tests}};
CR_TEST_MAIN(suites)
