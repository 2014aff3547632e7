/* What the door costs a Route, library level, one thread, virtual time:
 * cr_core_route of one request of H chained block hashes (a 16-block
 * prefix shared by groups of 8, the rest fresh) under --route-by ttft
 * over 8 shards, with the door idle (never pressed: no critical request
 * misses its SLO), three ways in interleaved rounds:
 *   none         no objective: the door never looks (the rule alone)
 *   critical     objective "interactive" (0, 2 s): placed, then sampled
 *   sheddable    objective "batch" (-1): the rule's prediction weighed
 *                first (cr_router_predict), then placed: two passes
 * The clock moves 2 ms a request and every route's outcome comes 50 ms
 * later, so queues stay short. Thread CPU time of the cr_core_route
 * calls alone (the outcomes untimed) per route, the median round.
 *
 * usage: door_bench [routes per round=200000] [rounds=5] [hashes=64] */
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core.h"

#define SHARDS 8
#define LAG 25 /* outcomes come this many routes later */

typedef struct vclock {
    double t;
} vclock;

static double vclock_now(void *ctx) { return ((vclock *)ctx)->t; }

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static cr_core *core_for(vclock *clock)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cfg.planner.n_shards = SHARDS;
    cfg.route.by = CR_ROUTE_TTFT;
    cr_clock_source src = {vclock_now, clock};
    cr_error err;
    cr_core *c = cr_core_new(&cfg, NULL, &src, &err);
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n;
    cr_admit_config ac;
    cr_admit_config_default(&ac);
    ac.budget_ms = 1000;
    if (!c || cr_admit_objectives_parse("interactive:0:2000,batch:-1:30000", t, &n, &err) != CR_OK ||
        cr_core_set_door(c, &ac, t, n, &err) != CR_OK) {
        fprintf(stderr, "door_bench: %s\n", err.msg);
        exit(1);
    }
    return c;
}

/* n routes of objective (NULL: none) from request k on; seconds of CPU
 * in cr_core_route. */
static double routes(cr_core *c, vclock *clock, const char *objective, uint32_t hashes,
                     uint64_t *k, uint64_t n)
{
    uint64_t h[256];
    char id[32], old[32];
    cr_error err;
    double spent = 0;
    for (uint64_t i = 0; i < n; i++, (*k)++) {
        uint64_t group = *k / 8, x = cr_mix64(*k + 1);
        for (uint32_t j = 0; j < hashes; j++)
            h[j] = j < 16 ? cr_mix64(group * 1000 + j) : cr_mix64(x + j);
        snprintf(id, sizeof id, "r%llu", (unsigned long long)*k);
        cr_route_request q = {.hashes = h, .n_hashes = hashes, .request_id = id,
                              .objective = objective,
                              .objective_len = objective ? strlen(objective) : 0};
        cr_route_answer a;
        clock->t += 0.002;
        double t0 = cpu_now();
        cr_status st = cr_core_route(c, &q, 1, &a, NULL, &err);
        spent += cpu_now() - t0;
        if (st != CR_OK) {
            fprintf(stderr, "door_bench: %s\n", err.msg);
            exit(1);
        }
        if (*k >= LAG) {
            snprintf(old, sizeof old, "r%llu", (unsigned long long)(*k - LAG));
            cr_outcome o = {.request_id = old};
            cr_outcome_counts counts;
            cr_core_report(c, &o, 1, &counts, &err);
        }
    }
    return spent;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    uint32_t hashes = argc > 3 ? (uint32_t)atoi(argv[3]) : 64;
    if (n < 1 || rounds < 1 || rounds > 99 || hashes < 17 || hashes > 256) {
        fprintf(stderr, "usage: door_bench [routes per round >= 1] [rounds 1..99] "
                        "[hashes 17..256]\n");
        return 2;
    }
    static const char *const objective[] = {NULL, "interactive", "batch"};
    static const char *const name[] = {"none", "critical", "sheddable"};
    enum { N = 3 };
    vclock clocks[N] = {{0}};
    cr_core *cores[N];
    uint64_t k[N] = {0};
    double ns[N][99];
    for (int c = 0; c < N; c++) {
        cores[c] = core_for(&clocks[c]);
        routes(cores[c], &clocks[c], objective[c], hashes, &k[c], n); /* warm */
    }
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < N; c++)
            ns[c][r] = routes(cores[c], &clocks[c], objective[c], hashes, &k[c], n) * 1e9 /
                       (double)n;
    printf("cr_core_route, 1 request of %u hashes, ttft over %d shards, idle door, %llu routes "
           "x %d rounds (median)\n",
           hashes, SHARDS, (unsigned long long)n, rounds);
    for (int c = 0; c < N; c++) {
        qsort(ns[c], (size_t)rounds, sizeof ns[c][0], by_value);
        cr_admit_stats st;
        size_t m;
        cr_admit_stats_read(cr_core_door(cores[c]), clocks[c].t, &st, NULL, 0, &m);
        printf("  %-10s %8.0f ns/route  (held %u, pressure %.3f)\n", name[c], ns[c][rounds / 2],
               st.held, st.pressure);
        cr_core_free(cores[c]);
    }
    return 0;
}
