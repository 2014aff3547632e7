/* The answers: --json, one document (byte-identical for the same inputs),
 * and the Markdown report on stdout. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* ---- the JSON ------------------------------------------------------------------ */

static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* A row into obj as {flag: value}: numbers as numbers, the rest as the
 * text a flag would take (null when unset). */
static void row_json(const cr_option_ref *r, const settings *s, json_t *obj)
{
    const cr_option *o = r->o;
    char text[512];
    cr_compose_text(r, s, text, sizeof text);
    int integral = o->type == CR_OPT_LONG || o->type == CR_OPT_U32 || o->type == CR_OPT_U64;
    double x = integral || o->type == CR_OPT_DOUBLE
                   ? cr_option_number(o, (const char *)s + r->offset)
                   : 0;
    json_t *v = !*text                     ? json_null()
                : o->type == CR_OPT_DOUBLE ? num(x)
                : integral                 ? json_integer((json_int_t)x)
                                           : json_string(text);
    json_object_set_new(obj, o->name, v);
}

/* The object named key in parent, made when absent: tables of one group
 * (the core's own, the route's, the state file's) share it. */
static json_t *group_object(json_t *parent, const char *key)
{
    json_t *obj = json_object_get(parent, key);
    if (!obj) {
        obj = json_object();
        json_object_set_new(parent, key, obj);
    }
    return obj;
}

/* Whether the inputs show a table of this kind: the generator's only for a
 * generated trace, its documents' only when it has some (so a trace
 * without them reads as it did before they existed). */
static int shown(part_json kind, const settings *s)
{
    switch (kind) {
    case JSON_NONE:
        return 0;
    case JSON_GENERATOR:
        return s->generate;
    case JSON_DOCUMENTS:
        return s->generate && s->gen.documents > 0;
    case JSON_EVENTS:
        return s->events_path[0] != '\0';
    case JSON_OUTSIDE:
        return s->cluster.foreign_share > 0 || s->cluster.scrape_interval_s > 0;
    case JSON_TOOL:
    case JSON_SIDECAR:
        break;
    }
    return 1;
}

static json_t *inputs_json(const settings *s, const trace_stats *st)
{
    json_t *in = json_object(), *sidecar = json_object();
    const cr_composition *c = &cli_flags;
    for (cr_option_ref r = cr_compose_first(c); r.o; cr_compose_next(c, &r)) {
        const char *group = r.table->group;
        part_json kind = cli_part_json(&r);
        if (!shown(kind, s) || cr_compose_shadowed(c, &r))
            continue;
        if (kind != JSON_SIDECAR)
            row_json(&r, s, group_object(in, group));
        else
            row_json(&r, s, group_object(sidecar, group[0] ? group : "core"));
    }
    json_object_set_new(in, "cacheroute", sidecar);
    json_object_set_new(in, "shard_blocks", json_integer((json_int_t)s->cluster.shard_blocks));
    json_object_set_new(
        in, "trace_stats",
        json_pack("{s:I,s:I,s:I,s:o,s:o,s:o,s:b,s:o}", "requests", (json_int_t)st->requests,
                  "owners", (json_int_t)st->owners, "distinct_blocks",
                  (json_int_t)st->distinct_blocks, "span_s", num(st->span_s), "rate_per_s",
                  num(st->rate_per_s), "owner_gini", num(st->owner_gini), "knowledge",
                  st->knowledge, "cold_prefill_ms_mean", num(st->cold_ms_mean)));
    return in;
}

/* moved / forced, NaN when none was forced. */
static double moved_per_forced(const cr_replay_event_result *e)
{
    return e->forced ? (double)e->moved / (double)e->forced : NAN;
}

static json_t *event_json(const cr_replay_event_result *e)
{
    return json_pack("{s:o,s:s,s:s,s:I,s:o,s:o,s:o,s:o,s:I,s:I,s:o}", "at_s", num(e->event.at_s),
                     "kind", cr_replay_member_kind_name(e->event.kind), "endpoint", e->event.id,
                     "shard", (json_int_t)e->event.slot, "hit_ratio_before", num(e->hit_before),
                     "ttft_p99_before_ms", num(e->p99_before_ms), "ttft_p99_after_ms",
                     num(e->p99_after_ms), "recovered_s", num(e->recovered_s), "moved",
                     (json_int_t)e->moved, "forced", (json_int_t)e->forced, "moved_per_forced",
                     num(moved_per_forced(e)));
}

