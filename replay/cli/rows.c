/* The tool's option rows (options.h): its own tables (replay, output,
 * generator, cluster), composed with the sidecar's core parts (core.h), so
 * a sidecar flag means, parses and fails here exactly as it does there.
 * Also the custom rows' parsers and printers, and the settings' defaults. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "internal.h" /* CR_REPLAY_CACHE_MAX */

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "generator counts are U64 option rows");

/* ---- the custom rows ----------------------------------------------------- */

static cr_status set_owner_key(void *cfg, const char *value, cr_error *err)
{
    cr_error why;
    if (cr_owner_key_parse(value, &((settings *)cfg)->key, &why) == CR_OK)
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "--owner-key must be prefix:N (N >= 1) or block:N, got \"%s\"",
                   value);
}

static cr_status set_policies(void *cfg, const char *value, cr_error *err)
{
    settings *s = cfg;
    size_t n = 0;
    unsigned got[MAX_POLICIES];
    for (const char *p = value;; p += strcspn(p, ",") + 1) {
        size_t len = strcspn(p, ",");
        int k = cli_policy_index(p, len);
        if (k < 0 || n == MAX_POLICIES) {
            char names[256];
            cli_policy_names(names, sizeof names);
            return cr_fail(err, CR_EINVAL, "--policies must be a comma list of %s; got \"%s\"",
                           names, value);
        }
        got[n++] = (unsigned)k;
        if (!p[len])
            break;
    }
    memcpy(s->policies, got, n * sizeof got[0]);
    s->n_policies = n;
    return CR_OK;
}

/* n numbers >= 0, all or none of them into fields. */
static cr_status set_numbers(const char *flag, const char *value, double *const *fields,
                             size_t n, cr_error *err)
{
    values v;
    cr_status st = cli_parse_values(flag, value, 0, 0, n, &v, err);
    for (size_t i = 0; st == CR_OK && i < n; i++)
        *fields[i] = v.v[i];
    return st;
}

static cr_status set_true_prefill(void *cfg, const char *value, cr_error *err)
{
    cr_replay_cost *k = &((settings *)cfg)->cluster.truth;
    double *const fields[] = {&k->prefill.fixed_ms, &k->prefill.ms_per_token,
                              &k->prefill.ms_per_token2};
    return set_numbers("true-prefill", value, fields, 3, err);
}

static cr_status set_true_kv(void *cfg, const char *value, cr_error *err)
{
    cr_replay_cost *k = &((settings *)cfg)->cluster.truth;
    double *const fields[] = {&k->kv_fixed_ms, &k->kv_ms_per_token};
    return set_numbers("true-kv", value, fields, 2, err);
}

/* Item i of a comma list into buf, which holds used bytes of it so far:
 * the show functions' snprintf contract (the whole length, what fits). */
static int append(char *buf, size_t len, int used, size_t i, const char *item)
{
    size_t at = (size_t)used < len ? (size_t)used : len;
    return used + snprintf(buf + at, len - at, "%s%s", i ? "," : "", item);
}

static int show_numbers(const double *v, size_t n, char *buf, size_t len)
{
    int used = 0;
    for (size_t i = 0; i < n; i++) {
        char num[40];
        cr_option_number_text(v[i], num, sizeof num);
        used = append(buf, len, used, i, num);
    }
    return used;
}

int cli_show_owner_key(const void *cfg, char *buf, size_t len)
{
    const cr_owner_key *k = &((const settings *)cfg)->key;
    return snprintf(buf, len, "%s:%u", k->kind == CR_OWNER_PREFIX ? "prefix" : "block", k->n);
}

static int show_policies(const void *cfg, char *buf, size_t len)
{
    const settings *s = cfg;
    int used = 0;
    for (size_t i = 0; i < s->n_policies; i++)
        used = append(buf, len, used, i, cli_policy_name(s->policies[i]));
    return used;
}

