/* Table-driven flags: every flag is one row, so --help, the environment
 * variable and the validation can never disagree. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef CR_VERSION
#define CR_VERSION "dev"
#endif

/* K_INJECT values go to the inject component's own parser (it knows their
 * ranges and which were set); their defaults live there too. */
typedef enum kind {
    K_STRING,
    K_ADDR, /* host:port (port 0..65535), [v6]:port, or unix:PATH; empty only if min == 0 */
    K_INT,
    K_U32,
    K_U64,
    K_DOUBLE,
    K_CLOCK,
    K_LEVEL,
    K_LIST,
    K_INJECT
} kind;

typedef struct flag {
    const char *name;
    kind kind;
    size_t offset;
    double min, max;  /* numeric bounds, inclusive unless min_open */
    int min_open;
    const char *def;  /* default, as text (applied before env and argv, but
                       * for K_INJECT, where it is only shown) */
    const char *help;
    int repeatable;   /* given many times; its variable holds a list */
} flag;

#define AT(field) offsetof(cr_config, field)
#define BIG 9007199254740992.0 /* 2^53: every integer below is exact */

static const flag flags[] = {
    {"listen", K_ADDR, AT(listen), 1, 0, 0, "0.0.0.0:50051",
     "gRPC listen address: host:port, [ipv6]:port or unix:PATH", 0},
    {"threads", K_INT, AT(threads), 0, 1024, 0, "0",
     "worker threads, each with its own completion queue; 0 = number of cores", 0},
    {"n-shards", K_U32, AT(planner.n_shards), 1, 65536, 0, "8", "KV-pool shards R (1..65536)", 0},
    {"qcap", K_DOUBLE, AT(planner.qcap), 0, INFINITY, 1, "50",
     "requests per second one shard serves (> 0)", 0},
    {"warm-slots-per-shard", K_DOUBLE, AT(planner.warm_slots_per_shard), 0, INFINITY, 1, "200",
     "warm slots per shard W; the budget is R * W slots (> 0)", 0},
    {"half-life", K_DOUBLE, AT(estimator.half_life), 0, INFINITY, 1, "20",
     "estimator half-life: seconds, or the owner's own calls with --estimator-clock calls (> 0)", 0},
    {"window", K_U32, AT(estimator.window), 1, 4294967295.0, 0, "256",
     "accepted for seed compatibility; the decayed count keeps no history (>= 1)", 0},
    {"estimator-clock", K_CLOCK, AT(estimator.clock), 0, 0, 0, "seconds",
     "seconds (rates in arrivals per second) or calls (the seed's per-call decay)", 0},
    {"max-owners", K_U64, AT(estimator.max_owners), 1, BIG, 0, "1000000",
     "owners tracked at most; a new owner then evicts a low-rate one", 0},
    {"replan-interval", K_DOUBLE, AT(replan_interval), 0, 1e9, 0, "10",
     "seconds between plans from the estimator, installed as the current table; 0 = off", 0},
    {"max-message-bytes", K_INT, AT(max_message_bytes), 65536, 2147483647.0, 0, "67108864",
     "largest request or response message, bytes (at least 64 KiB, so reflection answers fit)", 0},
    {"shutdown-grace", K_DOUBLE, AT(shutdown_grace), 0, 3600, 0, "10",
     "seconds in-flight calls get to finish after SIGTERM/SIGINT", 0},
    {"metrics-listen", K_ADDR, AT(metrics_listen), 0, 0, 0, "0.0.0.0:9090",
     "Prometheus /metrics address, host:port; empty = off", 0},
    {"log-level", K_LEVEL, AT(log_level), 0, 0, 0, "info", "debug, info, warn or error", 0},
    {"model-layers", K_INJECT, 0, 0, 0, 0, "32", "transformer layers (KV size, prefill c)", 0},
    {"model-kv-heads", K_INJECT, 0, 0, 0, 0, "8", "KV heads (KV size)", 0},
    {"model-head-dim", K_INJECT, 0, 0, 0, 0, "128", "head dimension (KV size)", 0},
    {"kv-dtype-bytes", K_INJECT, 0, 0, 0, 0, "2", "bytes per KV element", 0},
    {"tensor-parallel", K_INJECT, 0, 0, 0, 0, "1", "tensor-parallel ways; divides the KV size", 0},
    {"kv-bytes-per-token", K_INJECT, 0, 0, 0, 0, "from the model shape",
     "KV cache bytes per token; overrides the shape", 0},
    {"model-params-b", K_INJECT, 0, 0, 0, 0, "8.03", "model parameters in 10^9 (prefill b)", 0},
    {"model-d-model", K_INJECT, 0, 0, 0, 0, "4096", "hidden size (prefill c)", 0},
    {"mfu", K_INJECT, 0, 0, 0, 0, "0.5", "model FLOPs utilization during prefill, (0, 1]", 0},
    {"peak-tflops", K_INJECT, 0, 0, 0, 0, "312",
     "dense BF16 teraFLOP/s when no GPU is probed or its architecture is unknown", 0},
    {"prefill-fixed-ms", K_INJECT, 0, 0, 0, 0, "10", "prefill a: fixed ms per request", 0},
    {"prefill-coeffs", K_INJECT, 0, 0, 0, 0, "from the probe",
     "a,b,c fitted prefill coefficients (ms, ms/token, ms/token^2); override a, b and c", 0},
    {"kv-source", K_INJECT, 0, 0, 0, 0, "none",
     "NAME=GBPS[,RTT_MS]: a KV source's link in gigabits/s (10^9) and rtt in ms; repeatable "
     "(the variable takes a space-separated list)", 1},
    {"link-gbps", K_INJECT, 0, 0, 0, 0, "10",
     "link to KV sources in gigabits/s (10^9) when no NIC speed is probed", 0},
    {"link-efficiency", K_INJECT, 0, 0, 0, 0, "0.825", "usable fraction of link bandwidth", 0},
    {"h2d-gbps", K_INJECT, 0, 0, 0, 0, "25",
     "host-to-GPU gigabytes/s (10^9) when not measured", 0},
    {"load-fixed-ms", K_INJECT, 0, 0, 0, 0, "2", "fixed ms per KV load into the GPU", 0},
    {"link-queue-penalty", K_INJECT, 0, 0, 0, 0, "0.5", "weight of link wait in the KV score", 0},
    {"decision-margin-ms", K_INJECT, 0, 0, 0, 0, "100", "KV must beat text by this many ms", 0},
    {"probe-interval", K_DOUBLE, AT(probe_interval), 0, 1e9, 0, "300",
     "seconds between GPU/NIC probes; 0 = start-up only", 0},
    {"nic", K_LIST, AT(nics), 0, 0, 0, "",
     "probe exactly this interface; repeatable (the variable takes a space-separated list)", 1},
    {"sysfs-root", K_STRING, AT(sysfs_root), 0, 0, 0, "/sys", "where sysfs is mounted", 0},
};
#define N_FLAGS (sizeof flags / sizeof flags[0])

