/* The door: the decision, the held requests (drr.c) and the counts behind
 * one mutex. Every call is short: O(held flows + tracked ids) at most. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TRACKED_MAX 4096

/* A fairness id counted apart (the last slot is "other"). */
typedef struct id_slot {
    char name[CR_ADMIT_NAME_MAX + 1];
    size_t len;
    cr_admit_counts c;
    uint32_t held;
} id_slot;

struct cr_admit {
    cr_admit_config cfg;
    cr_admit_objective table[CR_ADMIT_MAX_OBJECTIVES];
    size_t n_table;
    pthread_mutex_t lock;
    drr q;
    uint64_t held_bytes;
    id_slot *ids; /* tracked_ids + 1 */
    uint32_t n_ids; /* tracked ones taken */
    cr_admit_counts objective[CR_ADMIT_MAX_OBJECTIVES + 1];
    double pressure, pressure_at; /* cr_admit_pressure, and its last sample's time */
    int pressured;                   /* any sample yet */
    int pressed;                     /* above pressure, not yet back to pressure_off */
};

void cr_admit_config_default(cr_admit_config *cfg)
{
    *cfg = (cr_admit_config){.max_queued = 1024, .max_per_id = 256, .max_bytes = 64u << 20,
                             .max_wait_ms = 30000, .budget_ms = 0, .pressure = 0.1,
                             .pressure_off = 0, .pressure_tau_s = 120, .quantum = 1,
                             .tracked_ids = 64, .meet_slo = CR_ADMIT_MEET_PRESSED};
}

cr_status cr_admit_config_check(const cr_admit_config *cfg, cr_error *err)
{
    if (cfg->max_per_id > cfg->max_queued)
        return cr_fail(err, CR_EINVAL, "max_per_id must be at most max_queued (%u), got %u",
                       cfg->max_queued, cfg->max_per_id);
    if (!isfinite(cfg->max_wait_ms) || cfg->max_wait_ms < 0 || cfg->max_wait_ms > CR_ADMIT_MAX_SLO_MS)
        return cr_fail(err, CR_EINVAL, "max_wait_ms must be in [0, %.0f], got %g",
                       CR_ADMIT_MAX_SLO_MS, cfg->max_wait_ms);
    if (!isfinite(cfg->budget_ms) || cfg->budget_ms < 0 || cfg->budget_ms > CR_ADMIT_MAX_SLO_MS)
        return cr_fail(err, CR_EINVAL, "budget_ms must be in [0, %.0f], got %g",
                       CR_ADMIT_MAX_SLO_MS, cfg->budget_ms);
    if (!(cfg->pressure >= 0 && cfg->pressure <= 1))
        return cr_fail(err, CR_EINVAL, "pressure must be in [0, 1], got %g", cfg->pressure);
    if (!(cfg->pressure_off >= 0 && cfg->pressure_off <= cfg->pressure))
        return cr_fail(err, CR_EINVAL, "pressure_off must be in [0, pressure (%g)], got %g",
                       cfg->pressure, cfg->pressure_off);
    if (!isfinite(cfg->pressure_tau_s) || cfg->pressure_tau_s <= 0 ||
        cfg->pressure_tau_s > 3600)
        return cr_fail(err, CR_EINVAL, "pressure_tau_s must be in (0, 3600], got %g",
                       cfg->pressure_tau_s);
    if (!isfinite(cfg->quantum) || cfg->quantum <= 0)
        return cr_fail(err, CR_EINVAL, "quantum must be finite and > 0, got %g", cfg->quantum);
    if (cfg->meet_slo < CR_ADMIT_MEET_OFF || cfg->meet_slo > CR_ADMIT_MEET_ALWAYS)
        return cr_fail(err, CR_EINVAL, "meet_slo must be 0 (off), 1 (pressed) or 2 (always), got %d",
                       cfg->meet_slo);
    if (cfg->tracked_ids < 1 || cfg->tracked_ids > TRACKED_MAX)
        return cr_fail(err, CR_EINVAL, "tracked_ids must be in 1..%d, got %u", TRACKED_MAX,
                       cfg->tracked_ids);
    return CR_OK;
}

