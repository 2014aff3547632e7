/* A run's statistics: what the loop tallies per request, and the result
 * figures made from it once the run is over. Hit ratios over any span of
 * arrivals (the windows, the spans around a replan) come from running
 * sums over the requests in arrival order, so each is O(log n). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int cr_replay_tally_init(cr_replay_tally *t, size_t n, uint32_t shards, int events)
{
    *t = (cr_replay_tally){.shards = shards};
    t->hits = malloc(n * sizeof *t->hits);
    t->ttft_ms = malloc(n * sizeof *t->ttft_ms);
    t->work_ms = calloc(shards, sizeof *t->work_ms);
    if (events) {
        t->shard = malloc(n * sizeof *t->shard);
        t->failed = calloc(n, sizeof *t->failed);
    }
    return t->hits && t->ttft_ms && t->work_ms && (!events || (t->shard && t->failed)) ? 0 : -1;
}

void cr_replay_tally_add(cr_replay_tally *t, size_t i, const cr_replay_request *r,
                         const cr_replay_outcome *o)
{
    t->hits[i] = o->hit_tokens;
    t->ttft_ms[i] = o->ttft_ms;
    if (t->shard)
        t->shard[i] = o->shard;
    if (i >= t->warmup)
        t->work_ms[o->shard] += o->prefill_ms;
    t->with_knowledge += r->knowledge_tokens > 0;
    t->as_kv += o->used_kv != 0;
}

void cr_replay_tally_predicted(cr_replay_tally *t, size_t i, const cr_replay_request *r,
                               uint32_t predicted, uint32_t hit_tokens)
{
    if (i < t->warmup)
        return;
    t->predicted++;
    t->predicted_error += fabs((double)predicted - (double)hit_tokens);
    t->predicted_input += r->input_tokens;
}

void cr_replay_tally_free(cr_replay_tally *t)
{
    free(t->hits);
    free(t->ttft_ms);
    free(t->work_ms);
    free(t->shard);
    free(t->failed);
    free(t->foreign);
    memset(t, 0, sizeof *t);
}

cr_status cr_replay_window_check(const cr_replay_trace *t, const cr_replay_cluster *c,
                                 double window_s, cr_error *err)
{
    if (!(isfinite(window_s) && window_s > 0))
        return cr_fail(err, CR_EINVAL, "window_s must be finite and > 0, got %g", window_s);
    double span = cr_replay_arrival_s(&t->reqs[t->n - 1], c);
    if (span / window_s >= CR_REPLAY_WINDOWS_MAX)
        return cr_fail(err, CR_EINVAL, "window_s %g cuts %g s into more than %u windows",
                       window_s, span, CR_REPLAY_WINDOWS_MAX);
    return CR_OK;
}

/* Whether request i failed (was never served). */
static int failed(const cr_replay_tally *tally, size_t i)
{
    return tally->failed && tally->failed[i];
}

/* Whether request i is in the figures: served, and routed by the policy
 * (not foreign). */
static int measured(const cr_replay_tally *tally, size_t i)
{
    return !failed(tally, i) && !(tally->foreign && tally->foreign[i]);
}

/* Running sums of the measured requests' hit and input tokens: sums[i]
 * over requests before i. */
typedef struct spans {
    const cr_replay_trace *t;
    const cr_replay_cluster *c;
    double *hit, *in; /* n + 1 each */
} spans;

static int spans_init(spans *s, const cr_replay_trace *t, const cr_replay_cluster *c,
                      const cr_replay_tally *tally)
{
    *s = (spans){t, c, malloc((t->n + 1) * sizeof(double)), malloc((t->n + 1) * sizeof(double))};
    if (!s->hit || !s->in)
        return -1;
    s->hit[0] = s->in[0] = 0;
    for (size_t i = 0; i < t->n; i++) {
        int in = measured(tally, i);
        s->hit[i + 1] = s->hit[i] + (in ? tally->hits[i] : 0);
        s->in[i + 1] = s->in[i] + (in ? t->reqs[i].input_tokens : 0);
    }
    return 0;
}