static int show_true_prefill(const void *cfg, char *buf, size_t len)
{
    const cr_replay_cost *k = &((const settings *)cfg)->cluster.truth;
    double v[3] = {k->prefill.fixed_ms, k->prefill.ms_per_token, k->prefill.ms_per_token2};
    return show_numbers(v, 3, buf, len);
}

static int show_true_kv(const void *cfg, char *buf, size_t len)
{
    const cr_replay_cost *k = &((const settings *)cfg)->cluster.truth;
    double v[2] = {k->kv_fixed_ms, k->kv_ms_per_token};
    return show_numbers(v, 2, buf, len);
}

/* ---- the rows ----------------------------------------------------------------- */

#define AT(field) offsetof(settings, field)
#define NUMBER(flag, type_, field, lo, hi, flags_, bit, text)                                    \
    {.name = flag, .key = #field, .type = type_, .offset = AT(field), .min = lo, .max = hi,       \
     .flags = flags_, .set_bit = bit, .help = text}
#define CUSTOM(flag, field, setter, shower, bit, text)                                            \
    {.name = flag, .key = field, .type = CR_OPT_CUSTOM, .set = setter, .show = shower,           \
     .set_bit = bit, .help = text}
#define LIST(flag, field, def, text)                                                              \
    {.name = flag, .key = #field, .type = CR_OPT_STRING, .offset = AT(field), .def_text = def,    \
     .help = text}
#define TEXT(flag, field, text) LIST(flag, field, "", text)

static const char *const WEIGHTS[] = {"requests", "tokens", NULL}; /* cr_replay_weight's order */
static const char *const CALLS[] = {"route", "record", NULL};       /* cr_replay_call's order */
static const char *const KV_EVENTS[] = {"off", "on", "dispatch", NULL}; /* cr_replay_kv_events' */

static const cr_option REPLAY_ROWS[] = {
    TEXT("trace", trace, "Mooncake JSON-lines trace to replay (or --generate)"),
    CUSTOM("owner-key", "owner_key", set_owner_key, cli_show_owner_key, 0,
           "a trace request's session: prefix:N hashes its first N block ids, block:N is its "
           "block number N"),
    CUSTOM("policies", "policies", set_policies, show_policies, SET_POLICIES,
           "comma list of policies to replay (always-text, always-kv and oracle join the "
           "default when the trace has knowledge; the peers llmd-scorer, sglang-cache-aware, "
           "dynamo-kv, aibrix-prefix, min-ttft-exact and round-robin run only when named)"),
    LIST("scale", scale_text, "1",
         "load scales, comma list: arrivals at timestamp / scale, so offered load = trace "
         "rate * scale"),
    {.name = "slo-p99-ms", .key = "slo_p99_ms", .type = CR_OPT_DOUBLE, .offset = AT(slo_p99_ms),
     .def = 1000, .min = 0, .max = INFINITY, .flags = CR_OPT_MIN_OPEN,
     .help = "p99 TTFT objective, ms: capacity is the largest load meeting it"},
    LIST("sweep-qcap", sweep_qcap_text, "",
         "--sweep's qcap values, comma list (empty: 0.5, 1, 2 and 4 times a shard's cold "
         "service rate)"),
    LIST("sweep-warm-slots", sweep_warm_text, "",
         "--sweep's W values (empty: 0.01, 0.1 and 1 times the sessions a shard's cache "
         "holds)"),
    LIST("sweep-margin", sweep_margin_text, "",
         "--sweep's decision margins, ms (empty: 0, --decision-margin-ms and 4 times it with "
         "knowledge, else --decision-margin-ms)"),
    {.name = "series-window", .key = "series_window_s", .type = CR_OPT_DOUBLE,
     .offset = AT(series_window_s), .def = 10, .min = 0, .max = 1e9, .flags = CR_OPT_MIN_OPEN,
     .help = "seconds of virtual time per point of the hit-ratio series and replan dips"},
    {.name = "weight", .key = "weight", .type = CR_OPT_CHOICE, .offset = AT(weight),
     .def_text = "requests", .choices = WEIGHTS,
     .help = "what each cacheroute arrival weighs: requests (1) or tokens (its input tokens; "
             "rates and --qcap are then tokens/s)"},
    {.name = "call", .key = "call", .type = CR_OPT_CHOICE, .offset = AT(call),
     .def_text = "route", .choices = CALLS,
     .help = "what cacheroute is asked per request: route (Route: owner, prompt tokens, block "
             "hashes, request id) or record (RecordArrival: owner and --weight)"},
    {.name = "kv-events", .key = "kv_events", .type = CR_OPT_CHOICE, .offset = AT(kv_events),
     .def_text = "off", .choices = KV_EVENTS,
     .help = "feed cacheroute's prefix index the shards' KV events (blocks stored at each "
             "prefill's end, removed at each eviction), its Route hashes then the router's "
             "chain; dispatch: stored when each request is dispatched instead (a diagnostic)"},
};

