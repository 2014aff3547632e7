/* What the files of cacheroute-replay (main.c says what the tool does)
 * share: the settings the flags fill, the trace's figures, one policy's
 * runs over the scales, and the sweep's grid. One concern a file: rows.c
 * the tool's option rows, flags.c argv into settings, trace.c the trace
 * and its figures, policies.c the policy set, runs.c runs, capacity and
 * the sweep, report.c the JSON and the Markdown, plots.c the plots. */
#ifndef CR_REPLAY_CLI_H
#define CR_REPLAY_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "options.h"
#include "replay.h"

#define TOOL "cacheroute-replay"
#define MAX_VALUES 64   /* numbers in one list flag */
#define MAX_POLICIES 16 /* names in --policies */

typedef struct values {
    double v[MAX_VALUES];
    size_t n;
} values;

/* ---- settings (rows.c, flags.c) -------------------------------------------- */

/* The tool tables' set word. */
enum { SET_ZIPF = 1u << 0, SET_GINI = 1u << 1, SET_FRACTION = 1u << 2, SET_BLOCKS = 1u << 3,
       SET_POLICIES = 1u << 4 };

typedef struct settings {
    /* replay rows */
    char *trace; /* "" = none */
    cr_owner_key key;
    unsigned policies[MAX_POLICIES]; /* policy indexes (policies.c) */
    size_t n_policies;
    char *scale_text, *sweep_qcap_text, *sweep_warm_text, *sweep_margin_text;
    double slo_p99_ms, series_window_s;
    cr_replay_weight weight; /* --weight: what a cacheroute arrival weighs */
    cr_replay_call call;     /* --call: Route or RecordArrival */
    cr_replay_kv_events kv_events; /* --kv-events: the shards' KV events to cacheroute */
    /* the lists, parsed from their text by cli_finish_settings */
    values scales; /* ascending, distinct */
    values sweep_qcap, sweep_warm, sweep_margin; /* empty = from the trace */
    /* output rows */
    char *json, *plots, *dump_routes; /* "" = none */
    /* events row, and the file it names (cli_open_events) */
    char *events_path; /* "" = none */
    cr_replay_events events;
    /* generator and cluster rows */
    cr_replay_gen_config gen;
    cr_replay_cluster cluster;
    double shard_fraction;
    unsigned set; /* SET_*: the tool tables' set word */
    int generate, sweep; /* the two switches */
    cr_core_config core; /* the sidecar's rows */
} settings;

/* Where a table's values go in the JSON's inputs. */
typedef enum part_json {
    JSON_NONE,      /* not there (the outputs) */
    JSON_TOOL,      /* under the table's group */
    JSON_GENERATOR, /* likewise, when the trace is generated */
    JSON_DOCUMENTS, /* likewise, when the generated trace has documents */
    JSON_EVENTS,    /* under the replay group, when --events is given */
    JSON_OUTSIDE,   /* under the cluster group, with foreign traffic or scrapes */
    JSON_SIDECAR    /* under "cacheroute", then the group ("core" for none) */
} part_json;

/* The tool's flags (rows.c): its own tables (replay, output, generator,
 * cluster), then the sidecar's core parts but the probe's, in lookup
 * order: a name found in an earlier table shadows a later one (--n-shards
 * is the cluster's --shards here). */
extern const cr_composition cli_flags;
/* Where a row's table goes in the JSON's inputs. */
part_json cli_part_json(const cr_option_ref *r);
/* --owner-key's value (a show function: cfg is the settings). */
int cli_show_owner_key(const void *cfg, char *buf, size_t len);

void cli_settings_default(settings *s);
void cli_settings_free(settings *s);

/* A comma list of numbers, each finite and >= lo (> lo when open); want
 * of them, or 1..MAX_VALUES when want is 0. */
cr_status cli_parse_values(const char *flag, const char *text, double lo, int open, size_t want,
                           values *out, cr_error *err);
void cli_usage(FILE *out);
/* Applies argv (cr_compose_parse over cli_flags, with the switches
 * --generate and --sweep). Returns 0, 1 after --help, -1 with err filled. */
