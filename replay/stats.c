/* A run's statistics: what the loop tallies per request, and the result
 * figures made from it once the run is over. Hit ratios over any span of
 * arrivals (the windows, the spans around a replan) come from running
 * sums over the requests in arrival order, so each is O(log n). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int cr_replay_tally_init(cr_replay_tally *t, size_t n, uint32_t shards)
{
    *t = (cr_replay_tally){.shards = shards};
    t->hits = malloc(n * sizeof *t->hits);
    t->ttft_ms = malloc(n * sizeof *t->ttft_ms);
    t->work_ms = calloc(shards, sizeof *t->work_ms);
    return t->hits && t->ttft_ms && t->work_ms ? 0 : -1;
}

void cr_replay_tally_add(cr_replay_tally *t, size_t i, const cr_replay_request *r,
                         const cr_replay_outcome *o)
{
    t->hits[i] = o->hit_tokens;
    t->ttft_ms[i] = o->ttft_ms;
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

/* Running sums of hit and input tokens: sums[i] over requests before i. */
typedef struct spans {
    const cr_replay_trace *t;
    const cr_replay_cluster *c;
    double *hit, *in; /* n + 1 each */
} spans;

static int spans_init(spans *s, const cr_replay_trace *t, const cr_replay_cluster *c,
                      const uint32_t *hits)
{
    *s = (spans){t, c, malloc((t->n + 1) * sizeof(double)), malloc((t->n + 1) * sizeof(double))};
    if (!s->hit || !s->in)
        return -1;
    s->hit[0] = s->in[0] = 0;
    for (size_t i = 0; i < t->n; i++) {
        s->hit[i + 1] = s->hit[i] + hits[i];
        s->in[i + 1] = s->in[i] + t->reqs[i].input_tokens;
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

/* The nearest-rank q-quantile of n sorted values. */
static double nearest_rank(const double *v, size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);
    return v[k > 0 ? k - 1 : 0];
}

/* Over the requests from tally->warmup on (n of them). */
static void ttft_figures(cr_replay_tally *tally, size_t n, cr_replay_result *out)
{
    double *v = tally->ttft_ms;
    tally->ttft_ms = NULL;
    memmove(v, v + tally->warmup, n * sizeof *v);
    qsort(v, n, sizeof *v, cr_replay_cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    out->ttft_sorted_ms = v;
    out->ttft_mean_ms = sum / (double)n;
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

cr_status cr_replay_summarize(const cr_replay_trace *t, const cr_replay_cluster *c,
                              const cr_replay_policy *p, double window_s, cr_replay_tally *tally,
                              cr_replay_result *out, cr_error *err)
{
    spans s;
    cr_status st = CR_OK;
    if (spans_init(&s, t, c, tally->hits) != 0)
        st = cr_fail(err, CR_ENOMEM, "out of memory summing %zu requests", t->n);
    if (st == CR_OK) {
        strncpy(out->policy, p->name ? p->name : "", sizeof out->policy - 1);
        size_t w = tally->warmup;
        out->requests = t->n - w;
        out->hit_ratio = (s.hit[t->n] - s.hit[w]) / (s.in[t->n] - s.in[w]);
        out->imbalance = imbalance(tally);
        out->kv_share =
            tally->with_knowledge ? (double)tally->as_kv / (double)tally->with_knowledge : 0;
        ttft_figures(tally, t->n - w, out);
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
    memset(r, 0, sizeof *r);
}
