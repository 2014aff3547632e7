/* The application core on its own, in virtual time: routes before and after
 * an install, plan generations and partial configs, the replanner driven by
 * an injected clock (no sleeps), selections whose reservations expire as the
 * virtual clock passes them, and the reports each call makes. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "core.h"
#include "cunit_main.h"

typedef struct vclock {
    double t; /* seconds */
} vclock;

static double vclock_now(void *ctx) { return ((vclock *)ctx)->t; }

/* What the hooks saw. */
typedef struct seen {
    int plans, installs, failures;
    cr_core_plan_event last;
    char last_by[16];
    uint64_t arrivals;
    int selections;
    cr_inject_reason last_reason;
    int probes;
} seen;

static void on_plan(void *ctx, const cr_core_plan_event *ev)
{
    seen *s = ctx;
    s->plans++;
    s->installs += ev->installed;
    s->failures += ev->error != NULL;
    s->last = *ev;
    strncpy(s->last_by, ev->by, sizeof s->last_by - 1);
    s->last.by = s->last_by;
    s->last.error = NULL;
}

static void on_record(void *ctx, uint64_t n) { ((seen *)ctx)->arrivals += n; }

static void on_select(void *ctx, const cr_inject_response *r)
{
    seen *s = ctx;
    s->selections++;
    s->last_reason = r->reason;
}

static void on_probe(void *ctx, const cr_node_snapshot *snap)
{
    (void)snap;
    ((seen *)ctx)->probes++;
}

typedef struct fixture {
    vclock clock;
    seen seen;
    cr_core *core;
} fixture;

/* A core on 8 shards, qcap 50, W 200, seconds clock with H = 20, no probing
 * of this machine (an empty sysfs, no CUDA), replans every 10 s of virtual
 * time. */
/* The defaults, with a probe that finds nothing, at once, on any machine,
 * and the plan route rule: routes these cases work out from the table. */
static void quiet_config(cr_core_config *cfg)
{
    cr_core_config_default(cfg);
    cr_core_quiet_probe(&cfg->probe);
    cfg->route.by = CR_ROUTE_PLAN;
}

