/* The runs: one policy at every scale and its capacity at the SLO, and
 * the --sweep grid of cacheroute settings. */
#include <stdlib.h>

#include "cli.h"

static capacity capacity_at(const double *load, const double *p99, size_t n, double slo)
{
    size_t k = n;
    while (k > 0 && p99[k - 1] > slo)
        k--;
    if (k == 0)
        return (capacity){0, "none"};
    if (k == n)
        return (capacity){load[n - 1], "largest tested"};
    double f = (slo - p99[k - 1]) / (p99[k] - p99[k - 1]);
    return (capacity){load[k - 1] + f * (load[k] - load[k - 1]), "interpolated"};
}

double cli_offered_load(const runner *r, double scale) { return r->stats->rate_per_s * scale; }

cr_status cli_run_series(const runner *r, unsigned policy, const cr_core_config *core,
                         series *out, cr_error *err)
{
    const values *sc = &r->s->scales;
    double load[MAX_VALUES], p99[MAX_VALUES];
    *out = (series){.policy = policy, .at = calloc(sc->n, sizeof *out->at)};
    if (!out->at)
        return cr_fail(err, CR_ENOMEM, "out of memory for %zu results", sc->n);
    for (size_t j = 0; j < sc->n; j++) {
        cr_replay_cluster c = r->s->cluster;
        c.scale = sc->v[j];
        cr_replay_policy p;
        cr_status st = cli_make_policy(policy, core, r->s, &c, r->dump, &p, err);
        if (st == CR_OK) {
            st = cr_replay_run(r->t, &c, &p, r->s->series_window_s, &out->at[j], err);
            p.free(p.state);
        }
        if (st != CR_OK)
            return st;
        load[j] = cli_offered_load(r, c.scale);
        p99[j] = out->at[j].ttft_p99_ms;
        out->hit_mean += out->at[j].hit_ratio / (double)sc->n;
    }
    out->cap = capacity_at(load, p99, sc->n, r->s->slo_p99_ms);
    return CR_OK;
}

void cli_series_free(series *x, size_t n_scales)
{
    for (size_t j = 0; x->at && j < n_scales; j++)
        cr_replay_result_free(&x->at[j]);
    free(x->at);
    x->at = NULL;
}

static void sweep_grid(const runner *r, sweep *g)
{
    const settings *s = r->s;
    const trace_stats *st = r->stats;
    double mu = 1000.0 / st->cold_ms_mean; /* requests/s a shard serves cold */
    double per_session = (double)st->distinct_blocks / (double)(st->owners ? st->owners : 1);
    double fits = (double)s->cluster.shard_blocks / (per_session > 0 ? per_session : 1);
    double m = s->core.inject.decision_margin_ms;
    g->qcap = s->sweep_qcap.n ? s->sweep_qcap : (values){{0.5 * mu, mu, 2 * mu, 4 * mu}, 4};
    /* W across orders of magnitude: admitting fewer sessions leaves more
     * on their stable fallback shards, which matters more than the LPT
     * balance when every replan reshuffles the admitted ones. */
    g->warm = s->sweep_warm.n ? s->sweep_warm : (values){{0.01 * fits, 0.1 * fits, fits}, 3};
    if (s->sweep_margin.n)
        g->margin = s->sweep_margin;
    else
        g->margin = st->knowledge ? (values){{0, m, 4 * m}, 3} : (values){{m}, 1};
}

void cli_sweep_point(const sweep *g, size_t i, double *qcap, double *warm, double *margin)
{
    *qcap = g->qcap.v[i / (g->warm.n * g->margin.n)];
    *warm = g->warm.v[i / g->margin.n % g->warm.n];
    *margin = g->margin.v[i % g->margin.n];
}

/* Better: a higher capacity, ties by the mean hit ratio, then the earlier
 * point (so the answer is deterministic). */
static int better(const series *a, const series *b)
{
    if (a->cap.req_per_s != b->cap.req_per_s)
        return a->cap.req_per_s > b->cap.req_per_s;
    return a->hit_mean > b->hit_mean;
}

cr_status cli_run_sweep(const runner *given, sweep *g, cr_error *err)
{
    runner quiet = *given, *r = &quiet;
    quiet.dump = NULL; /* --dump-routes is for the policies' own runs */
    sweep_grid(r, g);
    g->n = g->qcap.n * g->warm.n * g->margin.n;
    g->points = calloc(g->n, sizeof *g->points);
    if (!g->points)
        return cr_fail(err, CR_ENOMEM, "out of memory for %zu sweep points", g->n);
    for (size_t i = 0; i < g->n; i++) {
        cr_core_config core = r->s->core;
        cli_sweep_point(g, i, &core.planner.qcap, &core.planner.warm_slots_per_shard,
                        &core.inject.decision_margin_ms);
        cr_status st = cli_run_series(r, 0, &core, &g->points[i], err);
        if (st != CR_OK)
            return st;
        if (i == 0 || better(&g->points[i], &g->points[g->best]))
            g->best = i;
    }
    return CR_OK;
}

void cli_sweep_free(sweep *g, size_t n_scales)
{
    for (size_t i = 0; i < g->n && g->points; i++)
        cli_series_free(&g->points[i], n_scales);
    free(g->points);
    g->points = NULL;
}
