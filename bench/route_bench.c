/* RecordArrival's route at library level, on one thread, in virtual time:
 * cr_core_record of one owner per call (the common RPC) under --route-by
 * plan, bounded and live, with token weights (0.9k..126k), over 100,000
 * owners of which a table admits 1,600 (8 shards x W 200, the defaults).
 * The clock moves 100 us per call (10,000 arrivals/s), so outstanding work
 * stays at arrivals/s x --inflight-ttl: 10,000 with a 1 s ttl, and at the
 * 100,000 cap (an eviction every call) with the default 60 s. The three
 * rules run interleaved in rounds; each figure is the median round.
 *
 * Then routes against a large table (issue 14): cr_core_record of 1,000
 * owners a call, drawn uniformly from 1,000,000 tracked ones, under plan,
 * with a table admitting all 1,000,000 installed against none; the ratio
 * none / table is what the table's lookups cost. The same arrivals count
 * as the first half's calls per round.
 *
 * usage: route_bench [calls per round=2000000] [rounds=5] */
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core.h"

#define OWNERS 100000
#define SEQ (1u << 20)
#define BIG 1000000 /* the large table's sessions, all tracked */
#define BATCH 1000

typedef struct vclock {
    double t;
} vclock;

static double vclock_now(void *ctx) { return ((vclock *)ctx)->t; }

/* A core on the defaults (8 shards) with a table admitting the first 1,600
 * owners (the budget) planned from rates. */
static cr_core *core_for(cr_route_by by, double ttl_s, vclock *clock)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cfg.route.by = by;
    cfg.route.inflight_ttl_s = ttl_s;
    cr_clock_source src = {vclock_now, clock};
    cr_error err;
    cr_core *c = cr_core_new(&cfg, NULL, &src, &err);
    cr_session_rate *rates = malloc(OWNERS * sizeof *rates);
    if (!c || !rates) {
        fprintf(stderr, "core: %s\n", c ? "out of memory" : err.msg);
        exit(1);
    }
    for (int64_t o = 0; o < OWNERS; o++)
        rates[o] = (cr_session_rate){o, 1000.0 / (double)(o + 1)};
    cr_core_plan_request req = {.rates = rates, .n_rates = OWNERS, .install = 1};
    cr_core_plan_result res;
    if (cr_core_plan(c, &req, &res, &err) != CR_OK) {
        fprintf(stderr, "plan: %s\n", err.msg);
        exit(1);
    }
    cr_core_plan_result_free(&res);
    free(rates);
    return c;
}

/* ns per call over n calls of owners[i % SEQ] weighing weights[i % SEQ]. */
static double record_ns(cr_core *c, vclock *clock, const int64_t *owners, const double *weights,
                        uint64_t n)
{
    cr_route_answer r;
    cr_error err;
    double t0 = bench_now();
    for (uint64_t i = 0; i < n; i++) {
        clock->t += 1e-4;
        if (cr_core_record(c, &owners[i % SEQ], 1, &weights[i % SEQ], 1, &r, NULL, &err) !=
            CR_OK) {
            fprintf(stderr, "record: %s\n", err.msg);
            exit(1);
        }
    }
    return (bench_now() - t0) / (double)n * 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A core tracking owners 1..BIG (one arrival each), and with table set, a
 * plan admitting them all installed (kb 1 each: every rate under qcap). */
static cr_core *big_core(int table, vclock *clock)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cfg.estimator.max_owners = 2 * BIG;
    cr_clock_source src = {vclock_now, clock};
    cr_error err;
    cr_core *c = cr_core_new(&cfg, NULL, &src, &err);
    int64_t *ids = malloc(BIG * sizeof *ids);
    cr_session_rate *rates = malloc(BIG * sizeof *rates);
    if (!c || !ids || !rates) {
        fprintf(stderr, "core: %s\n", c ? "out of memory" : err.msg);
        exit(1);
    }
    for (int64_t o = 0; o < BIG; o++) {
        ids[o] = o + 1;
        rates[o] = (cr_session_rate){o + 1, 1000.0 / (double)(o + 1)};
    }
    for (size_t i = 0; i < BIG; i += BATCH)
        if (cr_core_record(c, ids + i, BATCH, NULL, 0, NULL, NULL, &err) != CR_OK) {
            fprintf(stderr, "record: %s\n", err.msg);
            exit(1);
        }
    cr_core_plan_request req = {.rates = rates, .n_rates = BIG, .install = 1,
                                .has_qcap = 1, .qcap = 1e4, .has_warm_slots_per_shard = 1,
                                .warm_slots_per_shard = (double)BIG / cfg.planner.n_shards};
    cr_core_plan_result res;
    if (table && cr_core_plan(c, &req, &res, &err) != CR_OK) {
        fprintf(stderr, "plan: %s\n", err.msg);
        exit(1);
    }
    if (table) {
        if (cr_table_n_placements(res.table) != BIG)
            fprintf(stderr, "plan admitted %zu\n", cr_table_n_placements(res.table));
        cr_core_plan_result_free(&res);
    }
    free(ids);
    free(rates);
    return c;
}

/* CPU ns per arrival over calls of BATCH owners from owners (SEQ + BATCH
 * of them); routes NULL records without routing. */
