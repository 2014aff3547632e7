/* Rate estimator: both clocks' math, a Poisson stream, eviction bounds and
 * a multi-threaded run (built under ThreadSanitizer in CI). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "estimator.h"

static cr_estimator *make(cr_clock clock, double half_life, uint64_t max_owners)
{
    cr_estimator_config cfg;
    cr_estimator_config_default(&cfg);
    cfg.clock = clock;
    cfg.half_life = half_life;
    cfg.max_owners = max_owners;
    cr_error err;
    cr_estimator *e = cr_estimator_new(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    return e;
}

static void test_defaults_and_config_errors(void)
{
    cr_estimator_config cfg;
    cr_estimator_config_default(&cfg);
    CU_ASSERT_EQUAL(cfg.clock, CR_CLOCK_SECONDS);
    CU_ASSERT_EQUAL(cfg.half_life, 20);
    CU_ASSERT_EQUAL(cfg.window, 256);
    CU_ASSERT_EQUAL(cfg.max_owners, 1000000);
    cr_error err;
    cfg.half_life = 0;
    CU_ASSERT_PTR_NULL(cr_estimator_new(&cfg, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "half_life must be finite and > 0, got 0");
    cfg.half_life = NAN;
    CU_ASSERT_PTR_NULL(cr_estimator_new(&cfg, &err));
    cfg.half_life = 20;
    cfg.window = 0;
    CU_ASSERT_PTR_NULL(cr_estimator_new(&cfg, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "window must be >= 1, got 0");
    cfg.window = 1;
    cfg.max_owners = 0;
    CU_ASSERT_PTR_NULL(cr_estimator_new(&cfg, &err));
    cfg.max_owners = 1;
    cfg.clock = (cr_clock)7;
    CU_ASSERT_PTR_NULL(cr_estimator_new(&cfg, &err));
}

static void test_calls_mode_math(void)
{
    /* r_n = sum_{k<n} d^k = (1 - d^n) / (1 - d), d = 0.5^(1/H); no time decay. */
    cr_estimator *e = make(CR_CLOCK_CALLS, 4, 100);
    double d = pow(0.5, 1.0 / 4);
    for (int n = 1; n <= 200; n++) {
        double r = cr_estimator_record(e, 42, 1000.0 * n);
        CU_ASSERT_DOUBLE_EQUAL(r, (1 - pow(d, n)) / (1 - d), 1e-12);
    }
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 42, 1e9), (1 - pow(d, 200)) / (1 - d), 1e-12);
    /* Converges to 1 / (1 - d). */
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 42, 0), 1 / (1 - d), 1e-9);
    /* H counted in the owner's own calls: another owner does not decay 42. */
    double before = cr_estimator_rate(e, 42, 0);
    for (int i = 0; i < 50; i++)
        cr_estimator_record(e, 43, 0);
    CU_ASSERT_EQUAL(cr_estimator_rate(e, 42, 0), before);
    CU_ASSERT_EQUAL(cr_estimator_rate(e, 44, 0), 0);
    cr_estimator_free(e);
}

static void test_seconds_mode_math(void)
{
    double H = 10, inc = log(2) / H;
    cr_estimator *e = make(CR_CLOCK_SECONDS, H, 100);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_record(e, 1, 100), inc, 1e-15);
    /* One half-life later the count has halved. */
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 1, 110), inc / 2, 1e-15);
    /* Arrival at 105: r = inc * 2^(-0.5) + inc. */
    double r = cr_estimator_record(e, 1, 105);
    CU_ASSERT_DOUBLE_EQUAL(r, inc * pow(2, -0.5) + inc, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 1, 125), r * pow(2, -2.0), 1e-12);
    /* An arrival stamped in the past counts at its own time (forward
     * decay): every rate is the sum over arrivals of inc 2^(-(t - t_i)/H). */
    double r2 = cr_estimator_record(e, 1, 104);
    CU_ASSERT_DOUBLE_EQUAL(r2, inc * (pow(2, -0.4) + pow(2, 0.1) + 1), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 1, 103),
                           inc * (pow(2, -0.3) + pow(2, 0.2) + pow(2, 0.1)), 1e-12);
    double at105 = inc * (pow(2, -0.5) + 1 + pow(2, -0.1));
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 1, 105), at105, 1e-12);
    /* Idle decay: 20 half-lives later the rate is 2^-20 of itself. */
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 1, 105 + 20 * H), at105 * pow(2, -20), 1e-18);
    /* Read before the partition's epoch (100, its first arrival), a rate
     * is its rate at the epoch: never grown. */
    CU_ASSERT_EQUAL(cr_estimator_rate(e, 1, 50), cr_estimator_rate(e, 1, 100));
    cr_estimator_free(e);
}

