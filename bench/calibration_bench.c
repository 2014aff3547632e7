/* Online calibration: how fast cr_injector_observe ingests, and how fast
 * the prefill fit converges (figures: bench/README.md, under `calibration_bench`).
 *
 *   calibration_bench [observations=1000000] [batch=1000] [seeds=20]
 *
 * Throughput: observations on one thread, fed in batches of precomputed
 * outcomes as a ReportOutcome batch would be (8 GPUs, 64 KV sources), once
 * with every part (prefill, transfer, load, queue wait) and once prefill
 * only; best of 3. Convergence: the synthetic GPU (b 3x and c 2x
 * the default model's, 5% multiplicative noise), the held-out MAPE of the
 * default model, of the fit, and of the model decisions use (the fit once
 * adopted, else the prior) after n outcomes, mean and worst over the seeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "inject.h"

#define N_GPUS 8
#define N_SOURCES 64

static uint64_t next_u64(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return cr_mix64(*state);
}

static double uniform(uint64_t *state, double lo, double hi)
{
    return lo + (hi - lo) * (double)(next_u64(state) >> 11) * 0x1p-53;
}

/* 5% multiplicative noise: a normal deviate (Box-Muller) clipped to +-4. */
static double noise(uint64_t *state)
{
    double u = uniform(state, 0x1p-53, 1), v = uniform(state, 0, 1);
    return 1 + 0.05 * fmax(-4, fmin(4, sqrt(-2 * log(u)) * cos(2 * M_PI * v)));
}

typedef struct coeffs {
    double a, b, c;
} coeffs;

static double prefill_ms(const coeffs *k, double s, double l)
{
    return k->a + k->b * (l - s) + k->c * (l * l - s * s);
}

/* Half text requests, half KV ones with a cached prefix; L in 500..32000. */
static void span(uint64_t *state, double *s, double *l)
{
    *l = floor(uniform(state, 500, 32000));
    *s = uniform(state, 0, 1) < 0.5 ? 0 : floor(uniform(state, 0, 0.9 * *l));
}

static cr_injector *new_injector(void)
{
    cr_inject_config cfg;
    cr_error err;
    cr_inject_config_default(&cfg);
    cr_injector *inj = cr_injector_new(&cfg, &err);
    if (!inj) {
        fprintf(stderr, "calibration_bench: %s\n", err.msg);
        exit(1);
    }
    return inj;
}

/* ---- throughput ---------------------------------------------------------- */

static char source_names[N_SOURCES][16];

static void fill_batch(cr_inject_observation *batch, size_t n, int all_parts, uint64_t *state)
{
    const coeffs t = {10, 0.3, 3.4e-6};
    for (size_t i = 0; i < n; i++) {
        double s, l;
        span(state, &s, &l);
        cr_inject_observation o = {.gpu = (uint32_t)(i % N_GPUS), .has_prefill = 1,
                                   .prefill_from = s, .prefill_to = l,
                                   .prefill_ms = prefill_ms(&t, s, l) * noise(state)};
        if (all_parts) {
            double bytes = (l - s) * 131072;
            o.has_transfer = o.has_load = o.has_queue_wait = 1;
            o.source = source_names[next_u64(state) % N_SOURCES];
            o.transfer_bytes = o.load_bytes = bytes;
            o.transfer_ms = (2 + bytes * 8 / 40e6) * noise(state);
            o.load_ms = (5 + bytes / 12e6) * noise(state);
            o.queue_wait_ms = uniform(state, 0, 500);
        }
        batch[i] = o;
    }
}

/* Seconds to feed n observations, batch by batch, with the clock advancing
 * 1 us per observation. */
static double feed(cr_injector *inj, cr_inject_observation *batch, size_t batch_n, size_t n)
{
    cr_error err;
    double clock_ms = 0, t0 = bench_now();
    for (size_t done = 0; done < n; done += batch_n) {
        for (size_t i = 0; i < batch_n && done + i < n; i++) {
            batch[i].now_ms = clock_ms += 1e-3;
            if (cr_injector_observe(inj, &batch[i], &err) != CR_OK) {
                fprintf(stderr, "calibration_bench: %s\n", err.msg);
                exit(1);
            }
        }
    }
    return bench_now() - t0;
}

