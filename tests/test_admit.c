/* Admission at the door at library level: the objectives' text (good,
 * each field bad, repeats), the decision's cases (no SLO, the rule's pick
 * first, an alternative, critical never held or shed, sheddable held or
 * shed, the sheddable budget), the queue's bounds (requests, per id,
 * bytes, deadline), strict priority, deficit round robin sharing
 * dispatches equally between an id sending 3x and one sending 1x (and by
 * cost), ready saying no changing nothing, the counts per objective and
 * per id with the overflow under "other", attainment, and threads offering,
 * dispatching and expiring at once with every request accounted for. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "admit.h"
#include "cunit_main.h"

static void test_objectives_parse(void)
{
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n = 9;
    cr_error err;
    CU_ASSERT_EQUAL(cr_admit_objectives_parse(" interactive:0:2000 , batch : -1 :30000,bulk:-5",
                                              t, &n, &err),
                    CR_OK);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_STRING_EQUAL(t[0].name, "interactive");
    CU_ASSERT_EQUAL(t[0].priority, 0);
    CU_ASSERT_DOUBLE_EQUAL(t[0].slo_ms, 2000, 1e-9);
    CU_ASSERT_STRING_EQUAL(t[1].name, "batch");
    CU_ASSERT_EQUAL(t[1].priority, -1);
    CU_ASSERT_DOUBLE_EQUAL(t[2].slo_ms, 0, 0);
    CU_ASSERT_EQUAL(cr_admit_objective_find(t, n, "batch", 5), 1);
    CU_ASSERT_EQUAL(cr_admit_objective_find(t, n, "batc", 4), CR_ADMIT_NO_OBJECTIVE);
    CU_ASSERT_EQUAL(cr_admit_objectives_parse("", t, &n, &err), CR_OK);
    CU_ASSERT_EQUAL(n, 0);
    const struct {
        const char *text, *msg;
    } bad[] = {
        {"a:0,b:x", "objectives[1] (b): priority must be an integer in [-1000, 1000], got \"x\""},
        {"a:0,b", "objectives[1] (b): priority must be an integer in [-1000, 1000], got \"\""},
        {"a:2000", "objectives[0] (a): priority must be an integer in [-1000, 1000], got \"2000\""},
        {"a:0:-1", "objectives[0] (a): slo_ms must be a number in [0, 86400000], got \"-1\""},
        {"a:0:nan", "objectives[0] (a): slo_ms must be a number in [0, 86400000], got \"nan\""},
        {"a:0,,b:1", "objectives[1]: name must be 1 to 63 of [A-Za-z0-9_.-], got \"\""},
        {"a b:0", "objectives[0]: name must be 1 to 63 of [A-Za-z0-9_.-], got \"a b\""},
        {"a:0:1:2", "objectives[0]: must be name:priority[:slo_ms], got \"a:0:1:2\""},
        {"a:0,b:1,a:2", "objectives[2] (a): name repeats objectives[0]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = 9;
        CU_ASSERT_EQUAL(cr_admit_objectives_parse(bad[i].text, t, &n, &err), CR_EINVAL);
        CU_ASSERT_EQUAL(n, 0);
        if (strcmp(err.msg, bad[i].msg) != 0)
            printf("\n%s: got %s\n", bad[i].text, err.msg);
        CU_ASSERT_STRING_EQUAL(err.msg, bad[i].msg);
    }
    char many[4096] = "";
    for (int i = 0; i <= CR_ADMIT_MAX_OBJECTIVES; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%so%d:0", i ? "," : "", i);
    CU_ASSERT_EQUAL(cr_admit_objectives_parse(many, t, &n, &err), CR_EINVAL);
}

static const cr_admit_ask critical = {.has_objective = 1, .priority = 0, .slo_ms = 2000};
static const cr_admit_ask sheddable = {.has_objective = 1, .priority = -1, .slo_ms = 30000,
                                       .can_wait = 1};

static void test_decide(void)
{
    cr_admit_candidate c[3] = {{5, 2000, 2500}, {2, 1000, 1500}, {7, 400, 900}};
    uint32_t pick = 9;
    cr_admit_ask none = {0};
    CU_ASSERT_EQUAL(cr_admit_decide(&none, c, 3, 100, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 0); /* no objective: the rule's pick, budget or not */
    /* the rule's pick when it meets the SLO, else the first that does */
    CU_ASSERT_EQUAL(cr_admit_decide(&critical, c, 3, 0, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 1);
    c[0].ttft_ms = 2000;
    CU_ASSERT_EQUAL(cr_admit_decide(&critical, c, 3, 0, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 0);
    /* what it waited counts against the SLO */
    CU_ASSERT_EQUAL(cr_admit_decide(&critical, c, 3, 0, 600, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 2);
    /* critical and nothing meets it: the rule's pick, never held or shed */
    cr_admit_candidate slow[2] = {{1, 8000, 9000}, {3, 7000, 8000}};
    CU_ASSERT_EQUAL(cr_admit_decide(&critical, slow, 2, 0, 0, 0, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 0);
    /* sheddable: its SLO bounds the TTFT, the budget the queue it joins */
    CU_ASSERT_EQUAL(cr_admit_decide(&sheddable, slow, 2, 0, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 0);
    CU_ASSERT_EQUAL(cr_admit_decide(&sheddable, slow, 2, 7500, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 1);
    CU_ASSERT_EQUAL(cr_admit_decide(&sheddable, slow, 2, 7500, 22500, 1, &pick), CR_ADMIT_HOLD);
    /* the budget binds only sheddable work */
    cr_admit_ask critical_none = critical;
    critical_none.slo_ms = 0;
    CU_ASSERT_EQUAL(cr_admit_decide(&critical_none, slow, 2, 1000, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(pick, 0);
    CU_ASSERT_EQUAL(cr_admit_decide(&sheddable, slow, 2, 1000, 0, 1, &pick), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(cr_admit_decide(&sheddable, slow, 2, 1000, 0, 0, &pick), CR_ADMIT_SHED);
    cr_admit_ask no_slo = sheddable;
    no_slo.slo_ms = 0; /* no SLO of its own: only the budget bounds it */
    CU_ASSERT_EQUAL(cr_admit_decide(&no_slo, slow, 2, 0, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_EQUAL(cr_admit_decide(&no_slo, slow, 2, 1000, 0, 1, &pick), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(cr_admit_decide(&sheddable, NULL, 0, 1000, 0, 1, &pick), CR_ADMIT_ROUTE);
    CU_ASSERT_STRING_EQUAL(cr_admit_verdict_name(CR_ADMIT_SHED), "shed");
    CU_ASSERT_STRING_EQUAL(cr_admit_verdict_name(CR_ADMIT_HOLD), "queued");
}

/* A door with cfg over "interactive" (critical, 2 s) and "batch"
 * (sheddable, no SLO of its own). */
static cr_admit *door_of(const cr_admit_config *cfg)
{
    cr_admit_objective t[2] = {{"interactive", 0, 2000}, {"batch", -1, 0}};
    cr_error err;
    cr_admit *a = cr_admit_new(cfg, t, 2, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    return a;
}

/* A door with a budget of 1000 ms: a candidate whose queue is 5000 ms
 * holds every sheddable request. No pressure bound (test_pressure's). */
static cr_admit *door(uint32_t max, uint32_t per_id, uint64_t bytes, double wait_ms)
{
    cr_admit_config cfg;
    cr_admit_config_default(&cfg);
    cfg.max_queued = max;
    cfg.max_per_id = per_id;
    cfg.max_bytes = bytes;
    cfg.max_wait_ms = wait_ms;
    cfg.budget_ms = 1000;
    cfg.pressure = 0;
    cfg.tracked_ids = 2;
    return door_of(&cfg);
}

static const cr_admit_candidate busy = {0, 5000, 6000}, idle = {1, 0, 10};

static cr_admit_verdict offer(cr_admit *a, const char *tenant, int32_t prio, uint64_t handle,
                              double cost, uint64_t bytes, double now)
{
    cr_admit_ask q = {.has_objective = 1, .objective = prio < 0 ? 1 : 0, .priority = prio,
                      .slo_ms = prio < 0 ? 0 : 2000, .fairness = tenant,
                      .fairness_len = strlen(tenant), .can_wait = 1};
    cr_admit_item it = {.handle = handle, .cost = cost, .bytes = bytes};
    uint32_t pick;
    return cr_admit_offer(a, &q, &busy, 1, now, &it, &pick);
}

static int yes(void *ctx, const cr_admit_item *it)
{
    (void)it;
    if (ctx)
        ++*(int *)ctx;
    return 1;
}
static int handle_is(const void *ctx, const cr_admit_item *it)
{
    return it->handle == *(const uint64_t *)ctx;
}

static int no(void *ctx, const cr_admit_item *it)
{
    (void)ctx;
    (void)it;
    return 0;
}

static void test_queue_bounds(void)
{
    cr_admit *a = door(3, 2, 1000, 500);
    CU_ASSERT_EQUAL(offer(a, "A", -1, 1, 1, 100, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "A", -1, 2, 1, 100, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "A", -1, 3, 1, 100, 0), CR_ADMIT_SHED); /* per id */
    CU_ASSERT_EQUAL(offer(a, "B", -1, 4, 1, 900, 0), CR_ADMIT_SHED); /* bytes */
    CU_ASSERT_EQUAL(offer(a, "B", -1, 5, 1, 100, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "C", -1, 6, 1, 100, 0), CR_ADMIT_SHED); /* all */
    /* critical requests are never held or shed, however full */
    CU_ASSERT_EQUAL(offer(a, "C", 0, 7, 1, 100, 0), CR_ADMIT_ROUTE);
    cr_admit_stats st;
    cr_admit_id_counts ids[4];
    size_t n_ids;
    cr_admit_stats_read(a, 0.25, &st, ids, 4, &n_ids);
    CU_ASSERT_EQUAL(st.held, 3);
    CU_ASSERT_EQUAL(st.held_bytes, 300);
    CU_ASSERT_DOUBLE_EQUAL(st.oldest_s, 0.25, 1e-12);
    CU_ASSERT_EQUAL(st.objective[1].queued, 3);
    CU_ASSERT_EQUAL(st.objective[1].shed, 3);
    CU_ASSERT_EQUAL(st.objective[0].admitted, 1);
    CU_ASSERT_EQUAL(st.objective[0].shed, 0);
    /* two ids tracked, the third counted under "other" */
    CU_ASSERT_EQUAL_FATAL(n_ids, 3);
    CU_ASSERT_STRING_EQUAL(ids[0].name, "A");
    CU_ASSERT_EQUAL(ids[0].held, 2);
    CU_ASSERT_EQUAL(ids[0].c.shed, 1);
    CU_ASSERT_STRING_EQUAL(ids[2].name, "other");
    CU_ASSERT_EQUAL(ids[2].c.shed, 1);
    CU_ASSERT_EQUAL(ids[2].c.admitted, 1);
    /* the wait bound: dropped after 500 ms, not before */
    cr_admit_item out[8];
    CU_ASSERT_EQUAL(cr_admit_expire(a, 0.5, out, 8), 0);
    CU_ASSERT_EQUAL(cr_admit_expire(a, 0.501, out, 2), 2);
    CU_ASSERT_EQUAL(cr_admit_expire(a, 0.501, out, 2), 1);
    cr_admit_stats_read(a, 1, &st, ids, 4, &n_ids);
    CU_ASSERT_EQUAL(st.held, 0);
    CU_ASSERT_EQUAL(st.held_bytes, 0);
    CU_ASSERT_EQUAL(st.objective[1].dropped, 3);
    CU_ASSERT_EQUAL(cr_admit_next(a, 0, yes, NULL, out), 0);
    cr_admit_free(a);

    /* no queue: what would be held is shed */
    a = door(0, 0, 1000, 500);
    CU_ASSERT_EQUAL(offer(a, "A", -1, 1, 1, 1, 0), CR_ADMIT_SHED);
    cr_admit_free(a);
    cr_admit_config cfg;
    cr_admit_config_default(&cfg);
    cfg.max_per_id = cfg.max_queued + 1;
    cr_error err;
    CU_ASSERT_PTR_NULL(cr_admit_new(&cfg, NULL, 0, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "max_per_id must be at most max_queued (1024), got 1025");
}

/* A new sheddable arrival never passes a held one, even when an endpoint
 * meets its bound; ready saying no changes nothing. */
static void test_no_jumping_and_ready(void)
{
    cr_admit *a = door(8, 8, 1 << 20, 10000);
    CU_ASSERT_EQUAL(offer(a, "A", -2, 1, 1, 1, 0), CR_ADMIT_HOLD);
    cr_admit_ask q = {.has_objective = 1, .objective = 1, .priority = -2, .fairness = "B",
                      .fairness_len = 1, .can_wait = 1};
    cr_admit_item it = {.handle = 2, .cost = 1, .bytes = 1};
    uint32_t pick;
    CU_ASSERT_EQUAL(cr_admit_offer(a, &q, &idle, 1, 0, &it, &pick), CR_ADMIT_HOLD);
    q.priority = -1; /* above the held: it may go */
    CU_ASSERT_EQUAL(cr_admit_offer(a, &q, &idle, 1, 0, &it, &pick), CR_ADMIT_ROUTE);
    cr_admit_item out;
    CU_ASSERT_EQUAL(cr_admit_next(a, 0, no, NULL, &out), 0);
    CU_ASSERT_EQUAL(cr_admit_next(a, 0, yes, NULL, &out), 1);
    CU_ASSERT_EQUAL(out.handle, 1);
    CU_ASSERT_EQUAL(cr_admit_next(a, 0, yes, NULL, &out), 1);
    CU_ASSERT_EQUAL(out.handle, 2);
    CU_ASSERT_EQUAL(out.id, 1);
    cr_admit_free(a);
}

/* A caller that cannot wait is shed where another would be held: behind
 * a held one, and when nothing meets its bound. cr_admit_cancel takes out
 * only what its match names, counted dropped, the queue's order kept. */
static void test_cannot_wait_and_cancel(void)
{
    cr_admit *a = door(8, 8, 1 << 20, 10000);
    CU_ASSERT_EQUAL(offer(a, "A", -1, 1, 1, 1, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "A", -1, 2, 1, 1, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "B", -1, 3, 1, 1, 0), CR_ADMIT_HOLD);
    cr_admit_ask q = {.has_objective = 1, .objective = 1, .priority = -1, .fairness = "B",
                      .fairness_len = 1};
    cr_admit_item it = {.handle = 9, .cost = 1, .bytes = 1};
    uint32_t pick;
    CU_ASSERT_EQUAL(cr_admit_offer(a, &q, &idle, 1, 0, &it, &pick), CR_ADMIT_SHED); /* behind */
    CU_ASSERT_EQUAL(cr_admit_offer(a, &q, &busy, 1, 0, &it, &pick), CR_ADMIT_SHED);
    uint64_t want = 2;
    cr_admit_item out;
    CU_ASSERT_EQUAL(cr_admit_cancel(a, handle_is, &want, &out), 1);
    CU_ASSERT_EQUAL(out.handle, 2);
    CU_ASSERT_EQUAL(cr_admit_cancel(a, handle_is, &want, &out), 0); /* gone already */
    cr_admit_stats st;
    size_t n;
    cr_admit_stats_read(a, 0, &st, NULL, 0, &n);
    CU_ASSERT_EQUAL(st.held, 2);
    CU_ASSERT_EQUAL(st.objective[1].dropped, 1);
    CU_ASSERT_EQUAL(st.objective[1].shed, 2);
    CU_ASSERT_EQUAL(cr_admit_next(a, 0, yes, NULL, &out), 1); /* A's first, then B's */
    CU_ASSERT_EQUAL(out.handle, 1);
    CU_ASSERT_EQUAL(cr_admit_next(a, 0, yes, NULL, &out), 1);
    CU_ASSERT_EQUAL(out.handle, 3);
    CU_ASSERT_EQUAL(cr_admit_next(a, 0, yes, NULL, &out), 0);
    cr_admit_free(a);
}

static void test_strict_priority(void)
{
    cr_admit *a = door(16, 16, 1 << 20, 10000);
    CU_ASSERT_EQUAL(offer(a, "A", -3, 1, 1, 1, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "B", -1, 2, 1, 1, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "A", -2, 3, 1, 1, 0), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(offer(a, "B", -1, 4, 1, 1, 0), CR_ADMIT_HOLD);
    uint64_t want[] = {2, 4, 3, 1};
    cr_admit_item out;
    for (size_t i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL_FATAL(cr_admit_next(a, 0, yes, NULL, &out), 1);
        CU_ASSERT_EQUAL(out.handle, want[i]);
    }
    cr_admit_free(a);
}

/* Tenant A offers 3 for each of B's; while both are held they get equal
 * dispatches, by request and by cost. */
static void fair_share(double cost_a, double cost_b, double quantum)
{
    cr_admit_config cfg;
    cr_admit_config_default(&cfg);
    cfg.budget_ms = 1000;
    cfg.pressure = 0; /* the budget alone holds */
    cfg.quantum = quantum;
    cfg.max_per_id = cfg.max_queued;
    cr_admit *a = cr_admit_new(&cfg, NULL, 0, &(cr_error){{0}});
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    uint64_t h = 0;
    for (int i = 0; i < 100; i++) {
        for (int k = 0; k < 3; k++)
            CU_ASSERT_EQUAL(offer(a, "A", -1, h++ * 2, cost_a, 1, 0), CR_ADMIT_HOLD);
        CU_ASSERT_EQUAL(offer(a, "B", -1, h++ * 2 + 1, cost_b, 1, 0), CR_ADMIT_HOLD);
    }
    double work[2] = {0, 0};
    cr_admit_item out;
    for (int i = 0; i < 80; i++) { /* B still has some held throughout */
        CU_ASSERT_EQUAL_FATAL(cr_admit_next(a, 0, yes, NULL, &out), 1);
        work[out.handle & 1] += out.cost;
    }
    double most = cost_a > cost_b ? cost_a : cost_b;
    CU_ASSERT(work[0] - work[1] <= most + quantum && work[1] - work[0] <= most + quantum);
    while (cr_admit_next(a, 0, yes, NULL, &out)) /* then A has the rest */
        work[out.handle & 1] += out.cost;
    CU_ASSERT_DOUBLE_EQUAL(work[0], 300 * cost_a, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(work[1], 100 * cost_b, 1e-6);
    cr_admit_free(a);
}

/* Arrivals and dispatches interleaved: A offers 3 and B 1 per dispatch,
 * both stay backlogged, and the dispatches alternate. */
static void test_fairness_interleaved(void)
{
    cr_admit_config cfg;
    cr_admit_config_default(&cfg);
    cfg.budget_ms = 1000;
    cfg.pressure = 0; /* the budget alone holds */
    cfg.max_queued = 4096;
    cfg.max_per_id = 4096;
    cr_admit *a = cr_admit_new(&cfg, NULL, 0, &(cr_error){{0}});
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    uint64_t h = 0;
    size_t got[2] = {0, 0};
    cr_admit_item out;
    for (int i = 0; i < 600; i++) {
        for (int k = 0; k < 3; k++)
            offer(a, "A", -1, h++ * 2, 1, 1, 0);
        offer(a, "B", -1, h++ * 2 + 1, 1, 1, 0);
        CU_ASSERT_EQUAL_FATAL(cr_admit_next(a, 0, yes, NULL, &out), 1);
        got[out.handle & 1]++;
    }
    CU_ASSERT(got[0] <= got[1] + 1 && got[1] <= got[0] + 1);
    cr_admit_free(a);
}

static void test_fairness(void)
{
    fair_share(1, 1, 1);
    fair_share(1, 4, 1);   /* B's requests cost 4: it gets a quarter of the dispatches */
    fair_share(3, 1, 2.5); /* credit over several turns */
}

/* A sheddable request of tenant "t" offered at now with an idle candidate. */
static cr_admit_verdict offer_idle(cr_admit *a, uint64_t handle, double now)
{
    cr_admit_ask q = {.has_objective = 1, .objective = 1, .priority = -1, .fairness = "t",
                      .fairness_len = 1, .can_wait = 1};
    cr_admit_item it = {.handle = handle, .cost = 1};
    uint32_t pick;
    return cr_admit_offer(a, &q, &idle, 1, now, &it, &pick);
}

/* A sheddable request of tenant "t" offered at now with candidate c. */
static cr_admit_verdict offer_on(cr_admit *a, uint64_t handle, const cr_admit_candidate *c,
                                 double now)
{
    cr_admit_ask q = {.has_objective = 1, .objective = 1, .priority = -1, .fairness = "t",
                      .fairness_len = 1, .can_wait = 1};
    cr_admit_item it = {.handle = handle, .cost = 1};
    uint32_t pick;
    return cr_admit_offer(a, &q, c, 1, now, &it, &pick);
}

/* The pressure: critical requests that the queues make miss raise it
 * (one whose prefill alone misses is no sample); until it is above the
 * bound the door is idle (a sheddable request is routed whatever its
 * queue); above it a sheddable request is held however idle its
 * candidate, and nothing is dispatched before its last budget
 * (test_last_chance_while_pressed), until it falls to pressure_off;
 * critical ones that meet their SLO bring it down with time. */
static void test_pressure(void)
{
    cr_admit_config cfg;
    cr_admit_config_default(&cfg);
    CU_ASSERT_DOUBLE_EQUAL(cfg.pressure, 0.1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cfg.pressure_tau_s, 120, 1e-12);
    cfg.pressure = 0.15; /* the bound this test reckons with (off at half: 0.075) */
    cfg.budget_ms = 1000;
    cfg.pressure_tau_s = 5;
    cr_admit_objective t[2] = {{"interactive", 0, 2000}, {"batch", -1, 0}};
    cr_error err;
    cr_admit *a = cr_admit_new(&cfg, t, 2, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    const cr_admit_candidate slow = {0, 0, 4000};    /* its prefill alone misses */
    const cr_admit_candidate queued = {0, 1500, 2500}; /* the queue makes it miss */
    const cr_admit_candidate long_queue = {0, 5000, 5100}; /* far over the budget */
    CU_ASSERT_DOUBLE_EQUAL(cr_admit_pressure(a), 0, 0); /* none before any sample */
    cr_admit_ask crit = {.has_objective = 1, .objective = 0, .priority = 0, .slo_ms = 2000};
    cr_admit_item it = {.cost = 1};
    uint32_t pick;
    cr_admit_stats st;
    /* idle: a sheddable request with a queue far over the budget is routed */
    CU_ASSERT_EQUAL(offer_on(a, 1, &long_queue, 1), CR_ADMIT_ROUTE);
    cr_admit_offer(a, &crit, &idle, 1, 1, &it, &pick);
    for (int i = 2; i <= 10; i++) /* no samples: the share stays where it was */
        cr_admit_offer(a, &crit, &slow, 1, i, &it, &pick);
    CU_ASSERT_DOUBLE_EQUAL(cr_admit_pressure(a), 0, 1e-12);
    /* a miss while some shard idles is no overload: it counts 0 */
    cr_admit_ask roomy = crit;
    roomy.spare = 1;
    cr_admit_offer(a, &roomy, &queued, 1, 10.5, &it, &pick);
    CU_ASSERT_DOUBLE_EQUAL(cr_admit_pressure(a), 0, 1e-12);
    cr_admit_offer(a, &crit, &queued, 1, 11, &it, &pick); /* 1 - e^-0.1 of the way up */
    CU_ASSERT_DOUBLE_EQUAL(cr_admit_pressure(a), 1 - exp(-0.5 / 5), 1e-9);
    for (int i = 12; i <= 20; i++)
        cr_admit_offer(a, &crit, &queued, 1, i, &it, &pick);
    CU_ASSERT(cr_admit_pressure(a) > 0.8);
    CU_ASSERT_EQUAL(offer_idle(a, 2, 20), CR_ADMIT_HOLD); /* idle, yet held */
    cr_admit_item out;
    CU_ASSERT_EQUAL(cr_admit_next(a, 20, yes, NULL, &out), 0); /* pressed: 30 s to its deadline */
    CU_ASSERT_EQUAL(cr_admit_offer(a, &crit, &queued, 1, 20, &it, &pick), CR_ADMIT_ROUTE);
    /* down through the bound (0.15) it stays pressed; at half of it, off */
    double t_s = 20;
    while (cr_admit_pressure(a) > 0.15 && t_s < 100)
        cr_admit_offer(a, &crit, &idle, 1, ++t_s, &it, &pick);
    cr_admit_stats_read(a, t_s, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.pressed, 1);
    CU_ASSERT_EQUAL(cr_admit_next(a, t_s, yes, NULL, &out), 0);
    while (cr_admit_pressure(a) > 0.075 && t_s < 100)
        cr_admit_offer(a, &crit, &idle, 1, ++t_s, &it, &pick);
    CU_ASSERT(t_s > 30 && t_s < 40); /* e^-dt/5 a second: 1 -> 0.075 in ~13 s */
    cr_admit_stats_read(a, t_s, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.pressed, 0);
    CU_ASSERT_DOUBLE_EQUAL(st.pressure, cr_admit_pressure(a), 1e-12);
    /* a new one waits behind the held one, which goes first */
    CU_ASSERT_EQUAL(offer_idle(a, 3, t_s), CR_ADMIT_HOLD);
    CU_ASSERT_EQUAL(cr_admit_next(a, t_s, yes, NULL, &out), 1);
    CU_ASSERT_EQUAL(out.handle, 2);
    CU_ASSERT_EQUAL(cr_admit_next(a, t_s, yes, NULL, &out), 1);
    CU_ASSERT_EQUAL(out.handle, 3);
    CU_ASSERT_EQUAL(offer_on(a, 4, &long_queue, t_s), CR_ADMIT_ROUTE); /* idle again */
    cr_admit_free(a);
    /* a fresh door starts at 0 and its first sample weighs nothing: one
     * request that missed presses nothing (it pressed a new door for
     * minutes when it was the whole average) */
    cfg.pressure_off = 0.1;
    a = cr_admit_new(&cfg, t, 2, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    cr_admit_offer(a, &crit, &queued, 1, 1, &it, &pick);
    CU_ASSERT_DOUBLE_EQUAL(cr_admit_pressure(a), 0, 0);
    CU_ASSERT_EQUAL(offer_on(a, 5, &long_queue, 1), CR_ADMIT_ROUTE);
    /* an explicit off level */
    for (t_s = 2; t_s <= 10; t_s++)
        cr_admit_offer(a, &crit, &queued, 1, t_s, &it, &pick);
    cr_admit_stats_read(a, t_s, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.pressed, 1);
    while (cr_admit_pressure(a) > 0.1 && t_s < 100)
        cr_admit_offer(a, &crit, &idle, 1, ++t_s, &it, &pick);
    cr_admit_stats_read(a, t_s, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.pressed, 0);
    CU_ASSERT_EQUAL(offer_on(a, 7, &long_queue, t_s), CR_ADMIT_ROUTE);
    cr_admit_free(a);
    /* without a bound the budget alone decides, at once */
    cfg.pressure = 0;
    cfg.pressure_off = 0;
    a = cr_admit_new(&cfg, t, 2, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_EQUAL(offer_on(a, 6, &long_queue, 1), CR_ADMIT_HOLD);
    cr_admit_free(a);
    cfg.pressure = 1.5;
    CU_ASSERT_PTR_NULL(cr_admit_new(&cfg, t, 2, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "pressure must be in [0, 1], got 1.5");
    cfg.pressure = 0.1;
    cfg.pressure_off = 0.2;
    CU_ASSERT_PTR_NULL(cr_admit_new(&cfg, t, 2, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "pressure_off must be in [0, pressure (0.1)], got 0.2");
    cfg.pressure_off = 0;
    cfg.pressure_tau_s = 0;
    CU_ASSERT_PTR_NULL(cr_admit_new(&cfg, t, 2, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "pressure_tau_s must be in (0, 3600], got 0");
    cfg.pressure_tau_s = 5;
    cfg.meet_slo = 3;
    CU_ASSERT_PTR_NULL(cr_admit_new(&cfg, t, 2, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "meet_slo must be 0 (off), 1 (pressed) or 2 (always), got 3");
    cfg.meet_slo = -1;
    CU_ASSERT_PTR_NULL(cr_admit_new(&cfg, t, 2, &err));
}

/* Pressed, held work waits; but within one budget of its deadline the
 * head goes, where ready says the wait allows: served late rather than
 * dropped. */
static void test_last_chance_while_pressed(void)
{
    cr_admit_config cfg;
    cr_admit_config_default(&cfg);
    cfg.budget_ms = 1000;
    cfg.pressure_tau_s = 5;
    cfg.max_wait_ms = 10000;
    cr_admit *a = door_of(&cfg);
    const cr_admit_candidate queued = {0, 1500, 2500}; /* the queue makes it miss */
    cr_admit_ask crit = {.has_objective = 1, .objective = 0, .priority = 0, .slo_ms = 2000};
    cr_admit_item it = {.cost = 1};
    uint32_t pick;
    for (int i = 0; i <= 10; i++)
        cr_admit_offer(a, &crit, &queued, 1, i, &it, &pick);
    CU_ASSERT_TRUE_FATAL(cr_admit_acts(a, -1)); /* pressed, nothing held yet */
    CU_ASSERT_EQUAL(offer_idle(a, 7, 10), CR_ADMIT_HOLD); /* its deadline: 20 */
    cr_admit_item out;
    CU_ASSERT_EQUAL(cr_admit_next(a, 18.5, yes, NULL, &out), 0); /* 1.5 s left: it waits */
    CU_ASSERT_EQUAL(cr_admit_next(a, 19.5, no, NULL, &out), 0);  /* its wait is too long */
    CU_ASSERT_EQUAL(cr_admit_next(a, 19.5, yes, NULL, &out), 1); /* its last budget */
    CU_ASSERT_EQUAL(out.handle, 7);
    cr_admit_stats st;
    cr_admit_stats_read(a, 19.5, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.pressed, 1);
    CU_ASSERT_EQUAL(st.held, 0);
    cr_admit_free(a);
}

static void test_attainment(void)
{
    cr_admit *a = door(4, 4, 100, 100);
    cr_admit_ask q = {.has_objective = 1, .objective = 0, .priority = 0, .slo_ms = 2000,
                      .fairness = "A", .fairness_len = 1};
    cr_admit_outcome(a, &q, 1999);
    cr_admit_outcome(a, &q, 2000);
    cr_admit_outcome(a, &q, 2001);
    q.slo_ms = 0; /* nothing to meet: not counted */
    cr_admit_outcome(a, &q, 5);
    cr_admit_stats st;
    cr_admit_id_counts ids[2];
    size_t n;
    cr_admit_stats_read(a, 0, &st, ids, 2, &n);
    CU_ASSERT_EQUAL(st.objective[0].outcomes, 3);
    CU_ASSERT_EQUAL(st.objective[0].met, 2);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(ids[0].c.met, 2);
    cr_admit_free(a);
}

/* Threads offering, dispatching and expiring at once: every request is
 * admitted, shed or dropped exactly once and the bounds hold throughout. */
#define THREADS 4
#define PER_THREAD 4000

typedef struct shared {
    cr_admit *a;
    _Atomic uint64_t out, held_max;
} shared;

static void *worker(void *arg)
{
    shared *s = arg;
    static const char *tenants[] = {"A", "B", "C"};
    for (int i = 0; i < PER_THREAD; i++) {
        double now = i * 1e-4;
        offer(s->a, tenants[i % 3], -1 - (i % 2), (uint64_t)i, 1 + i % 3, 10, now);
        cr_admit_item out[4];
        if (i % 2 && cr_admit_next(s->a, 0, yes, NULL, out))
            atomic_fetch_add(&s->out, 1);
        atomic_fetch_add(&s->out, cr_admit_expire(s->a, now, out, 4));
        cr_admit_stats st;
        cr_admit_stats_read(s->a, now, &st, NULL, 0, NULL);
        if (st.held > atomic_load(&s->held_max))
            atomic_store(&s->held_max, st.held); /* a race only makes it smaller */
    }
    return NULL;
}

static void test_threads(void)
{
    shared s = {.a = door(64, 32, 64 * 10, 50)};
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, worker, &s), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    cr_admit_item out;
    while (cr_admit_next(s.a, 0, yes, NULL, &out))
        s.out++;
    cr_admit_stats st;
    cr_admit_stats_read(s.a, 1e9, &st, NULL, 0, NULL);
    cr_admit_counts *c = &st.objective[1];
    CU_ASSERT_EQUAL(st.held, 0);
    CU_ASSERT_EQUAL(st.held_bytes, 0);
    CU_ASSERT_EQUAL(c->queued + c->shed, THREADS * PER_THREAD);
    CU_ASSERT_EQUAL(c->admitted + c->dropped, c->queued);
    CU_ASSERT_EQUAL(s.out, c->queued);
    CU_ASSERT(s.held_max <= 64);
    cr_admit_free(s.a);
}

static const cr_test_case admit_tests[] = {
    {"objectives parse", test_objectives_parse},
    {"decide", test_decide},
    {"queue bounds", test_queue_bounds},
    {"no jumping; ready says no", test_no_jumping_and_ready},
    {"strict priority", test_strict_priority},
    {"cannot wait: shed; cancel", test_cannot_wait_and_cancel},
    {"deficit round robin shares equally", test_fairness},
    {"deficit round robin, arrivals interleaved", test_fairness_interleaved},
    {"pressure", test_pressure},
    {"last chance while pressed", test_last_chance_while_pressed},
    {"attainment", test_attainment},
    {"threads account for every request", test_threads},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"admit", admit_tests}};
CR_TEST_MAIN(suites)
