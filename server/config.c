/* The sidecar's configuration: the server's own rows composed with every
 * component's. Parsing, ranges and defaults are the rows' (options.h); this
 * file only decides where values come from (defaults, variables, flags),
 * records which one won for each row, and prints the result. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef CR_VERSION
#define CR_VERSION "dev"
#endif

/* The first probe's NIC utilization window delays readiness by this much;
 * the sidecar keeps it short (the probe's own default is for tools). */
#define SIDECAR_NIC_SAMPLE_S 0.25

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

static cr_status valid_listen(const char *value, cr_error *err)
{
    if (valid_address(value, 1))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--listen must be host:port with a port in 0..65535 (or unix:PATH), got \"%s\"",
                   value);
}

static cr_status valid_metrics_listen(const char *value, cr_error *err)
{
    if (!*value || valid_address(value, 0))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--metrics-listen must be host:port with a port in 0..65535 or empty, "
                   "got \"%s\"",
                   value);
}

static cr_status valid_health_listen(const char *value, cr_error *err)
{
    if (!*value || valid_address(value, 0))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--health-listen must be host:port with a port in 0..65535 or empty, "
                   "got \"%s\"",
                   value);
}

#define AT(field) offsetof(cr_server_config, field)

static const cr_option SERVER_ROWS[] = {
    {.name = "listen", .key = "listen", .type = CR_OPT_STRING, .offset = AT(listen),
     .def_text = "0.0.0.0:50051", .valid = valid_listen,
     .help = "gRPC listen address: host:port, [ipv6]:port or unix:PATH"},
    {.name = "threads", .key = "threads", .type = CR_OPT_LONG, .offset = AT(threads), .def = 0,
     .min = 0, .max = 1024,
     .help = "worker threads, each with its own completion queue; 0 = number of cores"},
    {.name = "max-message-bytes", .key = "max_message_bytes", .type = CR_OPT_LONG,
     .offset = AT(max_message_bytes), .def = 67108864, .min = 65536, .max = 2147483647.0,
     .help = "largest request or response message, bytes (at least 64 KiB, so reflection "
             "answers fit)"},
    {.name = "shutdown-grace", .key = "shutdown_grace_s", .type = CR_OPT_DOUBLE,
     .offset = AT(shutdown_grace_s), .def = 10, .min = 0, .max = 3600,
     .help = "seconds in-flight calls get to finish after SIGTERM/SIGINT"},
    {.name = "metrics-listen", .key = "metrics_listen", .type = CR_OPT_STRING,
     .offset = AT(metrics_listen), .def_text = "0.0.0.0:9090", .valid = valid_metrics_listen,
     .help = "Prometheus /metrics address, host:port; empty = off"},
    {.name = "log-level", .key = "log_level", .type = CR_OPT_CHOICE, .offset = AT(log_level),
     .def_text = "info", .choices = cr_log_levels, .help = "the least severe log lines written"},
    {.name = "tls-cert", .key = "tls_cert", .type = CR_OPT_STRING, .offset = AT(tls_cert),
     .def_text = "", .help = "PEM server certificate (chain) for the gRPC port; empty = plaintext"},
    {.name = "tls-key", .key = "tls_key", .type = CR_OPT_STRING, .offset = AT(tls_key),
     .def_text = "", .help = "PEM private key of --tls-cert"},
    {.name = "tls-client-ca", .key = "tls_client_ca", .type = CR_OPT_STRING,
     .offset = AT(tls_client_ca), .def_text = "",
     .help = "PEM CA bundle: clients must present a certificate it verifies (mTLS)"},
    {.name = "health-listen", .key = "health_listen", .type = CR_OPT_STRING,
     .offset = AT(health_listen), .def_text = "", .valid = valid_health_listen,
     .help = "plaintext grpc.health.v1 only, host:port (for kubelet probes); empty = off"},
    {.name = "admin-identity", .key = "admin_identities", .type = CR_OPT_LIST,
     .offset = AT(admin_identities), .count_offset = AT(n_admin_identities), .min = 1,
     .max = 1024, .flags = CR_OPT_REPEATABLE,
     .help = "client certificate SAN URI, SAN DNS or CN allowed state-changing calls (mTLS)"},
    {.name = "admin-token-file", .key = "admin_token_file", .type = CR_OPT_STRING,
     .offset = AT(admin_token_file), .def_text = "",
     .help = "file holding the bearer token allowed state-changing calls"},
    {.name = "handshake-timeout", .key = "handshake_timeout_s", .type = CR_OPT_DOUBLE,
     .offset = AT(handshake_timeout_s), .def = 10, .min = 0, .max = 3600,
     .flags = CR_OPT_MIN_OPEN,
     .help = "seconds a new connection gets to send its HTTP/2 preface and settings"},
    {.name = "max-connection-idle", .key = "max_connection_idle_s", .type = CR_OPT_DOUBLE,
     .offset = AT(max_connection_idle_s), .def = 1800, .min = 0, .max = 2000000,
     .help = "seconds a connection without calls is kept open; 0 = forever"},
    {.name = "max-connection-age", .key = "max_connection_age_s", .type = CR_OPT_DOUBLE,
     .offset = AT(max_connection_age_s), .def = 0, .min = 0, .max = 2000000,
     .help = "seconds after which a connection is asked to go away (clients reconnect); "
             "0 = never"},
    {.name = "max-connection-age-grace", .key = "max_connection_age_grace_s",
     .type = CR_OPT_DOUBLE, .offset = AT(max_connection_age_grace_s), .def = 30, .min = 0,
     .max = 2000000,
     .help = "seconds calls on a connection past --max-connection-age get before it closes"},
    {.name = "max-concurrent-streams", .key = "max_concurrent_streams", .type = CR_OPT_LONG,
     .offset = AT(max_concurrent_streams), .def = 1000, .min = 1, .max = 2147483647.0,
     .help = "calls open at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)"},
    {.name = "memory-quota-bytes", .key = "memory_quota_bytes", .type = CR_OPT_LONG,
     .offset = AT(memory_quota_bytes), .def = 4294967296.0, .min = 16777216,
     .max = CR_OPT_U64_MAX,
     .help = "memory gRPC core may hold for connections and messages in transit, bytes; "
             "past it, connections are closed"},
    {.name = "max-calls-per-method", .key = "max_calls_per_method", .type = CR_OPT_LONG,
     .offset = AT(max_calls_per_method), .def = 1024, .min = 1, .max = 1000000,
     .help = "calls of one method in flight at once; more are RESOURCE_EXHAUSTED at once"},
    {.name = "max-arrivals-per-call", .key = "max_arrivals_per_call", .type = CR_OPT_LONG,
     .offset = AT(max_arrivals_per_call), .def = 1000000, .min = 1, .max = 2147483647.0,
     .help = "owners one RecordArrival call (or RecordArrivals message) may list, counted "
             "before decoding (8 bytes of memory each); more are RESOURCE_EXHAUSTED, "
             "nothing recorded"},
    {.name = "request-deadline", .key = "request_deadline_s", .type = CR_OPT_DOUBLE,
     .offset = AT(request_deadline_s), .def = 60, .min = 0, .max = 3600,
     .help = "seconds a client gets to send a unary call's request once the call started; "
             "then the call is cancelled and its buffers freed; 0 = forever (and ~30 us "
             "less per call: gRPC core reads requests before the call is ours)"},
    {.name = "reply-deadline", .key = "reply_deadline_s", .type = CR_OPT_DOUBLE,
     .offset = AT(reply_deadline_s), .def = 60, .min = 0, .max = 3600,
     .help = "seconds a client gets to read an answer once it is sent; then the call is "
             "cancelled and its memory freed; 0 = forever"},
    {.name = "max-pending-reply-bytes", .key = "max_pending_reply_bytes", .type = CR_OPT_LONG,
     .offset = AT(max_pending_reply_bytes), .def = 2147483648.0, .min = 1048576,
     .max = CR_OPT_U64_MAX,
     .help = "bytes of answers sent and not yet read by their clients, over all calls; an "
             "answer past it is RESOURCE_EXHAUSTED (at least --max-message-bytes)"},
    {.name = "stream-idle-timeout", .key = "stream_idle_timeout_s", .type = CR_OPT_DOUBLE,
     .offset = AT(stream_idle_timeout_s), .def = 60, .min = 0, .max = 86400,
     .help = "seconds a stream (RecordArrivals, reflection) may wait for its next message, "
             "counted from its previous answer; then it ends DEADLINE_EXCEEDED; 0 = forever"},
    {.name = "metrics-timeout", .key = "metrics_timeout_s", .type = CR_OPT_LONG,
     .offset = AT(metrics_timeout_s), .def = 10, .min = 1, .max = 3600,
     .help = "seconds a /metrics connection may stay silent before it is closed"},
    {.name = "metrics-max-connections", .key = "metrics_max_connections", .type = CR_OPT_LONG,
     .offset = AT(metrics_max_connections), .def = 128, .min = 1, .max = 4096,
     .help = "/metrics connections open at once"},
    {.name = "metrics-per-ip-connections", .key = "metrics_per_ip_connections",
     .type = CR_OPT_LONG, .offset = AT(metrics_per_ip_connections), .def = 8, .min = 1,
     .max = 4096, .help = "/metrics connections open at once from one IP address"},
};

