/* cacheroute: command-line client for the cacheroute sidecar. Prints each
 * answer as JSON on stdout; a gRPC error goes to stderr with exit code 1,
 * a usage error exits 2. */
#include <errno.h>
#include <getopt.h>
#include <grpc/grpc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "call.h"
#include "cli.h"
#include "common.h"
#include "grpc/health/v1/health.pb-c.h"
#include "json.h"
#include "wire.h"

static const char usage[] =
    "usage: cacheroute [--target HOST:PORT] [--timeout SECONDS] [--tls-ca PEM\n"
    "                  [--tls-cert PEM --tls-key PEM]] [--token-file FILE] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  plan [--file F] [--from-estimator] [--install]\n"
    "       [--n-shards R] [--qcap Q] [--warm-slots-per-shard W]\n"
    "                        plan 'owner,rate' lines from F (default: stdin), or the\n"
    "                        sidecar's estimator; each config flag given replaces the\n"
    "                        sidecar's value for this plan, the others keep the\n"
    "                        sidecar's own (its --n-shards, --qcap, ...)\n"
    "  record [--omit-routes] OWNER...   record one arrival per OWNER\n"
    "  record --stream [--file F] [--omit-routes]\n"
    "                        RecordArrivals: each line of F (default: stdin) is one\n"
    "                        message, 'OWNER[=WEIGHT] ...' (spaces or commas); one JSON\n"
    "                        line per answer, in order (no --timeout); a bad message\n"
    "                        ends it, named by its index among the lines sent, from 0\n"
    "  rates [OWNER...]      estimated rates (all tracked owners when none given)\n"
    "  forget OWNER...       drop owners from the estimator\n"
    "  health [--service S]  grpc.health.v1 Check (exit 1 unless SERVING)\n"
    "  select PROMPT_TOKENS KNOWLEDGE_TOKENS [--source NAME=CACHED_TOKENS]...\n"
    "         [--queue-wait-ms MS] [--gpu N] [--dry-run] [--request-id ID]\n"
    "                        text or KV-cache injection, with the predicted costs\n"
    "  profile               the node's GPUs, NICs and injection cost model\n"
    "  report [--file F]     report served requests' outcomes: one Outcome per line\n"
    "                        of F (default: stdin) as a JSON object in proto3 JSON\n"
    "                        ({\"requestId\":\"r1\",\"promptTokens\":900,\"ttftMs\":41.5});\n"
    "                        sent in batches of up to 10,000; prints the summed counts\n"
    "  decision REQUEST_ID   a decision's receipt: predicted vs measured per term\n"
    "  watch [--count N]     receipts as they are made and reported, one JSON line\n"
    "                        each, until N are printed or Ctrl-C (no --timeout)\n"
    "  stats                 served hit ratios, prediction errors, regret, calibration\n"
    "  endpoints             the endpoint set: each shard's endpoint, address and state\n"
    "  drain ID | undrain ID take endpoint ID out of (back into) new routes; its\n"
    "                        sessions move when they next arrive (admin)\n"
    "\n"
    "--target defaults to $CACHEROUTE_TARGET, else 127.0.0.1:50051; --timeout to 10 s.\n"
    "--tls-ca speaks TLS, trusting that CA; --tls-cert/--tls-key add a client\n"
    "certificate (mTLS); --token-file sends 'authorization: Bearer <its content>'.\n"
    "Answers are JSON on stdout (64-bit integers as strings); errors go to stderr.\n"
    "Put -- before negative owner ids: cacheroute record -- -5 7\n";

typedef struct options {
    const char *target;
    cr_client_security security;
    double timeout;
    const char *file;
    int from_estimator, install, omit_routes, stream, have_config;
    Cacheroute__V1__PlannerConfig config;
    const char *service;
    uint64_t count; /* watch --count; 0 = no limit */
    Cacheroute__V1__SelectInjectionRequest select;
    Cacheroute__V1__KvSource *sources;
    size_t n_sources;
} options;

static int fail_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "cacheroute: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see --help)\n");
    return EXIT_USAGE;
}

/* A number the sidecar checks: what cr_parse_double takes, or nan, inf or
 * infinity (any case, optional sign), which are passed on as they are so that
 * the sidecar's INVALID_ARGUMENT names the field and the value. */
static int parse_number(const char *s, double *out)
{
    if (cr_parse_double(s, out) == 0)
        return 0;
    int neg = *s == '-';
    const char *w = s + (*s == '-' || *s == '+');
    if (!strcasecmp(w, "nan"))
        *out = neg ? -NAN : NAN;
    else if (!strcasecmp(w, "inf") || !strcasecmp(w, "infinity"))
        *out = neg ? -INFINITY : INFINITY;
    else
        return -1;
    return 0;
}

