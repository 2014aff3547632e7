/* Admission at the door on the core, in virtual time (core/door.c): a
 * core with a door routes requests without objectives exactly as one
 * without (and critical ones that meet their SLO); a sheddable request
 * over the budget is queued with nothing placed; a critical
 * one is never queued or shed; a held request is dispatched once the
 * outstanding work falls (an outcome), or dropped at its deadline. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "core_config.h"
#include "cunit_main.h"

#define SHARDS 2

typedef struct fixture {
    double t;
    cr_core *core;
} fixture;

static double now_of(void *ctx) { return ((fixture *)ctx)->t; }

/* ttft over shards with miss weight g (0: the default), prefill 1 ms a
 * token (1000 tokens: 1 s), engines' loads fresh for 1000 s; door 0:
 * none; 1: a door with budget 1500 ms and the wait bound wait_ms, acting
 * always (no pressure bound); 2: the same, never moving a pick for an
 * SLO (meet_slo off); 3: the same as 1 but idle until pressed (pressure
 * bound 0.1, time constant 10 ms); 4: as 3, moving picks always. */
static void open_core_n(fixture *f, uint32_t shards, int door, double wait_ms, double g)
{
    memset(f, 0, sizeof *f);
    cr_core_config cfg;
    cr_test_core_config(&cfg, shards);
    cfg.route.by = CR_ROUTE_TTFT;
    if (g > 0)
        cfg.route.miss_weight = g;
    cfg.route.scrape_interval_s = 1000;
    cr_test_core_fixed_model(&cfg, 1);
    cr_clock_source clock = {now_of, f};
    cr_error err;
    f->core = cr_core_new(&cfg, NULL, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
    if (!door)
        return;
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n;
    CU_ASSERT_EQUAL_FATAL(
            cr_admit_objectives_parse("interactive:0:2000,batch:-1:30000", t, &n, &err), CR_OK);
    cr_admit_config ac;
    cr_admit_config_default(&ac);
    ac.budget_ms = 1500;
    ac.pressure = 0; /* the budget decides at once: the queue's mechanics, not the signal's */
    if (door >= 3) {
        ac.pressure = 0.1;
        ac.pressure_tau_s = 0.01;
    }
    ac.max_wait_ms = wait_ms;
    ac.meet_slo = door == 2   ? CR_ADMIT_MEET_OFF
                  : door == 4 ? CR_ADMIT_MEET_ALWAYS
                              : CR_ADMIT_MEET_PRESSED;
    CU_ASSERT_EQUAL_FATAL(cr_core_set_door(f->core, &ac, t, n, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_set_door(f->core, &ac, t, n, &err), CR_ESTATE);
}

static void open_core_g(fixture *f, int door, double wait_ms, double g)
{
    open_core_n(f, SHARDS, door, wait_ms, g);
}

static void open_core(fixture *f, int door, double wait_ms) { open_core_g(f, door, wait_ms, 0); }

/* q routed alone at f's now: its answer (the call must succeed). */
static cr_route_answer route_q(fixture *f, const cr_route_request *q)
{
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_route(f->core, q, 1, &a, NULL, &err), CR_OK);
    return a;
}

static cr_route_answer route(fixture *f, int64_t owner, const char *objective, const char *id)
{
    cr_route_request q = {.has_owner = 1, .owner = owner, .prompt_tokens = 1000,
                          .request_id = id, .objective = objective,
                          .objective_len = objective ? strlen(objective) : 0,
                          .fairness = "tenant", .fairness_len = 6, .can_wait = 1};
    return route_q(f, &q);
}

/* With and without a door, the same calls route the same while nothing
 * is over its bound. */
static void test_same_routes_without_overload(void)
{
    fixture a, b;
    open_core(&a, 0, 30000);
    open_core(&b, 1, 30000);
    for (int i = 0; i < 40; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        a.t = b.t = i * 1.0; /* a request a second: 1 s of work on 2 shards */
        cr_route_answer x = route(&a, i % 5, NULL, id);
        cr_route_answer y = route(&b, i % 5, i % 3 ? "interactive" : NULL, id);
        CU_ASSERT_EQUAL(x.shard, y.shard);
        CU_ASSERT_EQUAL(y.door, CR_ROUTE_DOOR_ROUTED);
        CU_ASSERT_DOUBLE_EQUAL(x.queue_wait_ms, y.queue_wait_ms, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(x.prefill_ms, y.prefill_ms, 1e-9);
    }
    cr_core_free(a.core);
    cr_core_free(b.core);
}

static void test_queue_then_dispatch(void)
{
    fixture f;
    open_core(&f, 1, 30000);
    /* four critical seconds of work on two shards: every pick waits 1 s */
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "c%d", i);
        CU_ASSERT_EQUAL(route(&f, 10 + i, "interactive", id).door, CR_ROUTE_DOOR_ROUTED);
    }
    cr_route_stats before, after;
    cr_core_route_stats_read(f.core, &before, NULL, 0);
    cr_route_answer a = route(&f, 20, "batch", "b0");
    CU_ASSERT_EQUAL(a.door, CR_ROUTE_DOOR_QUEUED);
    CU_ASSERT_EQUAL(a.admitted, 0);
    CU_ASSERT(a.held != 0);
    CU_ASSERT(a.queue_wait_ms + a.prefill_ms > 1500); /* why: the prediction */
    cr_core_route_stats_read(f.core, &after, NULL, 0);
    CU_ASSERT_DOUBLE_EQUAL(after.work, before.work, 1e-9); /* nothing placed */
    /* critical: routed however long its wait */
    CU_ASSERT_EQUAL(route(&f, 11, "interactive", "c4").door, CR_ROUTE_DOOR_ROUTED);
    cr_core_dispatched d[4];
    CU_ASSERT_EQUAL(cr_core_admit_dispatch(f.core, d, 4), 0); /* still over */
    /* the outcomes come: the work falls, the held one goes */
    for (int i = 0; i < 5; i++) {
        char id[8];
        snprintf(id, sizeof id, "c%d", i);
        cr_outcome o = {.request_id = id};
        cr_outcome_counts counts;
        cr_error err;
        f.t = 2 + i;
        CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    }
    CU_ASSERT_EQUAL_FATAL(cr_core_admit_dispatch(f.core, d, 4), 1);
    CU_ASSERT_EQUAL(d[0].held, a.held);
    CU_ASSERT_EQUAL(d[0].dropped, 0);
    CU_ASSERT_STRING_EQUAL(d[0].request_id, "b0");
    CU_ASSERT_DOUBLE_EQUAL(d[0].held_ms, 6000, 1e-6);
    CU_ASSERT_EQUAL(d[0].answer.door, CR_ROUTE_DOOR_ROUTED);
    CU_ASSERT(d[0].answer.shard < SHARDS);
    cr_admit_stats st;
    cr_admit_stats_read(cr_core_door(f.core), f.t, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.objective[0].admitted, 5);
    CU_ASSERT_EQUAL(st.objective[0].shed + st.objective[0].queued, 0);
    CU_ASSERT_EQUAL(st.objective[1].queued, 1);
    CU_ASSERT_EQUAL(st.objective[1].admitted, 1);
    cr_core_free(f.core);
}