/* The fixture's core on cfg (quiet_config's, with changes). */
static void fixture_open_config(fixture *f, const cr_core_config *cfg)
{
    memset(f, 0, sizeof *f);
    cr_core_hooks hooks = {.planned = on_plan, .recorded = on_record, .selected = on_select,
                           .probed = on_probe, .ctx = &f->seen};
    cr_clock_source clock = {vclock_now, &f->clock};
    cr_error err;
    f->core = cr_core_new(cfg, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

static void fixture_open(fixture *f, double replan_interval_s)
{
    cr_core_config cfg;
    quiet_config(&cfg);
    cfg.planner = (cr_planner_config){8, 50, 200};
    cfg.replan_interval_s = replan_interval_s;
    fixture_open_config(f, &cfg);
}

static void fixture_close(fixture *f) { cr_core_free(f->core); }

static cr_status plan_rates(cr_core *c, const cr_session_rate *r, size_t n, int install,
                            cr_core_plan_result *res, cr_error *err)
{
    cr_core_plan_request req = {.rates = r, .n_rates = n, .install = install};
    return cr_core_plan(c, &req, res, err);
}

static void test_routes_before_and_after_install(void)
{
    fixture f;
    fixture_open(&f, 0);
    CU_ASSERT_EQUAL(f.seen.probes, 1); /* the first probe, at construction */
    int64_t owners[] = {1, 2, 3, 2};
    cr_route_answer routes[4];
    uint64_t gen = 99;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_record(f.core, owners, 4, NULL, 0, routes, &gen, &err), CR_OK);
    CU_ASSERT_EQUAL(gen, 0);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(routes[i].owner, owners[i]);
        CU_ASSERT_FALSE(routes[i].admitted);
        /* Before any table: the configured 8 shards. */
        CU_ASSERT_EQUAL(routes[i].shard, cr_mix64((uint64_t)owners[i]) % 8);
    }
    /* Seconds clock: ln2/H per arrival at one instant; owner 2 twice. */
    CU_ASSERT_DOUBLE_EQUAL(routes[0].rate, log(2) / 20, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(routes[3].rate, 2 * log(2) / 20, 1e-15);
    CU_ASSERT_EQUAL(f.seen.arrivals, 4);

    /* R = 4 (a field given), qcap 50, W 200: the seed's example. Owner 2 on
     * shards (0, 1), owner 1 on (2). */
    cr_session_rate rates[] = {{1, 10}, {2, 80}};
    cr_core_plan_request req = {
        .rates = rates, .n_rates = 2, .install = 1, .has_n_shards = 1, .n_shards = 4};
    cr_core_plan_result res;
    CU_ASSERT_EQUAL_FATAL(cr_core_plan(f.core, &req, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.generation, 1);
    CU_ASSERT_EQUAL(cr_table_n_shards(res.table), 4);
    const cr_placement *p1 = cr_table_find(res.table, 1), *p2 = cr_table_find(res.table, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p2);
    CU_ASSERT_EQUAL(p1->preferred_shard, 2);
    cr_core_plan_result_free(&res);

    CU_ASSERT_EQUAL_FATAL(cr_core_record(f.core, owners, 4, NULL, 0, routes, &gen, &err), CR_OK);
    CU_ASSERT_EQUAL(gen, 1);
    CU_ASSERT(routes[0].admitted && routes[1].admitted && !routes[2].admitted);
    CU_ASSERT_EQUAL(routes[0].shard, 2);
    CU_ASSERT_EQUAL(routes[1].shard, routes[3].shard);
    CU_ASSERT(routes[1].shard == 0 || routes[1].shard == 1);
    /* Not admitted: the fallback over the installed table's 4 shards. */
    CU_ASSERT_EQUAL(routes[2].shard, cr_mix64(3) % 4);
    /* omit routes: still recorded, generation still known. */
    gen = 0;
    CU_ASSERT_EQUAL(cr_core_record(f.core, owners, 1, NULL, 0, NULL, &gen, &err), CR_OK);
    CU_ASSERT_EQUAL(gen, 1);
    CU_ASSERT_EQUAL(f.seen.arrivals, 9);
    /* Empty is refused and records nothing. */
    CU_ASSERT_EQUAL(cr_core_record(f.core, owners, 0, NULL, 0, routes, &gen, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "owners must not be empty");
    CU_ASSERT_EQUAL(f.seen.arrivals, 9);
    fixture_close(&f);
}

static void test_plan_generations_and_partial_config(void)
{
    fixture f;
    fixture_open(&f, 0);
    cr_session_rate rates[] = {{5, 120}, {6, 1}};
    cr_core_plan_result res;
    cr_error err;
    /* Without install: generation 0, nothing current, reported as a plan. */
    CU_ASSERT_EQUAL_FATAL(plan_rates(f.core, rates, 2, 0, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.generation, 0);
    CU_ASSERT_EQUAL(cr_table_n_shards(res.table), 8); /* the configured planner */
    cr_core_plan_result_free(&res);
    CU_ASSERT_EQUAL(f.seen.plans, 1);
    CU_ASSERT_EQUAL(f.seen.installs, 0);
    cr_core_stats st;
    cr_core_stats_read(f.core, &st);
    CU_ASSERT_EQUAL(st.generation, 0);
    CU_ASSERT_EQUAL(st.imbalance, 1.0);

    for (uint64_t g = 1; g <= 3; g++) {
        CU_ASSERT_EQUAL_FATAL(plan_rates(f.core, rates, 2, 1, &res, &err), CR_OK);
        CU_ASSERT_EQUAL(res.generation, g);
        CU_ASSERT_EQUAL(f.seen.last.generation, g);
        CU_ASSERT_STRING_EQUAL(f.seen.last.by, "rpc");
        CU_ASSERT_EQUAL(f.seen.last.admitted, 2);
        cr_core_plan_result_free(&res);
    }
    cr_core_stats_read(f.core, &st);
    CU_ASSERT_EQUAL(st.generation, 3);
    CU_ASSERT_EQUAL(st.admitted, 2);
    cr_core_current(f.core, &res);
    CU_ASSERT_EQUAL(res.generation, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res.table);
    CU_ASSERT_EQUAL(cr_table_n_placements(res.table), 2);
    cr_core_plan_result_free(&res);
    CU_ASSERT_DOUBLE_EQUAL(st.admitted_rate, 121, 1e-12);

    /* Only qcap given: kb = ceil(120/30) = 4 of the configured 8 shards. */
    cr_core_plan_request req = {.rates = rates, .n_rates = 2, .has_qcap = 1, .qcap = 30};
    CU_ASSERT_EQUAL_FATAL(cr_core_plan(f.core, &req, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_table_n_shards(res.table), 8);
    CU_ASSERT_EQUAL(cr_table_find(res.table, 5)->kb, 4);
    cr_core_plan_result_free(&res);

    /* A given invalid field is named; nothing changes and nothing is
     * reported (the caller answers with the error). */
    int plans = f.seen.plans;
    req = (cr_core_plan_request){.rates = rates, .n_rates = 2, .install = 1, .has_n_shards = 1};
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &req, &res, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "config.n_shards must be in 1..65536, got 0");
    req = (cr_core_plan_request){.rates = rates, .n_rates = 2, .has_qcap = 1, .qcap = NAN};
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &req, &res, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "config.qcap must be finite and > 0, got nan");
    req = (cr_core_plan_request){.rates = rates, .n_rates = 2, .from_estimator = 1};
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &req, &res, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "rates and from_estimator are mutually exclusive, got 2 "
                                    "rates and from_estimator true");
    req = (cr_core_plan_request){.install = 1};
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &req, &res, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg,
                           "one of rates (non-empty) or from_estimator is required, got neither");
    CU_ASSERT_EQUAL(f.seen.plans, plans);
    cr_core_stats_read(f.core, &st);
    CU_ASSERT_EQUAL(st.generation, 3);
    fixture_close(&f);
}

static int refuse(void *ctx, const cr_table *t, int install, cr_error *err)
{
    int *calls = ctx;
    (*calls)++;
    CU_ASSERT_EQUAL(install, 1);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 1);
    cr_fail(err, CR_ENOMEM, "too big for the caller");
    return -1;
}