/* A table of its own, so the JSON's inputs show it only when given and a
 * run without events is reported as before they existed. */
static const cr_option EVENTS_ROWS[] = {
    TEXT("events", events_path,
         "membership events, one a line: AT_S join|drain|fail|mark ENDPOINT (virtual seconds "
         "after --scale; the shards are e0 .. e{R-1}, a join takes the next shard; a mark "
         "changes nothing, a control; # comments)"),
};

static const cr_option OUTPUT_ROWS[] = {
    TEXT("json", json, "write the results as one JSON document here"),
    TEXT("plots", plots, "write PNG plots (gnuplot) and their data into this folder"),
    TEXT("dump-routes", dump_routes, "write every request's route and outcome here, as CSV"),
};

static const cr_option GENERATOR_ROWS[] = {
    NUMBER("requests", CR_OPT_U64, gen.n_requests, 1, CR_OPT_U64_MAX, 0, 0, "requests"),
    NUMBER("sessions", CR_OPT_U64, gen.n_sessions, 1, UINT32_MAX, 0, 0, "sessions"),
    NUMBER("zipf", CR_OPT_DOUBLE, gen.zipf_s, 0, 16, 0, SET_ZIPF,
           "Zipf popularity exponent (alone: no --gini target)"),
    NUMBER("gini", CR_OPT_DOUBLE, gen.gini, -1, 0.9999, 0, SET_GINI,
           "target Gini of requests per session; < 0 = use --zipf"),
    NUMBER("rate", CR_OPT_DOUBLE, gen.rate_per_s, 0, INFINITY, CR_OPT_MIN_OPEN, 0,
           "mean arrivals per second"),
    NUMBER("burst-on", CR_OPT_DOUBLE, gen.burst_on_s, 0, 1e9, 0, 0,
           "seconds of arrivals per on/off cycle (both > 0 for bursts)"),
    NUMBER("burst-off", CR_OPT_DOUBLE, gen.burst_off_s, 0, 1e9, 0, 0,
           "seconds without arrivals per cycle"),
    NUMBER("system-blocks", CR_OPT_U32, gen.system_blocks, 0, 1e6, 0, 0,
           "shared system-prompt blocks, every request"),
    NUMBER("first-blocks", CR_OPT_U32, gen.first_blocks, 1, 1e6, 0, 0,
           "blocks of a session's first prompt"),
    NUMBER("turn-blocks", CR_OPT_U32, gen.turn_blocks, 0, 1e6, 0, 0, "blocks appended per turn"),
    NUMBER("max-blocks", CR_OPT_U32, gen.max_blocks, 1, 1e6, 0, 0,
           "a conversation starts over past this many blocks"),
    NUMBER("drift", CR_OPT_DOUBLE, gen.drift_per_s, 0, 1e9, 0, 0,
           "popularity ranks rotate by this many per second"),
    NUMBER("knowledge-tokens", CR_OPT_U32, gen.knowledge_tokens, 0, CR_INJECT_MAX_TOKENS, 0, 0,
           "retrieved knowledge per request, tokens (never cached)"),
    NUMBER("output-tokens", CR_OPT_U32, gen.output_tokens, 0, 1e7, 0, 0,
           "output tokens per request"),
};