static void test_dropped_at_deadline(void)
{
    fixture f;
    open_core(&f, 1, 500); /* held at most 0.5 s */
    for (int i = 0; i < 6; i++) /* 3 s of work a shard: over the budget past the deadline */
        route(&f, 10 + i, "interactive", NULL);
    cr_route_answer a = route(&f, 20, "batch", "b0");
    CU_ASSERT_EQUAL_FATAL(a.door, CR_ROUTE_DOOR_QUEUED);
    route(&f, 21, "batch", "b1"); /* held behind it */
    cr_core_dispatched d[4];
    f.t = 0.5;
    CU_ASSERT_EQUAL(cr_core_admit_dispatch(f.core, d, 4), 0);
    f.t = 0.6;
    CU_ASSERT_EQUAL_FATAL(cr_core_admit_dispatch(f.core, d, 1), 1); /* one at a time */
    CU_ASSERT_EQUAL(d[0].dropped, 1);
    CU_ASSERT_EQUAL(d[0].answer.door, CR_ROUTE_DOOR_SHED);
    CU_ASSERT_EQUAL(cr_core_admit_dispatch(f.core, d, 4), 1);
    CU_ASSERT_EQUAL(cr_core_admit_dispatch(f.core, d, 4), 0);
    route(&f, 22, "batch", "b2"); /* left held: freed with the core */
    cr_core_free(f.core);
}

/* A held request taken out when its caller leaves: by its handle and its
 * request id both (a handle alone may be a later hold's), counted
 * dropped; then nothing of it is dispatched. */