static void test_refused_plan_is_not_installed(void)
{
    fixture f;
    fixture_open(&f, 0);
    cr_session_rate rates[] = {{7, 3}};
    int calls = 0;
    cr_core_plan_request req = {
        .rates = rates, .n_rates = 1, .install = 1, .fits = refuse, .fits_ctx = &calls};
    cr_core_plan_result res;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &req, &res, &err), CR_ENOMEM);
    CU_ASSERT_STRING_EQUAL(err.msg, "too big for the caller");
    CU_ASSERT_EQUAL(calls, 1);
    CU_ASSERT_PTR_NULL(res.table);
    CU_ASSERT_EQUAL(f.seen.plans, 1); /* a plan was made, and not installed */
    CU_ASSERT_EQUAL(f.seen.installs, 0);
    int64_t owner = 7;
    cr_route_answer r;
    uint64_t gen;
    cr_core_record(f.core, &owner, 1, NULL, 0, &r, &gen, &err);
    CU_ASSERT_EQUAL(gen, 0);
    CU_ASSERT_FALSE(r.admitted);
    fixture_close(&f);
}

/* The installed generation now. */
static uint64_t generation_now(cr_core *c)
{
    cr_core_stats st;
    cr_core_stats_read(c, &st);
    return st.generation;
}

/* Tables external (a replica's mode): an install is CR_ESTATE whatever the
 * request, nothing planned, reported or installed; plans without install
 * and installs of a leader's table go on; the replanner stops; turned off,
 * all is as before. */