const cr_option_table cr_server_options = CR_OPTION_TABLE("", SERVER_ROWS);

const cr_config_part cr_config_parts[] = {
    {&cr_server_options, offsetof(cr_config, server)},
    {&cr_core_options, offsetof(cr_config, core)},
    {&cr_route_options, offsetof(cr_config, core.route)},
    {&cr_core_state_options, offsetof(cr_config, core)},
    {&cr_planner_options, offsetof(cr_config, core.planner)},
    {&cr_replan_options, offsetof(cr_config, core.replan)},
    {&cr_estimator_options, offsetof(cr_config, core.estimator)},
    {&cr_inject_options, offsetof(cr_config, core.inject)},
    {&cr_probe_options, offsetof(cr_config, core.probe)},
    {&cr_replica_options, offsetof(cr_config, replica)},
};
const size_t cr_config_n_parts = sizeof cr_config_parts / sizeof cr_config_parts[0];

static void *part_cfg(const cr_config_part *p, cr_config *cfg) { return (char *)cfg + p->offset; }
static const void *part_ccfg(const cr_config_part *p, const cr_config *cfg)
{
    return (const char *)cfg + p->offset;
}

/* One row of the composition: its table and struct, and its index in
 * cr_config.source. */
typedef struct row_ref {
    const cr_config_part *part;
    const cr_option *o;
    size_t index;
} row_ref;