static void test_cancelled(void)
{
    fixture f;
    open_core(&f, 1, 30000);
    for (int i = 0; i < 4; i++)
        route(&f, 10 + i, "interactive", NULL);
    cr_route_answer a = route(&f, 20, "batch", "b0");
    CU_ASSERT_EQUAL_FATAL(a.door, CR_ROUTE_DOOR_QUEUED);
    CU_ASSERT_EQUAL(cr_core_admit_cancel(f.core, a.held, "b1"), 0); /* another's id */
    CU_ASSERT_EQUAL(cr_core_admit_cancel(f.core, a.held + 1, "b0"), 0);
    CU_ASSERT_EQUAL(cr_core_admit_cancel(f.core, a.held, "b0"), 1);
    CU_ASSERT_EQUAL(cr_core_admit_cancel(f.core, a.held, "b0"), 0);
    f.t = 100; /* everything done, past every deadline */
    cr_core_dispatched d[4];
    CU_ASSERT_EQUAL(cr_core_admit_dispatch(f.core, d, 4), 0);
    cr_admit_stats st;
    cr_admit_stats_read(cr_core_door(f.core), f.t, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.objective[1].queued, 1);
    CU_ASSERT_EQUAL(st.objective[1].dropped, 1);
    CU_ASSERT_EQUAL(st.held, 0);
    /* a Route caller cannot wait: what the door would hold, it sheds */
    for (int i = 0; i < 4; i++)
        route(&f, 30 + i, "interactive", NULL);
    cr_route_request q = {.has_owner = 1, .owner = 40, .prompt_tokens = 1000,
                          .request_id = "b2", .objective = "batch", .objective_len = 5};
    a = route_q(&f, &q);
    CU_ASSERT_EQUAL(a.door, CR_ROUTE_DOOR_SHED);
    CU_ASSERT_EQUAL(a.held, 0);
    cr_core_free(f.core);
}

/* One request of n hashes (base + i) with objective (NULL: none) at f's
 * now, its answer. */
static cr_route_answer route_hashes(fixture *f, uint64_t base, uint32_t n, const char *objective,
                                    const char *id)
{
    uint64_t h[16];
    for (uint32_t i = 0; i < n; i++)
        h[i] = base + i;
    cr_route_request q = {.hashes = h, .n_hashes = n, .request_id = id, .objective = objective,
                          .objective_len = objective ? strlen(objective) : 0, .can_wait = 1};
    return route_q(f, &q);
}

/* A sheddable request is predicted, and placed only when the door routes
 * it: routed, it goes and counts exactly as without a door (shared
 * prefixes too: the prediction counts nothing); held, it leaves no blocks
 * in the index and no work. */
static void test_predicted_then_placed(void)
{
    fixture a, b;
    open_core_g(&a, 0, 30000, 8); /* shared prefixes weigh less: counted ones matter */
    open_core_g(&b, 1, 30000, 8);
    for (int i = 0; i < 60; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        a.t = b.t = i * 0.15; /* queues, but never over the budget */
        uint64_t base = (uint64_t)(i % 4) * 1000 + (uint64_t)(i % 3); /* shared prefixes */
        cr_route_answer x = route_hashes(&a, base, 8 + (uint32_t)(i % 5), NULL, id);
        cr_route_answer y = route_hashes(&b, base, 8 + (uint32_t)(i % 5), "batch", id);
        CU_ASSERT_EQUAL(y.door, CR_ROUTE_DOOR_ROUTED);
        CU_ASSERT_EQUAL(x.shard, y.shard);
        CU_ASSERT_EQUAL(x.cached_tokens, y.cached_tokens);
        CU_ASSERT_DOUBLE_EQUAL(x.prefill_ms, y.prefill_ms, 1e-9);
    }
    cr_core_free(a.core);
    /* under load a batch request of a new prefix is held: nothing of it kept */
    b.t = 1000;
    for (int i = 0; i < 4; i++)
        route(&b, 10 + i, "interactive", NULL);
    cr_route_stats before, after;
    cr_core_route_stats_read(b.core, &before, NULL, 0);
    cr_route_answer h = route_hashes(&b, 77000, 8, "batch", "held");
    CU_ASSERT_EQUAL_FATAL(h.door, CR_ROUTE_DOOR_QUEUED);
    cr_core_route_stats_read(b.core, &after, NULL, 0);
    CU_ASSERT_EQUAL(after.outstanding, before.outstanding);
    CU_ASSERT_DOUBLE_EQUAL(after.work, before.work, 1e-9);
    b.t = 2000; /* everything done, past its deadline */
    cr_route_answer c = route_hashes(&b, 77000, 8, "interactive", NULL);
    CU_ASSERT_EQUAL(c.cached_tokens, 0); /* its blocks were never sent anywhere */
    cr_core_free(b.core);
}