static void test_external_tables_refuse_installs(void)
{
    fixture f;
    fixture_open(&f, 10);
    cr_session_rate rates[] = {{5, 120}, {6, 1}};
    cr_core_plan_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(plan_rates(f.core, rates, 2, 1, &res, &err), CR_OK);
    cr_core_plan_result_free(&res);
    cr_core_set_tables_external(f.core, 1);
    CU_ASSERT_EQUAL(plan_rates(f.core, rates, 2, 1, &res, &err), CR_ESTATE);
    CU_ASSERT_STRING_EQUAL(err.msg, "install=true with --state-backend: every replica routes "
                                    "by the leader's published table (plan with install=false)");
    CU_ASSERT_PTR_NULL(res.table);
    cr_core_plan_request bad = {.install = 1}; /* the mode comes before the input */
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &bad, &res, &err), CR_ESTATE);
    CU_ASSERT_EQUAL(f.seen.plans, 1);
    CU_ASSERT_EQUAL(generation_now(f.core), 1);
    CU_ASSERT_EQUAL_FATAL(plan_rates(f.core, rates, 2, 0, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.generation, 0);
    cr_core_plan_result_free(&res);
    f.clock.t = 10;
    CU_ASSERT_EQUAL(cr_core_tick(f.core), 0);
    CU_ASSERT_EQUAL(f.seen.plans, 2);
    cr_table *t;
    CU_ASSERT_EQUAL_FATAL(cr_core_cluster_plan(f.core, rates, 2, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_install_as(f.core, t, 7, &err), CR_OK);
    CU_ASSERT_EQUAL(generation_now(f.core), 7);
    cr_core_set_tables_external(f.core, 0);
    CU_ASSERT_EQUAL_FATAL(plan_rates(f.core, rates, 2, 1, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.generation, 8);
    cr_core_plan_result_free(&res);
    CU_ASSERT_EQUAL(cr_core_tick(f.core), 1);
    CU_ASSERT_EQUAL(generation_now(f.core), 9);
    fixture_close(&f);
}

/* N12: generations only move forward. A follower's install of a lower or
 * equal generation, or of one near 2^64 (a Redis generation of "-5" read
 * as 2^64 - 5), is refused and changes nothing. */
static void test_generations_only_move_forward(void)
{
    fixture f;
    fixture_open(&f, 0);
    cr_session_rate rates[] = {{5, 120}, {6, 1}};
    cr_table *t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_cluster_plan(f.core, rates, 2, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_install_as(f.core, t, 7, &err), CR_OK);
    const uint64_t refused[] = {7, 6, 1, 0, CR_CORE_MAX_GENERATION + 1, UINT64_MAX - 4,
                                UINT64_MAX};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CU_ASSERT_EQUAL_FATAL(cr_core_cluster_plan(f.core, rates, 1, &t, &err), CR_OK);
        cr_status st = cr_core_install_as(f.core, t, refused[i], &err);
        CU_ASSERT(st == (refused[i] && refused[i] <= CR_CORE_MAX_GENERATION ? CR_ESTATE
                                                                            : CR_EINVAL));
        CU_ASSERT_EQUAL(generation_now(f.core), 7);
    }
    CU_ASSERT_STRING_EQUAL(err.msg, "generation must be in 1..4611686018427387904, got "
                                    "18446744073709551615");
    CU_ASSERT_EQUAL_FATAL(cr_core_cluster_plan(f.core, rates, 1, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_install_as(f.core, t, 6, &err), CR_ESTATE);
    CU_ASSERT_STRING_EQUAL(err.msg, "generation 6 does not move forward from the installed 7");
    CU_ASSERT_EQUAL_FATAL(cr_core_cluster_plan(f.core, rates, 1, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_install_as(f.core, t, 8, &err), CR_OK);
    CU_ASSERT_EQUAL(generation_now(f.core), 8);
    fixture_close(&f);
}

/* A leader's cluster plan, installed under the published generation,
 * reports as an installed plan by "leader": seconds from its start (the
 * publish in between), churn against the table it replaced. A follower's
 * install of the same table is no plan. */
static void test_cluster_installs_report(void)
{
    fixture f;
    fixture_open(&f, 0);
    cr_session_rate rates[] = {{5, 120}, {6, 1}};
    cr_table *t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_cluster_plan(f.core, rates, 1, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_install_as(f.core, t, 3, &err), CR_OK);
    CU_ASSERT_EQUAL(f.seen.plans, 0);
    double started = cr_core_now(f.core);
    CU_ASSERT_EQUAL_FATAL(cr_core_cluster_plan(f.core, rates, 2, &t, &err), CR_OK);
    f.clock.t += 0.25; /* the publish */
    CU_ASSERT_EQUAL(cr_core_install_planned(f.core, t, 5, started, &err), CR_OK);
    CU_ASSERT_EQUAL(generation_now(f.core), 5);
    CU_ASSERT_EQUAL(f.seen.plans, 1);
    CU_ASSERT_EQUAL(f.seen.installs, 1);
    CU_ASSERT_STRING_EQUAL(f.seen.last.by, "leader");
    CU_ASSERT_EQUAL(f.seen.last.generation, 5);
    CU_ASSERT_EQUAL(f.seen.last.seconds, 0.25);
    CU_ASSERT_EQUAL(f.seen.last.admitted, 2);
    CU_ASSERT_EQUAL(f.seen.last.churn_generation, 3);
    CU_ASSERT(f.seen.last.churn.admitted_in == 1 && f.seen.last.churn.admitted_out == 0);
    CU_ASSERT_EQUAL(cr_core_install_planned(f.core, NULL, 0, started, &err), CR_EINVAL);
    CU_ASSERT_EQUAL(f.seen.plans, 1);
    fixture_close(&f);
}

/* A plan whose answer could not fit is refused after admission: nothing
 * placed, installed or reported, fits never asked. 3 sessions of kb 8 on 8
 * shards: 3 x 27 + 24 slots x 1 byte + 8 x 8 + 256 = 425 bytes. */
static int refuse_any(void *ctx, const cr_table *t, int install, cr_error *err)
{
    (void)t;
    (void)install;
    (*(int *)ctx)++;
    cr_fail(err, CR_ENOMEM, "too big for the caller");
    return -1;
}

static void test_plan_sized_before_placing(void)
{
    fixture f;
    fixture_open(&f, 0);
    cr_session_rate rates[] = {{1, 1000}, {2, 900}, {3, 800}};
    int calls = 0;
    cr_core_plan_request req = {.rates = rates, .n_rates = 3, .install = 1, .fits = refuse_any,
                                .fits_ctx = &calls, .max_answer_bytes = 424,
                                .answer_bound = cr_wire_plan_bound};
    cr_core_plan_result res;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &req, &res, &err), CR_ENOMEM);
    CU_ASSERT_STRING_EQUAL(err.msg,
                           "the plan admits 3 sessions holding 24 shard slots over 8 shards; its "
                           "answer could need 425 bytes, over the 424-byte message limit "
                           "(--max-message-bytes): plan fewer sessions or shards, or a larger "
                           "qcap");
    CU_ASSERT_EQUAL(calls, 0);
    CU_ASSERT_EQUAL(f.seen.plans, 0);
    /* From the estimator the same. */
    int64_t owners[] = {1, 2, 3};
    cr_route_answer r[3];
    uint64_t gen;
    CU_ASSERT_EQUAL(cr_core_record(f.core, owners, 3, NULL, 0, r, &gen, &err), CR_OK);
    cr_core_plan_request est = {.from_estimator = 1, .has_qcap = 1, .qcap = 1e-9,
                                .max_answer_bytes = 424, .answer_bound = cr_wire_plan_bound};
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &est, &res, &err), CR_ENOMEM);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "3 sessions holding 24 shard slots"));
    /* At the bound it is planned; fits still has the last word. */
    req.max_answer_bytes = 425;
    CU_ASSERT_EQUAL(cr_core_plan(f.core, &req, &res, &err), CR_ENOMEM);
    CU_ASSERT_EQUAL(calls, 1);
    req.fits = NULL;
    CU_ASSERT_EQUAL_FATAL(cr_core_plan(f.core, &req, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.generation, 1);
    cr_core_plan_result_free(&res);
    fixture_close(&f);
}