static double batch_ns(cr_core *c, vclock *clock, const int64_t *owners, uint64_t calls,
                       cr_route_answer *routes)
{
    cr_error err;
    double t0 = bench_thread_cpu();
    for (uint64_t k = 0; k < calls; k++) {
        clock->t += 1e-4;
        if (cr_core_record(c, &owners[(k * BATCH) % SEQ], BATCH, NULL, 0, routes, NULL, &err) !=
            CR_OK) {
            fprintf(stderr, "record: %s\n", err.msg);
            exit(1);
        }
    }
    return (bench_thread_cpu() - t0) / (double)(calls * BATCH) * 1e9;
}

/* The large table's half: records without routes, routes with no table
 * and routes with a table of BIG sessions, interleaved in rounds, medians;
 * "route" is a case's time less the first's. */
static void big_table(uint64_t arrivals, int rounds)
{
    int64_t *owners = malloc((SEQ + BATCH) * sizeof *owners);
    cr_route_answer *routes = malloc(BATCH * sizeof *routes);
    if (!owners || !routes)
        exit(1);
    for (uint64_t i = 0, x = 7; i < SEQ + BATCH; i++) {
        x = cr_mix64(x);
        owners[i] = (int64_t)(x % BIG) + 1;
    }
    static const struct {
        const char *name;
        int table, routes;
    } cases[] = {{"no routes (estimator only)", 0, 0},
                 {"routes, no table", 0, 1},
                 {"routes, table of 1M sessions", 1, 1}};
    enum { N_BIG = sizeof cases / sizeof cases[0] };
    uint64_t calls = arrivals / BATCH ? arrivals / BATCH : 1;
    vclock clocks[2] = {{0}};
    cr_core *cores[2];
    double ns[N_BIG][99];
    for (int k = 0; k < 2; k++) {
        cores[k] = big_core(k, &clocks[k]);
        batch_ns(cores[k], &clocks[k], owners, SEQ / BATCH, routes); /* warm */
    }
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < N_BIG; k++)
            ns[k][r] = batch_ns(cores[cases[k].table], &clocks[cases[k].table], owners, calls,
                                cases[k].routes ? routes : NULL);
    printf("cr_core_record, %d owners a call uniform over %d, plan, %llu calls x %d rounds "
           "(median thread CPU time)\n",
           BATCH, BIG, (unsigned long long)calls, rounds);
    for (int k = 0; k < N_BIG; k++) {
        qsort(ns[k], (size_t)rounds, sizeof ns[k][0], cmp_double);
        double med = ns[k][rounds / 2];
        printf("  %-30s %7.1f ns/arrival  %6.2f M/s  route %5.1f ns", cases[k].name, med,
               1e3 / med, med - ns[0][rounds / 2]);
        if (k == N_BIG - 1)
            printf("  %.3fx no table", ns[1][rounds / 2] / med);
        printf("\n");
    }
    for (int k = 0; k < 2; k++)
        cr_core_free(cores[k]);
    free(owners);
    free(routes);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > 99 || n < 1) {
        fprintf(stderr, "usage: route_bench [calls per round >= 1] [rounds 1..99]\n");
        return 2;
    }
    int64_t *owners = malloc(SEQ * sizeof *owners);
    double *weights = malloc(SEQ * sizeof *weights);
    if (!owners || !weights)
        return 1;
    for (uint64_t i = 0, x = 1; i < SEQ; i++) { /* owners skewed like rates: o ~ 1/u */
        x = cr_mix64(x);
        double u = (double)(x >> 11) / 9007199254740992.0;
        owners[i] = (int64_t)((double)OWNERS * u * u * u) % OWNERS;
        weights[i] = 900 + (double)((x >> 7) % 125300);
    }
    static const struct {
        const char *name;
        cr_route_by by;
        double ttl_s;
    } cases[] = {{"plan", CR_ROUTE_PLAN, 60},
                 {"bounded, ttl 1 s (10k outstanding)", CR_ROUTE_BOUNDED, 1},
                 {"bounded, ttl 60 s (at the 100k cap)", CR_ROUTE_BOUNDED, 60},
                 {"live, ttl 1 s", CR_ROUTE_LIVE, 1}};
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    vclock clocks[N_CASES] = {{0}};
    cr_core *cores[N_CASES];
    double ns[N_CASES][99];
    for (int k = 0; k < N_CASES; k++) {
        cores[k] = core_for(cases[k].by, cases[k].ttl_s, &clocks[k]);
        record_ns(cores[k], &clocks[k], owners, weights, SEQ); /* warm: steady state */
    }
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < N_CASES; k++)
            ns[k][r] = record_ns(cores[k], &clocks[k], owners, weights, n);
    printf("cr_core_record, 1 owner a call, token weights, %llu calls x %d rounds (median)\n",
           (unsigned long long)n, rounds);
    double plan = 0;
    for (int k = 0; k < N_CASES; k++) {
        qsort(ns[k], (size_t)rounds, sizeof ns[k][0], cmp_double);
        double med = ns[k][rounds / 2];
        plan = k == 0 ? med : plan;
        cr_route_stats st;
        cr_core_route_stats_read(cores[k], &st, NULL, 0);
        printf("  %-38s %7.1f ns/call  %6.2f M/s  %.3fx plan  outstanding %llu  %.1f MB\n",
               cases[k].name, med, 1e3 / med, plan / med, (unsigned long long)st.outstanding,
               (double)st.bytes / 1e6);
        cr_core_free(cores[k]);
    }
    free(owners);
    free(weights);
    big_table(n, rounds);
    return 0;
}
