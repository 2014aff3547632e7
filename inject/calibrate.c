/* Online calibration: what one observation changes in the injector, and
 * what the adopted fits change in the model a decision uses.
 *
 * Three kinds of fit (fit.c), each started at its prior on its first
 * sample:
 *   prefill  per GPU, ms = a + b (L - s) + c (L^2 - s^2); adopted once it
 *            has min-samples samples whose L - s spans 4x (one request
 *            shape cannot tell a from b from c) and while it beats the
 *            prior's rolling error
 *   h2d      per GPU, ms = load_fixed + bytes / (GB/s 10^6)
 *   link     per source, in its link table entry, ms = rtt + bytes 8 /
 *            (effective Gb/s 10^6); a calibrated link's rate already has
 *            the efficiency in it, so the decision gets gbps = rate /
 *            link_efficiency, which its formula multiplies back
 * The lines need no span: their prior's weight, 10 x each coefficient,
 * goes almost wholly to whichever term dominates the time, so with a single
 * transfer size rtt stays at its prior while the rate follows bytes / (ms -
 * rtt), an EWMA with the fit's forgetting; with varied sizes the small
 * transfers pin rtt (the intercept) and the large ones the rate (the slope).
 *
 * Timelines, taking now_ms as the moment of the measurement (a request's
 * first token, a transfer's ack): a measured queue wait is the engine's own
 * queue, so the GPU's timeline becomes that wait from now; without one, a
 * measured prefill or transfer shows how wrong its reservation was, and the
 * reservations still pending behind it move by that error (the proxy's
 * first-token and kv_ack corrections), never to before now. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Scales: a typical prefill has L ~ 10^4 (so L^2 ~ 10^8), a typical KV
 * transfer or load 10^8 bytes (Llama-3.1-8B's KV for 760 tokens). The
 * rates' bound, 10^5 Gb/s or GB/s, keeps each rate finite for text and
 * JSON: a zero slope would claim free transfers. */
static const cr_fit_kind PREFILL = {3, {1, 1e4, 1e8}, {0, 0, 0}, 1};
static const cr_fit_kind LINK = {2, {1, 1e8}, {0, 8 / (1e5 * 1e6)}, 0};
static const cr_fit_kind H2D = {2, {1, 1e8}, {0, 1 / (1e5 * 1e6)}, 0};

/* ms per byte at a rate in 10^9 per second (10^6 per ms), bits_per_byte 8
 * for Gb/s and 1 for GB/s; the same map turns a fitted ms per byte back
 * into its rate. */
static double per_byte(double bits_per_byte, double v) { return bits_per_byte / (v * 1e6); }

/* The prefill fit's vector is a, b, c in cost.h's order. */
static void prefill_prior(const cr_inject_model *m, double out[3])
{
    out[0] = m->prefill.fixed_ms;
    out[1] = m->prefill.ms_per_token;
    out[2] = m->prefill.ms_per_token2;
}

static cr_prefill_cost prefill_of(const cr_fit *f)
{
    return (cr_prefill_cost){f->coef[0], f->coef[1], f->coef[2]};
}

static void h2d_prior(const cr_inject_model *m, double out[2])
{
    out[0] = m->load.fixed_ms;
    out[1] = per_byte(1, m->load.h2d_gbps);
}

static void link_prior(const cr_inject_link *l, const cr_inject_model *m, double out[2])
{
    out[0] = l->rtt_ms;
    out[1] = per_byte(8, l->gbps * m->link_efficiency);
}

void cr_calibration_init(cr_injector *inj)
{
    cr_error err;
    cr_inject_model m;
    cr_inject_model_resolve(&inj->cfg, NULL, 0, &m, &err); /* GPU 0 always resolves */
    for (size_t g = 0; g < CR_PROBE_MAX_GPUS; g++)
        inj->gpus[g].prior = m;
}

void cr_calibration_apply(cr_injector *inj, uint32_t gpu, cr_inject_model *m,
                          cr_inject_labels *labels)
{
    if (!inj->cfg.calibrate)
        return;
    cr_gpu_calibration *g = &inj->gpus[gpu];
    g->prior = *m;
    if (g->prefill.adopted) {
        m->prefill = prefill_of(&g->prefill);
        m->peak_tflops = 0;
        labels->fit_n = g->prefill.n;
        labels->fit_mape = cr_fit_mape(&g->prefill);
    }
    if (g->h2d.adopted) {
        m->load = (cr_load_cost){g->h2d.coef[0], per_byte(1, g->h2d.coef[1])};
        labels->h2d = "fitted";
    }
}

void cr_calibration_link(const cr_link_entry *e, const cr_inject_model *m, cr_inject_link *link)
{
    if (!e->fit.adopted)
        return;
    link->rtt_ms = e->fit.coef[0];
    link->gbps = per_byte(8, e->fit.coef[1]) / m->link_efficiency;
}

/* Measurements move timelines too, so they keep to --reservation-horizon-s
 * as reservations do: one wild outcome cannot park a GPU for days. */
static double within_horizon(const cr_injector *inj, double now_ms, double until_ms)
{
    return fmin(until_ms, now_ms + inj->cfg.reservation_horizon_s * 1e3);
}

/* The first-token and kv_ack corrections (see the top of this file). */
static void shift_pending(const cr_injector *inj, double *busy_until_ms, double now_ms,
                          double error_ms)
{
    if (*busy_until_ms > now_ms)
        *busy_until_ms = within_horizon(inj, now_ms, fmax(now_ms, *busy_until_ms + error_ms));
}

