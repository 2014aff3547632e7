/* The sidecar's configuration: the server's own rows composed with every
 * component's. Parsing, ranges and defaults are the rows' (options.h); this
 * file only decides where values come from (defaults, variables, flags),
 * records which one won for each row, and prints the result. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "epp.h"
#include "memory.h"

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

/* One --kv-events value on its own; the rules across values and flags are
 * cr_config_kv_engines'. */
static cr_status valid_kv_events(const char *value, cr_error *err)
{
    cr_kv_engine e;
    cr_error why;
    if (cr_kv_engine_parse(value, &e, &why) == CR_OK)
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "--kv-events %s, got \"%s\"", why.msg, value);
}

#define AT(field) offsetof(cr_server_config, field)

static const char *const RESERVATIONS[] = {"admins", "anyone", NULL}; /* cr_reservations' order */
static const char *const ROUTE_ACCESS[] = {"identified", "anyone", NULL}; /* cr_route_access' */
static const char *const COMPRESSED[] = {"refuse", "inflate", NULL};

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
    {.name = "route-identity", .key = "route_identities", .type = CR_OPT_LIST,
     .offset = AT(route_identities), .count_offset = AT(n_route_identities), .min = 1,
     .max = 1024, .flags = CR_OPT_REPEATABLE,
     .help = "client certificate SAN URI, SAN DNS or CN allowed Route, Routes and "
             "RecordArrival(s) once authorization is on (mTLS; admins may too)"},
    {.name = "route-access", .key = "route_access", .type = CR_OPT_CHOICE,
     .offset = AT(route_access), .def_text = "identified", .choices = ROUTE_ACCESS,
     .help = "once authorization is on, who may call Route, Routes and RecordArrival(s), "
             "whose routes count toward every client's: identified (--route-identity, "
             "admins; others PERMISSION_DENIED) or anyone"},
    {.name = "kv-events", .key = "kv_events", .type = CR_OPT_LIST, .offset = AT(kv_events),
     .count_offset = AT(n_kv_events), .min = 1, .max = 1024, .flags = CR_OPT_REPEATABLE,
     .valid = valid_kv_events,
     .help = "a shard's engine publishing KV events (vLLM, SGLang) on ZeroMQ: "
             "SHARD=ENDPOINT[,replay=ENDPOINT], tcp:// or ipc://, at most one a shard"},
    {.name = "kv-events-max-frame-bytes", .key = "kv_events_max_frame_bytes",
     .type = CR_OPT_LONG, .offset = AT(kv_events_max_frame_bytes), .def = CR_KV_MAX_FRAME_BYTES,
     .min = CR_KV_MIN_FRAME_BYTES, .max = 67108864,
     .help = "largest KV-event frame read from an engine, bytes; a larger one is never read: "
             "the link is re-opened and the shard's view reset. A frame and its decoding "
             "take up to 34 bytes a byte; under a cgroup memory limit the default is 1/272 of "
             "it (an eighth of it for one frame), at most 4 MiB"},
    {.name = "kv-events-topic", .key = "kv_events_topic", .type = CR_OPT_STRING,
     .offset = AT(kv_events_topic), .def_text = "", .max = CR_KV_TOPIC_MAX - 1,
     .help = "topic prefix every KV-event link subscribes to (vLLM's topic is its "
             "--kv-events-config topic, kv@POD@MODEL under llm-d); empty = every topic"},
    {.name = "kv-events-dp-size", .key = "kv_events_dp_size", .type = CR_OPT_LONG,
     .offset = AT(kv_events_dp_size), .def = 1, .min = 1, .max = CR_KV_MAX_DP,
     .help = "data-parallel ranks each endpoint's engine publishes KV events on: rank R at "
             "its kv_events port + R (ipc://: _dpR appended), every rank feeding the "
             "endpoint's shard; at most 256 links in all"},
    {.name = "endpoints-file", .key = "endpoints_file", .type = CR_OPT_STRING,
     .offset = AT(endpoints_file), .def_text = "",
     .help = "YAML or JSON file of the endpoints ({\"endpoints\": [{\"id\", \"address\", "
             "\"weight\", \"kv_events\"}]}): shards become named endpoints; re-read when it changes, every "
             "5 s while refused, and on SIGHUP; a regular file of at most 1 MiB, one "
             "document, nested at most 16 deep, 8192 YAML nodes; empty = shards by number"},
    {.name = "admin-token-file", .key = "admin_token_file", .type = CR_OPT_STRING,
     .offset = AT(admin_token_file), .def_text = "",
     .help = "file holding the bearer token allowed state-changing calls"},
    {.name = "reservations", .key = "reservations", .type = CR_OPT_CHOICE,
     .offset = AT(reservations), .def_text = "admins", .choices = RESERVATIONS,
     .help = "once authorization is on (--admin-identity or --admin-token-file), who may make "
             "SelectInjection reserve GPU and link time: admins (everyone else may dry-run) "
             "or anyone"},
    {.name = "compressed-requests", .key = "compressed_requests", .type = CR_OPT_CHOICE,
     .offset = AT(compressed_requests), .def_text = "refuse", .choices = COMPRESSED,
     .help = "requests sent with grpc-encoding gzip or deflate: refuse (UNIMPLEMENTED: a few "
             "KB could inflate to --max-message-bytes) or inflate (each to at most "
             "--max-message-bytes, and at once at most a quarter of --memory-quota-bytes at "
             "that size; more are RESOURCE_EXHAUSTED)"},
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
    {.name = "max-decode-bytes", .key = "max_decode_bytes", .type = CR_OPT_LONG,
     .offset = AT(max_decode_bytes), .def = 1073741824.0, .min = 1048576,
     .max = CR_OPT_U64_MAX,
     .help = "bytes requests may decode into over all calls in flight (at most 8 a wire "
             "byte each); a call past it is RESOURCE_EXHAUSTED (default under a cgroup "
             "limit: a quarter of it)"},
    {.name = "stream-idle-timeout", .key = "stream_idle_timeout_s", .type = CR_OPT_DOUBLE,
     .offset = AT(stream_idle_timeout_s), .def = 60, .min = 0, .max = 86400,
     .help = "seconds a stream (RecordArrivals, reflection) may wait for its next message, "
             "counted from its previous answer (the picker's Process: from its last message "
             "read or answer sent); then it ends DEADLINE_EXCEEDED; 0 = forever"},
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

