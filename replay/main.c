/* cacheroute-replay: what would cacheroute do to my hit rate and my p99
 * TTFT, and which qcap / W / margin should I use? Replays a trace (a
 * Mooncake file or the generator) through routing policies against a
 * simulated cluster (replay.h), at one or more load scales, and answers
 * with each policy's figures, its capacity at a p99 TTFT SLO and, with
 * --sweep, the best cacheroute setting on a small grid.
 *
 * Every flag is an option row (cli/rows.c): the tool's own, then the
 * sidecar's own, so a sidecar flag means, parses and fails here exactly
 * as it does there. Outputs: a Markdown report on stdout, --json
 * (byte-identical for the same inputs), --plots (PNGs through gnuplot),
 * --dump-routes (every request's route).
 *
 * Exit status: 0; 1 when a run fails (memory, I/O); 2 for a bad flag or a
 * bad trace, with one line on stderr naming it.
 *
 * This file is the order of things: the flags, the trace, every policy's
 * runs and the sweep, then the outputs. What each step does is in cli/,
 * one file a concern (cli/cli.h says which). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "internal.h" /* CR_REPLAY_CACHE_MAX */

static int fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, TOOL ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return rc;
}

/* Every policy's series, the sweep, the outputs. */
static int replay(const runner *r)
{
    const settings *s = r->s;
    series all[MAX_POLICIES] = {{0}};
    sweep g = {.n = 0};
    cr_error err;
    cr_status st = CR_OK;
    size_t n = 0;
    for (; st == CR_OK && n < s->n_policies; n++)
        st = cli_run_series(r, s->policies[n], &s->core, &all[n], &err);
    if (st == CR_OK && s->sweep)
        st = cli_run_sweep(r, &g, &err);
    int rc = st == CR_OK ? 0 : fail(st == CR_EINVAL ? 2 : 1, "%s", err.msg);
    if (rc == 0 && s->json[0] && cli_write_json(r, all, n, s->sweep ? &g : NULL) != 0)
        rc = fail(1, "--json %s: cannot write it", s->json);
    if (rc == 0 && s->plots[0] && cli_write_plots(r, all, n) != 0)
        rc = 1;
    if (rc == 0)
        cli_print_markdown(r, all, n, s->sweep ? &g : NULL);
    for (size_t i = 0; i < n; i++)
        cli_series_free(&all[i], s->scales.n);
    cli_sweep_free(&g, s->scales.n);
    return rc;
}

static int run_with_trace(settings *s, const cr_replay_trace *t)
{
    trace_stats st;
    cli_measure(t, &s->cluster.truth, &st);
    if (s->set & SET_FRACTION) {
        double blocks = ceil(s->shard_fraction * (double)st.distinct_blocks);
        s->cluster.shard_blocks = (uint64_t)fmin(fmax(blocks, 1), CR_REPLAY_CACHE_MAX);
    }
    cli_choose_policies(s, &st);
    FILE *dump = NULL;
    if (s->dump_routes[0]) {
        if (!(dump = fopen(s->dump_routes, "w")))
            return fail(1, "--dump-routes %s: %s", s->dump_routes, strerror(errno));
        fprintf(dump, "policy,scale,request,owner,input_tokens,knowledge_tokens,shard,hit_tokens,"
                      "queue_wait_ms,prefill_ms,kv_ms,ttft_ms,used_kv,replanned\n");
    }
    runner r = {s, t, &st, dump};
    int rc = replay(&r);
    if (dump && fclose(dump) != 0 && rc == 0)
        rc = fail(1, "--dump-routes %s: cannot write it", s->dump_routes);
    return rc;
}

int main(int argc, char **argv)
{
    settings s;
    cli_settings_default(&s);
    cr_error err;
    int rc = cli_parse_args(argc, argv, &s, &err);
    if (rc == 1) {
        cli_usage(stdout);
        rc = 0;
    } else if (rc != 0 || cli_finish_settings(&s, &err) != 0) {
        rc = fail(2, "%s", err.msg);
    } else {
        cr_replay_trace t = {0};
        rc = cli_open_events(&s, &err);
        if (rc == 0)
            rc = cli_open_trace(&s, &t, &err);
        rc = rc ? fail(rc, "%s", err.msg) : run_with_trace(&s, &t);
        cr_replay_trace_free(&t);
    }
    cli_settings_free(&s);
    return rc;
}