/* The first request arriving at or after x. */
static size_t first_at(const spans *s, double x)
{
    size_t lo = 0, hi = s->t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cr_replay_arrival_s(&s->t->reqs[mid], s->c) < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The hit ratio of the requests arriving in [x0, x1); -1 when there are
 * none. */
static double ratio(const spans *s, double x0, double x1)
{
    size_t i = first_at(s, x0), j = first_at(s, x1);
    double in = s->in[j] - s->in[i];
    return in > 0 ? (s->hit[j] - s->hit[i]) / in : -1;
}

static cr_status series(const spans *s, double w, cr_replay_result *out, cr_error *err)
{
    size_t n = (size_t)floor(cr_replay_arrival_s(&s->t->reqs[s->t->n - 1], s->c) / w) + 1;
    out->hit_series = malloc(n * sizeof *out->hit_series);
    if (!out->hit_series)
        return cr_fail(err, CR_ENOMEM, "out of memory for %zu windows", n);
    out->window_s = w;
    out->n_windows = n;
    double last = 0;
    for (size_t k = 0; k < n; k++) {
        double x = ratio(s, (double)k * w, (double)(k + 1) * w);
        out->hit_series[k] = last = x >= 0 ? x : last;
    }
    return CR_OK;
}

/* Churn and dip per replan, averaged. */
static cr_status replans(const spans *s, const cr_replay_policy *p, double w,
                         cr_replay_result *out, cr_error *err)
{
    size_t n = 0, dips = 0;
    const double *changed = NULL, *at = NULL;
    if (!p->replans)
        return CR_OK;
    if (p->replans(p->state, &n, &changed, &at) != 0)
        return cr_fail(err, CR_ENOMEM, "policy %s could not report its replans",
                       p->name ? p->name : "?");
    double churn = 0, dip = 0;
    for (size_t j = 0; j < n; j++) {
        churn += changed[j];
        double before = ratio(s, at[j] - w, at[j]), after = ratio(s, at[j], at[j] + w);
        if (before >= 0 && after >= 0) {
            dip += after - before;
            dips++;
        }
    }
    out->n_replans = n;
    out->churn_mean = n ? churn / (double)n : 0;
    out->dip_mean = dips ? dip / (double)dips : 0;
    return CR_OK;
}

/* The nearest-rank q-quantile of n sorted values; NaN when there are
 * none. */
static double nearest_rank(const double *v, size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);
    return n ? v[k > 0 ? k - 1 : 0] : NAN;
}

/* The TTFTs of the measured requests in [i, j) into v (room for j - i),
 * sorted; how many. */
static size_t served_ttfts(const cr_replay_tally *tally, size_t i, size_t j, double *v)
{
    size_t n = 0;
    for (; i < j; i++)
        if (measured(tally, i))
            v[n++] = tally->ttft_ms[i];
    qsort(v, n, sizeof *v, cr_replay_cmp_double);
    return n;
}

/* Over the served requests from tally->warmup to n: the TTFTs move into
 * the result, sorted in place. */
static void ttft_figures(cr_replay_tally *tally, size_t n_requests, cr_replay_result *out)
{
    double *v = tally->ttft_ms;
    size_t n = served_ttfts(tally, tally->warmup, n_requests, v);
    tally->ttft_ms = NULL;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    out->ttft_sorted_ms = v;
    out->ttft_mean_ms = n ? sum / (double)n : NAN;
    out->ttft_p50_ms = nearest_rank(v, n, 0.50);
    out->ttft_p99_ms = nearest_rank(v, n, 0.99);
}

static double imbalance(const cr_replay_tally *tally)
{
    double max = 0, sum = 0;
    for (uint32_t k = 0; k < tally->shards; k++) {
        sum += tally->work_ms[k];
        max = fmax(max, tally->work_ms[k]);
    }
    double mean = sum / tally->shards;
    return mean > 0 ? max / mean : 1.0;
}

/* The mean error over the predicted requests, and that over their mean
 * prompt (the sums' ratio); NaN for a policy that predicted none. */