/* ---- the endpoint picker's rows (epp.h) ------------------------------------ */

static cr_status valid_epp_listen(const char *value, cr_error *err)
{
    if (!*value || valid_address(value, 0))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--epp-listen must be host:port with a port in 0..65535 or empty, got \"%s\"",
                   value);
}

/* An HTTP/2 header name as the data plane sends it: lower case. */
static cr_status valid_owner_header(const char *value, cr_error *err)
{
    if (strspn(value, "abcdefghijklmnopqrstuvwxyz0123456789-_.") == strlen(value))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--epp-owner-header must be a lower-case HTTP header name (a-z, 0-9, '-', "
                   "'_', '.') or empty, got \"%s\"",
                   value);
}

#undef AT
#define AT(field) offsetof(cr_epp_server_config, field)

static const char *const EPP_TOKENS[] = {"estimate", "engine", NULL};      /* cr_epp_tokens' */
static const char *const EPP_BODY[] = {"full-duplex", "buffered", NULL}; /* cr_epp_body_mode's */

static const cr_option EPP_ROWS[] = {
    {.name = "epp-listen", .key = "listen", .type = CR_OPT_STRING, .offset = AT(listen),
     .def_text = "", .valid = valid_epp_listen,
     .help = "the endpoint picker of a Gateway API inference gateway (Envoy ext_proc "
             "Process, with grpc.health.v1), host:port, with the gRPC port's TLS and limits; "
             "--endpoints-file addresses must then be ip:port; empty = off"},
    {.name = "epp-fallbacks", .key = "fallbacks", .type = CR_OPT_U32, .offset = AT(fallbacks),
     .def = 2, .min = 0, .max = CR_EPP_MAX_FALLBACKS,
     .help = "endpoints after the best in x-gateway-destination-endpoint, next best first, "
             "for the gateway to retry"},
    {.name = "epp-tokens", .key = "tokens", .type = CR_OPT_CHOICE, .offset = AT(tokens),
     .def_text = "estimate", .choices = EPP_TOKENS,
     .help = "how prompts become block keys: estimate (4 bytes a pseudo-token, no tokenizer) "
             "or engine (an endpoint's /tokenize, as its KV events count; estimate on failure)"},
    {.name = "epp-owner-header", .key = "owner_header", .type = CR_OPT_STRING,
     .offset = AT(owner_header), .def_text = "x-session-id", .valid = valid_owner_header,
     .help = "request header naming the session (the owner), else the body's user; "
             "lower case; empty = the body's user only"},
    {.name = "epp-max-body-bytes", .key = "max_body_bytes", .type = CR_OPT_U64,
     .offset = AT(max_body_bytes), .def = 8388608, .min = 1024, .max = CR_EPP_MAX_BODY_LIMIT,
     .help = "largest request body read, bytes; a larger one is answered 413"},
    {.name = "epp-tokenize-timeout", .key = "tokenize_timeout_s", .type = CR_OPT_DOUBLE,
     .offset = AT(tokenize_timeout_s), .def = 0.05, .min = 0, .max = 10,
     .flags = CR_OPT_MIN_OPEN,
     .help = "--epp-tokens engine: seconds a /tokenize call may take before the request "
             "falls back to estimate"},
    {.name = "epp-body-mode", .key = "body_mode", .type = CR_OPT_CHOICE,
     .offset = AT(body_mode), .def_text = "full-duplex", .choices = EPP_BODY,
     .help = "the body mode assumed when the data plane does not announce one: full-duplex "
             "(FULL_DUPLEX_STREAMED, what GIE requires) or buffered (BUFFERED)"},
    {.name = "epp-max-requests", .key = "max_requests", .type = CR_OPT_U32,
     .offset = AT(max_requests), .def = 10000, .min = 1, .max = CR_EPP_MAX_REQUESTS_LIMIT,
     .help = "picker streams (HTTP requests) open at once; one more answers 429 (shed)"},
    {.name = "epp-max-buffered-bytes", .key = "max_buffered_bytes", .type = CR_OPT_U64,
     .offset = AT(max_buffered_bytes), .def = 536870912, .min = 1024,
     .max = CR_EPP_MAX_BUFFERED_LIMIT,
     .help = "request bodies all picker streams may hold at once while gathering them, bytes "
             "(at least --epp-max-body-bytes); a body that would pass it answers 429 (shed)"},
    {.name = "epp-base-model", .key = "base_model", .type = CR_OPT_STRING,
     .offset = AT(base_model), .def_text = "",
     .help = "the model name the pool's engines serve as their base model: its requests' "
             "namespace names no adapter, as vLLM's KV events do; other names are adapters"},
};