int cr_cli_print(const ProtobufCMessage *m, size_t json_flags)
{
    json_t *j = cr_message_to_json(m);
    char *text = j ? json_dumps(j, json_flags | JSON_PRESERVE_ORDER) : NULL;
    if (text) {
        printf("%s\n", text);
        fflush(stdout);
    }
    free(text);
    json_decref(j);
    return text ? 0 : EXIT_RPC;
}

int cr_cli_call_and_print(cr_client *c, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_type, ProtobufCMessage **keep)
{
    ProtobufCMessage *resp;
    cr_error err;
    grpc_status_code st = cr_client_call(c, method, req, resp_type, &resp, &err);
    if (st != GRPC_STATUS_OK) {
        fprintf(stderr, "cacheroute: %s: %s\n", cr_wire_status_name(st), err.msg);
        return EXIT_RPC;
    }
    int rc = cr_cli_print(resp, JSON_INDENT(2));
    if (!rc && keep)
        *keep = resp;
    else
        protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

FILE *cr_cli_open_input(const char *file)
{
    FILE *in = file && strcmp(file, "-") ? fopen(file, "r") : stdin;
    if (!in)
        fprintf(stderr, "cacheroute: cannot open %s: %s\n", file, strerror(errno));
    return in;
}

/* Parses "owner,rate" (spaces around either allowed); 0 on success. */
static int parse_rate_line(char *p, int64_t *owner, double *rate)
{
    char *comma = strchr(p, ',');
    if (!comma)
        return -1;
    *comma = '\0';
    char *first = p + strlen(p), *second = comma + 1 + strspn(comma + 1, " \t");
    while (first > p && (first[-1] == ' ' || first[-1] == '\t'))
        *--first = '\0';
    int bad = cr_parse_i64(p, owner) || parse_number(second, rate);
    *comma = ',';
    return bad ? -1 : 0;
}

/* Reads "owner,rate" lines ('#' comments and blank lines skipped), of any
 * length. */
static int read_rates(FILE *in, Cacheroute__V1__SessionRate **items, size_t *n)
{
    char *line = NULL;
    size_t len = 0, cap = 0, lineno = 0;
    *items = NULL;
    *n = 0;
    while (getline(&line, &len, in) >= 0) {
        lineno++;
        char *p = line + strspn(line, " \t"), *end = p + strcspn(p, "\r\n");
        while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        *end = '\0';
        if (!*p || *p == '#')
            continue;
        int64_t owner;
        double rate;
        if (parse_rate_line(p, &owner, &rate) != 0) {
            fprintf(stderr, "cacheroute: line %zu: expected 'owner,rate', got '%s'\n", lineno, p);
            free(line);
            return -1;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 1024;
            Cacheroute__V1__SessionRate *grown = realloc(*items, cap * sizeof *grown);
            if (!grown) {
                free(line);
                return -1;
            }
            *items = grown;
        }
        cacheroute__v1__session_rate__init(&(*items)[*n]);
        (*items)[*n].owner = owner;
        (*items)[(*n)++].rate = rate;
    }
    free(line);
    return 0;
}

static int cmd_plan(cr_client *c, const options *o)
{
    Cacheroute__V1__PlanRequest req = CACHEROUTE__V1__PLAN_REQUEST__INIT;
    Cacheroute__V1__SessionRate *items = NULL;
    Cacheroute__V1__SessionRate **ptrs = NULL;
    size_t n = 0;
    req.from_estimator = o->from_estimator;
    req.install = o->install;
    if (o->have_config)
        req.config = (Cacheroute__V1__PlannerConfig *)&o->config;
    if (!o->from_estimator) {
        FILE *in = cr_cli_open_input(o->file);
        if (!in)
            return EXIT_USAGE;
        int bad = read_rates(in, &items, &n);
        if (in != stdin)
            fclose(in);
        if (bad) {
            free(items);
            return EXIT_USAGE;
        }
        ptrs = malloc((n ? n : 1) * sizeof *ptrs);
        for (size_t i = 0; ptrs && i < n; i++)
            ptrs[i] = &items[i];
        req.n_rates = n;
        req.rates = ptrs;
    }
    int rc = cr_cli_call_and_print(c, SERVICE "Plan", &req.base,
                            &cacheroute__v1__plan_response__descriptor, NULL);
    free(items);
    free(ptrs);
    return rc;
}

/* Parses every positional argument as an owner id. */
static int parse_owners(char **args, int n, int64_t **owners)
{
    *owners = malloc((size_t)(n ? n : 1) * sizeof **owners);
    for (int i = 0; *owners && i < n; i++)
        if (cr_parse_i64(args[i], &(*owners)[i]) != 0) {
            free(*owners);
            return fail_usage("owner must be a 64-bit integer, got '%s'", args[i]);
        }
    return *owners ? 0 : EXIT_RPC;
}

static int cmd_owners(cr_client *c, const char *cmd, char **args, int n, const options *o)
{
    int64_t *owners;
    int rc = parse_owners(args, n, &owners);
    if (rc)
        return rc;
    if (!strcmp(cmd, "record")) {
        Cacheroute__V1__RecordArrivalRequest req = CACHEROUTE__V1__RECORD_ARRIVAL_REQUEST__INIT;
        req.n_owners = (size_t)n;
        req.owners = owners;
        req.omit_routes = o->omit_routes;
        rc = cr_cli_call_and_print(c, SERVICE "RecordArrival", &req.base,
                            &cacheroute__v1__record_arrival_response__descriptor, NULL);
    } else if (!strcmp(cmd, "rates")) {
        Cacheroute__V1__GetRatesRequest req = CACHEROUTE__V1__GET_RATES_REQUEST__INIT;
        req.n_owners = (size_t)n;
        req.owners = owners;
        rc = cr_cli_call_and_print(c, SERVICE "GetRates", &req.base,
                            &cacheroute__v1__get_rates_response__descriptor, NULL);
    } else {
        Cacheroute__V1__ForgetRequest req = CACHEROUTE__V1__FORGET_REQUEST__INIT;
        req.n_owners = (size_t)n;
        req.owners = owners;
        rc = cr_cli_call_and_print(c, SERVICE "Forget", &req.base,
                            &cacheroute__v1__forget_response__descriptor, NULL);
    }
    free(owners);
    return rc;
}

static int cmd_health(cr_client *c, const options *o)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = (char *)(o->service ? o->service : "");
    ProtobufCMessage *resp;
    int rc = cr_cli_call_and_print(c, "/grpc.health.v1.Health/Check", &req.base,
                            &grpc__health__v1__health_check_response__descriptor, &resp);
    if (rc)
        return rc;
    int serving = ((Grpc__Health__V1__HealthCheckResponse *)resp)->status ==
                  GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    protobuf_c_message_free_unpacked(resp, NULL);
    return serving ? 0 : EXIT_RPC;
}

