/* Objectives per request for admission runs (replay.h, "admission"), and
 * the figures per objective class from a run's per-request record. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CLASS_STREAM 0x636c617373ULL  /* "class" */
#define TENANT_STREAM 0x74656e616eULL /* "tenan" */

void cr_replay_admission_default(cr_replay_admission *a)
{
    *a = (cr_replay_admission){.seed = 1, .interactive_share = 0.6,
                               .interactive_slo_ms = 2000, .batch_slo_ms = 30000,
                               .heavy_share = 0.75};
    cr_admit_config_default(&a->door);
    a->door.budget_ms = a->interactive_slo_ms / 2;
}

void cr_replay_admission_of(const cr_replay_admission *a, int64_t owner, unsigned *cls,
                            unsigned *tenant)
{
    double u = cr_replay_unit(cr_replay_draw(cr_mix64(a->seed ^ CLASS_STREAM), (uint64_t)owner));
    double v = cr_replay_unit(cr_replay_draw(cr_mix64(a->seed ^ TENANT_STREAM), (uint64_t)owner));
    *cls = u < a->interactive_share ? 0 : 1;
    *tenant = v < a->heavy_share ? 0 : 1;
}

void cr_replay_admission_table(const cr_replay_admission *a, char *buf, size_t len)
{
    snprintf(buf, len, "interactive:0:%.17g,batch:-1:%.17g", a->interactive_slo_ms,
             a->batch_slo_ms);
}

static int by_value(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Work asked and served per window, class and tenant. */
typedef struct fair_window {
    double asked[CR_REPLAY_CLASSES][CR_REPLAY_TENANTS];
    double served[CR_REPLAY_CLASSES][CR_REPLAY_TENANTS];
} fair_window;

/* Max-min over one window: half the work served each, or all a tenant
 * asked for when less, the rest to the other. */
static double heavy_fair(const fair_window *f, unsigned k)
{
    double served = f->served[k][0] + f->served[k][1];
    return served - fmin(f->asked[k][1], served / 2);
}

/* Folds x into h (the routes' hash). */
static uint64_t fold(uint64_t h, uint64_t x) { return cr_mix64(h ^ x) + 0x9e3779b97f4a7c15ULL; }

cr_replay_admission_result *cr_replay_admission_figures(const cr_replay_trace *t,
                                                        const cr_replay_cluster *c,
                                                        const double *ttft_ms,
                                                        const uint32_t *shard,
                                                        const uint8_t *door)
{
    const cr_replay_admission *a = c->admission;
    size_t w = c->warmup;
    double t0 = t->n > w ? cr_replay_arrival_s(&t->reqs[w], c) : 0;
    size_t n_win = t->n > w ? (size_t)((cr_replay_arrival_s(&t->reqs[t->n - 1], c) - t0) /
                                       CR_REPLAY_FAIR_WINDOW_S) + 1
                            : 1;
    cr_replay_admission_result *out = calloc(1, sizeof *out);
    fair_window *win = calloc(n_win, sizeof *win);
    double *ttft[CR_REPLAY_CLASSES] = {malloc(t->n * sizeof(double)),
                                       malloc(t->n * sizeof(double))};
    if (!out || !win || !ttft[0] || !ttft[1]) {
        free(out);
        free(win);
        free(ttft[0]);
        free(ttft[1]);
        return NULL;
    }
    double slo[CR_REPLAY_CLASSES] = {a->interactive_slo_ms, a->batch_slo_ms};
    for (size_t i = w; i < t->n; i++) {
        unsigned k, tenant;
        cr_replay_admission_of(a, t->reqs[i].owner, &k, &tenant);
        cr_replay_class_result *r = &out->cls[k];
        uint8_t d = door ? door[i] : CR_REPLAY_DOOR_ROUTED;
        r->requests++;
        r->tenant_requests[tenant]++;
        r->held += d == CR_REPLAY_DOOR_HELD || d == CR_REPLAY_DOOR_DROPPED;
        r->shed += d == CR_REPLAY_DOOR_SHED;
        r->dropped += d == CR_REPLAY_DOOR_DROPPED;
        double work = cr_prefill_ms(&c->truth.prefill, 0, t->reqs[i].input_tokens);
        size_t j = (size_t)fmax(0, (cr_replay_arrival_s(&t->reqs[i], c) - t0) /
                                           CR_REPLAY_FAIR_WINDOW_S);
        fair_window *f = &win[j < n_win ? j : n_win - 1];
        r->tenant_asked_ms[tenant] += work;
        f->asked[k][tenant] += work;
        out->routes = fold(out->routes, (uint64_t)i << 8 | d);
        if (d == CR_REPLAY_DOOR_SHED || d == CR_REPLAY_DOOR_DROPPED)
            continue; /* no shard, no TTFT */
        uint64_t bits;
        memcpy(&bits, &ttft_ms[i], sizeof bits);
        out->routes = fold(fold(out->routes, shard ? shard[i] : 0), bits);
        ttft[k][r->served++] = ttft_ms[i];
        r->tenant_served[tenant]++;
        r->tenant_work_ms[tenant] += work;
        f->served[k][tenant] += work;
        r->met += slo[k] <= 0 || ttft_ms[i] <= slo[k];
    }
    out->span_s = cr_replay_arrival_s(&t->reqs[t->n - 1], c) - cr_replay_arrival_s(&t->reqs[w], c);
    for (size_t j = 0; j < n_win; j++)
        for (unsigned k = 0; k < CR_REPLAY_CLASSES; k++)
            out->cls[k].heavy_fair_ms += heavy_fair(&win[j], k);
    free(win);
    for (unsigned k = 0; k < CR_REPLAY_CLASSES; k++) {
        cr_replay_class_result *r = &out->cls[k];
        r->goodput_per_s = out->span_s > 0 ? r->met / out->span_s : NAN;
        r->attainment = r->requests ? (double)r->met / (double)r->requests : NAN;
        qsort(ttft[k], r->served, sizeof(double), by_value);
        size_t rank = (size_t)ceil(0.99 * (double)r->served); /* nearest rank */
        r->ttft_p99_ms = r->served ? ttft[k][rank ? rank - 1 : 0] : NAN;
        free(ttft[k]);
    }
    return out;
}
