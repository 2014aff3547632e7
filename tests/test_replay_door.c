/* Admission in the replay (replay.h, "admission"): objectives drawn the
 * same for every run and per session; policies without a door serve everything and their
 * routes do not change with objectives on; cacheroute-door under overload
 * holds and sheds only batch requests, every measured request is served,
 * shed or dropped once, and below overload it refuses and holds nothing
 * and routes as without a door; held work is dispatched fairly between
 * tenants; a door
 * policy needs the cluster's admission. */
#include <math.h>
#include <string.h>

#include "cunit_main.h"
#include "replay.h"

/* 4000 requests over 200 sessions at rate req/s on 2 shards. */
static void open_run(cr_replay_trace *t, cr_replay_cluster *c, double rate)
{
    cr_replay_gen_config g;
    cr_replay_gen_default(&g);
    g.n_requests = 4000;
    g.n_sessions = 200;
    g.rate_per_s = rate;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, t, &err), CR_OK);
    cr_replay_cluster_default(c);
    c->shards = 2;
    c->truth.noise = 0;
}

static cr_replay_result run(const cr_replay_trace *t, const cr_replay_cluster *c, int door)
{
    cr_core_config core;
    cr_core_config_default(&core);
    cr_replay_policy p;
    cr_replay_result r;
    cr_error err;
    cr_status st = door ? cr_replay_cacheroute_door_policy(&core, c, &p, &err)
                        : cr_replay_cacheroute_policy(&core, CR_REPLAY_WEIGHT_REQUESTS,
                                                      CR_REPLAY_CALL_ROUTE,
                                                      CR_REPLAY_KV_EVENTS_OFF, c, &p, &err);
    CU_ASSERT_EQUAL_FATAL(st, CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(t, c, &p, 10, &r, &err), CR_OK);
    p.free(p.state);
    return r;
}

static void test_objectives_drawn(void)
{
    cr_replay_admission a;
    cr_replay_admission_default(&a);
    size_t n[2] = {0, 0}, heavy = 0, heavy_interactive = 0, moved = 0;
    for (size_t i = 0; i < 10000; i++) {
        unsigned cls, tenant, other_cls, other_tenant;
        cr_replay_admission_of(&a, (int64_t)i * 7, &cls, &tenant);
        n[cls]++;
        heavy += tenant == 0;
        heavy_interactive += tenant == 0 && cls == 0;
        a.seed = 2; /* another seed, other draws */
        cr_replay_admission_of(&a, (int64_t)i * 7, &other_cls, &other_tenant);
        moved += other_cls != cls;
        a.seed = 1;
    }
    CU_ASSERT(fabs(n[0] / 10000.0 - 0.6) < 0.02);
    CU_ASSERT(fabs(heavy / 10000.0 - 0.75) < 0.02);
    CU_ASSERT(fabs(heavy_interactive / (double)n[0] - 0.75) < 0.03); /* drawn apart */
    CU_ASSERT(moved > 3000); /* 2 x 0.6 x 0.4 of them, were the seeds independent */
    char text[128];
    cr_replay_admission_table(&a, text, sizeof text);
    CU_ASSERT_STRING_EQUAL(text, "interactive:0:2000,batch:-1:30000");
}

