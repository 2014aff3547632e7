/* Plan 1,000,000 sessions over 64 shards (budget admits all, Zipf-skewed
 * rates so the hottest need many shards) and compare with qsort of the same
 * 1,000,000 doubles, in the same run. Also the peak memory the plan adds,
 * per session, from the kernel's peak-RSS counter.
 *
 * Then the stable replan (issue 11): 1% of the rates changed (each times
 * 0.5 to 2), planned fresh and replanned stable from the first table, with
 * each one's time (best of repeats), the stable replan's peak memory and
 * both tables' churn against the first.
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

/* One rate in a hundred (a fixed pseudo-random choice) times 0.5 to 2. */
static cr_session_rate *change_one_percent(const cr_session_rate *r, size_t n)
{
    cr_session_rate *c = malloc(n * sizeof *c);
    size_t changed = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = cr_mix64(i ^ 0x5eed);
        c[i] = r[i];
        if (h % 100 == 0) {
            c[i].rate *= 0.5 + 1.5 * (double)(h >> 11) / 9007199254740992.0;
            changed++;
        }
    }
    printf("rates changed: %zu of %zu\n", changed, n);
    return c;
}

static void print_churn(const char *what, const cr_table *prev, const cr_table *t)
{
    cr_churn c = cr_table_churn(prev, t);
    printf("%s: churn moved %llu, admitted in %llu, out %llu (%.4f%% of admitted), "
           "imbalance %.6f\n",
           what, (unsigned long long)c.moved, (unsigned long long)c.admitted_in,
           (unsigned long long)c.admitted_out,
           100.0 * (double)(c.moved + c.admitted_in) / (double)cr_table_n_placements(t),
           cr_table_imbalance(t));
}

/* The stable replan against a fresh plan of the same changed rates. */
static void bench_stable(const cr_planner_config *cfg, const cr_table *prev_table,
                         const cr_session_rate *r, size_t n, int repeats)
{
    cr_replan_prev from = {prev_table, NULL, NULL}, *prev = &from;
    cr_replan_config rc;
    cr_replan_config_default(&rc);
    rc.mode = CR_REPLAN_STABLE;
    cr_error err;
    cr_table *t;
    long base = bench_reset_peak() == 0 ? bench_status_bytes("VmHWM") : -1;
    if (cr_planner_replan(cfg, &rc, prev, r, n, &t, &err) != CR_OK) {
        fprintf(stderr, "replan failed: %s\n", err.msg);
        exit(1);
    }
    long peak = bench_status_bytes("VmHWM");
    if (base >= 0)
        printf("stable replan peak extra memory: %.1f bytes/session (%ld bytes)\n",
               (double)(peak - base) / n, peak - base);
    print_churn("stable", prev_table, t);
    cr_table_free(t);
    cr_planner_plan(cfg, r, n, &t, &err);
    print_churn("fresh", prev_table, t);
    cr_table_free(t);
    double best_fresh = INFINITY, best_stable = INFINITY;
    for (int k = 0; k < repeats; k++) {
        double t0 = bench_now();
        cr_planner_plan(cfg, r, n, &t, &err);
        double t1 = bench_now();
        cr_table_free(t);
        double t2 = bench_now();
        cr_planner_replan(cfg, &rc, prev, r, n, &t, &err);
        double t3 = bench_now();
        cr_table_free(t);
        best_fresh = fmin(best_fresh, t1 - t0);
        best_stable = fmin(best_stable, t3 - t2);
    }
    printf("fresh plan, 1%% changed: %.1f ms (best of %d)\n", best_fresh * 1e3, repeats);
    printf("stable replan, 1%% changed: %.1f ms (best of %d)\n", best_stable * 1e3, repeats);
    printf("stable / fresh: %.2f (target <= 1.0)\n", best_stable / best_fresh);
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
    cr_session_rate *changed = change_one_percent(r, n);
    bench_stable(&cfg, t, changed, n, repeats);
    free(changed);
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