/* The figures events add to a result (only with --events, so a run
 * without them reads as before). */
static void events_json(const cr_replay_result *res, json_t *obj)
{
    json_t *list = json_array();
    for (size_t k = 0; k < res->n_events; k++)
        json_array_append_new(list, event_json(&res->events[k]));
    json_object_set_new(obj, "failed_requests", json_integer((json_int_t)res->failed_requests));
    json_object_set_new(obj, "hit_ratio_events", num(res->hit_ratio_events));
    json_object_set_new(obj, "events", list);
}

static json_t *result_json(const runner *r, const series *x, size_t j)
{
    const cr_replay_result *res = &x->at[j];
    double scale = r->s->scales.v[j];
    json_t *obj = json_pack("{s:s,s:o,s:o,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:o,s:o,s:o,s:o}", "policy",
                     cli_policy_name(x->policy), "scale", num(scale), "offered_load_per_s",
                     num(cli_offered_load(r, scale)), "requests", (json_int_t)res->requests,
                     "hit_ratio", num(res->hit_ratio), "ttft_p50_ms", num(res->ttft_p50_ms),
                     "ttft_p99_ms", num(res->ttft_p99_ms), "ttft_mean_ms", num(res->ttft_mean_ms),
                     "imbalance", num(res->imbalance), "kv_share", num(res->kv_share),
                     "n_replans", (json_int_t)res->n_replans, "churn_mean", num(res->churn_mean),
                     "dip_mean", num(res->dip_mean), "hit_error_tokens",
                     num(res->hit_error_tokens), "hit_error_share", num(res->hit_error_share));
    if (r->s->cluster.events)
        events_json(res, obj);
    if (r->s->cluster.foreign_share > 0)
        json_object_set_new(obj, "foreign_requests", json_integer((json_int_t)res->foreign_requests));
    return obj;
}

static json_t *capacity_json(const series *x, const char *key, json_t *v)
{
    json_t *o = json_pack("{s:o,s:s,s:o}", "capacity_req_per_s", num(x->cap.req_per_s), "bound",
                          x->cap.how, "hit_ratio_mean", num(x->hit_mean));
    if (key)
        json_object_set_new(o, key, v);
    return o;
}

static json_t *sweep_json(const sweep *g)
{
    json_t *points = json_array();
    for (size_t i = 0; i < g->n; i++) {
        double q, w, m;
        cli_sweep_point(g, i, &q, &w, &m);
        json_t *o = capacity_json(&g->points[i], NULL, NULL);
        json_object_set_new(o, "qcap", num(q));
        json_object_set_new(o, "warm_slots_per_shard", num(w));
        json_object_set_new(o, "decision_margin_ms", num(m));
        json_array_append_new(points, o);
    }
    return json_pack("{s:o,s:O}", "points", points, "best", json_array_get(points, g->best));
}

int cli_write_json(const runner *r, const series *all, size_t n, const sweep *g)
{
    json_t *results = json_array(), *caps = json_array();
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < r->s->scales.n; j++)
            json_array_append_new(results, result_json(r, &all[i], j));
        json_array_append_new(caps, capacity_json(&all[i], "policy",
                                                  json_string(cli_policy_name(all[i].policy))));
    }
    json_t *root = json_pack("{s:s,s:o,s:o,s:o}", "tool", TOOL, "inputs",
                             inputs_json(r->s, r->stats), "results", results, "capacity", caps);
    if (g)
        json_object_set_new(root, "sweep", sweep_json(g));
    int rc = root ? json_dump_file(root, r->s->json, JSON_INDENT(2) | JSON_REAL_PRECISION(12))
                  : -1;
    json_decref(root);
    return rc;
}

/* ---- the Markdown --------------------------------------------------------------- */

/* A flag's value as the flag would take it (its row, the one source). */
static void flag_text(const settings *s, const char *flag, char *buf, size_t len)
{
    cr_option_ref r;
    buf[0] = '\0';
    if (cr_compose_find(&cli_flags, flag, strlen(flag), &r))
        cr_compose_text(&r, s, buf, len);
}