static double exp_sample(unsigned *seed, double lambda)
{
    double u = (rand_r(seed) + 1.0) / ((double)RAND_MAX + 2.0);
    return -log(u) / lambda;
}

static void test_seconds_mode_poisson(void)
{
    /* Steady Poisson streams; after ten half-lives of warm-up the estimate at
     * every 50 s checkpoint is within 10% of the true rate. The relative
     * noise is about sqrt(ln 2 / (2 H lambda)): 2.6% for the slowest stream
     * here, so 10% is a wide margin, not a coin toss. */
    const double lambdas[] = {5, 50, 400}, halves[] = {100, 20, 20};
    for (int k = 0; k < 3; k++) {
        cr_estimator *e = make(CR_CLOCK_SECONDS, halves[k], 100);
        unsigned seed = 99 + k;
        double t = 0, worst = 0, warm = 10 * halves[k], next_check = warm;
        int checks = 0;
        while (t < warm + 2000) {
            t += exp_sample(&seed, lambdas[k]);
            cr_estimator_record(e, 5, t);
            if (t >= next_check) {
                double err = fabs(cr_estimator_rate(e, 5, t) / lambdas[k] - 1);
                worst = err > worst ? err : worst;
                next_check += 50;
                checks++;
            }
        }
        CU_ASSERT_EQUAL(checks, 41); /* warm, warm + 50, ..., warm + 2000 */
        CU_ASSERT_TRUE(worst < 0.10);
        /* After the stream stops, the rate halves every half-life. */
        CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 5, t + 2 * halves[k]) /
                                   cr_estimator_rate(e, 5, t), 0.25, 1e-12);
        cr_estimator_free(e);
    }
}

static void test_rates_snapshot_and_forget(void)
{
    cr_estimator *e = make(CR_CLOCK_CALLS, 20, 1000);
    int64_t owners[] = {5, -3, 900, 0, INT64_MIN, INT64_MAX, 17};
    for (int i = 0; i < 7; i++)
        for (int k = 0; k <= i; k++)
            cr_estimator_record(e, owners[i], 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 7);
    size_t n;
    cr_session_rate *all = cr_estimator_rates(e, 0, &n);
    CU_ASSERT_EQUAL_FATAL(n, 7);
    int64_t want[] = {INT64_MIN, -3, 0, 5, 17, 900, INT64_MAX};
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(all[i].owner, want[i]);
        CU_ASSERT_EQUAL(all[i].rate, cr_estimator_rate(e, want[i], 0));
    }
    free(all);
    CU_ASSERT_EQUAL(cr_estimator_forget(e, 900), 1);
    CU_ASSERT_EQUAL(cr_estimator_forget(e, 900), 0);
    CU_ASSERT_EQUAL(cr_estimator_forget(e, 12345), 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 6);
    CU_ASSERT_EQUAL(cr_estimator_rate(e, 900, 0), 0);
    /* A forgotten owner starts from scratch. */
    CU_ASSERT_EQUAL(cr_estimator_record(e, 900, 0), 1);
    cr_estimator_free(e);
}

static void test_table_growth_and_deletes(void)
{
    /* Many owners through growth, then delete every other one: the rest are
     * all still found with their exact counts (backward-shift deletion). */
    enum { N = 50000 };
    cr_estimator *e = make(CR_CLOCK_CALLS, 1e9, N);
    for (int64_t i = 0; i < N; i++)
        for (int k = 0; k < 1 + (i % 3); k++)
            cr_estimator_record(e, i * 1000003, 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), N);
    for (int64_t i = 0; i < N; i += 2)
        CU_ASSERT_EQUAL(cr_estimator_forget(e, i * 1000003), 1);
    int bad = 0;
    for (int64_t i = 0; i < N; i++) {
        double want = i % 2 ? 1 + (double)(i % 3) : 0;
        bad += fabs(cr_estimator_rate(e, i * 1000003, 0) - want) > 1e-6;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), N / 2);
    CU_ASSERT_EQUAL(cr_estimator_evictions(e), 0);
    cr_estimator_free(e);
}

