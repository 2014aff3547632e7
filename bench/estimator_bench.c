/* Estimator memory per tracked owner at 1,000,000 owners (RSS delta) and
 * single-thread record() throughput over a 100,000-owner working set.
 *
 * usage: estimator_bench [owners] [working_set] [calls] */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "estimator.h"

int main(int argc, char **argv)
{
    uint64_t owners = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    uint64_t ws = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
    uint64_t calls = argc > 3 ? strtoull(argv[3], NULL, 10) : 50000000;
    cr_estimator_config cfg;
    cr_estimator_config_default(&cfg);
    cfg.max_owners = owners;
    cr_error err;

    long before = bench_status_bytes("VmRSS");
    cr_estimator *e = cr_estimator_new(&cfg, &err);
    for (uint64_t i = 0; i < owners; i++)
        cr_estimator_record(e, (int64_t)cr_mix64(i), i * 1e-6);
    long after = bench_status_bytes("VmRSS");
    printf("tracked %llu owners: RSS delta %.1f bytes/owner (%ld bytes), evictions %llu\n",
           (unsigned long long)cr_estimator_size(e), (double)(after - before) / owners,
           after - before, (unsigned long long)cr_estimator_evictions(e));
    cr_estimator_free(e);

    /* Owner ids are precomputed so the loop measures record(), not an RNG. */
    enum { SEQ = 1 << 20 };
    int64_t *seq = malloc(SEQ * sizeof *seq);
    uint64_t s = 7;
    for (size_t i = 0; i < SEQ; i++) {
        s = cr_mix64(s);
        seq[i] = (int64_t)(s % ws) * 2654435761LL;
    }
    e = cr_estimator_new(&cfg, &err);
    for (uint64_t i = 0; i < ws; i++)
        cr_estimator_record(e, (int64_t)i * 2654435761LL, 0);
    double sink = 0, t0 = bench_now();
    for (uint64_t i = 0; i < calls; i++)
        sink += cr_estimator_record(e, seq[i & (SEQ - 1)], (double)i * 1e-7);
    double dt = bench_now() - t0;
    printf("record: %.2f million calls/s on one thread (%llu calls over %llu owners, %.1f ns/call)"
           "%s\n",
           calls / dt / 1e6, (unsigned long long)calls, (unsigned long long)ws, dt / calls * 1e9,
           sink > 0 ? "" : " ");
    cr_estimator_free(e);
    free(seq);
    return 0;
}