int cli_parse_args(int argc, char **argv, settings *s, cr_error *err);
/* The rules across flags, once they are all in; -1 with err filled. */
int cli_finish_settings(settings *s, cr_error *err);

/* ---- the trace (trace.c) ----------------------------------------------------- */

/* What the report says about a trace, and what the defaults derive from. */
typedef struct trace_stats {
    size_t requests, owners, distinct_blocks;
    double span_s, rate_per_s, owner_gini;
    int knowledge;       /* some request carries knowledge */
    double cold_ms_mean; /* mean true prefill with nothing cached, no noise */
} trace_stats;

/* Loads or generates the trace; exit status 2 for bad input, 1 otherwise. */
int cli_open_trace(const settings *s, cr_replay_trace *t, cr_error *err);
/* Loads --events, when given, for the cluster's shards and gives it to
 * the cluster; exit status as cli_open_trace. */
int cli_open_events(settings *s, cr_error *err);
void cli_measure(const cr_replay_trace *t, const cr_replay_cost *truth, trace_stats *st);

/* ---- policies (policies.c) ----------------------------------------------------- */

/* Policies are named by index; the first DEFAULT_POLICIES are the default. */
#define DEFAULT_POLICIES 6
const char *cli_policy_name(unsigned policy);
/* The index of the name of len bytes, or -1. */
int cli_policy_index(const char *name, size_t len);
/* Every name, in order, ", " between them (as much as fits in len). */
void cli_policy_names(char *buf, size_t len);
/* --policies as given, or the default (plus the knowledge variants when
 * the trace has knowledge). */
void cli_choose_policies(settings *s, const trace_stats *st);
/* A fresh policy by index, for one run, cacheroute's arrivals weighing
 * what s->weight says, its call and KV events s's; dump (NULL = none) gets
 * every outcome. */
cr_status cli_make_policy(unsigned policy, const cr_core_config *core, const settings *s,
                          const cr_replay_cluster *c, FILE *dump, cr_replay_policy *out,
                          cr_error *err);

/* ---- runs, capacity and the sweep (runs.c) ---------------------------------------- */

/* Capacity at the SLO: the largest offered load whose p99 meets it, linear
 * between that point and the next (failing) one, or the largest load
 * tested when every point meets it; 0 ("none") when none does. */
typedef struct capacity {
    double req_per_s;
    const char *how; /* "interpolated", "largest tested", "none" */
} capacity;

/* One policy's runs over every scale. */
typedef struct series {
    unsigned policy;
    cr_replay_result *at; /* per scale */
    capacity cap;
    double hit_mean; /* over the scales */
} series;

/* What every run reads. */
typedef struct runner {
    const settings *s;
    const cr_replay_trace *t;
    const trace_stats *stats;
    FILE *dump;
} runner;

/* The sweep's grid and, per point, cacheroute's series. */
typedef struct sweep {
    values qcap, warm, margin;
    size_t n, best; /* points; the best one */
    series *points; /* qcap-major, then W, then margin */
} sweep;

double cli_offered_load(const runner *r, double scale);
/* Runs one policy at every scale with core as cacheroute's config. */
cr_status cli_run_series(const runner *r, unsigned policy, const cr_core_config *core,
                         series *out, cr_error *err);
void cli_series_free(series *x, size_t n_scales);
cr_status cli_run_sweep(const runner *r, sweep *g, cr_error *err);
/* Point i's settings. */
void cli_sweep_point(const sweep *g, size_t i, double *qcap, double *warm, double *margin);
void cli_sweep_free(sweep *g, size_t n_scales);

/* ---- outputs (report.c, plots.c) ----------------------------------------------------- */

/* --json: every series, and the sweep when g is not NULL; 0 or -1. */
int cli_write_json(const runner *r, const series *all, size_t n, const sweep *g);
/* The Markdown report on stdout. */
void cli_print_markdown(const runner *r, const series *all, size_t n, const sweep *g);
/* --plots: data and script always, PNGs when gnuplot is there (a warning
 * if not); -1 after saying why on stderr. */
int cli_write_plots(const runner *r, const series *all, size_t n);

#endif