/* Adds (x, y) to f, started at prior when new; returns y's error against
 * the coefficients in use before it. */
static double feed(cr_fit *f, const cr_fit_kind *k, const cr_fit_params *p, const double *x,
                   double y, const double *prior)
{
    if (!f->n)
        cr_fit_start(f, k, prior);
    double error_ms = y - cr_fit_eval(k, f->adopted ? f->coef : prior, x);
    cr_fit_add(f, k, p, x, y, prior);
    return error_ms;
}

static void observe_prefill(cr_injector *inj, const cr_inject_observation *o)
{
    cr_gpu_calibration *g = &inj->gpus[o->gpu];
    double s = o->prefill_from, l = o->prefill_to, prior[3];
    double x[3] = {1, l - s, l * l - s * s};
    prefill_prior(&g->prior, prior);
    double error_ms = feed(&g->prefill, &PREFILL, &inj->fit, x, o->prefill_ms, prior);
    if (!o->has_queue_wait)
        shift_pending(inj, &inj->gpu_busy_until_ms[o->gpu], o->now_ms, error_ms);
}

static void observe_load(cr_injector *inj, const cr_inject_observation *o)
{
    cr_gpu_calibration *g = &inj->gpus[o->gpu];
    double x[2] = {1, o->load_bytes}, prior[2];
    h2d_prior(&g->prior, prior);
    feed(&g->h2d, &H2D, &inj->fit, x, o->load_ms, prior);
}

static void observe_transfer(cr_injector *inj, const cr_inject_observation *o)
{
    const cr_inject_model *m = &inj->gpus[o->gpu].prior;
    cr_inject_link configured = cr_injector_link_prior(inj, m, o->source);
    cr_link_entry *e = cr_link_table_get(&inj->links, o->source, o->now_ms);
    double x[2] = {1, o->transfer_bytes}, prior[2];
    link_prior(&configured, m, prior);
    double error_ms = feed(&e->fit, &LINK, &inj->fit, x, o->transfer_ms, prior);
    shift_pending(inj, &e->busy_until_ms, o->now_ms, error_ms);
    e->observed_ms = o->now_ms;
}

/* A part feeds a fit only with a positive time (its error is relative). */
static int usable(int has, double ms) { return has && ms > 0 && isfinite(ms); }

static int named(const char *source)
{
    size_t len = source ? strnlen(source, CR_INJECT_NAME_MAX + 1) : 0;
    return len >= 1 && len <= CR_INJECT_NAME_MAX;
}

cr_status cr_injector_observe(cr_injector *inj, const cr_inject_observation *o, cr_error *err)
{
    if (o->gpu >= CR_PROBE_MAX_GPUS)
        return cr_fail(err, CR_EINVAL, "gpu must be in 0..%d, got %u", CR_PROBE_MAX_GPUS - 1,
                       o->gpu);
    if (!isfinite(o->now_ms))
        return cr_fail(err, CR_EINVAL, "now_ms must be finite, got %g", o->now_ms);
    if (!inj->cfg.calibrate)
        return CR_OK;
    pthread_mutex_lock(&inj->lock);
    if (usable(o->has_prefill, o->prefill_ms))
        observe_prefill(inj, o);
    if (usable(o->has_load, o->load_ms))
        observe_load(inj, o);
    if (usable(o->has_transfer, o->transfer_ms) && named(o->source))
        observe_transfer(inj, o);
    if (o->has_queue_wait)
        inj->gpu_busy_until_ms[o->gpu] =
            within_horizon(inj, o->now_ms, o->now_ms + o->queue_wait_ms);
    pthread_mutex_unlock(&inj->lock);
    return CR_OK;
}

/* A line fit with its slope as a rate (bits_per_byte as for per_byte). */
static void line_state(const cr_fit *f, double bits_per_byte, cr_inject_line_calibration *out)
{
    memset(out, 0, sizeof *out);
    if (!f->n)
        return;
    out->samples = f->n;
    out->adopted = f->adopted;
    out->fixed_ms = f->coef[0];
    out->gbps = per_byte(bits_per_byte, f->coef[1]);
    out->mape_fit = cr_fit_mape(f);
    out->mape_prior = cr_fit_mape_prior(f);
}

void cr_injector_calibration(cr_injector *inj, uint32_t gpu, cr_inject_calibration *out)
{
    memset(out, 0, sizeof *out);
    if (gpu >= CR_PROBE_MAX_GPUS)
        return;
    pthread_mutex_lock(&inj->lock);
    const cr_fit *f = &inj->gpus[gpu].prefill;
    if (f->n) {
        out->samples = f->n;
        out->adopted = f->adopted;
        out->prefill = prefill_of(f);
        out->mape_fit = cr_fit_mape(f);
        out->mape_prior = cr_fit_mape_prior(f);
    }
    line_state(&inj->gpus[gpu].h2d, 1, &out->h2d);
    pthread_mutex_unlock(&inj->lock);
}

int cr_injector_link_calibration(cr_injector *inj, const char *source,
                                 cr_inject_line_calibration *out)
{
    memset(out, 0, sizeof *out);
    if (!named(source))
        return 0;
    pthread_mutex_lock(&inj->lock);
    const cr_link_entry *e = cr_link_table_find(&inj->links, source);
    if (e)
        line_state(&e->fit, 8, out);
    pthread_mutex_unlock(&inj->lock);
    return e != NULL;
}