/* The generator's shared documents: a table of their own, so the JSON's
 * inputs show them only when there are documents and every trace without
 * them is reported as it was before they existed. */
static const char *const DOC_PER[] = {"session", "request", NULL}; /* cr_replay_doc_per's order */
static const char *const OWNERS[] = {"session", "document", NULL}; /* cr_replay_gen_owner's */

static const cr_option DOCUMENT_ROWS[] = {
    NUMBER("documents", CR_OPT_U32, gen.documents, 0, UINT32_MAX, 0, 0,
           "shared documents K behind the system prompt (RAG); 0 = none"),
    NUMBER("document-blocks", CR_OPT_U32, gen.document_blocks, 0, 1e6, 0, 0,
           "blocks of each document (>= 1 with --documents)"),
    NUMBER("document-zipf", CR_OPT_DOUBLE, gen.document_zipf, 0, 16, 0, 0,
           "Zipf popularity exponent of the documents"),
    {.name = "document-per", .key = "document_per", .type = CR_OPT_CHOICE,
     .offset = AT(gen.document_per), .def_text = "session", .choices = DOC_PER,
     .help = "a document is drawn per session (at each conversation start, kept for its "
             "turns) or per request"},
    {.name = "owners", .key = "owners", .type = CR_OPT_CHOICE, .offset = AT(gen.owners),
     .def_text = "session", .choices = OWNERS,
     .help = "a generated request's owner: its session, or its document (with --documents)"},
};

static const cr_option CLUSTER_ROWS[] = {
    NUMBER("shards", CR_OPT_U32, cluster.shards, 1, CR_MAX_SHARDS, 0, 0, "shards R"),
    NUMBER("n-shards", CR_OPT_U32, cluster.shards, 1, CR_MAX_SHARDS, 0, 0,
           "the same as --shards (the sidecar's name)"),
    NUMBER("shard-blocks", CR_OPT_U64, cluster.shard_blocks, 1, CR_REPLAY_CACHE_MAX, 0,
           SET_BLOCKS, "LRU prefix cache per shard, blocks"),
    NUMBER("shard-fraction", CR_OPT_DOUBLE, shard_fraction, 0, 1e6, CR_OPT_MIN_OPEN | CR_OPT_UNSET,
           SET_FRACTION, "cache per shard as this times the trace's distinct blocks"),
    CUSTOM("true-prefill", "true_prefill", set_true_prefill, show_true_prefill, 0,
           "the simulated prefill a,b,c: a + b (L - s) + c (L^2 - s^2) ms"),
    CUSTOM("true-kv", "true_kv", set_true_kv, show_true_kv, 0,
           "the simulated KV path FIXED_MS,MS_PER_TOKEN per knowledge token"),
    NUMBER("noise", CR_OPT_DOUBLE, cluster.truth.noise, 0, 10, 0, 0,
           "prefill times lognormal(0, noise)"),
    NUMBER("seed", CR_OPT_U64, cluster.seed, 0, CR_OPT_U64_MAX, 0, 0,
           "seed of the generator, the noise and the random policies"),
    NUMBER("warmup", CR_OPT_U64, cluster.warmup, 0, CR_OPT_U64_MAX, 0, 0,
           "the first requests served but left out of the figures (hit ratio, TTFT, "
           "imbalance, capacity): a cluster measured once warm"),
};

/* Traffic around the router and the engines' metrics: a table of its own,
 * so the JSON's inputs show it only when either is on and every run
 * without them is reported as before they existed. */