/* 1000 ms of work for shard s at f's now (only s allowed), released by
 * an outcome with id. */
static void load_shard(fixture *f, uint32_t s, const char *id)
{
    cr_route_request q = {.prompt_tokens = 1000, .request_id = id, .only = &s, .n_only = 1};
    CU_ASSERT_EQUAL_FATAL(route_q(f, &q).shard, s);
}

/* The 16-block prefix at 5000, interactive with a TTFT SLO of slo_ms, at
 * f's now: its answer. */
static cr_route_answer interactive(fixture *f, double slo_ms)
{
    uint64_t h[16];
    for (uint32_t i = 0; i < 16; i++)
        h[i] = 5000 + i;
    cr_route_request q = {.hashes = h, .n_hashes = 16, .objective = "interactive",
                          .objective_len = 11, .slo_ttft_ms = slo_ms};
    return route_q(f, &q);
}

/* That prefix cached on one shard, that shard then loaded with 1756 ms
 * of work left at 0.5 s, and the prefix asked again with a TTFT SLO of
 * slo_ms: its answer. Where it was cached: *home. */
static cr_route_answer cached_then_loaded(fixture *f, double slo_ms, uint32_t *home)
{
    *home = route_hashes(f, 5000, 16, NULL, NULL).shard;
    load_shard(f, *home, "l0");
    load_shard(f, *home, "l1");
    f->t = 0.5; /* half a second of it done */
    return interactive(f, slo_ms);
}

/* A critical request that misses its SLO at its pick raises the pressure
 * only while no shard idles: with room anywhere the cluster is not
 * overloaded, and the miss is its placement's (holding sheddable work
 * would not help it). */
static void test_pressure_only_without_room(void)
{
    fixture f;
    open_core_g(&f, 2, 30000, 8); /* picks kept: a miss stays a miss */
    uint32_t home;
    cached_then_loaded(&f, 500, &home); /* the first sample weighs nothing */
    cr_admit *door = cr_core_door(f.core);
    f.t = 0.6;
    cr_route_answer a = interactive(&f, 500);
    CU_ASSERT_EQUAL(a.shard, home);
    CU_ASSERT(a.queue_wait_ms + a.prefill_ms > 500); /* missed, the other shard idle */
    CU_ASSERT_DOUBLE_EQUAL(cr_admit_pressure(door), 0, 0);
    load_shard(&f, 1 - home, "l2"); /* no shard idles now */
    f.t = 0.7;
    a = interactive(&f, 500);
    CU_ASSERT_EQUAL(a.shard, home);
    CU_ASSERT_DOUBLE_EQUAL(cr_admit_pressure(door), 1 - exp(-0.1 / 120), 1e-12);
    cr_core_free(f.core);
}

/* A request with an SLO whose pick (its cache, behind a queue) would
 * miss it goes to the cheapest shard predicted to meet it; with none
 * that meets it, or with meet_slo off, or without a door, to the pick. */
static void test_placed_to_meet_its_slo(void)
{
    fixture none, off, on;
    open_core_g(&none, 0, 30000, 8); /* the cache weighs 8x: the queue is worth it */
    open_core_g(&off, 2, 30000, 8);
    open_core_g(&on, 1, 30000, 8);
    uint32_t home, home_off, home_on;
    cr_route_answer x = cached_then_loaded(&none, 1000, &home);
    CU_ASSERT_EQUAL(x.shard, home);
    CU_ASSERT(x.queue_wait_ms + x.prefill_ms > 1000); /* the pick misses a 1 s SLO */
    cr_route_answer y = cached_then_loaded(&off, 1000, &home_off);
    CU_ASSERT_EQUAL(y.shard, home_off);
    CU_ASSERT_DOUBLE_EQUAL(y.queue_wait_ms, x.queue_wait_ms, 1e-9);
    cr_route_answer z = cached_then_loaded(&on, 1000, &home_on);
    CU_ASSERT_EQUAL(z.shard, 1 - home_on); /* cold, idle, and within the SLO */
    CU_ASSERT_EQUAL(z.cached_tokens, 0);
    CU_ASSERT(z.queue_wait_ms + z.prefill_ms <= 1000);
    CU_ASSERT_EQUAL(z.door, CR_ROUTE_DOOR_ROUTED);
    CU_ASSERT_EQUAL(z.n_alternatives, 0);
    cr_core_free(none.core);
    cr_core_free(off.core);
    cr_core_free(on.core);
    /* an SLO no shard meets: the pick */
    open_core_g(&on, 1, 30000, 8);
    z = cached_then_loaded(&on, 100, &home_on);
    CU_ASSERT_EQUAL(z.shard, home_on);
    cr_core_free(on.core);
}