static void test_no_door_routes_unchanged(void)
{
    cr_replay_trace t;
    cr_replay_cluster c;
    open_run(&t, &c, 20);
    cr_replay_result plain = run(&t, &c, 0);
    cr_replay_admission a;
    cr_replay_admission_default(&a);
    c.admission = &a;
    cr_replay_result with = run(&t, &c, 0);
    CU_ASSERT_EQUAL(plain.requests, with.requests);
    CU_ASSERT_EQUAL(with.failed_requests, 0);
    CU_ASSERT_EQUAL(memcmp(plain.ttft_sorted_ms, with.ttft_sorted_ms,
                           plain.requests * sizeof(double)), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(with.admission);
    const cr_replay_admission_result *f = with.admission;
    CU_ASSERT_EQUAL(f->cls[0].requests + f->cls[1].requests, t.n);
    CU_ASSERT_EQUAL(f->cls[0].served + f->cls[1].served, t.n);
    CU_ASSERT_EQUAL(f->cls[1].shed + f->cls[1].held, 0);
    cr_replay_result_free(&plain);
    cr_replay_result_free(&with);
    cr_replay_trace_free(&t);
}

static void test_door_under_overload(void)
{
    cr_replay_trace t;
    cr_replay_cluster c;
    open_run(&t, &c, 200); /* far past 2 shards' service */
    cr_replay_admission a;
    cr_replay_admission_default(&a);
    a.door.max_queued = 64;
    a.door.max_per_id = 48;
    c.admission = &a;
    cr_replay_result r = run(&t, &c, 1);
    const cr_replay_admission_result *f = r.admission;
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    const cr_replay_class_result *in = &f->cls[0], *b = &f->cls[1];
    CU_ASSERT_EQUAL(in->shed + in->dropped + in->held, 0); /* critical: never */
    CU_ASSERT_EQUAL(in->served, in->requests);
    CU_ASSERT(b->held > 0);
    CU_ASSERT(b->shed + b->dropped > 0);
    CU_ASSERT_EQUAL(b->served + b->shed + b->dropped, b->requests);
    CU_ASSERT_EQUAL(r.failed_requests, b->shed + b->dropped);
    CU_ASSERT_EQUAL(r.requests, in->served + b->served);
    cr_replay_result again = run(&t, &c, 1); /* deterministic */
    CU_ASSERT_EQUAL(memcmp(again.admission, r.admission, sizeof *r.admission), 0);
    /* the routes' hash sees a door that acts */
    cr_replay_result plain = run(&t, &c, 0);
    CU_ASSERT_NOT_EQUAL(plain.admission->routes, r.admission->routes);
    cr_replay_result_free(&plain);
    cr_replay_result_free(&r);
    cr_replay_result_free(&again);
    /* below overload: nothing refused, nothing held, and the routes are
     * those without a door */
    cr_replay_trace_free(&t);
    open_run(&t, &c, 2);
    c.admission = &a;
    r = run(&t, &c, 1);
    CU_ASSERT_EQUAL(r.failed_requests, 0);
    CU_ASSERT_EQUAL(r.admission->cls[1].shed + r.admission->cls[1].held, 0);
    plain = run(&t, &c, 0);
    CU_ASSERT_EQUAL(plain.admission->routes, r.admission->routes);
    cr_replay_result_free(&plain);
    cr_replay_result_free(&r);
    /* a door needs the objectives */
    c.admission = NULL;
    cr_core_config core;
    cr_core_config_default(&core);
    cr_replay_policy p;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replay_cacheroute_door_policy(&core, &c, &p, &err), CR_EINVAL);
    cr_replay_trace_free(&t);
}

/* The door by its budget alone (no pressure signal) holds and dispatches
 * all along at twice 2 shards' service: of the held work dispatched, the
 * heavy tenant (3x the rate) gets no more than its max-min fair share,
 * within one request's work (the round robin's grain), and is not starved
 * either. */
static void test_fair_dispatch(void)
{
    cr_replay_trace t;
    cr_replay_cluster c;
    open_run(&t, &c, 100);
    cr_replay_admission a;
    cr_replay_admission_default(&a);
    a.door.pressure = 0;
    c.admission = &a;
    cr_replay_result r = run(&t, &c, 1);
    const cr_replay_class_result *b = &r.admission->cls[1];
    double sent = b->dispatched_work_ms[0] + b->dispatched_work_ms[1];
    double largest = 0;
    for (size_t i = 0; i < t.n; i++)
        largest = fmax(largest, cr_prefill_ms(&c.truth.prefill, 0, t.reqs[i].input_tokens));
    CU_ASSERT(sent > 100 * largest);
    CU_ASSERT(b->heavy_fair_dispatched_ms <= sent);
    CU_ASSERT(b->dispatched_work_ms[0] <= b->heavy_fair_dispatched_ms + largest);
    CU_ASSERT(b->dispatched_work_ms[0] > 0.5 * sent); /* more than half: the light ran dry */
    cr_replay_result_free(&r);
    cr_replay_trace_free(&t);
}

static const cr_test_case door_tests[] = {
    {"objectives drawn", test_objectives_drawn},
    {"without a door, routes unchanged", test_no_door_routes_unchanged},
    {"the door under overload", test_door_under_overload},
    {"held work dispatched fairly", test_fair_dispatch},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"replay door", door_tests}};
CR_TEST_MAIN(suites)