static void hit_error(const cr_replay_tally *tally, cr_replay_result *out)
{
    size_t n = tally->predicted;
    out->hit_error_tokens = n ? tally->predicted_error / (double)n : NAN;
    out->hit_error_share = n ? tally->predicted_error / tally->predicted_input : NAN;
}

/* ---- membership events ---------------------------------------------------- */

/* What the figures of every event share: per request its owner's number
 * (0 .. n_owners - 1), per owner its last shard, and room for TTFTs. */
typedef struct event_scratch {
    uint32_t *owner_no, *last;
    size_t n_owners;
    double *ttfts;
} event_scratch;

typedef struct owned {
    int64_t owner;
    size_t i;
} owned;

static int by_owner(const void *pa, const void *pb)
{
    const owned *a = pa, *b = pb;
    return (a->owner > b->owner) - (a->owner < b->owner);
}

static void event_scratch_free(event_scratch *x)
{
    free(x->owner_no);
    free(x->last);
    free(x->ttfts);
}

/* Numbers the owners through a sort of the requests by owner; -1 when out
 * of memory. */
static int event_scratch_init(event_scratch *x, const cr_replay_trace *t)
{
    *x = (event_scratch){.owner_no = malloc(t->n * sizeof *x->owner_no),
                         .last = malloc(t->n * sizeof *x->last),
                         .ttfts = malloc(t->n * sizeof *x->ttfts)};
    owned *o = malloc(t->n * sizeof *o);
    if (!x->owner_no || !x->last || !x->ttfts || !o) {
        free(o);
        return -1;
    }
    for (size_t i = 0; i < t->n; i++)
        o[i] = (owned){t->reqs[i].owner, i};
    qsort(o, t->n, sizeof *o, by_owner);
    for (size_t k = 0; k < t->n; k++) {
        x->n_owners += k == 0 || o[k].owner != o[k - 1].owner;
        x->owner_no[o[k].i] = (uint32_t)(x->n_owners - 1);
    }
    free(o);
    return 0;
}

/* The nearest-rank p99 TTFT of the served requests arriving in [x0, x1). */
static double p99_between(const spans *s, const cr_replay_tally *tally, double x0, double x1,
                          double *scratch)
{
    size_t n = served_ttfts(tally, first_at(s, x0), first_at(s, x1), scratch);
    return nearest_rank(scratch, n, 0.99);
}

/* The first t in 0, 5, ..., 60 whose 30 s from at hit at least before -
 * 0.02 (replay.h); NaN when none does first, or the span runs past the
 * last arrival. */
static double recovered_s(const spans *s, double at, double before)
{
    double end = cr_replay_arrival_s(&s->t->reqs[s->t->n - 1], s->c);
    int steps = (int)(CR_REPLAY_EVENT_WINDOW_S / CR_REPLAY_RECOVERY_STEP_S);
    for (int k = 0; isfinite(before) && k <= steps; k++) {
        double t0 = at + k * CR_REPLAY_RECOVERY_STEP_S, t1 = t0 + CR_REPLAY_RECOVERY_SPAN_S;
        if (t1 > end)
            break;
        double x = ratio(s, t0, t1);
        if (x >= 0 && x >= before - CR_REPLAY_RECOVERY_POINTS)
            return k * CR_REPLAY_RECOVERY_STEP_S;
    }
    return NAN;
}

/* Owners moved across event k, and those forced to move: each owner's
 * last shard before it against its first from it on, both between the
 * events either side of it, so that an owner silent across another event
 * does not count that event's move against this one. */
static void moves(const spans *s, const cr_replay_tally *tally, event_scratch *x, size_t k,
                  cr_replay_event_result *out)
{
    const cr_replay_events *e = s->c->events;
    const cr_replay_member_event *ev = &e->ev[k];
    size_t from = k ? first_at(s, e->ev[k - 1].at_s) : 0, cut = first_at(s, ev->at_s);
    size_t to = k + 1 < e->n ? first_at(s, e->ev[k + 1].at_s) : s->t->n;
    for (size_t o = 0; o < x->n_owners; o++)
        x->last[o] = CR_REPLAY_NIL;
    for (size_t i = from; i < cut; i++)
        x->last[x->owner_no[i]] = tally->shard[i];
    for (size_t i = cut; i < to; i++) {
        uint32_t *last = &x->last[x->owner_no[i]];
        if (*last == CR_REPLAY_NIL)
            continue; /* no request before ev, or its first after ev was seen */
        out->moved += tally->shard[i] != *last;
        out->forced += (ev->kind == CR_REPLAY_DRAIN || ev->kind == CR_REPLAY_FAIL) && *last == ev->slot;
        *last = CR_REPLAY_NIL;
    }
}