/* An idle door moves no pick, so that below overload every route is the
 * rule's; once pressed, the same pick is moved to meet its SLO; with
 * meet_slo always, an idle door moves it too. */
static void test_moved_only_while_pressed(void)
{
    fixture f;
    open_core_g(&f, 3, 30000, 8);
    cr_admit *door = cr_core_door(f.core);
    uint32_t home;
    cr_route_answer a = cached_then_loaded(&f, 1000, &home);
    CU_ASSERT_EQUAL(a.shard, home); /* idle: the pick, though it misses */
    CU_ASSERT(a.queue_wait_ms + a.prefill_ms > 1000);
    CU_ASSERT_FALSE(cr_admit_acts(door, 0));
    load_shard(&f, 1 - home, "l2"); /* no shard idles: a miss is overload */
    f.t = 0.55;
    a = interactive(&f, 1000);
    CU_ASSERT_EQUAL(a.shard, home); /* still idle when it was placed */
    CU_ASSERT(cr_admit_pressure(door) > 0.9);
    CU_ASSERT_TRUE(cr_admit_acts(door, 0)); /* pressed by that miss */
    cr_outcome o = {.request_id = "l2"};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK); /* 1 - home idles */
    f.t = 0.6;
    a = interactive(&f, 1000);
    CU_ASSERT_EQUAL(a.shard, 1 - home);
    CU_ASSERT(a.queue_wait_ms + a.prefill_ms <= 1000);
    cr_core_free(f.core);
    open_core_g(&f, 4, 30000, 8);
    a = cached_then_loaded(&f, 1000, &home);
    CU_ASSERT_FALSE(cr_admit_acts(cr_core_door(f.core), 0));
    CU_ASSERT_EQUAL(a.shard, 1 - home); /* always: moved by an idle door */
    CU_ASSERT(a.queue_wait_ms + a.prefill_ms <= 1000);
    cr_core_free(f.core);
}

/* shard's engine load: idle, adapter name listed, max adapter slots. */
static void give_adapter(fixture *f, uint32_t shard, const char *name, uint32_t max)
{
    cr_engine_load l = {.at_s = f->t, .kv_usage = NAN, .max_lora = max, .n_lora = 1};
    snprintf(l.lora[0], sizeof l.lora[0], "%s", name);
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_engine_load(f->core, shard, &l, &err), CR_OK);
}

/* A move weighs shards by the rule's own cost, an adapter's eviction
 * included: of two idle shards that both meet the SLO, the one with a
 * free adapter slot, not the lower-numbered one that must evict. */
static void test_move_weighs_the_adapter(void)
{
    fixture f;
    open_core_n(&f, 3, 1, 30000, 8);
    uint64_t h[16];
    for (uint32_t i = 0; i < 16; i++)
        h[i] = 5000 + i;
    cr_route_request q = {.hashes = h, .n_hashes = 16, .space = "a", .space_len = 1};
    uint32_t home = route_q(&f, &q).shard, evicts = home == 0 ? 1 : 0, spare = 3 - home - evicts;
    give_adapter(&f, home, "a", 1);
    give_adapter(&f, evicts, "b", 1); /* full: "a" would evict "b" */
    give_adapter(&f, spare, "c", 2);  /* a free slot */
    load_shard(&f, home, "l0");
    load_shard(&f, home, "l1");
    f.t = 0.5;
    q.objective = "interactive";
    q.objective_len = 11;
    q.slo_ttft_ms = 1000;
    cr_route_answer a = route_q(&f, &q);
    CU_ASSERT_EQUAL(a.shard, spare);
    CU_ASSERT(a.queue_wait_ms + a.prefill_ms <= 1000);
    cr_core_free(f.core);
}