static void markdown_inputs(const runner *r)
{
    const settings *s = r->s;
    const trace_stats *st = r->stats;
    const cr_replay_cost *k = &s->cluster.truth;
    char key[32];
    cli_show_owner_key(s, key, sizeof key);
    printf("# " TOOL "\n\n");
    if (s->generate)
        printf("- trace: generated, seed %llu: ", (unsigned long long)s->gen.seed);
    else
        printf("- trace: %s (owner key %s): ", s->trace, key);
    printf("%zu requests over %.0f s (%.3f req/s), %zu sessions (Gini %.3f), %zu distinct "
           "blocks%s\n",
           st->requests, st->span_s, st->rate_per_s, st->owners, st->owner_gini,
           st->distinct_blocks, st->knowledge ? ", with knowledge" : "");
    if (s->generate && s->gen.documents > 0) {
        char per[16], owners[16];
        flag_text(s, "document-per", per, sizeof per);
        flag_text(s, "owners", owners, sizeof owners);
        printf("- documents: %u x %u blocks, Zipf %g, one per %s; owners by %s\n",
               s->gen.documents, s->gen.document_blocks, s->gen.document_zipf, per, owners);
    }
    printf("- cluster: %u shards x %llu blocks; true prefill %g + %g (L - s) + %g (L^2 - s^2) "
           "ms, noise %g; KV %g + %g ms/token\n",
           s->cluster.shards, (unsigned long long)s->cluster.shard_blocks, k->prefill.fixed_ms,
           k->prefill.ms_per_token, k->prefill.ms_per_token2, k->noise, k->kv_fixed_ms, k->kv_ms_per_token);
    if (s->cluster.events) {
        const cr_replay_events *e = s->cluster.events;
        size_t per[CR_REPLAY_N_KINDS] = {0};
        for (size_t k = 0; k < e->n; k++)
            per[e->ev[k].kind]++;
        printf("- events: %s: %zu joins, %zu drains, %zu fails, %zu marks over e0 .. e%u (%u "
               "shards at most)\n",
               s->events_path, per[CR_REPLAY_JOIN], per[CR_REPLAY_DRAIN], per[CR_REPLAY_FAIL],
               per[CR_REPLAY_MARK], e->shards - 1, e->slots);
    }
    char by[16], weight[16];
    flag_text(s, "route-by", by, sizeof by);
    flag_text(s, "weight", weight, sizeof weight);
    printf("- cacheroute: qcap %g, W %g, replan every %g s, half-life %g, margin %g ms; "
           "route by %s (load bound %g), weights %s\n\n",
           s->core.planner.qcap, s->core.planner.warm_slots_per_shard,
           s->core.replan_interval_s, s->core.estimator.half_life,
           s->core.inject.decision_margin_ms, by, s->core.route.load_bound, weight);
}

/* One line per run of a policy that predicts hits (a table of its own, so
 * the results table keeps its columns for the parsers that read it). */
static void markdown_hit_error(const runner *r, const series *all, size_t n)
{
    int heading = 0;
    char events[16];
    flag_text(r->s, "kv-events", events, sizeof events);
    for (size_t j = 0; j < r->s->scales.n; j++)
        for (size_t i = 0; i < n; i++) {
            const cr_replay_result *x = &all[i].at[j];
            if (!isfinite(x->hit_error_tokens))
                continue;
            if (!heading++)
                printf("\nHit prediction error (mean |predicted - served cached tokens| per "
                       "request; KV events %s):\n\n| policy | scale | error (tokens) | of the "
                       "mean prompt |\n|---|---:|---:|---:|\n",
                       events);
            printf("| %s | %g | %.1f | %.4f |\n", cli_policy_name(all[i].policy),
                   r->s->scales.v[j], x->hit_error_tokens, x->hit_error_share);
        }
}