static void env_name(const flag *f, char *buf, size_t len)
{
    size_t i = (size_t)snprintf(buf, len, "CACHEROUTE_");
    for (const char *p = f->name; *p && i + 1 < len; p++)
        buf[i++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[i] = '\0';
}

static int parse_number(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return *s && !isspace((unsigned char)*s) && *end == '\0' && errno == 0 && isfinite(*out)
               ? 0
               : -1;
}

static int in_range(const flag *f, double v)
{
    return (f->min_open ? v > f->min : v >= f->min) && v <= f->max;
}

static void range_text(const flag *f, char *buf, size_t len)
{
    if (f->kind != K_DOUBLE)
        snprintf(buf, len, "an integer in %.0f..%.0f", f->min, f->max);
    else if (isinf(f->max))
        snprintf(buf, len, "a finite number %s %g", f->min_open ? ">" : ">=", f->min);
    else
        snprintf(buf, len, "a number in %g..%g", f->min, f->max);
}

static int list_add(cr_string_list *l, const char *s, size_t len)
{
    if (len == 0)
        return 0;
    char **grown = realloc(l->items, (l->n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    l->items = grown;
    l->items[l->n++] = strndup(s, len);
    return 0;
}

/* A flag adds one item; an environment variable holds items separated by
 * spaces. */
static int set_list(cr_string_list *l, const char *value, int from_env)
{
    if (!from_env)
        return list_add(l, value, strlen(value));
    while (*value) {
        size_t skip = strspn(value, " \t"), len = strcspn(value + skip, " \t");
        if (list_add(l, value + skip, len) != 0)
            return -1;
        value += skip + len;
    }
    return 0;
}

static int set_string(char **field, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return -1;
    free(*field);
    *field = copy;
    return 0;
}

/* host:port with a non-empty host and a decimal port in 0..65535, or
 * "[v6]:port"; unix:PATH when unix_ok (gRPC serves Unix sockets). */
static int valid_address(const char *a, int unix_ok)
{
    if (unix_ok && !strncmp(a, "unix:", 5) && a[5])
        return 1;
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a || !colon[1] || strlen(colon + 1) > 5 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return 0;
    if (a[0] == '[' && colon[-1] != ']')
        return 0;
    return atoi(colon + 1) <= 65535;
}

/* The inject component parses its own flags; from the environment, a
 * repeatable one (--kv-source) takes a space-separated list. */
static int set_inject(cr_config *cfg, const flag *f, const char *origin, const char *value,
                      int from_env, char *err, size_t errlen)
{
    char name[64], *copy = strdup(value), *save = NULL;
    cr_error e;
    int rc = copy ? 0 : -1;
    snprintf(name, sizeof name, "--%s", f->name);
    int split = from_env && f->repeatable;
    for (char *item = split ? strtok_r(copy, " \t", &save) : copy; item && rc == 0;
         item = split ? strtok_r(NULL, " \t", &save) : NULL) {
        if (cr_inject_config_set(&cfg->inject, name, item, &e) != CR_OK) {
            snprintf(err, errlen, "%s%s%s", from_env ? origin : "", from_env ? ": " : "", e.msg);
            rc = -1;
        }
    }
    free(copy);
    return rc;
}

/* Stores value into cfg for f; on error writes "<origin>: <why>" to err. */
static int set_flag(cr_config *cfg, const flag *f, const char *origin, const char *value,
                    int from_env, char *err, size_t errlen)
{
    char *field = (char *)cfg + f->offset;
    double v;
    char want[96];
    switch (f->kind) {
    case K_INJECT:
        return set_inject(cfg, f, origin, value, from_env, err, errlen);
    case K_ADDR:
        if (!(f->min == 0 && !*value) && !valid_address(value, f->min > 0)) {
            snprintf(err, errlen, "%s: must be host:port with a port in 0..65535%s, got '%s'",
                     origin, f->min > 0 ? " (or unix:PATH)" : "", value);
            return -1;
        }
        return set_string((char **)field, value);
    case K_STRING:
        return set_string((char **)field, value);
    case K_LIST:
        return set_list((cr_string_list *)field, value, from_env);
    case K_CLOCK:
        if (strcmp(value, "seconds") && strcmp(value, "calls")) {
            snprintf(err, errlen, "%s: must be seconds or calls, got '%s'", origin, value);
            return -1;
        }
        *(cr_clock *)field = value[0] == 's' ? CR_CLOCK_SECONDS : CR_CLOCK_CALLS;
        return 0;
    case K_LEVEL:
        if (cr_log_parse_level(value, (cr_log_level *)field) != 0) {
            snprintf(err, errlen, "%s: must be debug, info, warn or error, got '%s'", origin,
                     value);
            return -1;
        }
        return 0;
    default:
        break;
    }
    int integral = f->kind != K_DOUBLE;
    if (parse_number(value, &v) != 0 || !in_range(f, v) || (integral && v != floor(v))) {
        range_text(f, want, sizeof want);
        snprintf(err, errlen, "%s: must be %s, got '%s'", origin, want, value);
        return -1;
    }
    if (f->kind == K_INT)
        *(long *)field = (long)v;
    else if (f->kind == K_U32)
        *(uint32_t *)field = (uint32_t)v;
    else if (f->kind == K_U64)
        *(uint64_t *)field = (uint64_t)v;
    else
        *(double *)field = v;
    return 0;
}

static const flag *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

/* One flag given on the command line. */
typedef struct given {
    const flag *f;
    const char *value;
} given;

/* Splits argv into flags and values without applying any. Returns 0, 1 for
 * --help/--version (printed), 2 for --check-config, or -1 with err set. */
static int scan_args(int argc, char **argv, given *out, size_t *n, char *err, size_t errlen)
{
    int check = 0;
    *n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--check-config")) {
            check = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cr_config_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--version")) {
            printf("cacheroute-sidecar %s\n", CR_VERSION);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        const flag *f = find_flag(a + 2, len);
        if (!f) {
            snprintf(err, errlen, "unknown flag '%.*s' (see --help)", (int)len + 2, a);
            return -1;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) {
            snprintf(err, errlen, "--%s: missing value", f->name);
            return -1;
        }
        out[(*n)++] = (given){f, value};
    }
    return check ? 2 : 0;
}

static int on_command_line(const flag *f, const given *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (g[i].f == f)
            return 1;
    return 0;
}

/* Defaults, then the environment for every flag the command line does not
 * set (so a flag overrides even a bad variable, and a repeatable flag
 * replaces its variable's list), then the command line in order. */
static int apply(cr_config *cfg, const given *g, size_t n, char *err, size_t errlen)
{
    char name[64];
    for (size_t i = 0; i < N_FLAGS; i++) {
        const flag *f = &flags[i];
        if (f->kind != K_INJECT && set_flag(cfg, f, f->name, f->def, 0, err, errlen) != 0)
            return -1;
        env_name(f, name, sizeof name);
        const char *v = getenv(name);
        if (v && !on_command_line(f, g, n) && set_flag(cfg, f, name, v, 1, err, errlen) != 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "--%s", g[i].f->name);
        if (set_flag(cfg, g[i].f, name, g[i].value, 0, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int cr_config_load(cr_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cr_estimator_config_default(&cfg->estimator);
    cr_inject_config_default(&cfg->inject);
    given *g = calloc((size_t)argc + 1, sizeof *g);
    size_t n;
    int rc = g ? scan_args(argc, argv, g, &n, err, errlen) : -1;
    if (!g)
        snprintf(err, errlen, "out of memory");
    if ((rc == 0 || rc == 2) && apply(cfg, g, n, err, errlen) != 0)
        rc = -1;
    free(g);
    if ((rc == 0 || rc == 2) && cfg->threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = cores > 0 ? cores : 1;
    }
    return rc;
}

void cr_config_free(cr_config *cfg)
{
    for (size_t i = 0; i < N_FLAGS; i++) {
        char *field = (char *)cfg + flags[i].offset;
        if (flags[i].kind == K_STRING || flags[i].kind == K_ADDR) {
            free(*(char **)field);
        } else if (flags[i].kind == K_LIST) {
            cr_string_list *l = (cr_string_list *)field;
            for (size_t k = 0; k < l->n; k++)
                free(l->items[k]);
            free(l->items);
        }
    }
    cr_inject_config_clear(&cfg->inject);
    memset(cfg, 0, sizeof *cfg);
}

json_t *cr_config_json(const cr_config *c)
{
    json_t *nics = json_array();
    for (size_t i = 0; i < c->nics.n; i++)
        json_array_append_new(nics, json_string(c->nics.items[i]));
    return json_pack(
        "{s:s,s:I,s:{s:i,s:f,s:f},s:{s:s,s:f,s:i,s:I},s:f,s:I,s:f,s:s,s:s,s:f,s:o,s:s,s:i}",
        "listen", c->listen, "threads", (json_int_t)c->threads, "planner", "n_shards",
        (int)c->planner.n_shards, "qcap", c->planner.qcap, "warm_slots_per_shard",
        c->planner.warm_slots_per_shard, "estimator", "clock",
        c->estimator.clock == CR_CLOCK_SECONDS ? "seconds" : "calls", "half_life",
        c->estimator.half_life, "window", (int)c->estimator.window, "max_owners",
        (json_int_t)c->estimator.max_owners, "replan_interval_s", c->replan_interval,
        "max_message_bytes", (json_int_t)c->max_message_bytes, "shutdown_grace_s",
        c->shutdown_grace, "metrics_listen", c->metrics_listen, "log_level",
        cr_log_level_name(c->log_level), "probe_interval_s", c->probe_interval, "nics", nics,
        "sysfs_root", c->sysfs_root, "kv_sources", (int)c->inject.n_kv_sources);
}

void cr_config_usage(FILE *out)
{
    fprintf(out, "usage: cacheroute-sidecar [--flag value | --flag=value]...\n"
                 "       cacheroute-sidecar --check-config [flags]   validate flags and\n"
                 "           environment, print the effective configuration as JSON, exit\n\n"
                 "Every flag can also be set with its environment variable; a flag wins.\n\n");
    char env[64];
    for (size_t i = 0; i < N_FLAGS; i++) {
        env_name(&flags[i], env, sizeof env);
        fprintf(out, "  --%-22s %s\n  %-24s env %s, default '%s'\n", flags[i].name, flags[i].help,
                "", env, flags[i].def);
    }
}