/* Walks every row in --help order: for (row_ref r = first_row(); r.o; next_row(&r)). */
static row_ref first_row(void)
{
    row_ref r = {cr_config_parts, cr_config_parts[0].table->rows, 0};
    return r;
}

static void next_row(row_ref *r)
{
    r->index++;
    if (++r->o < r->part->table->rows + r->part->table->n)
        return;
    while (++r->part < cr_config_parts + cr_config_n_parts) {
        if (r->part->table->n) {
            r->o = r->part->table->rows;
            return;
        }
    }
    r->o = NULL;
}

static int find_row(const char *name, size_t len, row_ref *out)
{
    for (row_ref r = first_row(); r.o; next_row(&r)) {
        if (strlen(r.o->name) == len && strncmp(r.o->name, name, len) == 0) {
            *out = r;
            return 1;
        }
    }
    return 0;
}

static size_t n_rows(void)
{
    size_t n = 0;
    for (size_t i = 0; i < cr_config_n_parts; i++)
        n += cr_config_parts[i].table->n;
    return n;
}

/* A flag adds one value; the variable of a repeatable one holds values
 * separated by spaces or tabs. */
static cr_status set_row(cr_config *cfg, const row_ref *r, const char *value, int from_env,
                         cr_error *err)
{
    const cr_option_table *t = r->part->table;
    void *c = part_cfg(r->part, cfg);
    if (!from_env || !(r->o->flags & CR_OPT_REPEATABLE))
        return cr_option_set(t, r->o, c, value, err);
    char *copy = strdup(value), *save = NULL;
    if (!copy)
        return cr_fail(err, CR_ENOMEM, "--%s: out of memory", r->o->name);
    cr_status st = CR_OK;
    for (char *item = strtok_r(copy, " \t", &save); item && st == CR_OK;
         item = strtok_r(NULL, " \t", &save))
        st = cr_option_set(t, r->o, c, item, err);
    free(copy);
    return st;
}