static void test_replanner_in_virtual_time(void)
{
    fixture f;
    fixture_open(&f, 10);
    int64_t hot[] = {11, 11, 11, 12};
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_record(f.core, hot, 4, NULL, 0, NULL, NULL, &err), CR_OK);
    f.clock.t = 5;
    CU_ASSERT_EQUAL(cr_core_tick(f.core), 0);
    CU_ASSERT_EQUAL(f.seen.plans, 0);
    f.clock.t = 10;
    CU_ASSERT_EQUAL(cr_core_tick(f.core), 1);
    CU_ASSERT_EQUAL(f.seen.installs, 1);
    CU_ASSERT_STRING_EQUAL(f.seen.last.by, "replanner");
    CU_ASSERT_EQUAL(f.seen.last.generation, 1);
    CU_ASSERT_EQUAL(f.seen.last.admitted, 2);
    CU_ASSERT_EQUAL(f.seen.last.seconds, 0); /* no virtual time passed while planning */
    f.clock.t = 19.5;
    CU_ASSERT_EQUAL(cr_core_tick(f.core), 0);
    f.clock.t = 20;
    CU_ASSERT_EQUAL(cr_core_tick(f.core), 1);
    CU_ASSERT_EQUAL(f.seen.last.generation, 2);
    /* The table holds what the estimator said at t = 20: owner 11's rate is
     * 3 ln2/20 decayed by 20 s (one half-life). */
    int64_t owner = 11;
    cr_route_answer r;
    uint64_t gen;
    f.clock.t = 20;
    CU_ASSERT_EQUAL(cr_core_record(f.core, &owner, 1, NULL, 0, &r, &gen, &err), CR_OK);
    CU_ASSERT_EQUAL(gen, 2);
    CU_ASSERT(r.admitted);
    CU_ASSERT_DOUBLE_EQUAL(r.rate, 1.5 * log(2) / 20 + log(2) / 20, 1e-15);
    /* With no interval configured, ticks never replan. */
    fixture_close(&f);
    fixture_open(&f, 0);
    f.clock.t = 1e6;
    CU_ASSERT_EQUAL(cr_core_tick(f.core), 0);
    CU_ASSERT_EQUAL(f.seen.plans, 0);
    fixture_close(&f);
}