cr_admit *cr_admit_new(const cr_admit_config *cfg, const cr_admit_objective *t, size_t n,
                       cr_error *err)
{
    if (cr_admit_config_check(cfg, err) != CR_OK)
        return NULL;
    if (n > CR_ADMIT_MAX_OBJECTIVES) {
        cr_fail(err, CR_EINVAL, "objectives: at most %d entries, got %zu",
                CR_ADMIT_MAX_OBJECTIVES, n);
        return NULL;
    }
    cr_admit *a = calloc(1, sizeof *a);
    if (!a || !(a->ids = calloc(cfg->tracked_ids + 1, sizeof *a->ids)) ||
        drr_init(&a->q, cfg->max_queued, cfg->quantum) != 0) {
        if (a)
            free(a->ids);
        free(a);
        cr_fail(err, CR_ENOMEM, "out of memory for the door (%u held)", cfg->max_queued);
        return NULL;
    }
    a->cfg = *cfg;
    if (a->cfg.pressure_off <= 0) /* the default, resolved once for the door and its figures */
        a->cfg.pressure_off = a->cfg.pressure / 2;
    if (n)
        memcpy(a->table, t, n * sizeof *t);
    a->n_table = n;
    memcpy(a->ids[cfg->tracked_ids].name, "other", 6);
    pthread_mutex_init(&a->lock, NULL);
    return a;
}

void cr_admit_free(cr_admit *a)
{
    if (!a)
        return;
    drr_free(&a->q);
    pthread_mutex_destroy(&a->lock);
    free(a->ids);
    free(a);
}

const cr_admit_config *cr_admit_config_of(const cr_admit *a) { return &a->cfg; }

const cr_admit_objective *cr_admit_objectives(const cr_admit *a, size_t *n)
{
    *n = a->n_table;
    return a->table;
}

/* a locked: the counter slot of q's fairness id, taking a free one for a
 * new id while any is left ("" is an id like any other). */
static uint32_t id_slot_of(cr_admit *a, const cr_admit_ask *q)
{
    size_t len = q->fairness ? q->fairness_len : 0;
    len = len > CR_ADMIT_NAME_MAX ? CR_ADMIT_NAME_MAX : len; /* longer ids share their head */
    for (uint32_t i = 0; i < a->n_ids; i++)
        if (a->ids[i].len == len && (!len || memcmp(a->ids[i].name, q->fairness, len) == 0))
            return i;
    if (a->n_ids == a->cfg.tracked_ids)
        return a->cfg.tracked_ids;
    id_slot *s = &a->ids[a->n_ids];
    if (len)
        memcpy(s->name, q->fairness, len);
    s->name[len] = 0;
    s->len = len;
    return a->n_ids++;
}

static uint32_t objective_slot(const cr_admit *a, uint32_t objective)
{
    return objective < a->n_table ? objective : (uint32_t)a->n_table;
}

/* a locked: adds one to the field at offset of both counts. */
static void count(cr_admit *a, uint32_t objective, uint32_t id, size_t offset)
{
    *(uint64_t *)((char *)&a->objective[objective_slot(a, objective)] + offset) += 1;
    *(uint64_t *)((char *)&a->ids[id].c + offset) += 1;
}

#define COUNT(a, obj, id, field) count(a, obj, id, offsetof(cr_admit_counts, field))

/* a locked: 1 when it can be held now (every bound has room). */
static int room_for(const cr_admit *a, const cr_admit_item *it, double now)
{
    return a->cfg.max_queued > 0 && a->q.held < a->cfg.max_queued &&
           a->ids[it->id].held < a->cfg.max_per_id &&
           a->held_bytes + it->bytes <= a->cfg.max_bytes && it->deadline_s > now;
}

/* a locked: a critical request with an SLO, predicted c at the rule's
 * pick, sampled at now into the share (cr_admit_pressure), and whether
 * the door is pressed after it. */