static void test_eviction_bounds_table(void)
{
    cr_estimator *e = make(CR_CLOCK_SECONDS, 20, 1000);
    /* Ten hot owners, then a flood of 100,000 one-shot random owners. */
    for (int k = 0; k < 100; k++)
        for (int64_t h = 1; h <= 10; h++)
            cr_estimator_record(e, h, 0);
    unsigned seed = 1;
    for (int i = 0; i < 100000; i++) {
        int64_t owner = ((int64_t)rand_r(&seed) << 31 | rand_r(&seed)) + 1000;
        CU_ASSERT_TRUE(cr_estimator_record(e, owner, 0) > 0);
        /* the owner just recorded is never the one evicted */
        if (i % 997 == 0)
            CU_ASSERT_TRUE(cr_estimator_rate(e, owner, 0) > 0);
        CU_ASSERT_TRUE(cr_estimator_size(e) <= 1000);
    }
    CU_ASSERT_EQUAL(cr_estimator_size(e), 1000);
    CU_ASSERT_EQUAL(cr_estimator_evictions(e), 100000 + 10 - 1000);
    size_t n;
    free(cr_estimator_rates(e, 0, &n));
    CU_ASSERT_EQUAL(n, 1000);
    /* The hot owners survive: eviction takes the lowest rate the hand sees. */
    for (int64_t h = 1; h <= 10; h++)
        CU_ASSERT_TRUE(cr_estimator_rate(e, h, 0) > 50 * log(2) / 20);
    cr_estimator_free(e);

    /* max_owners = 1: each new owner replaces the previous one. */
    e = make(CR_CLOCK_CALLS, 20, 1);
    cr_estimator_record(e, 1, 0);
    cr_estimator_record(e, 2, 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 1);
    CU_ASSERT_EQUAL(cr_estimator_rate(e, 1, 0), 0);
    CU_ASSERT_EQUAL(cr_estimator_rate(e, 2, 0), 1);
    cr_estimator_free(e);
}

static void test_eviction_from_other_partition(void)
{
    /* White-box: at max_owners 4096 the table has 2 partitions, picked by
     * the low bit of cr_mix64(owner). Fill it with partition-1 owners only;
     * a partition-0 newcomer must evict from partition 1. */
    cr_estimator *e = make(CR_CLOCK_CALLS, 20, 4096);
    int64_t o = 0;
    for (uint64_t filled = 0; filled < 4096; o++)
        if (cr_mix64((uint64_t)o) & 1) {
            cr_estimator_record(e, o, 0);
            filled++;
        }
    CU_ASSERT_EQUAL(cr_estimator_size(e), 4096);
    while (cr_mix64((uint64_t)o) & 1)
        o++;
    CU_ASSERT_EQUAL(cr_estimator_record(e, o, 0), 1);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 4096);
    CU_ASSERT_EQUAL(cr_estimator_evictions(e), 1);
    CU_ASSERT_EQUAL(cr_estimator_rate(e, o, 0), 1);
    cr_estimator_free(e);
}

/* ---- weighted arrivals ---- */

static void test_weighted_seconds_math(void)
{
    /* An arrival of weight w adds w ln2/H; decay is as for requests. */
    double H = 10, inc = log(2) / H;
    cr_estimator *e = make(CR_CLOCK_SECONDS, H, 100);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_record_weighted(e, 1, 4096, 100), 4096 * inc, 1e-12);
    double r = cr_estimator_record_weighted(e, 1, 512, 105);
    CU_ASSERT_DOUBLE_EQUAL(r, 4096 * inc * pow(2, -0.5) + 512 * inc, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 1, 115), r / 2, 1e-12);
    /* A Poisson stream of 50/s weighing 2000 each reads as 100k per second. */
    unsigned seed = 7;
    double t = 0;
    while (t < 400) {
        t += exp_sample(&seed, 50);
        cr_estimator_record_weighted(e, 2, 2000, t);
    }
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 2, t) / 1e5, 1, 0.10);
    cr_estimator_free(e);
}

static void test_weighted_calls_math(void)
{
    /* w instead of 1: r_n = w (1 - d^n) / (1 - d). */
    cr_estimator *e = make(CR_CLOCK_CALLS, 4, 100);
    double d = pow(0.5, 1.0 / 4);
    for (int n = 1; n <= 50; n++)
        CU_ASSERT_DOUBLE_EQUAL(cr_estimator_record_weighted(e, 42, 300, 0),
                               300 * (1 - pow(d, n)) / (1 - d), 1e-9);
    cr_estimator_free(e);
}