static void markdown_results(const runner *r, const series *all, size_t n)
{
    printf("| policy | scale | load (req/s) | hit ratio | p50 TTFT (ms) | p99 TTFT (ms) | "
           "mean TTFT (ms) | imbalance | KV share | replans | churn | dip |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t j = 0; j < r->s->scales.n; j++)
        for (size_t i = 0; i < n; i++) {
            const cr_replay_result *x = &all[i].at[j];
            printf("| %s | %g | %.3f | %.3f | %.0f | %.0f | %.0f | %.2f | %.2f | %zu | %.3f | "
                   "%+.3f |\n",
                   cli_policy_name(all[i].policy), r->s->scales.v[j],
                   cli_offered_load(r, r->s->scales.v[j]), x->hit_ratio, x->ttft_p50_ms,
                   x->ttft_p99_ms, x->ttft_mean_ms, x->imbalance, x->kv_share, x->n_replans,
                   x->churn_mean, x->dip_mean);
        }
    markdown_hit_error(r, all, n);
    printf("\nCapacity at p99 TTFT <= %g ms:\n\n| policy | capacity (req/s) | bound | mean hit "
           "ratio |\n|---|---:|---|---:|\n",
           r->s->slo_p99_ms);
    for (size_t i = 0; i < n; i++)
        printf("| %s | %.3f | %s | %.3f |\n", cli_policy_name(all[i].policy),
               all[i].cap.req_per_s, all[i].cap.how, all[i].hit_mean);
}

static void markdown_sweep(const sweep *g)
{
    printf("\nSweep (cacheroute; capacity at the SLO, ties by mean hit ratio):\n\n"
           "| qcap | W | margin (ms) | capacity (req/s) | bound | mean hit ratio |\n"
           "|---:|---:|---:|---:|---|---:|\n");
    for (size_t i = 0; i < g->n; i++) {
        double q, w, m;
        cli_sweep_point(g, i, &q, &w, &m);
        printf("| %.4g | %.4g | %g | %.3f | %s | %.3f |%s\n", q, w, m, g->points[i].cap.req_per_s,
               g->points[i].cap.how, g->points[i].hit_mean, i == g->best ? " best" : "");
    }
    double q, w, m;
    cli_sweep_point(g, g->best, &q, &w, &m);
    printf("\nBest: --qcap %.6g --warm-slots-per-shard %.6g --decision-margin-ms %g\n", q, w, m);
}

/* A figure or "-" when it is NaN (no request in its span, none forced). */
static const char *or_dash(char *buf, size_t len, const char *fmt, double x)
{
    if (!isfinite(x))
        return "-";
    snprintf(buf, len, fmt, x);
    return buf;
}

/* Per event, per run: the figures around it (replay.h); then per run the
 * hit ratio through the events and the failed requests. */
static void markdown_events(const runner *r, const series *all, size_t n)
{
    printf("\nMembership events (%s; hit before over [T-60, T), p99 over [T-60, T) and [T, "
           "T+60); recovered: the first t in 0, 5, ..., 60 s whose [T+t, T+t+30) hits within "
           "0.02 of before, - when none or the trace ends; moved: owners whose first shard from "
           "T differs from their last before; forced: of them, those whose last shard left):\n\n"
           "| policy | scale | at (s) | event | hit before | recovered (s) | p99 before (ms) | "
           "p99 after (ms) | moved | forced | moved/forced |\n"
           "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
           r->s->events_path);
    for (size_t j = 0; j < r->s->scales.n; j++)
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < all[i].at[j].n_events; k++) {
                const cr_replay_event_result *e = &all[i].at[j].events[k];
                char b[5][32];
                printf("| %s | %g | %.1f | %s %s | %s | %s | %s | %s | %llu | %llu | %s |\n",
                       cli_policy_name(all[i].policy), r->s->scales.v[j], e->event.at_s,
                       cr_replay_member_kind_name(e->event.kind), e->event.id,
                       or_dash(b[0], 32, "%.3f", e->hit_before),
                       or_dash(b[1], 32, "%.0f", e->recovered_s),
                       or_dash(b[2], 32, "%.0f", e->p99_before_ms),
                       or_dash(b[3], 32, "%.0f", e->p99_after_ms),
                       (unsigned long long)e->moved, (unsigned long long)e->forced,
                       or_dash(b[4], 32, "%.2f", moved_per_forced(e)));
            }
    printf("\nThrough the events ([first - 60, last + 60) s):\n\n| policy | scale | hit ratio | "
           "failed requests |\n|---|---:|---:|---:|\n");
    for (size_t j = 0; j < r->s->scales.n; j++)
        for (size_t i = 0; i < n; i++) {
            char b[32];
            const cr_replay_result *x = &all[i].at[j];
            printf("| %s | %g | %s | %zu |\n", cli_policy_name(all[i].policy), r->s->scales.v[j],
                   or_dash(b, sizeof b, "%.3f", x->hit_ratio_events), x->failed_requests);
        }
}

void cli_print_markdown(const runner *r, const series *all, size_t n, const sweep *g)
{
    markdown_inputs(r);
    markdown_results(r, all, n);
    if (r->s->cluster.events)
        markdown_events(r, all, n);
    if (g)
        markdown_sweep(g);
}