static void throughput(size_t n, size_t batch_n)
{
    cr_inject_observation *batch = calloc(batch_n, sizeof *batch);
    if (!batch)
        exit(1);
    for (int i = 0; i < N_SOURCES; i++)
        snprintf(source_names[i], sizeof source_names[i], "kv-pool-%d", i);
    for (int all = 1; all >= 0; all--) {
        uint64_t state = 1;
        double best = INFINITY;
        fill_batch(batch, batch_n, all, &state);
        for (int rep = 0; rep < 3; rep++) {
            cr_injector *inj = new_injector();
            best = fmin(best, feed(inj, batch, batch_n, n));
            cr_injector_free(inj);
        }
        printf("observe, %s: %zu observations in batches of %zu: %.3f s, %.2f M/s (%.0f ns each)\n",
               all ? "every part" : "prefill only", n, batch_n, best, n / best / 1e6,
               best / n * 1e9);
    }
    free(batch);
}

/* ---- convergence ---------------------------------------------------------- */

static double holdout_mape(const coeffs *k, const coeffs *t)
{
    uint64_t state = 42;
    double sum = 0;
    for (int i = 0; i < 1000; i++) {
        double s, l;
        span(&state, &s, &l);
        sum += fabs(prefill_ms(k, s, l) / prefill_ms(t, s, l) - 1);
    }
    return sum / 1000;
}

static coeffs model_coeffs(cr_injector *inj)
{
    cr_inject_model m;
    cr_error err;
    cr_injector_model(inj, NULL, 0, &m, &err);
    return (coeffs){m.prefill.fixed_ms, m.prefill.ms_per_token, m.prefill.ms_per_token2};
}

#define N_POINTS 6

typedef struct point {
    double fit_sum, fit_max, used_sum, used_max;
    int adopted;
} point;

/* One seed's run through every table row. */
static void converge_once(uint64_t seed, const int *at, point *rows, double *prior_mape)
{
    cr_injector *inj = new_injector();
    coeffs p = model_coeffs(inj), t = {p.a, 3 * p.b, 2 * p.c};
    uint64_t state = seed;
    *prior_mape = holdout_mape(&p, &t);
    for (int n = 1, row = 0; row < N_POINTS; n++) {
        double s, l;
        span(&state, &s, &l);
        cr_inject_observation o = {.has_prefill = 1, .prefill_from = s, .prefill_to = l};
        o.prefill_ms = prefill_ms(&t, s, l) * noise(&state);
        cr_error err;
        cr_injector_observe(inj, &o, &err);
        if (n < at[row])
            continue;
        cr_inject_calibration cal;
        cr_injector_calibration(inj, 0, &cal);
        coeffs fit = {cal.prefill.fixed_ms, cal.prefill.ms_per_token, cal.prefill.ms_per_token2}, used = model_coeffs(inj);
        double e_fit = holdout_mape(&fit, &t), e_used = holdout_mape(&used, &t);
        rows[row].fit_sum += e_fit;
        rows[row].fit_max = fmax(rows[row].fit_max, e_fit);
        rows[row].used_sum += e_used;
        rows[row].used_max = fmax(rows[row].used_max, e_used);
        rows[row++].adopted += cal.adopted;
    }
    cr_injector_free(inj);
}

static void convergence(int seeds)
{
    static const int at[N_POINTS] = {10, 30, 100, 200, 500, 1000};
    point rows[N_POINTS];
    double prior_mape = 0;
    memset(rows, 0, sizeof rows);
    for (int seed = 1; seed <= seeds; seed++)
        converge_once((uint64_t)seed * 7919, at, rows, &prior_mape);
    printf("\nprefill MAPE on 1000 held-out requests, %d seeds (default model: %.1f%%)\n", seeds,
           100 * prior_mape);
    printf("| outcomes | fit, mean | fit, worst | model in use, mean | model in use, worst | "
           "adopted |\n|---:|---:|---:|---:|---:|---:|\n");
    for (int r = 0; r < N_POINTS; r++)
        printf("| %d | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %d/%d |\n", at[r],
               100 * rows[r].fit_sum / seeds, 100 * rows[r].fit_max,
               100 * rows[r].used_sum / seeds, 100 * rows[r].used_max, rows[r].adopted, seeds);
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    size_t batch_n = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000;
    int seeds = argc > 3 ? atoi(argv[3]) : 20;
    if (!n || !batch_n || seeds < 1) {
        fprintf(stderr, "usage: calibration_bench [observations] [batch] [seeds]\n");
        return 2;
    }
    throughput(n, batch_n);
    convergence(seeds);
    return 0;
}
