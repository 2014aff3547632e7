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

/* A held request's arrival at the door, or its leaving it: dropped at
 * its deadline, or sent (dispatched). At one instant the door drops the
 * expired, then dispatches, then takes the new arrivals: the order of
 * the kinds. */
enum { HELD_DROPPED, HELD_SENT, HELD_ARRIVED };
typedef struct held_event {
    double at;
    int kind;
    unsigned tenant;
    double work;
} held_event;

static int by_time_then_kind(const void *x, const void *y)
{
    const held_event *a = x, *b = y;
    return a->at < b->at ? -1 : a->at > b->at ? 1 : a->kind - b->kind;
}

/* Over the dispatches in ev[0..n) (sorted), the work each tenant was
 * sent and the heavy one's max-min fair share of it: at each dispatch
 * instant, of the work sent then, half each, or all that a tenant had
 * held when less (what the round robin owes). */
static void dispatch_shares(const held_event *ev, size_t n, double *sent, double *heavy_fair)
{
    double held[CR_REPLAY_TENANTS] = {0, 0};
    for (size_t i = 0; i < n;) {
        if (ev[i].kind != HELD_SENT) {
            held[ev[i].tenant] += ev[i].kind == HELD_ARRIVED ? ev[i].work : -ev[i].work;
            i++;
            continue;
        }
        double now[CR_REPLAY_TENANTS] = {0, 0};
        size_t j = i;
        for (; j < n && ev[j].kind == HELD_SENT && ev[j].at == ev[i].at; j++)
            now[ev[j].tenant] += ev[j].work;
        double all = now[0] + now[1];
        *heavy_fair += fmin(held[0], all - fmin(held[1], all / 2));
        for (unsigned u = 0; u < CR_REPLAY_TENANTS; u++) {
            sent[u] += now[u];
            held[u] -= now[u];
        }
        i = j;
    }
}

/* Folds x into h (the routes' hash). */
static uint64_t fold(uint64_t h, uint64_t x) { return cr_mix64(h ^ x) + 0x9e3779b97f4a7c15ULL; }

cr_replay_admission_result *cr_replay_admission_figures(const cr_replay_trace *t,
                                                        const cr_replay_cluster *c,
                                                        const double *ttft_ms,
                                                        const uint32_t *shard,
                                                        const uint8_t *door,
                                                        const double *left_s)
{
    const cr_replay_admission *a = c->admission;
    size_t w = c->warmup;
    cr_replay_admission_result *out = calloc(1, sizeof *out);
    double *ttft[CR_REPLAY_CLASSES] = {malloc(t->n * sizeof(double)),
                                       malloc(t->n * sizeof(double))};
    held_event *ev = malloc(4 * t->n * sizeof *ev); /* two a request, per class */
    if (!out || !ttft[0] || !ttft[1] || !ev) {
        free(out);
        free(ttft[0]);
        free(ttft[1]);
        free(ev);
        return NULL;
    }
    held_event *class_ev[CR_REPLAY_CLASSES] = {ev, ev + 2 * t->n};
    size_t n_ev[CR_REPLAY_CLASSES] = {0, 0};
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
        r->tenant_asked_ms[tenant] += work;
        if ((d == CR_REPLAY_DOOR_HELD || d == CR_REPLAY_DOOR_DROPPED) && left_s) {
            double at = cr_replay_arrival_s(&t->reqs[i], c);
            held_event *e = &class_ev[k][n_ev[k]];
            e[0] = (held_event){at, HELD_ARRIVED, tenant, work};
            e[1] = (held_event){fmax(at, left_s[i]),
                                d == CR_REPLAY_DOOR_DROPPED ? HELD_DROPPED : HELD_SENT, tenant,
                                work};
            n_ev[k] += 2;
        }
        out->routes = fold(out->routes, (uint64_t)i << 8 | d);
        if (d == CR_REPLAY_DOOR_SHED || d == CR_REPLAY_DOOR_DROPPED)
            continue; /* no shard, no TTFT */
        uint64_t bits;
        memcpy(&bits, &ttft_ms[i], sizeof bits);
        out->routes = fold(fold(out->routes, shard ? shard[i] : 0), bits);
        ttft[k][r->served++] = ttft_ms[i];
        r->tenant_served[tenant]++;
        r->tenant_work_ms[tenant] += work;
        r->met += slo[k] <= 0 || ttft_ms[i] <= slo[k];
    }
    out->span_s = cr_replay_arrival_s(&t->reqs[t->n - 1], c) - cr_replay_arrival_s(&t->reqs[w], c);
    for (unsigned k = 0; k < CR_REPLAY_CLASSES; k++) {
        qsort(class_ev[k], n_ev[k], sizeof *ev, by_time_then_kind);
        dispatch_shares(class_ev[k], n_ev[k], out->cls[k].dispatched_work_ms,
                        &out->cls[k].heavy_fair_dispatched_ms);
    }
    free(ev);
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