static const cr_option OUTSIDE_ROWS[] = {
    NUMBER("foreign-share", CR_OPT_DOUBLE, cluster.foreign_share, 0, 0.99, 0, 0,
           "this share of the requests (drawn from the seed) reach the engines around the "
           "router, round-robin: never routed by a policy nor told to it, left out of the "
           "figures; 0 = none"),
    NUMBER("scrape-interval", CR_OPT_DOUBLE, cluster.scrape_interval_s, 0, 3600, 0, 0,
           "seconds of virtual time between scrapes of the engines' /metrics (waiting, "
           "running, KV usage), the only load the policies see of traffic they did not "
           "route; 0 = no scrapes"),
};

#define TABLE(group_, rows_)                                                                      \
    {.group = group_, .rows = rows_, .n = sizeof rows_ / sizeof rows_[0],                         \
     .set_offset = offsetof(settings, set)}

static const cr_option_table REPLAY_TABLE = TABLE("replay", REPLAY_ROWS);
static const cr_option_table EVENTS_TABLE = TABLE("replay", EVENTS_ROWS);
static const cr_option_table OUTPUT_TABLE = TABLE("output", OUTPUT_ROWS);
static const cr_option_table GENERATOR_TABLE = TABLE("generator", GENERATOR_ROWS);
static const cr_option_table DOCUMENT_TABLE = TABLE("generator", DOCUMENT_ROWS);
static const cr_option_table CLUSTER_TABLE = TABLE("cluster", CLUSTER_ROWS);
static const cr_option_table OUTSIDE_TABLE = TABLE("cluster", OUTSIDE_ROWS);

static const cr_option_part TOOL_PARTS[] = {
    {&REPLAY_TABLE, 0},
    {&EVENTS_TABLE, 0},
    {&OUTPUT_TABLE, 0},
    {&GENERATOR_TABLE, 0},
    {&DOCUMENT_TABLE, 0},
    {&CLUSTER_TABLE, 0},
    {&OUTSIDE_TABLE, 0},
};
static const cr_option_group GROUPS[] = {
    {TOOL_PARTS, sizeof TOOL_PARTS / sizeof TOOL_PARTS[0], 0},
    {cr_core_parts, CR_CORE_N_NODELESS_PARTS, offsetof(settings, core)},
};
const cr_composition cli_flags = {GROUPS, sizeof GROUPS / sizeof GROUPS[0]};

part_json cli_part_json(const cr_option_ref *r)
{
    if (r->group == 1)
        return JSON_SIDECAR;
    return r->table == &OUTPUT_TABLE      ? JSON_NONE
           : r->table == &GENERATOR_TABLE ? JSON_GENERATOR
           : r->table == &DOCUMENT_TABLE  ? JSON_DOCUMENTS
           : r->table == &EVENTS_TABLE    ? JSON_EVENTS
           : r->table == &OUTSIDE_TABLE   ? JSON_OUTSIDE
                                          : JSON_TOOL;
}

/* ---- the settings --------------------------------------------------------------- */

void cli_settings_default(settings *s)
{
    memset(s, 0, sizeof *s);
    cr_options_defaults(&REPLAY_TABLE, s);
    cr_options_defaults(&EVENTS_TABLE, s);
    cr_options_defaults(&OUTPUT_TABLE, s);
    cr_replay_gen_default(&s->gen);
    cr_replay_cluster_default(&s->cluster);
    cr_core_config_default(&s->core);
    cr_error err;
    cr_owner_key_parse(CR_REPLAY_OWNER_KEY_DEFAULT, &s->key, &err);
    for (unsigned k = 0; k < DEFAULT_POLICIES; k++)
        s->policies[s->n_policies++] = k;
}

void cli_settings_free(settings *s)
{
    cr_replay_events_free(&s->events);
    cr_compose_release(&cli_flags, s);
}