/* Advances to t, which must replan, and returns the replan's churn. */
static cr_churn tick_churn(fixture *f, double t, uint64_t generation, uint64_t compared)
{
    f->clock.t = t;
    CU_ASSERT_EQUAL(cr_core_tick(f->core), 1);
    CU_ASSERT_STRING_EQUAL(f->seen.last.by, "replanner");
    CU_ASSERT_EQUAL(f->seen.last.generation, generation);
    CU_ASSERT_EQUAL(f->seen.last.churn_generation, compared);
    return f->seen.last.churn;
}

/* 40 owners (20 of them twice), a replan every 10 s, with the calls clock:
 * a rate moves only on its owner's arrivals. At t = 40 a new owner is the
 * hottest. Returns the churn of that replan. */
static cr_churn replan_rounds(fixture *f, int mode)
{
    cr_core_config cfg;
    quiet_config(&cfg);
    cfg.planner = (cr_planner_config){8, 50, 200};
    cfg.replan_interval_s = 10;
    cfg.estimator.clock = CR_CLOCK_CALLS;
    cfg.replan.mode = mode;
    fixture_open_config(f, &cfg);
    int64_t owners[60], hot[] = {500, 500, 500};
    for (int i = 0; i < 60; i++)
        owners[i] = 100 + i % 40;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_record(f->core, owners, 60, NULL, 0, NULL, NULL, &err), CR_OK);
    cr_churn c = tick_churn(f, 10, 1, 0);
    CU_ASSERT(c.moved == 0 && c.admitted_in == 40 && c.admitted_out == 0);
    CU_ASSERT_EQUAL(f->seen.last.admitted, 40);
    for (int k = 2; k <= 3; k++) {
        c = tick_churn(f, 10.0 * k, (uint64_t)k, (uint64_t)k - 1); /* rates unchanged */
        if (mode == CR_REPLAN_STABLE)
            CU_ASSERT(c.moved == 0 && c.admitted_in == 0 && c.admitted_out == 0);
    }
    CU_ASSERT_EQUAL(cr_core_record(f->core, hot, 3, NULL, 0, NULL, NULL, &err), CR_OK);
    return tick_churn(f, 40, 4, 3);
}