static void test_weight_one_is_unweighted_bit_for_bit(void)
{
    for (int clock = 0; clock < 2; clock++) {
        cr_estimator *a = make((cr_clock)clock, 20, 100), *b = make((cr_clock)clock, 20, 100);
        for (int k = 0; k < 500; k++) {
            double t = k * 0.173, ra = cr_estimator_record(a, k % 7, t);
            double rb = cr_estimator_record_weighted(b, k % 7, 1.0, t);
            CU_ASSERT_EQUAL(memcmp(&ra, &rb, sizeof ra), 0);
        }
        cr_estimator_free(a);
        cr_estimator_free(b);
    }
}

static void test_tiny_weight_stays_tracked(void)
{
    /* w ln2/H underflows to 0 for the smallest double; the increment is
     * floored at DBL_MIN so the owner is tracked, not an empty slot. */
    cr_estimator *e = make(CR_CLOCK_SECONDS, 1e6, 100);
    CU_ASSERT_TRUE(cr_estimator_record_weighted(e, 9, 4.9e-324, 0) > 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 1);
    CU_ASSERT_TRUE(cr_estimator_rate(e, 9, 0) > 0);
    CU_ASSERT_EQUAL(cr_estimator_forget(e, 9), 1);
    cr_estimator_free(e);
}

/* ---- forward decay: epochs and renormalisation ---- */

static void test_arrival_before_epoch(void)
{
    /* Owner 2 arrives at 99.5, before its partition's epoch (100, owner
     * 1's arrival; one partition at 100 owners): it weighs its own time. */
    double H = 10, inc = log(2) / H;
    cr_estimator *e = make(CR_CLOCK_SECONDS, H, 100);
    cr_estimator_record(e, 1, 100);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_record(e, 2, 99.5), inc * pow(2, -0.05), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 2, 110), inc * pow(2, -1.05), 1e-15);
    /* Far before (10^5 half-lives): floored at the smallest double, tracked. */
    CU_ASSERT_TRUE(cr_estimator_record(e, 3, -1e6) > 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 3);
    CU_ASSERT_TRUE(cr_estimator_rate(e, 3, 100) > 0);
    cr_estimator_free(e);
}

/* rate(t) of an owner that had one arrival of inc at each time in ts. */
static double forward_sum(const double *ts, int n, double t, double H)
{
    double r = 0;
    for (int i = 0; i < n; i++)
        r += log(2) / H * exp2(-(t - ts[i]) / H);
    return r;
}

static void test_renormalise_keeps_rates_and_chains(void)
{
    /* H = 1 s and owner 0 arriving at 0, 400, 800, ..., 4000 s: its
     * partition (the only one at 3000 owners) is renormalised every other
     * step, past 512 half-lives. The other owners arrive once at 0: they
     * decay past any double and are floored, still tracked (an empty slot
     * would cut the probe chains to the owners after them). */
    const double H = 1;
    enum { N = 3000, STEPS = 11 };
    cr_estimator *e = make(CR_CLOCK_SECONDS, H, N);
    for (int64_t o = 1; o < N; o++)
        cr_estimator_record(e, o, 0);
    double ts[STEPS];
    for (int k = 0; k < STEPS; k++) {
        ts[k] = 400.0 * k;
        double r = cr_estimator_record(e, 0, ts[k]);
        CU_ASSERT_DOUBLE_EQUAL(r / forward_sum(ts, k + 1, ts[k], H), 1, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 0, ts[k] + 3) / r, 0.125, 1e-12);
    }
    CU_ASSERT_EQUAL(cr_estimator_size(e), N);
    CU_ASSERT_EQUAL(cr_estimator_evictions(e), 0);
    int lost = 0;
    for (int64_t o = 0; o < N; o++)
        lost += !(cr_estimator_rate(e, o, ts[STEPS - 1]) >= 0) || !cr_estimator_forget(e, o);
    CU_ASSERT_EQUAL(lost, 0);
    cr_estimator_free(e);
}