static void sample_pressure(cr_admit *a, const cr_admit_ask *q, const cr_admit_candidate *c,
                            double now)
{
    if (c->ttft_ms - c->wait_ms > q->slo_ms)
        return; /* its prefill alone misses: no word on the queues */
    double x = c->ttft_ms > q->slo_ms && !q->spare; /* with room anywhere: no overload */
    if (!a->pressured) { /* the average starts at 0 here: one request that
                          * missed must not press a fresh door for minutes */
        a->pressure = 0;
        a->pressure_at = now;
        a->pressured = 1;
    }
    double dt = now - a->pressure_at;
    if (dt > 0) { /* a clock read out of order weighs nothing */
        a->pressure += (1 - exp(-dt / a->cfg.pressure_tau_s)) * (x - a->pressure);
        a->pressure_at = now;
    }
    /* on above the bound, off only well below it: a door that let the
     * held work go the moment its own holding had lowered the share
     * would refill the queues it had just emptied */
    if (a->pressure > a->cfg.pressure)
        a->pressed = 1;
    else if (a->pressure <= a->cfg.pressure_off)
        a->pressed = 0;
}

/* a locked: 1 when sheddable work must wait for the critical's queues. */
static int pressed(const cr_admit *a)
{
    return a->cfg.pressure > 0 && a->pressed;
}

/* a locked: 1 when a request of priority would wait behind a held one
 * (one of its priority or above is held). */
static int behind(const cr_admit *a, int32_t priority)
{
    int32_t top;
    return drr_top(&a->q, &top) && top >= priority;
}

/* a locked: 1 when the door weighs a request of priority's candidates
 * rather than route the pick (cr_admit_acts). */
static int acts(const cr_admit *a, int32_t priority)
{
    return a->cfg.pressure <= 0 || pressed(a) || behind(a, priority);
}

double cr_admit_pressure(cr_admit *a)
{
    pthread_mutex_lock(&a->lock);
    double p = a->pressure;
    pthread_mutex_unlock(&a->lock);
    return p;
}

cr_admit_verdict cr_admit_offer(cr_admit *a, const cr_admit_ask *q, const cr_admit_candidate *c,
                                size_t n, double now, cr_admit_item *it, uint32_t *pick)
{
    *pick = 0;
    if (!q->has_objective)
        return CR_ADMIT_ROUTE; /* never looked at, counted nowhere */
    pthread_mutex_lock(&a->lock);
    uint32_t id = id_slot_of(a, q);
    if (q->priority >= 0 && q->slo_ms > 0 && n)
        sample_pressure(a, q, &c[0], now);
    /* idle until pressed: below overload the routes are the rule's own */
    cr_admit_verdict v = CR_ADMIT_ROUTE;
    if (acts(a, q->priority))
        v = cr_admit_decide(q, c, n, a->cfg.budget_ms, 0, q->can_wait, pick);
    if (v == CR_ADMIT_ROUTE && q->priority < 0 && (pressed(a) || behind(a, q->priority)))
        v = q->can_wait ? CR_ADMIT_HOLD : CR_ADMIT_SHED; /* never past a held one */
    if (v == CR_ADMIT_HOLD) {
        double wait = a->cfg.max_wait_ms;
        double last = q->slo_ms - it->service_ms; /* the latest start that meets the SLO */
        wait = q->slo_ms > 0 && last < wait ? last : wait;
        it->priority = q->priority;
        it->objective = q->objective;
        it->id = id;
        it->slo_ms = q->slo_ms;
        it->arrived_s = now;
        it->deadline_s = now + wait / 1000.0;
        if (room_for(a, it, now) && drr_push(&a->q, it) == 0) {
            a->ids[id].held++;
            a->held_bytes += it->bytes;
        } else {
            v = CR_ADMIT_SHED;
        }
    }
    if (v == CR_ADMIT_ROUTE)
        COUNT(a, q->objective, id, admitted);
    else if (v == CR_ADMIT_HOLD)
        COUNT(a, q->objective, id, queued);
    else
        COUNT(a, q->objective, id, shed);
    pthread_mutex_unlock(&a->lock);
    return v;
}

int cr_admit_behind(cr_admit *a, int32_t priority)
{
    pthread_mutex_lock(&a->lock);
    int b = behind(a, priority);
    pthread_mutex_unlock(&a->lock);
    return b;
}

int cr_admit_acts(cr_admit *a, int32_t priority)
{
    pthread_mutex_lock(&a->lock);
    int yes = acts(a, priority);
    pthread_mutex_unlock(&a->lock);
    return yes;
}