/* One flag given on the command line. */
typedef struct given {
    row_ref row;
    const char *value;
} given;

static int on_command_line(const row_ref *r, const given *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (g[i].row.o == r->o)
            return 1;
    return 0;
}

/* Splits argv into flags and values without applying any. Returns 0, 1 for
 * --help/--version (*version tells which), 2 for --check-config, or -1 with
 * err set. */
static int scan_args(int argc, char **argv, given *out, size_t *n, int *version, char *err,
                     size_t errlen)
{
    int check = 0;
    *n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--check-config")) {
            check = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "--version")) {
            *version = !strcmp(a, "--version");
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        row_ref r;
        if (!find_row(a + 2, len, &r)) {
            snprintf(err, errlen, "unknown flag '%.*s' (see --help)", (int)len + 2, a);
            return -1;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) {
            snprintf(err, errlen, "--%s: missing value", r.o->name);
            return -1;
        }
        out[(*n)++] = (given){r, value};
    }
    return check ? 2 : 0;
}

/* Appends "VARIABLE: why" for a bad variable to err (after "; " when err
 * already holds one). */
static void env_error(const row_ref *r, const cr_error *e, char *err, size_t errlen)
{
    char name[96];
    size_t used = strnlen(err, errlen);
    cr_option_env_name(r->o, name, sizeof name);
    if (used < errlen)
        snprintf(err + used, errlen - used, "%s%s: %s", used ? "; " : "", name, e->msg);
}

/* Each variable whose flag is not in g. Stops at the first bad one unless
 * all, which reports every bad one. Returns the number of bad ones. */
static int apply_env(cr_config *cfg, const given *g, size_t n, int all, char *err, size_t errlen)
{
    int bad = 0;
    char name[96];
    for (row_ref r = first_row(); r.o; next_row(&r)) {
        cr_option_env_name(r.o, name, sizeof name);
        const char *v = getenv(name);
        if (!v || on_command_line(&r, g, n))
            continue;
        cr_error e;
        if (set_row(cfg, &r, v, 1, &e) == CR_OK) {
            cfg->source[r.index] = CR_CONFIG_ENV;
            continue;
        }
        env_error(&r, &e, err, errlen);
        bad++;
        if (!all)
            break;
    }
    return bad;
}

static int apply_flags(cr_config *cfg, const given *g, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        cr_error e;
        if (set_row(cfg, &g[i].row, g[i].value, 0, &e) != CR_OK) {
            snprintf(err, errlen, "%s", e.msg);
            return -1;
        }
        cfg->source[g[i].row.index] = CR_CONFIG_FLAG;
    }
    return 0;
}

