/* RecordArrival's route at library level, on one thread, in virtual time:
 * cr_core_record of one owner per call (the common RPC) under --route-by
 * plan, bounded and live, with token weights (0.9k..126k), over 100,000
 * owners of which a table admits 1,600 (8 shards x W 200, the defaults).
 * The clock moves 100 us per call (10,000 arrivals/s), so outstanding work
 * stays at arrivals/s x --inflight-ttl: 10,000 with a 1 s ttl, and at the
 * 100,000 cap (an eviction every call) with the default 60 s. The three
 * rules run interleaved in rounds; each figure is the median round.
 *
 * usage: route_bench [calls per round=2000000] [rounds=5] */
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core.h"

#define OWNERS 100000
#define SEQ (1u << 20)

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
    cfg.route_by = by;
    cfg.inflight_ttl_s = ttl_s;
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
    cr_route r;
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
        cr_core_route_stats st;
        cr_core_route_stats_read(cores[k], &st, NULL, 0);
        printf("  %-38s %7.1f ns/call  %6.2f M/s  %.3fx plan  outstanding %llu  %.1f MB\n",
               cases[k].name, med, 1e3 / med, plan / med, (unsigned long long)st.outstanding,
               (double)st.bytes / 1e6);
        cr_core_free(cores[k]);
    }
    free(owners);
    free(weights);
    return 0;
}