static void test_stable_replans_in_virtual_time(void)
{
    fixture f;
    cr_churn c = replan_rounds(&f, CR_REPLAN_STABLE);
    CU_ASSERT(c.moved == 0 && c.admitted_in == 1 && c.admitted_out == 0);
    /* Plan calls plan fresh (the seed's table for explicit rates) and count
     * their churn against the table they replace: 40 of the 41 leave. */
    cr_session_rate one[] = {{100, 1}};
    cr_core_plan_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(plan_rates(f.core, one, 1, 1, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.generation, 5);
    CU_ASSERT_EQUAL(res.churn_generation, 4);
    CU_ASSERT(res.churn.admitted_in == 0 && res.churn.admitted_out == 40);
    CU_ASSERT_EQUAL(f.seen.last.churn.admitted_out, 40);
    cr_table *seed;
    cr_planner_plan(&(cr_planner_config){8, 50, 200}, one, 1, &seed, &err);
    CU_ASSERT_EQUAL(cr_table_placement(res.table, 0)->preferred_shard,
                    cr_table_placement(seed, 0)->preferred_shard);
    cr_table_free(seed);
    cr_core_plan_result_free(&res);
    fixture_close(&f);
    /* From scratch, the new hottest owner reshuffles the others. */
    c = replan_rounds(&f, CR_REPLAN_FRESH);
    CU_ASSERT(c.moved > 0 && c.admitted_in == 1);
    fixture_close(&f);
}

static cr_inject_response select_ok(cr_core *c, const cr_inject_request *req)
{
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_select(c, NULL, req, &r, &err), CR_OK);
    return r;
}