static void test_extreme_half_lives(void)
{
    /* H = 1e-300 s (any finite H > 0 is allowed): every later arrival
     * renormalises its partition; it terminates, tracks every owner and
     * reads the latest one at ln2/H. */
    cr_estimator *e = make(CR_CLOCK_SECONDS, 1e-300, 100);
    for (int k = 0; k < 100; k++)
        cr_estimator_record(e, k % 7, k * 1e-3);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 7);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_rate(e, 99 % 7, 0.099) / (log(2) / 1e-300), 1, 1e-12);
    CU_ASSERT_TRUE(cr_estimator_rate(e, 0, 0.099) >= 0);
    cr_estimator_free(e);
    /* H = 1e300 s: arrivals 1e300 s apart are 1 half-life apart. */
    e = make(CR_CLOCK_SECONDS, 1e300, 100);
    double inc = log(2) / 1e300;
    cr_estimator_record(e, 1, 0);
    CU_ASSERT_DOUBLE_EQUAL(cr_estimator_record(e, 1, 1e300) / inc, 1.5, 1e-12);
    cr_estimator_free(e);
}

static void test_export_import_round_trip(void)
{
    /* Exported (count, t_last) pairs mean the owners' rates: imported into
     * a new estimator they read the same, at any later time. */
    const double H = 5;
    cr_estimator *a = make(CR_CLOCK_SECONDS, H, 5000), *b = make(CR_CLOCK_SECONDS, H, 5000);
    for (int k = 0; k < 20000; k++)
        cr_estimator_record(a, k % 4000, 3000 + k * 0.05);
    size_t n, m;
    cr_estimator_entry *v = cr_estimator_export(a, &n);
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_estimator_import(b, v, n, &err), CR_OK);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double t = 4000 + (double)i, ra = cr_estimator_rate(a, v[i].owner, t);
        bad += fabs(cr_estimator_rate(b, v[i].owner, t) - ra) > 1e-12 * ra;
        bad += fabs(v[i].count * exp2(-(t - v[i].t_last) / H) - ra) > 1e-12 * ra;
    }
    CU_ASSERT_EQUAL(bad, 0);
    cr_estimator_entry *w = cr_estimator_export(b, &m);
    CU_ASSERT_EQUAL(m, n);
    free(v);
    free(w);
    cr_estimator_free(a);
    cr_estimator_free(b);
}

/* ---- batches ---- */

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* One random batch: owners from [0, range) with repeats (runs of one
 * owner too), weights NULL or random, recorded into a by
 * cr_estimator_record_batch and into b one by one; returns how many rates
 * differ in any bit. */
static int batch_round(cr_estimator *a, cr_estimator *b, unsigned *seed, int64_t range,
                       double now, int64_t *owners, double *weights, double *rates)
{
    /* Over one 1024-owner group, and a quarter of the rounds around the
     * small batches' bound (16: recorded in order, not grouped). */
    size_t n = 1 + (size_t)rand_r(seed) % (rand_r(seed) % 4 ? 2500 : 20);
    for (size_t i = 0; i < n; i++)
        owners[i] = i && rand_r(seed) % 8 == 0 ? owners[i - 1] : rand_r(seed) % range;
    int weighted = rand_r(seed) % 2, want_rates = rand_r(seed) % 4 != 0;
    for (size_t i = 0; i < n; i++)
        weights[i] = 1 + rand_r(seed) % 1000 / 7.0;
    cr_estimator_record_batch(a, owners, weighted ? weights : NULL, n, now,
                              want_rates ? rates : NULL);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double r = cr_estimator_record_weighted(b, owners[i], weighted ? weights[i] : 1.0, now);
        bad += want_rates && !same_bits(r, rates[i]);
    }
    return bad;
}

static int same_export(const cr_estimator *a, const cr_estimator *b)
{
    size_t na, nb;
    cr_estimator_entry *x = cr_estimator_export(a, &na), *y = cr_estimator_export(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na * sizeof *x) == 0;
    free(x);
    free(y);
    return same;
}

