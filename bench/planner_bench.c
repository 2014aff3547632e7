/* Plan 1,000,000 sessions over 64 shards (budget admits all, Zipf-skewed
 * rates so the hottest need many shards) and compare with qsort of the same
 * 1,000,000 doubles, in the same run. Also the peak memory the plan adds,
 * per session, from the kernel's peak-RSS counter.
 *
 * usage: planner_bench [sessions] [shards] [repeats] */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "planner.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static cr_session_rate *make_sessions(size_t n, double qcap, uint32_t shards)
{
    cr_session_rate *r = malloc(n * sizeof *r);
    uint64_t s = 42;
    /* Zipf(1) rates: the hottest needs all shards, the tail far less than
     * one qcap. Owners are shuffled ids. */
    double top = qcap * shards * 4;
    for (size_t i = 0; i < n; i++)
        r[i] = (cr_session_rate){(int64_t)cr_mix64(i), top / (double)(i + 1)};
    for (size_t i = n - 1; i > 0; i--) {
        s = cr_mix64(s);
        size_t j = s % (i + 1);
        cr_session_rate t = r[i];
        r[i] = r[j];
        r[j] = t;
    }
    return r;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    uint32_t shards = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
    int repeats = argc > 3 ? atoi(argv[3]) : 5;
    cr_planner_config cfg = {shards, 10.0, 1e12};
    cr_session_rate *r = make_sessions(n, cfg.qcap, shards);
    double *keys = malloc(n * sizeof *keys);
    cr_error err;
    cr_table *t;

    /* Memory first, in a fresh heap: the peak RSS the plan adds. */
    long base = bench_reset_peak() == 0 ? bench_status_bytes("VmHWM") : -1;
    if (cr_planner_plan(&cfg, r, n, &t, &err) != CR_OK) {
        fprintf(stderr, "plan failed: %s\n", err.msg);
        return 1;
    }
    long peak = bench_status_bytes("VmHWM");
    size_t max_kb = 0, total_kb = 0;
    for (size_t i = 0; i < cr_table_n_placements(t); i++) {
        const cr_placement *p = cr_table_placement(t, i);
        total_kb += p->kb;
        max_kb = p->kb > max_kb ? p->kb : max_kb;
    }
    printf("sessions %zu, shards %u, admitted %zu, shard slots %zu, max kb %zu, imbalance %.6f\n",
           n, shards, cr_table_n_placements(t), total_kb, max_kb, cr_table_imbalance(t));
    if (base >= 0)
        printf("peak extra memory: %.1f bytes/session (%ld bytes)\n", (double)(peak - base) / n,
               peak - base);
    else
        printf("peak extra memory: unavailable (/proc/self/clear_refs not writable)\n");
    cr_table_free(t);

    double best_sort = INFINITY, best_plan = INFINITY;
    for (int k = 0; k < repeats; k++) {
        for (size_t i = 0; i < n; i++)
            keys[i] = r[i].rate;
        double t0 = bench_now();
        qsort(keys, n, sizeof *keys, cmp_double);
        double t1 = bench_now();
        cr_planner_plan(&cfg, r, n, &t, &err);
        double t2 = bench_now();
        cr_table_free(t);
        best_sort = fmin(best_sort, t1 - t0);
        best_plan = fmin(best_plan, t2 - t1);
    }
    printf("qsort %zu doubles: %.1f ms (best of %d)\n", n, best_sort * 1e3, repeats);
    printf("plan: %.1f ms (best of %d)\n", best_plan * 1e3, repeats);
    printf("plan / qsort: %.2f (target <= 2.0)\n", best_plan / best_sort);
    free(keys);
    free(r);
    return 0;
}