/* a locked: it has left the queue. */
static void released(cr_admit *a, const cr_admit_item *it)
{
    a->ids[it->id].held--;
    a->held_bytes -= it->bytes;
}

int cr_admit_next(cr_admit *a, double now, int (*ready)(void *ctx, const cr_admit_item *it),
                  void *ctx, cr_admit_item *out)
{
    pthread_mutex_lock(&a->lock);
    uint32_t f;
    double turns;
    int ok = drr_peek(&a->q, &f, &turns);
    const cr_admit_item *head = ok ? &a->q.nodes[a->q.flows[f].head].it : NULL;
    /* pressed, held work waits for the critical traffic's queues; but in
     * its last budget before its deadline it goes where the wait allows
     * (ready): served late rather than dropped (at the capacity itself a
     * door that waited to the end dropped most of docs' batch work) */
    if (ok && pressed(a))
        ok = head->deadline_s - now <= a->cfg.budget_ms / 1000.0;
    ok = ok && ready(ctx, head);
    if (ok) {
        drr_take(&a->q, f, turns, out);
        released(a, out);
        COUNT(a, out->objective, out->id, admitted);
    }
    pthread_mutex_unlock(&a->lock);
    return ok;
}

/* Takes out up to max held requests that match says 1 of, counted
 * dropped. */
static size_t drop_if(cr_admit *a, int (*match)(const void *ctx, const cr_admit_item *it),
                      const void *ctx, cr_admit_item *out, size_t max)
{
    pthread_mutex_lock(&a->lock);
    size_t n = drr_take_if(&a->q, match, ctx, out, max);
    for (size_t i = 0; i < n; i++) {
        released(a, &out[i]);
        COUNT(a, out[i].objective, out[i].id, dropped);
    }
    pthread_mutex_unlock(&a->lock);
    return n;
}

static int past(const void *ctx, const cr_admit_item *it)
{
    return it->deadline_s < *(const double *)ctx;
}

size_t cr_admit_expire(cr_admit *a, double now, cr_admit_item *out, size_t max)
{
    return drop_if(a, past, &now, out, max);
}

int cr_admit_cancel(cr_admit *a, int (*match)(const void *ctx, const cr_admit_item *it),
                    const void *ctx, cr_admit_item *out)
{
    return drop_if(a, match, ctx, out, 1) == 1;
}

void cr_admit_outcome(cr_admit *a, const cr_admit_ask *q, double ttft_ms)
{
    if (!q->has_objective || !(q->slo_ms > 0))
        return;
    pthread_mutex_lock(&a->lock);
    uint32_t id = id_slot_of(a, q);
    COUNT(a, q->objective, id, outcomes);
    if (ttft_ms <= q->slo_ms)
        COUNT(a, q->objective, id, met);
    pthread_mutex_unlock(&a->lock);
}

void cr_admit_stats_read(cr_admit *a, double now, cr_admit_stats *out, cr_admit_id_counts *ids,
                         size_t max_ids, size_t *n_ids)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&a->lock);
    out->held = a->q.held;
    out->held_bytes = a->held_bytes;
    out->pressure = a->pressure;
    out->pressed = pressed(a);
    for (uint32_t f = 0; f < a->q.n_flows; f++) { /* each flow's head is its oldest */
        double age = now - a->q.nodes[a->q.flows[f].head].it.arrived_s;
        out->oldest_s = age > out->oldest_s ? age : out->oldest_s;
    }
    out->n_objectives = a->n_table;
    memcpy(out->objective, a->objective, (a->n_table + 1) * sizeof *a->objective);
    size_t k = 0;
    const id_slot *other = &a->ids[a->cfg.tracked_ids];
    int with_other = other->c.admitted || other->c.queued || other->c.shed || other->c.outcomes;
    for (uint32_t i = 0; i <= a->n_ids && k < max_ids; i++) {
        const id_slot *s = i < a->n_ids ? &a->ids[i] : with_other ? other : NULL;
        if (!s)
            break;
        memcpy(ids[k].name, s->name, sizeof s->name);
        ids[k].c = s->c;
        ids[k].held = s->held;
        k++;
    }
    if (n_ids)
        *n_ids = k;
    pthread_mutex_unlock(&a->lock);
}