/* The server's rules across its rows. */
static int check_server(const cr_server_config *s, char *err, size_t errlen)
{
    /* gRPC core counts a message in and one out against the quota; below
     * that the largest allowed call could never be served. */
    if (s->max_pending_reply_bytes < s->max_message_bytes) {
        snprintf(err, errlen,
                 "--max-pending-reply-bytes must be at least --max-message-bytes (%ld), got %ld",
                 s->max_message_bytes, s->max_pending_reply_bytes);
        return -1;
    }
    if (s->memory_quota_bytes / 2 < s->max_message_bytes) {
        snprintf(err, errlen,
                 "--memory-quota-bytes must be at least twice --max-message-bytes (%ld), got %ld",
                 s->max_message_bytes, s->memory_quota_bytes);
        return -1;
    }
    return 0;
}

/* What the rows cannot see: each component's own rules across fields. */
static int check_components(const cr_config *cfg, char *err, size_t errlen)
{
    cr_error e;
    const cr_core_config *c = &cfg->core;
    if (cr_planner_config_check(&c->planner, &e) != CR_OK ||
        cr_estimator_config_check(&c->estimator, &e) != CR_OK ||
        cr_inject_config_check(&c->inject, &e) != CR_OK ||
        cr_probe_config_check(&c->probe, &e) != CR_OK ||
        cr_replica_config_check(&cfg->replica, c->estimator.clock, &e) != CR_OK) {
        snprintf(err, errlen, "%s", e.msg);
        return -1;
    }
    return check_server(&cfg->server, err, errlen);
}

static void set_defaults(cr_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cr_options_defaults(&cr_server_options, &cfg->server);
    cr_core_config_default(&cfg->core);
    cr_replica_config_default(&cfg->replica);
    cfg->core.probe.nic_sample_s = SIDECAR_NIC_SAMPLE_S;
}

/* --help must work when the environment is broken: it prints the usage
 * anyway, and one line on stderr naming every variable that would stop the
 * sidecar from starting. */
static void warn_bad_env(void)
{
    cr_config scratch;
    char why[1024] = "";
    set_defaults(&scratch);
    if (apply_env(&scratch, NULL, 0, 1, why, sizeof why) > 0)
        fprintf(stderr,
                "cacheroute-sidecar: warning: the sidecar would refuse to start with this "
                "environment: %s\n",
                why);
    cr_config_free(&scratch);
}

int cr_config_load(cr_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    set_defaults(cfg);
    if (errlen)
        err[0] = '\0';
    if (n_rows() > CR_CONFIG_MAX_OPTIONS) {
        snprintf(err, errlen, "%zu option rows; cr_config holds %d", n_rows(),
                 CR_CONFIG_MAX_OPTIONS);
        return -1;
    }
    given *g = calloc((size_t)argc + 1, sizeof *g);
    size_t n = 0;
    int version = 0;
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = scan_args(argc, argv, g, &n, &version, err, errlen);
    if (rc == 1 && version) {
        printf("cacheroute-sidecar %s\n", CR_VERSION);
    } else if (rc == 1) {
        cr_config_usage(stdout);
        fflush(stdout);
        warn_bad_env();
    } else if (rc >= 0 && (apply_env(cfg, g, n, 0, err, errlen) > 0 ||
                         apply_flags(cfg, g, n, err, errlen) != 0 ||
                         check_components(cfg, err, errlen) != 0))
        rc = -1;
    free(g);
    if ((rc == 0 || rc == 2) && cfg->server.threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->server.threads = cores > 0 ? cores : 1;
    }
    return rc;
}

void cr_config_free(cr_config *cfg)
{
    for (size_t i = 0; i < cr_config_n_parts; i++)
        cr_options_release(cr_config_parts[i].table, part_cfg(&cr_config_parts[i], cfg));
    memset(cfg, 0, sizeof *cfg);
}

/* ---- the effective configuration ------------------------------------------ */

static json_t *string_or_null(const char *s)
{
    json_t *j = s ? json_string(s) : NULL;
    return j ? j : json_null();
}

static json_t *custom_json(const cr_option *o, const void *c)
{
    char small[256];
    int len = o->show ? o->show(c, small, sizeof small) : 0;
    if (len <= 0)
        return json_null();
    if ((size_t)len < sizeof small)
        return string_or_null(small);
    char *big = malloc((size_t)len + 1);
    json_t *j = NULL;
    if (big && o->show(c, big, (size_t)len + 1) == len)
        j = string_or_null(big);
    free(big);
    return j ? j : json_null();
}