/* A held request goes when the wait where the rule would send it falls
 * within the budget, not when some other shard idles: its pick is its
 * cache's shard, and a dispatch there would join the long queue. */
static void test_dispatched_by_its_pick(void)
{
    fixture f;
    open_core_g(&f, 1, 30000, 8);
    uint32_t home = route_hashes(&f, 9000, 16, NULL, NULL).shard;
    load_shard(&f, home, "l0");
    load_shard(&f, home, "l1"); /* over 2 s of work there, the other shard idle */
    f.t = 0.5; /* 1.76 s left: cheaper than a cold prefill at 8x, over the budget */
    cr_route_answer a = route_hashes(&f, 9000, 16, "batch", "b");
    CU_ASSERT_EQUAL_FATAL(a.door, CR_ROUTE_DOOR_QUEUED);
    CU_ASSERT_EQUAL(a.shard, home); /* predicted there: over the 1500 ms budget */
    cr_core_dispatched d[2];
    CU_ASSERT_EQUAL(cr_core_admit_dispatch(f.core, d, 2), 0); /* the other idles: no matter */
    cr_outcome o = {.request_id = "l0"};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_core_admit_dispatch(f.core, d, 2), 1); /* 1 s there now */
    CU_ASSERT_EQUAL(d[0].answer.shard, home);
    CU_ASSERT_EQUAL(d[0].answer.cached_tokens, a.cached_tokens);
    CU_ASSERT(d[0].answer.queue_wait_ms <= 1500);
    cr_core_free(f.core);
}

/* Routes and dispatches on two threads: a request is whole before the
 * door queues it, so a dispatcher taking it at once reads nothing being
 * written (TSan), and every one queued is dispatched or dropped once. */
typedef struct racers {
    fixture *f;
    atomic_int queued, done;
} racers;

static void *route_batch(void *arg)
{
    racers *r = arg;
    for (int i = 0; i < 200; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        if (route(r->f, 100 + i, "batch", id).door == CR_ROUTE_DOOR_QUEUED)
            atomic_fetch_add(&r->queued, 1);
    }
    atomic_store(&r->done, 1);
    return NULL;
}

static void test_route_and_dispatch_on_two_threads(void)
{
    fixture f;
    open_core(&f, 1, 30000);
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "c%d", i);
        route(&f, 10 + i, "interactive", id);
    }
    racers r = {.f = &f};
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, route_batch, &r), 0);
    for (int i = 0; i < 4; i++) { /* the work falls while batch requests arrive */
        char id[8];
        snprintf(id, sizeof id, "c%d", i);
        cr_outcome o = {.request_id = id};
        cr_outcome_counts counts;
        cr_error err;
        cr_core_report(f.core, &o, 1, &counts, &err);
    }
    cr_core_dispatched d[8];
    int left = 0;
    while (!atomic_load(&r.done))
        left += (int)cr_core_admit_dispatch(f.core, d, 8);
    pthread_join(t, NULL);
    f.t = 1000; /* past every deadline: the rest are dropped */
    size_t k;
    while ((k = cr_core_admit_dispatch(f.core, d, 8)) > 0)
        left += (int)k;
    CU_ASSERT_EQUAL(left, atomic_load(&r.queued));
    cr_admit_stats st;
    cr_admit_stats_read(cr_core_door(f.core), f.t, &st, NULL, 0, NULL);
    CU_ASSERT_EQUAL(st.held, 0);
    cr_core_free(f.core);
}

static const cr_test_case door_tests[] = {
    {"same routes without overload", test_same_routes_without_overload},
    {"queued, then dispatched when the work falls", test_queue_then_dispatch},
    {"dropped at the deadline", test_dropped_at_deadline},
    {"cancelled when its caller leaves; Route cannot wait", test_cancelled},
    {"predicted, then placed only when routed", test_predicted_then_placed},
    {"placed to meet its SLO", test_placed_to_meet_its_slo},
    {"a move weighs the adapter", test_move_weighs_the_adapter},
    {"pressure only without room", test_pressure_only_without_room},
    {"moved only while pressed", test_moved_only_while_pressed},
    {"dispatched when its pick's wait falls", test_dispatched_by_its_pick},
    {"route and dispatch on two threads", test_route_and_dispatch_on_two_threads},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"door", door_tests}};
CR_TEST_MAIN(suites)