static void test_batch_is_sequential_bit_for_bit(void)
{
    /* 8 partitions, 10,000 owners at most, ids from 25,000: the table
     * fills (one by one near the bound), then every new owner evicts. Both
     * clocks, and seconds with H = 2 ms: its partitions are renormalised
     * every few rounds (0.37 s apart is 185 half-lives). */
    enum { RANGE = 25000, MAX = 2500 };
    int64_t *owners = malloc(MAX * sizeof *owners);
    double *weights = malloc(MAX * sizeof *weights), *rates = malloc(MAX * sizeof *rates);
    double *listed = malloc(RANGE * sizeof *listed);
    int64_t *all = malloc(RANGE * sizeof *all);
    CU_ASSERT_FATAL(owners && weights && rates && listed && all);
    for (int64_t i = 0; i < RANGE; i++)
        all[i] = i;
    for (int run = 0; run < 3; run++) {
        cr_clock clock = run == 1 ? CR_CLOCK_CALLS : CR_CLOCK_SECONDS;
        double H = run == 2 ? 2e-3 : 5;
        cr_estimator *a = make(clock, H, 10000), *b = make(clock, H, 10000);
        unsigned seed = 11 + run;
        double t = 0;
        int bad = 0;
        for (int round = 0; round < 270; round++) {
            t += rand_r(&seed) % 3 * 0.37; /* some rounds at the same time */
            bad += batch_round(a, b, &seed, RANGE, t, owners, weights, rates);
        }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT_EQUAL(cr_estimator_size(a), 10000);
        CU_ASSERT_TRUE(cr_estimator_evictions(a) > 100000);
        CU_ASSERT_EQUAL(cr_estimator_evictions(a), cr_estimator_evictions(b));
        CU_ASSERT_TRUE(same_export(a, b));
        /* Batched lookups read what single ones do. */
        cr_estimator_rate_batch(a, all, RANGE, t + 3, listed);
        int differ = 0;
        for (int64_t i = 0; i < RANGE; i++)
            differ += !same_bits(listed[i], cr_estimator_rate(b, i, t + 3));
        /* and so do short lists (read in order, not grouped) */
        for (size_t k = 0; k <= 20; k++) {
            cr_estimator_rate_batch(a, all + 1000 * k, k, t + 3, listed);
            for (size_t i = 0; i < k; i++)
                differ += !same_bits(listed[i], cr_estimator_rate(b, all[1000 * k + i], t + 3));
        }
        CU_ASSERT_EQUAL(differ, 0);
        cr_estimator_free(a);
        cr_estimator_free(b);
    }
    free(owners);
    free(weights);
    free(rates);
    free(listed);
    free(all);
}

static void test_hot_owners_survive_a_flood(void)
{
    /* 20 hot owners in every batch of 1000 new ids, through 5M new ids in
     * a table of 20,000: the 20 keep the top 20 rates, and each its exact
     * rate (never evicted, so the same as in a table of its own). */
    enum { HOT = 20, NEW = 1000, BATCHES = 5000, N = HOT + NEW };
    cr_estimator *e = make(CR_CLOCK_SECONDS, 20, 20000), *alone = make(CR_CLOCK_SECONDS, 20, 100);
    int64_t owners[N];
    unsigned seed = 5;
    int64_t next = 1000;
    double t = 0;
    for (int b = 0; b < BATCHES; b++, t += 0.01) {
        for (int i = 0; i < N; i++)
            owners[i] = next++;
        for (int h = 0; h < HOT; h++) /* one at a random place in each 51 */
            owners[h * (N / HOT) + rand_r(&seed) % (N / HOT)] = h;
        cr_estimator_record_batch(e, owners, NULL, N, t, NULL);
        for (int i = 0; i < N; i++)
            if (owners[i] < HOT)
                cr_estimator_record(alone, owners[i], t);
    }
    CU_ASSERT_EQUAL(cr_estimator_evictions(e), (uint64_t)NEW * BATCHES + HOT - 20000);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 20000);
    size_t n;
    cr_session_rate *all = cr_estimator_rates(e, t, &n);
    CU_ASSERT_EQUAL_FATAL(n, 20000);
    int lower = 0, exact = 0;
    double coldest_hot = INFINITY, hottest_cold = 0;
    for (size_t i = 0; i < n; i++) {
        if (all[i].owner < HOT) {
            coldest_hot = fmin(coldest_hot, all[i].rate);
            exact += same_bits(all[i].rate, cr_estimator_rate(alone, all[i].owner, t));
        } else {
            hottest_cold = fmax(hottest_cold, all[i].rate);
        }
    }
    for (int64_t h = 0; h < HOT; h++)
        lower += cr_estimator_rate(e, h, t) == 0;
    CU_ASSERT_EQUAL(lower, 0);
    CU_ASSERT_EQUAL(exact, HOT);
    CU_ASSERT_TRUE(coldest_hot > hottest_cold);
    free(all);
    cr_estimator_free(e);
    cr_estimator_free(alone);
}

/* Owner i of a snapshot test's pattern k: random 64-bit ids (every digit
 * matters), small sequential ones (only low bits differ), ids apart in
 * the high bits only, and a cluster of neighbours with one far outlier. */