/* The row's effective value, typed. */
static json_t *value_json(const cr_option_table *t, const cr_option *o, const void *c)
{
    if ((o->flags & CR_OPT_UNSET) && !cr_option_is_set(t, o, c))
        return json_null();
    switch (o->type) {
    case CR_OPT_DOUBLE:
        return json_real(cr_option_number(o, c));
    case CR_OPT_LONG:
    case CR_OPT_U32:
    case CR_OPT_U64:
        return json_integer((json_int_t)cr_option_number(o, c));
    case CR_OPT_STRING:
    case CR_OPT_CHOICE:
        return string_or_null(cr_option_string(o, c));
    case CR_OPT_LIST: {
        size_t n;
        char *const *items = cr_option_list(o, c, &n);
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
            json_array_append_new(a, string_or_null(items[i]));
        return a ? a : json_null();
    }
    default:
        return custom_json(o, c);
    }
}

static json_t *group_object(json_t *root, const char *group)
{
    if (!*group)
        return root;
    json_t *obj = json_object_get(root, group);
    if (!obj) {
        obj = json_object();
        json_object_set_new(root, group, obj);
    }
    return obj;
}

json_t *cr_config_json(const cr_config *cfg)
{
    static const char *const SOURCES[] = {"default", "env", "flag"};
    json_t *root = json_object(), *options = json_array();
    if (!root || !options) {
        json_decref(root);
        json_decref(options);
        return NULL;
    }
    char env[96];
    for (row_ref r = first_row(); r.o; next_row(&r)) {
        const void *c = part_ccfg(r.part, cfg);
        json_t *v = value_json(r.part->table, r.o, c);
        unsigned src = cfg->source[r.index] < 3 ? cfg->source[r.index] : 0;
        cr_option_env_name(r.o, env, sizeof env);
        json_object_set_new(group_object(root, r.part->table->group), r.o->key, json_incref(v));
        json_array_append_new(options, json_pack("{s:s,s:s,s:o,s:s}", "flag", r.o->name, "env",
                                                 env, "value", v, "source", SOURCES[src]));
    }
    json_object_set_new(root, "options", options);
    return root;
}

/* ---- --help ----------------------------------------------------------------- */

void cr_config_usage(FILE *out)
{
    fprintf(out, "usage: cacheroute-sidecar [--flag value | --flag=value]...\n"
                 "       cacheroute-sidecar --check-config [flags]   validate flags and\n"
                 "           environment, print the effective configuration as JSON, exit\n\n"
                 "Every flag can also be set with its environment variable; a flag wins.\n\n");
    char env[96], def[160], range[160];
    for (row_ref r = first_row(); r.o; next_row(&r)) {
        cr_option_env_name(r.o, env, sizeof env);
        cr_option_default_text(r.o, def, sizeof def);
        cr_option_range_text(r.o, 1, range, sizeof range);
        fprintf(out, "  --%-24s %s\n  %-26s env %s, default '%s'%s%s%s\n", r.o->name, r.o->help,
                "", env, def, *range ? ", must be " : "", range,
                (r.o->flags & CR_OPT_REPEATABLE)
                    ? "; repeatable (the variable takes a space-separated list)"
                    : "");
    }
    fprintf(out, "\nSignals: SIGTERM, SIGINT and SIGQUIT drain: health turns NOT_SERVING, calls in\n"
                 "flight get --shutdown-grace seconds, then are cancelled, and the sidecar exits 0\n"
                 "within the grace + 1 s (a handler still running then is not waited for).\n"
                 "SIGHUP reloads (certificates), SIGUSR1 writes a state snapshot, SIGUSR2 logs\n"
                 "the current figures; none of these three stops serving.\n");
}