const cr_option_table cr_epp_server_options = CR_OPTION_TABLE("epp", EPP_ROWS);

static const cr_option_part SERVER_PART[] = {{&cr_server_options, 0}};
static const cr_option_part REPLICA_PART[] = {{&cr_replica_options, 0}};
static const cr_option_part EPP_PART[] = {{&cr_epp_server_options, 0}};
static const cr_option_part ADMIT_PART[] = {{&cr_admit_server_options, 0}};
static const cr_option_part DISCOVER_PART[] = {{&cr_discover_options, 0}};
static const cr_option_part SCRAPE_PART[] = {{&cr_scrape_options, 0}};
static const cr_option_group GROUPS[] = {
    {SERVER_PART, 1, offsetof(cr_config, server)},
    {cr_core_parts, CR_CORE_N_PARTS, offsetof(cr_config, core)},
    {REPLICA_PART, 1, offsetof(cr_config, replica)},
    {EPP_PART, 1, offsetof(cr_config, epp)},
    {ADMIT_PART, 1, offsetof(cr_config, admit)},
    {DISCOVER_PART, 1, offsetof(cr_config, discover)},
    {SCRAPE_PART, 1, offsetof(cr_config, scrape)},
};
const cr_composition cr_config_composition = {GROUPS, sizeof GROUPS / sizeof GROUPS[0]};