static void test_select_reserves_in_virtual_time(void)
{
    fixture f;
    fixture_open(&f, 0);
    cr_inject_request req = {.prompt_tokens = 4000, .knowledge_tokens = 0};
    cr_inject_response first = select_ok(f.core, &req);
    CU_ASSERT_EQUAL(first.reason, CR_REASON_NO_KNOWLEDGE);
    CU_ASSERT_EQUAL(first.text.queue_wait_ms, 0);
    double p = first.text.prefill_ms;
    CU_ASSERT(p > 0);
    /* Same instant: the second waits for the first's reserved prefill. */
    cr_inject_response second = select_ok(f.core, &req);
    CU_ASSERT_DOUBLE_EQUAL(second.text.queue_wait_ms, p, 1e-9);
    /* A dry run sees the queue (2p) and reserves nothing. */
    req.dry_run = 1;
    CU_ASSERT_DOUBLE_EQUAL(select_ok(f.core, &req).text.queue_wait_ms, 2 * p, 1e-9);
    /* Half of the first prefill later, 1.5p is left. */
    f.clock.t = p / 2 / 1e3;
    CU_ASSERT_DOUBLE_EQUAL(select_ok(f.core, &req).text.queue_wait_ms, 1.5 * p, 1e-6);
    /* Past both: nothing left. */
    f.clock.t = 2 * p / 1e3 + 1;
    CU_ASSERT_EQUAL(select_ok(f.core, &req).text.queue_wait_ms, 0);
    CU_ASSERT_EQUAL(f.seen.selections, 5);
    /* Bad input: named, not reserved, not reported. */
    cr_inject_request bad = {.prompt_tokens = 1, .gpu = 3};
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_select(f.core, NULL, &bad, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..0, got 3");
    CU_ASSERT_EQUAL(f.seen.selections, 5);
    /* The profile: nothing probed here, defaults in effect. */
    const cr_node_snapshot *snap;
    cr_inject_model m;
    CU_ASSERT_EQUAL(cr_core_profile(f.core, &snap, &m, &err), CR_OK);
    CU_ASSERT_EQUAL(snap->cuda_available, 0);
    CU_ASSERT_EQUAL(m.load.h2d_gbps, 25);
    cr_node_snapshot_release(snap);
    /* ClearReservations: every GPU at now, named errors otherwise. */
    req.dry_run = 0;
    select_ok(f.core, &req);
    cr_inject_cleared out;
    cr_inject_clear all = {0}, bad_gpu = {.has_gpu = 1, .gpu = 1};
    CU_ASSERT_EQUAL(cr_core_clear_reservations(f.core, &bad_gpu, &out, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..0, got 1");
    f.clock.t += p / 4 / 1e3;
    CU_ASSERT_EQUAL(cr_core_clear_reservations(f.core, &all, &out, &err), CR_OK);
    CU_ASSERT_EQUAL(out.gpus, 1);
    CU_ASSERT_DOUBLE_EQUAL(out.ms, 0.75 * p, 1e-6);
    req.dry_run = 1;
    CU_ASSERT_EQUAL(select_ok(f.core, &req).text.queue_wait_ms, 0);
    fixture_close(&f);
}

static void test_rates_and_forget(void)
{
    fixture f;
    fixture_open(&f, 0);
    int64_t owners[] = {30, 10, 20, 10};
    cr_error err;
    cr_core_record(f.core, owners, 4, NULL, 0, NULL, NULL, &err);
    f.clock.t = 20; /* one half-life */
    cr_session_rate *r;
    size_t n;
    uint64_t tracked;
    CU_ASSERT_EQUAL_FATAL(cr_core_rates(f.core, NULL, 0, &r, &n, &tracked, &err), CR_OK);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(tracked, 3);
    CU_ASSERT(r[0].owner == 10 && r[1].owner == 20 && r[2].owner == 30);
    CU_ASSERT_DOUBLE_EQUAL(r[0].rate, log(2) / 20, 1e-15); /* 2 ln2/H halved */
    free(r);
    int64_t listed[] = {20, 99};
    CU_ASSERT_EQUAL_FATAL(cr_core_rates(f.core, listed, 2, &r, &n, &tracked, &err), CR_OK);
    CU_ASSERT(n == 2 && r[0].owner == 20 && r[1].owner == 99 && r[1].rate == 0);
    free(r);
    CU_ASSERT_EQUAL(cr_core_forget(f.core, listed, 2), 1);
    cr_core_stats st;
    cr_core_stats_read(f.core, &st);
    CU_ASSERT_EQUAL(st.tracked_owners, 2);
    fixture_close(&f);
}

/* Arrivals and installs racing: every route a thread saw came from one
 * table (its generation's shard count), collected and checked here, on the
 * main thread. Real clock, as the sidecar runs. */
typedef struct racer {
    cr_core *core;
    int bad_routes, calls;
} racer;

static void *record_loop(void *arg)
{
    racer *a = arg;
    int64_t owners[] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_route_answer routes[8];
    cr_error err;
    for (int i = 0; i < 2000; i++) {
        uint64_t gen;
        if (cr_core_record(a->core, owners, 8, NULL, 0, routes, &gen, &err) != CR_OK) {
            a->bad_routes++;
            continue;
        }
        a->calls++;
        /* Generation g was planned over g % 3 + 2 shards (8 before any). */
        uint32_t shards = gen ? (uint32_t)(gen % 3 + 2) : 8;
        for (int k = 0; k < 8; k++)
            a->bad_routes += !routes[k].admitted && routes[k].shard !=
                                                        cr_route_fallback_shard(owners[k], shards);
    }
    return NULL;
}

static void test_concurrent_records_and_installs(void)
{
    cr_core_config cfg;
    quiet_config(&cfg);
    cr_error err;
    cr_core *c = cr_core_new(&cfg, NULL, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    racer args[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (racer){c, 0, 0};
        pthread_create(&th[i], NULL, record_loop, &args[i]);
    }
    cr_session_rate rates[] = {{1, 500}};
    int failed = 0;
    for (uint64_t g = 1; g <= 200; g++) {
        cr_core_plan_request req = {.rates = rates, .n_rates = 1, .install = 1,
                                    .has_n_shards = 1, .n_shards = (uint32_t)(g % 3 + 2)};
        cr_core_plan_result res;
        failed += cr_core_plan(c, &req, &res, &err) != CR_OK || res.generation != g;
        cr_core_plan_result_free(&res);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(failed, 0);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(args[i].calls, 2000);
        CU_ASSERT_EQUAL(args[i].bad_routes, 0);
    }
    cr_core_free(c);
}

static const cr_test_case core_tests[] = {
    {"routes before and after install", test_routes_before_and_after_install},
    {"plan generations and partial configs", test_plan_generations_and_partial_config},
    {"a refused plan is not installed", test_refused_plan_is_not_installed},
    {"external tables refuse installs", test_external_tables_refuse_installs},
    {"cluster installs report as plans", test_cluster_installs_report},
    {"generations only move forward", test_generations_only_move_forward},
    {"a plan is sized before placing", test_plan_sized_before_placing},
    {"replanner in virtual time", test_replanner_in_virtual_time},
    {"stable replans in virtual time", test_stable_replans_in_virtual_time},
    {"select reservations in virtual time", test_select_reserves_in_virtual_time},
    {"rates and forget", test_rates_and_forget},
    {"concurrent records and installs", test_concurrent_records_and_installs},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"core", core_tests}};
CR_TEST_MAIN(suites)