enum { O_TARGET = 256, O_TIMEOUT, O_FILE, O_FROM_EST, O_INSTALL, O_SHARDS, O_QCAP, O_WARM,
       O_OMIT, O_SERVICE, O_SOURCE, O_QUEUE, O_GPU, O_DRY, O_REQUEST_ID, O_COUNT, O_TLS_CA,
       O_TLS_CERT, O_TLS_KEY, O_TOKEN, O_STREAM };

static const struct option long_opts[] = {
    {"target", required_argument, NULL, O_TARGET},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    {"file", required_argument, NULL, O_FILE},
    {"from-estimator", no_argument, NULL, O_FROM_EST},
    {"install", no_argument, NULL, O_INSTALL},
    {"n-shards", required_argument, NULL, O_SHARDS},
    {"qcap", required_argument, NULL, O_QCAP},
    {"warm-slots-per-shard", required_argument, NULL, O_WARM},
    {"omit-routes", no_argument, NULL, O_OMIT},
    {"stream", no_argument, NULL, O_STREAM},
    {"service", required_argument, NULL, O_SERVICE},
    {"source", required_argument, NULL, O_SOURCE},
    {"queue-wait-ms", required_argument, NULL, O_QUEUE},
    {"gpu", required_argument, NULL, O_GPU},
    {"dry-run", no_argument, NULL, O_DRY},
    {"request-id", required_argument, NULL, O_REQUEST_ID},
    {"count", required_argument, NULL, O_COUNT},
    {"tls-ca", required_argument, NULL, O_TLS_CA},
    {"tls-cert", required_argument, NULL, O_TLS_CERT},
    {"tls-key", required_argument, NULL, O_TLS_KEY},
    {"token-file", required_argument, NULL, O_TOKEN},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* --source NAME=CACHED_TOKENS: the sidecar checks names and counts; here
 * only the shape. */
static int add_source(options *o, const char *arg)
{
    const char *eq = strrchr(arg, '=');
    int64_t cached;
    if (!eq || cr_parse_i64(eq + 1, &cached) || cached < 0 || cached > UINT32_MAX)
        return fail_usage("--source expects NAME=CACHED_TOKENS, got '%s'", arg);
    Cacheroute__V1__KvSource *grown = realloc(o->sources, (o->n_sources + 1) * sizeof *grown);
    if (!grown)
        return EXIT_RPC;
    o->sources = grown;
    cacheroute__v1__kv_source__init(&grown[o->n_sources]);
    grown[o->n_sources].name = strndup(arg, (size_t)(eq - arg));
    grown[o->n_sources++].cached_tokens = (uint32_t)cached;
    return 0;
}

static int parse_select_option(options *o, int opt, const char *arg)
{
    double v;
    int64_t gpu;
    switch (opt) {
    case O_SOURCE:
        return add_source(o, arg);
    case O_QUEUE:
        if (parse_number(arg, &v))
            return fail_usage("--queue-wait-ms takes a number, got '%s'", arg);
        o->select.queue_case = CACHEROUTE__V1__SELECT_INJECTION_REQUEST__QUEUE_QUEUE_WAIT_MS;
        o->select.queue_wait_ms = v; /* the sidecar rejects negative or NaN, naming it */
        return 0;
    case O_GPU:
        if (cr_parse_i64(arg, &gpu) || gpu < 0 || gpu > UINT32_MAX)
            return fail_usage("--gpu takes a GPU index, got '%s'", arg);
        o->select.gpu = (uint32_t)gpu;
        return 0;
    case O_DRY:
        o->select.dry_run = 1;
        return 0;
    default:
        o->select.request_id = (char *)arg;
        return 0;
    }
}

static int parse_tokens(const char *arg, uint32_t *out)
{
    int64_t v;
    if (cr_parse_i64(arg, &v) || v < 0 || v > UINT32_MAX)
        return fail_usage("token counts are integers in 0..4294967295, got '%s'", arg);
    *out = (uint32_t)v;
    return 0;
}

static int cmd_select(cr_client *c, options *o, char **args)
{
    Cacheroute__V1__SelectInjectionRequest *req = &o->select;
    Cacheroute__V1__KvSource **ptrs = calloc(o->n_sources + 1, sizeof *ptrs);
    int rc = ptrs ? 0 : EXIT_RPC;
    if (!rc)
        rc = parse_tokens(args[0], &req->prompt_tokens);
    if (!rc)
        rc = parse_tokens(args[1], &req->knowledge_tokens);
    for (size_t i = 0; !rc && i < o->n_sources; i++)
        ptrs[i] = &o->sources[i];
    req->n_sources = o->n_sources;
    req->sources = ptrs;
    if (!rc)
        rc = cr_cli_call_and_print(c, SERVICE "SelectInjection", &req->base,
                            &cacheroute__v1__select_injection_response__descriptor, NULL);
    free(ptrs);
    return rc;
}

static int cmd_profile(cr_client *c)
{
    Cacheroute__V1__GetNodeProfileRequest req = CACHEROUTE__V1__GET_NODE_PROFILE_REQUEST__INIT;
    return cr_cli_call_and_print(c, SERVICE "GetNodeProfile", &req.base,
                          &cacheroute__v1__node_profile__descriptor, NULL);
}

/* Options go anywhere on the line (getopt permutes); returns 0 or an exit code. */
static int parse_options(int argc, char **argv, options *o)
{
    int opt;
    double v;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case O_TARGET: o->target = optarg; break;
        case O_TIMEOUT:
            if (cr_parse_double(optarg, &o->timeout) || !(o->timeout > 0))
                return fail_usage("--timeout must be a number of seconds > 0, got '%s'", optarg);
            break;
        case O_FILE: o->file = optarg; break;
        case O_TLS_CA: o->security.ca = optarg; break;
        case O_TLS_CERT: o->security.cert = optarg; break;
        case O_TLS_KEY: o->security.key = optarg; break;
        case O_TOKEN: o->security.token_file = optarg; break;
        case O_FROM_EST: o->from_estimator = 1; break;
        case O_INSTALL: o->install = 1; break;
        case O_OMIT: o->omit_routes = 1; break;
        case O_STREAM: o->stream = 1; break;
        case O_SERVICE: o->service = optarg; break;
        case O_COUNT: {
            int64_t n;
            if (cr_parse_i64(optarg, &n) || n < 1)
                return fail_usage("--count takes a number of receipts >= 1, got '%s'", optarg);
            o->count = (uint64_t)n;
            break;
        }
        case O_SHARDS:
        case O_QCAP:
        case O_WARM:
            /* Range checks are the sidecar's: it names the field and value.
             * Only the flags given are sent (has_*); the sidecar fills in the
             * others from its own config. */
            if (parse_number(optarg, &v))
                return fail_usage("config flags take numbers, got '%s'", optarg);
            if (opt == O_SHARDS && !(v >= 0 && v <= 4294967295.0 && v == (uint32_t)v))
                return fail_usage("--n-shards takes a whole number, got '%s'", optarg);
            o->have_config = 1;
            if (opt == O_SHARDS) {
                o->config.has_n_shards = 1;
                o->config.n_shards = (uint32_t)v;
            } else if (opt == O_QCAP) {
                o->config.has_qcap = 1;
                o->config.qcap = v;
            } else {
                o->config.has_warm_slots_per_shard = 1;
                o->config.warm_slots_per_shard = v;
            }
            break;
        case O_SOURCE:
        case O_QUEUE:
        case O_GPU:
        case O_DRY:
        case O_REQUEST_ID:
            if (parse_select_option(o, opt, optarg) != 0)
                return EXIT_USAGE;
            break;
        case 'h': fputs(usage, stdout); return -1;
        default: return EXIT_USAGE;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o = {.timeout = 10};
    cacheroute__v1__planner_config__init(&o.config); /* no field set */
    cacheroute__v1__select_injection_request__init(&o.select);
    o.target = getenv("CACHEROUTE_TARGET") ? getenv("CACHEROUTE_TARGET") : "127.0.0.1:50051";
    int rc = parse_options(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (optind >= argc)
        return fail_usage("%s", "missing command");
    const char *cmd = argv[optind];
    char **args = argv + optind + 1;
    int n = argc - optind - 1;
    int streaming = o.stream && !strcmp(cmd, "record");
    int needs_owners = (!strcmp(cmd, "record") && !streaming) || !strcmp(cmd, "forget");
    if (o.stream && !streaming) {
        return fail_usage("--stream is for record, not %s", cmd);
    } else if (streaming) {
        if (n > 0)
            return fail_usage("record --stream reads owners from --file or stdin, got '%s'",
                              args[0]);
    } else if (!strcmp(cmd, "select")) {
        if (n != 2)
            return fail_usage("%s needs PROMPT_TOKENS and KNOWLEDGE_TOKENS", cmd);
    } else if (!strcmp(cmd, "decision")) {
        if (n != 1)
            return fail_usage("%s needs exactly one REQUEST_ID", cmd);
    } else if (!strcmp(cmd, "drain") || !strcmp(cmd, "undrain")) {
        if (n != 1)
            return fail_usage("%s needs exactly one endpoint ID", cmd);
    } else if (!strcmp(cmd, "plan") || !strcmp(cmd, "health") || !strcmp(cmd, "profile") ||
               !strcmp(cmd, "report") || !strcmp(cmd, "watch") || !strcmp(cmd, "stats") ||
               !strcmp(cmd, "endpoints")) {
        if (n > 0)
            return fail_usage("unexpected argument '%s'", args[0]);
    } else if (needs_owners && n == 0) {
        return fail_usage("%s needs at least one OWNER", cmd);
    } else if (!needs_owners && strcmp(cmd, "rates")) {
        return fail_usage("unknown command '%s'", cmd);
    }
    grpc_init();
    cr_client c;
    cr_error err;
    if (cr_client_open(&c, o.target, o.timeout, &o.security, &err) != 0) {
        grpc_shutdown();
        return fail_usage("%s", err.msg);
    }
    if (!strcmp(cmd, "plan"))
        rc = cmd_plan(&c, &o);
    else if (!strcmp(cmd, "health"))
        rc = cmd_health(&c, &o);
    else if (!strcmp(cmd, "select"))
        rc = cmd_select(&c, &o, args);
    else if (!strcmp(cmd, "profile"))
        rc = cmd_profile(&c);
    else if (!strcmp(cmd, "report"))
        rc = cr_cli_report(&c, o.file);
    else if (!strcmp(cmd, "decision"))
        rc = cr_cli_decision(&c, args[0]);
    else if (!strcmp(cmd, "watch"))
        rc = cr_cli_watch(&c, o.count);
    else if (!strcmp(cmd, "stats"))
        rc = cr_cli_stats(&c);
    else if (!strcmp(cmd, "endpoints") || !strcmp(cmd, "drain") || !strcmp(cmd, "undrain"))
        rc = cr_cli_endpoints(&c, cmd, n ? args[0] : NULL);
    else if (streaming)
        rc = cr_cli_record_stream(&c, o.file, o.omit_routes);
    else
        rc = cmd_owners(&c, cmd, args, n, &o);
    cr_client_close(&c);
    grpc_shutdown();
    for (size_t i = 0; i < o.n_sources; i++)
        free(o.sources[i].name);
    free(o.sources);
    return rc;
}