/* The server's rules across its rows. */
static cr_status check_server(const cr_server_config *s, cr_error *err)
{
    /* gRPC core counts a message in and one out against the quota; below
     * that the largest allowed call could never be served. */
    if (s->max_pending_reply_bytes < s->max_message_bytes)
        return cr_fail(err, CR_EINVAL,
                       "--max-pending-reply-bytes must be at least --max-message-bytes (%ld), "
                       "got %ld",
                       s->max_message_bytes, s->max_pending_reply_bytes);
    if (s->memory_quota_bytes / 2 < s->max_message_bytes)
        return cr_fail(err, CR_EINVAL,
                       "--memory-quota-bytes must be at least twice --max-message-bytes (%ld), "
                       "got %ld",
                       s->max_message_bytes, s->memory_quota_bytes);
    return CR_OK;
}

cr_status cr_config_kv_engines(const cr_config *cfg, cr_kv_engine *out, size_t *n,
                               cr_error *err)
{
    const cr_server_config *s = &cfg->server;
    uint32_t shards = cfg->core.planner.n_shards;
    uint64_t seen = 0; /* a bit a shard: CR_KV_MAX_ENGINES is 64 */
    *n = 0;
    if (s->n_kv_events > CR_KV_MAX_ENGINES)
        return cr_fail(err, CR_EINVAL, "--kv-events must be given at most %d times, got %zu",
                       CR_KV_MAX_ENGINES, s->n_kv_events);
    for (size_t i = 0; i < s->n_kv_events; i++) {
        const char *v = s->kv_events[i];
        if (cr_kv_engine_parse(v, &out[i], err) != CR_OK)
            return valid_kv_events(v, err); /* its message names the flag */
        if (out[i].shard >= shards)
            return cr_fail(err, CR_EINVAL,
                           "--kv-events SHARD must be below --n-shards (%u), got \"%s\"", shards,
                           v);
        if (seen >> out[i].shard & 1)
            return cr_fail(err, CR_EINVAL, "--kv-events names shard %u twice, got \"%s\"",
                           out[i].shard, v);
        seen |= 1ull << out[i].shard;
    }
    *n = s->n_kv_events;
    return CR_OK;
}

static cr_status check_kv_events(const cr_config *cfg, cr_error *err)
{
    cr_kv_engine engines[CR_KV_MAX_ENGINES];
    size_t n;
    return cr_config_kv_engines(cfg, engines, &n, err);
}

/* One endpoint source at most: each would replace the others' sets. */
static cr_status check_sources(const cr_config *cfg, cr_error *err)
{
    const char *names[8];
    size_t n = 0;
    if (*cfg->server.endpoints_file)
        names[n++] = "--endpoints-file";
    n += cr_discover_sources(&cfg->discover, names + n, sizeof names / sizeof names[0] - n);
    if (n > 1)
        return cr_fail(err, CR_EINVAL,
                       "%s and %s are exclusive: give one endpoint source, each would replace "
                       "the other's endpoints",
                       names[0], names[1]);
    return CR_OK;
}

/* Every component's check, then the rules across components. */
static cr_status check_all(const cr_config *cfg, cr_error *err)
{
    cr_status st = cr_compose_check(&cr_config_composition, cfg, err);
    if (st == CR_OK)
        st = cr_replica_config_check(&cfg->replica, cfg->core.estimator.clock, err);
    if (st == CR_OK)
        st = check_server(&cfg->server, err);
    if (st == CR_OK)
        st = check_kv_events(cfg, err);
    if (st == CR_OK) { /* the door's rules across its rows */
        cr_admit_config door;
        cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
        size_t n;
        st = cr_config_door(&cfg->admit, &door, t, &n, err) < 0 ? CR_EINVAL : CR_OK;
    }
    if (st == CR_OK)
        st = check_sources(cfg, err);
    return st;
}