static int64_t pattern_owner(int k, uint64_t i)
{
    switch (k) {
    case 0: return (int64_t)cr_mix64(i);
    case 1: return (int64_t)i - 15000;
    case 2: return (int64_t)(i << 40) - INT64_MAX / 2;
    default: return i ? (int64_t)(i * 3) : INT64_MIN;
    }
}

static void test_big_snapshot_sorted(void)
{
    enum { N = 30000 };
    for (int k = 0; k < 4; k++) {
        cr_estimator *e = make(CR_CLOCK_CALLS, 20, N);
        for (uint64_t i = 0; i < N; i++)
            cr_estimator_record_weighted(e, pattern_owner(k, i), 1 + (double)(i % 5), 0);
        size_t n, m;
        cr_session_rate *all = cr_estimator_rates(e, 0, &n);
        cr_estimator_entry *raw = cr_estimator_export(e, &m);
        CU_ASSERT_EQUAL_FATAL(n, N);
        CU_ASSERT_EQUAL_FATAL(m, N);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            bad += i && all[i].owner <= all[i - 1].owner;
            bad += raw[i].owner != all[i].owner || raw[i].count != all[i].rate;
            bad += all[i].rate != cr_estimator_rate(e, all[i].owner, 0);
        }
        CU_ASSERT_EQUAL(bad, 0);
        free(all);
        free(raw);
        cr_estimator_free(e);
    }
}

/* ---- concurrency ---- */

enum { THREADS = 4, PER_THREAD = 40000, OWNERS = 997 };

typedef struct worker_arg {
    cr_estimator *e;
    int id;
} worker_arg;

static void *record_worker(void *p)
{
    worker_arg *a = p;
    for (int i = 0; i < PER_THREAD; i++)
        cr_estimator_record(a->e, (i * 7 + a->id) % OWNERS, i * 1e-3);
    return NULL;
}

/* record_worker's arrivals, in batches of 100 (weights 1, rates wanted). */
static void *batch_worker(void *p)
{
    worker_arg *a = p;
    int64_t owners[100];
    double rates[100];
    for (int i = 0; i < PER_THREAD; i += 100) {
        for (int k = 0; k < 100; k++)
            owners[k] = ((i + k) * 7 + a->id) % OWNERS;
        cr_estimator_record_batch(a->e, owners, NULL, 100, i * 1e-3, rates);
    }
    return NULL;
}

static void *reader_worker(void *p)
{
    worker_arg *a = p;
    for (int i = 0; i < 200; i++) {
        size_t n;
        free(cr_estimator_rates(a->e, 0, &n));
        cr_estimator_rate(a->e, i % OWNERS, 0);
        cr_estimator_forget(a->e, OWNERS + i); /* never recorded: no effect */
    }
    return NULL;
}

static void test_concurrent_exact_totals(void)
{
    /* In calls mode an owner's rate is a function of its arrival count, so
     * exact per-owner totals can be checked after a concurrent run. Half
     * the writers record one by one, half in batches. */
    cr_estimator *e = make(CR_CLOCK_CALLS, 1e12, 100000);
    pthread_t th[THREADS + 1];
    worker_arg args[THREADS + 1];
    for (int t = 0; t <= THREADS; t++) {
        args[t] = (worker_arg){e, t};
        void *(*fn)(void *) = t == THREADS ? reader_worker : t % 2 ? batch_worker : record_worker;
        pthread_create(&th[t], NULL, fn, &args[t]);
    }
    for (int t = 0; t <= THREADS; t++)
        pthread_join(th[t], NULL);
    long want[OWNERS] = {0};
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER_THREAD; i++)
            want[(i * 7 + t) % OWNERS]++;
    double d = pow(0.5, 1.0 / 1e12);
    int bad = 0;
    for (int o = 0; o < OWNERS; o++) {
        double expect = (1 - pow(d, want[o])) / (1 - d);
        bad += fabs(cr_estimator_rate(e, o, 0) - expect) > 1e-6 * expect;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), OWNERS);
    cr_estimator_free(e);
}

/* 30,000 new owners, one by one (even ids) or in batches of 300 (odd). */
static void *flood_worker(void *p)
{
    worker_arg *a = p;
    int64_t owners[300];
    for (int64_t i = 0; i < 30000; i++) {
        owners[i % 300] = (int64_t)a->id << 40 | i;
        if (a->id % 2 == 0)
            cr_estimator_record(a->e, owners[i % 300], (double)i);
        else if (i % 300 == 299)
            cr_estimator_record_batch(a->e, owners, NULL, 300, (double)i, NULL);
    }
    return NULL;
}