static double or_nan(double ratio_or_none) { return ratio_or_none >= 0 ? ratio_or_none : NAN; }

static cr_status event_figures(const spans *s, const cr_replay_tally *tally,
                               cr_replay_result *out, cr_error *err)
{
    const cr_replay_events *e = s->c->events;
    const double w = CR_REPLAY_EVENT_WINDOW_S;
    event_scratch x;
    out->hit_ratio_events =
        e->n ? or_nan(ratio(s, e->ev[0].at_s - w, e->ev[e->n - 1].at_s + w)) : NAN;
    if (!e->n)
        return CR_OK;
    out->events = calloc(e->n, sizeof *out->events);
    if (!out->events || event_scratch_init(&x, s->t) != 0) {
        if (out->events)
            event_scratch_free(&x);
        return cr_fail(err, CR_ENOMEM, "out of memory for the figures of %zu events", e->n);
    }
    out->n_events = e->n;
    for (size_t k = 0; k < e->n; k++) {
        cr_replay_event_result *r = &out->events[k];
        double t = e->ev[k].at_s;
        r->event = e->ev[k];
        r->hit_before = or_nan(ratio(s, t - w, t));
        r->p99_before_ms = p99_between(s, tally, t - w, t, x.ttfts);
        r->p99_after_ms = p99_between(s, tally, t, t + w, x.ttfts);
        r->recovered_s = recovered_s(s, t, r->hit_before);
        moves(s, tally, &x, k, r);
    }
    event_scratch_free(&x);
    return CR_OK;
}

/* Failed requests from the warm-up on, and foreign ones. */
static size_t count_failed(const cr_replay_tally *tally, size_t n, size_t *foreign)
{
    size_t k = 0;
    *foreign = 0;
    for (size_t i = tally->warmup; i < n; i++) {
        k += failed(tally, i);
        *foreign += tally->foreign && tally->foreign[i];
    }
    return k;
}

cr_status cr_replay_summarize(const cr_replay_trace *t, const cr_replay_cluster *c,
                              const cr_replay_policy *p, double window_s, cr_replay_tally *tally,
                              cr_replay_result *out, cr_error *err)
{
    spans s;
    cr_status st = CR_OK;
    if (spans_init(&s, t, c, tally) != 0)
        st = cr_fail(err, CR_ENOMEM, "out of memory summing %zu requests", t->n);
    if (st == CR_OK && c->events)
        st = event_figures(&s, tally, out, err); /* before the TTFTs move to out */
    if (st == CR_OK) {
        strncpy(out->policy, p->name ? p->name : "", sizeof out->policy - 1);
        size_t w = tally->warmup;
        out->failed_requests = count_failed(tally, t->n, &out->foreign_requests);
        out->requests = t->n - w - out->failed_requests - out->foreign_requests;
        out->hit_ratio = (s.hit[t->n] - s.hit[w]) / (s.in[t->n] - s.in[w]);
        out->imbalance = imbalance(tally);
        out->kv_share =
            tally->with_knowledge ? (double)tally->as_kv / (double)tally->with_knowledge : 0;
        ttft_figures(tally, t->n, out);
        hit_error(tally, out);
        st = series(&s, window_s, out, err);
    }
    if (st == CR_OK)
        st = replans(&s, p, window_s, out, err);
    free(s.hit);
    free(s.in);
    if (st != CR_OK)
        cr_replay_result_free(out);
    return st;
}

void cr_replay_result_free(cr_replay_result *r)
{
    free(r->hit_series);
    free(r->ttft_sorted_ms);
    free(r->events);
    free(r->admission);
    memset(r, 0, sizeof *r);
}