static void set_defaults(cr_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cr_compose_defaults(&cr_config_composition, cfg);
    cfg->core.probe.nic_sample_s = SIDECAR_NIC_SAMPLE_S;
    cfg->memory_limit = cr_memory_limit();
    /* before variables and flags */
    cr_memory_defaults(cfg->memory_limit, &cfg->server.memory_quota_bytes,
                       &cfg->server.max_pending_reply_bytes, &cfg->server.max_decode_bytes,
                       &cfg->server.max_message_bytes,
                       &cfg->server.kv_events_max_frame_bytes);
}

/* One bad variable, into the warning line's list. */
static void collect_bad(void *ctx, const char *variable, const cr_error *why)
{
    FILE *list = ctx;
    fprintf(list, "%s%s: %s", ftell(list) ? "; " : "", variable, why->msg);
}

/* --help must work when the environment is broken: it prints the usage
 * anyway, and one line on stderr naming every variable that would stop the
 * sidecar from starting. */
static void warn_bad_env(void)
{
    cr_config scratch;
    char *why = NULL;
    size_t len = 0;
    FILE *list = open_memstream(&why, &len);
    if (!list)
        return;
    set_defaults(&scratch);
    int bad = cr_compose_env_errors(&cr_config_composition, &scratch, collect_bad, list);
    fclose(list);
    if (bad > 0)
        fprintf(stderr,
                "cacheroute-sidecar: warning: the sidecar would refuse to start with this "
                "environment: %s\n",
                why);
    free(why);
    cr_config_free(&scratch);
}

static const char *const STOPS[] = {"-h", "--help", "--version", NULL};
static const char *const SWITCHES[] = {"--check-config", NULL};

int cr_config_load(cr_config *cfg, int argc, char **argv, cr_error *err)
{
    set_defaults(cfg);
    err->msg[0] = '\0';
    if (cr_compose_rows(&cr_config_composition) > CR_CONFIG_MAX_OPTIONS) {
        cr_fail(err, CR_EINVAL, "%zu option rows; cr_config holds %d",
                cr_compose_rows(&cr_config_composition), CR_CONFIG_MAX_OPTIONS);
        return -1;
    }
    cr_compose_args a = {.stops = STOPS, .switches = SWITCHES, .env = 1, .source = cfg->source};
    int rc = cr_compose_parse(&cr_config_composition, argc, argv, cfg, &a, err);
    if (rc == 1 && a.stopped == 2) {
        printf("cacheroute-sidecar %s\n", CR_VERSION);
    } else if (rc == 1) {
        cr_config_usage(stdout);
        fflush(stdout);
        warn_bad_env();
    } else if (rc == 0) {
        rc = check_all(cfg, err) != CR_OK ? -1 : a.switched ? 2 : 0;
    }
    if ((rc == 0 || rc == 2) && cfg->server.threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->server.threads = cores > 0 ? cores : 1;
    }
    return rc;
}

void cr_config_free(cr_config *cfg)
{
    cr_compose_release(&cr_config_composition, cfg);
    memset(cfg, 0, sizeof *cfg);
}

json_t *cr_config_json(const cr_config *cfg)
{
    return cr_compose_json(&cr_config_composition, cfg, cfg->source);
}

/* ---- --help ----------------------------------------------------------------- */

void cr_config_usage(FILE *out)
{
    fprintf(out, "usage: cacheroute-sidecar [--flag value | --flag=value]...\n"
                 "       cacheroute-sidecar --check-config [flags]   validate flags and\n"
                 "           environment, print the effective configuration as JSON, exit\n\n"
                 "Every flag can also be set with its environment variable; a flag wins.\n\n");
    char env[96], def[160], range[160];
    const cr_composition *c = &cr_config_composition;
    for (cr_option_ref r = cr_compose_first(c); r.o; cr_compose_next(c, &r)) {
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
                 "SIGHUP re-reads the certificates, the admin token, the endpoints file and the\n"
                 "Redis password file; SIGUSR1 writes a state snapshot; SIGUSR2 logs the current\n"
                 "figures; none of these three stops serving.\n");
}