static void test_concurrent_eviction_bound(void)
{
    cr_estimator *e = make(CR_CLOCK_SECONDS, 20, 5000);
    pthread_t th[THREADS];
    worker_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (worker_arg){e, t};
        pthread_create(&th[t], NULL, flood_worker, &args[t]);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 5000);
    CU_ASSERT_EQUAL(cr_estimator_evictions(e), THREADS * 30000 - 5000);
    size_t n;
    free(cr_estimator_rates(e, 30000, &n));
    CU_ASSERT_EQUAL(n, 5000);
    cr_estimator_free(e);
}

/* A full table of warm owners, then one-off newcomers, some of them again
 * later (seconds clock: time moving on, so older owners grow colder than
 * newcomers): a newcomer may take a slot in place, and no tracked owner's
 * walk may break for it. Every exported owner is then found with its exact
 * count, and no owner twice. */
static void flood_and_check(cr_clock clock)
{
    enum { MAX = 3000, NEW = 60000 };
    cr_estimator *e = make(clock, 20, MAX);
    for (int k = 0; k < 2; k++)
        for (int64_t o = 0; o < MAX; o++)
            cr_estimator_record(e, o * 7919, 0);
    unsigned seed = 3;
    for (int64_t i = 0; i < NEW; i++) {
        int64_t o = i % 5 == 4 ? (int64_t)(rand_r(&seed) % (unsigned)i) : i;
        double t = clock == CR_CLOCK_SECONDS ? (double)i * 1e-3 : 0;
        CU_ASSERT_TRUE(cr_estimator_record(e, o * 7919 + 1, t) > 0);
    }
    CU_ASSERT_EQUAL(cr_estimator_size(e), MAX);
    size_t n;
    cr_estimator_entry *v = cr_estimator_export(e, &n);
    CU_ASSERT_EQUAL_FATAL(n, MAX);
    int missing = 0, twice = 0;
    for (size_t i = 0; i < n; i++) {
        cr_estimator_entry got;
        missing += !cr_estimator_lookup(e, v[i].owner, &got) || !same_bits(got.count, v[i].count);
        twice += cr_estimator_forget(e, v[i].owner) && cr_estimator_rate(e, v[i].owner, 0) != 0;
    }
    CU_ASSERT_EQUAL(missing, 0);
    CU_ASSERT_EQUAL(twice, 0);
    CU_ASSERT_EQUAL(cr_estimator_size(e), 0);
    free(v);
    cr_estimator_free(e);
}

static void test_flood_keeps_every_walk_intact(void)
{
    flood_and_check(CR_CLOCK_CALLS);
    flood_and_check(CR_CLOCK_SECONDS);
}

static const cr_test_case estimator_tests[] = {
    {"defaults and config errors", test_defaults_and_config_errors},
    {"calls mode math", test_calls_mode_math},
    {"seconds mode math", test_seconds_mode_math},
    {"seconds mode Poisson within 10%", test_seconds_mode_poisson},
    {"rates snapshot and forget", test_rates_snapshot_and_forget},
    {"growth and deletes", test_table_growth_and_deletes},
    {"eviction bounds the table", test_eviction_bounds_table},
    {"eviction from another partition", test_eviction_from_other_partition},
    {"weighted seconds math", test_weighted_seconds_math},
    {"weighted calls math", test_weighted_calls_math},
    {"weight 1 is unweighted bit for bit", test_weight_one_is_unweighted_bit_for_bit},
    {"tiny weight stays tracked", test_tiny_weight_stays_tracked},
    {"arrival before the epoch", test_arrival_before_epoch},
    {"renormalising keeps rates and chains", test_renormalise_keeps_rates_and_chains},
    {"extreme half-lives", test_extreme_half_lives},
    {"export import round trip", test_export_import_round_trip},
    {"batch is sequential bit for bit", test_batch_is_sequential_bit_for_bit},
    {"hot owners survive 5M new ids", test_hot_owners_survive_a_flood},
    {"a flood keeps every walk intact", test_flood_keeps_every_walk_intact},
    {"big snapshot sorted by radix", test_big_snapshot_sorted},
    {"concurrent exact totals", test_concurrent_exact_totals},
    {"concurrent eviction bound", test_concurrent_eviction_bound},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"estimator", estimator_tests}};
CR_TEST_MAIN(suites)
