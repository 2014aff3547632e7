/* Estimator memory per tracked owner, record() and record_batch()
 * throughput on one thread over a working set, and the sorted snapshot a
 * Plan from_estimator takes (with the plan itself, default config).
 *
 * usage: estimator_bench [owners] [working_set] [calls]     memory, then record()
 *        estimator_bench --owners N [--calls N] [--batch K] [--max-owners M]
 *            record() (K = 0) or batches of K over a working set of N owners in
 *            a table of M (default max(N, 1000000); M < N: constant eviction)
 *        estimator_bench --plan [--owners N] [--repeats N]  snapshot + plan */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "estimator.h"

static cr_estimator *make(uint64_t max_owners)
{
    cr_estimator_config cfg;
    cr_estimator_config_default(&cfg);
    cfg.max_owners = max_owners;
    cr_error err;
    cr_estimator *e = cr_estimator_new(&cfg, &err);
    if (!e) {
        fprintf(stderr, "estimator_bench: %s\n", err.msg);
        exit(1);
    }
    return e;
}

static void memory(uint64_t owners)
{
    long before = bench_status_bytes("VmRSS");
    cr_estimator *e = make(owners);
    for (uint64_t i = 0; i < owners; i++)
        cr_estimator_record(e, (int64_t)cr_mix64(i), i * 1e-6);
    long after = bench_status_bytes("VmRSS");
    printf("tracked %llu owners: RSS delta %.1f bytes/owner (%ld bytes), evictions %llu\n",
           (unsigned long long)cr_estimator_size(e), (double)(after - before) / owners,
           after - before, (unsigned long long)cr_estimator_evictions(e));
    cr_estimator_free(e);
}

/* calls arrivals over ws owners (ids precomputed, so the loop measures the
 * estimator, not an RNG), the clock advancing 0.1 us per arrival: one
 * record() each (batch 0) or batches of batch owners at one time each. The
 * ids cycle through a sequence of 1M draws, or 4M when ws > max_owners:
 * more distinct ids than the table holds, so such a run keeps evicting
 * (with 1M draws most of them would stay tracked after one pass). Only the
 * measured arrivals' evictions are reported. */
static void throughput(uint64_t ws, uint64_t calls, uint64_t batch, uint64_t max_owners)
{
    const size_t SEQ = ws > max_owners ? (size_t)1 << 22 : (size_t)1 << 20;
    batch = batch < SEQ ? batch : SEQ;
    int64_t *seq = malloc(SEQ * sizeof *seq);
    double *rates = malloc((batch ? batch : 1) * sizeof *rates);
    uint64_t s = 7;
    for (size_t i = 0; i < SEQ; i++) {
        s = cr_mix64(s);
        seq[i] = (int64_t)(s % ws) * 2654435761LL;
    }
    cr_estimator *e = make(max_owners);
    for (uint64_t i = 0; i < ws; i++)
        cr_estimator_record(e, (int64_t)i * 2654435761LL, 0);
    uint64_t evicted = cr_estimator_evictions(e);
    double sink = 0, t0 = bench_now();
    if (!batch) {
        for (uint64_t i = 0; i < calls; i++)
            sink += cr_estimator_record(e, seq[i & (SEQ - 1)], (double)i * 1e-7);
    } else {
        size_t at = 0;
        for (uint64_t i = 0; i + batch <= calls; i += batch, at += batch) {
            at = at + batch <= SEQ ? at : 0;
            cr_estimator_record_batch(e, seq + at, NULL, batch, (double)i * 1e-7, rates);
            sink += rates[0];
        }
    }
    double dt = bench_now() - t0;
    printf("%s: %.2f million arrivals/s on one thread (%llu over %llu owners, batch %llu, "
           "max_owners %llu, %.1f ns each, %llu evictions)%s\n",
           batch ? "record_batch" : "record", calls / dt / 1e6, (unsigned long long)calls,
           (unsigned long long)ws, (unsigned long long)batch, (unsigned long long)max_owners,
           dt / calls * 1e9, (unsigned long long)(cr_estimator_evictions(e) - evicted),
           sink > 0 ? "" : " ");
    cr_estimator_free(e);
    free(seq);
    free(rates);
}

/* owners tracked with Zipf(1)-like rates (shuffled ids), then the best of
 * repeats of: cr_estimator_rates (sorted snapshot) and cr_planner_plan of it
 * with the default planner config, as Plan from_estimator does. */
static void plan(uint64_t owners, int repeats)
{
    cr_estimator *e = make(owners);
    for (uint64_t i = 0; i < owners; i++)
        cr_estimator_record_weighted(e, (int64_t)cr_mix64(i), 1e6 / (double)(i + 1), 0);
    cr_planner_config cfg;
    cr_planner_config_default(&cfg);
    double best_snap = INFINITY, best_plan = INFINITY, best_total = INFINITY;
    size_t admitted = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = bench_now();
        size_t n;
        cr_session_rate *rates = cr_estimator_rates(e, 1, &n);
        double t1 = bench_now();
        cr_table *t = NULL;
        cr_error err;
        if (!rates || cr_planner_plan(&cfg, rates, n, &t, &err) != CR_OK) {
            fprintf(stderr, "estimator_bench: plan failed\n");
            exit(1);
        }
        double t2 = bench_now();
        admitted = cr_table_n_placements(t);
        cr_table_free(t);
        free(rates);
        best_snap = fmin(best_snap, t1 - t0);
        best_plan = fmin(best_plan, t2 - t1);
        best_total = fmin(best_total, t2 - t0);
    }
    printf("from_estimator over %llu owners: snapshot %.1f ms + plan %.1f ms, total %.1f ms "
           "(best of %d each; %zu admitted)\n",
           (unsigned long long)owners, best_snap * 1e3, best_plan * 1e3, best_total * 1e3,
           repeats, admitted);
    cr_estimator_free(e);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strncmp(argv[1], "--", 2) == 0) {
        uint64_t owners = bench_flag(argc, argv, "--owners", 1000000);
        if (bench_has(argc, argv, "--plan"))
            plan(owners, (int)bench_flag(argc, argv, "--repeats", 5));
        else
            throughput(owners, bench_flag(argc, argv, "--calls", 50000000),
                       bench_flag(argc, argv, "--batch", 0),
                       bench_flag(argc, argv, "--max-owners", owners > 1000000 ? owners : 1000000));
        return 0;
    }
    uint64_t owners = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    memory(owners);
    throughput(argc > 2 ? strtoull(argv[2], NULL, 10) : 100000,
               argc > 3 ? strtoull(argv[3], NULL, 10) : 50000000, 0, owners);
    return 0;
}
