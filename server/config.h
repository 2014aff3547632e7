/* Sidecar configuration: the option rows of every component, composed. Each
 * row is a command-line flag with a CACHEROUTE_* environment variable
 * (flags win), parsed and range-checked by the rows themselves (see
 * options.h); --help, --check-config and the start-up log are generated
 * from the same rows. */
#ifndef CR_CONFIG_H
#define CR_CONFIG_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "core.h"
#include "discover.h"
#include "kvevents.h"
#include "log.h"
#include "options.h"
#include "replica.h"
#include "scrape.h"

/* The gRPC server's own settings (its rows: cr_server_options). */
typedef struct cr_server_config {
    char *listen;             /* --listen host:port, [v6]:port or unix:PATH */
    long threads;             /* --threads; 0 = number of cores (resolved by load) */
    long max_message_bytes;   /* --max-message-bytes */
    double shutdown_grace_s;  /* --shutdown-grace */
    char *metrics_listen;     /* --metrics-listen host:port, or "" for off */
    cr_log_level log_level;   /* --log-level */
    char *tls_cert;           /* --tls-cert PEM path, "" = plaintext */
    char *tls_key;            /* --tls-key PEM path, with tls_cert */
    char *tls_client_ca;      /* --tls-client-ca PEM path, "" = no mTLS */
    char *health_listen;      /* --health-listen host:port, "" = off */
    char **admin_identities;  /* --admin-identity, repeatable */
    size_t n_admin_identities;
    char **route_identities;  /* --route-identity, repeatable */
    size_t n_route_identities;
    int route_access;         /* --route-access: cr_route_access */
    char *admin_token_file;   /* --admin-token-file path, "" = no token */
    char **kv_events;         /* --kv-events SHARD=ENDPOINT[,replay=ENDPOINT], repeatable */
    char *endpoints_file;     /* --endpoints-file path, "" = shards by number */
    size_t n_kv_events;
    long kv_events_max_frame_bytes; /* --kv-events-max-frame-bytes, ZMQ_MAXMSGSIZE */
    char *kv_events_topic;    /* --kv-events-topic: the SUB sockets' prefix, "" = all */
    long kv_events_dp_size;   /* --kv-events-dp-size: ranks of a followed endpoint */
    int reservations;         /* --reservations: cr_reservations */
    int compressed_requests;  /* --compressed-requests: 0 refuse, 1 inflate */
    /* Bounds on what clients can make the server hold: connections,
     * streams, memory, calls and time (docs/operating.md, "Limits"). */
    double handshake_timeout_s;     /* --handshake-timeout */
    double max_connection_idle_s;   /* --max-connection-idle; 0 = off */
    double max_connection_age_s;    /* --max-connection-age; 0 = off */
    double max_connection_age_grace_s; /* --max-connection-age-grace */
    long max_concurrent_streams;    /* --max-concurrent-streams, per connection */
    long memory_quota_bytes;        /* --memory-quota-bytes, gRPC core's buffers */
    long max_calls_per_method;      /* --max-calls-per-method, in flight */
    long max_arrivals_per_call;     /* --max-arrivals-per-call, owners a RecordArrival */
    double request_deadline_s;      /* --request-deadline; 0 = off */
    double reply_deadline_s;        /* --reply-deadline; 0 = off */
    long max_pending_reply_bytes;   /* --max-pending-reply-bytes */
    long max_decode_bytes;          /* --max-decode-bytes, all calls in flight */
    double stream_idle_timeout_s;   /* --stream-idle-timeout; 0 = off */
    long metrics_timeout_s;         /* --metrics-timeout, idle HTTP connection */
    long metrics_max_connections;   /* --metrics-max-connections */
    long metrics_per_ip_connections; /* --metrics-per-ip-connections */
} cr_server_config;

extern const cr_option_table cr_server_options;

/* The endpoint picker's settings (epp.h; its rows:
 * cr_epp_server_options, group "epp"). Unused while --epp-listen is empty. */
typedef struct cr_epp_server_config {
    char *listen;              /* --epp-listen host:port or [v6]:port, "" = off */
    uint32_t fallbacks;        /* --epp-fallbacks */
    int tokens;                /* --epp-tokens: cr_epp_tokens */
    char *owner_header;        /* --epp-owner-header, lower case; "" = none */
    uint64_t max_body_bytes;   /* --epp-max-body-bytes */
    double tokenize_timeout_s; /* --epp-tokenize-timeout */
    int body_mode;             /* --epp-body-mode: cr_epp_body_mode */
    uint32_t max_requests;     /* --epp-max-requests */
    uint64_t max_buffered_bytes; /* --epp-max-buffered-bytes */
    char *base_model;          /* --epp-base-model, "" = none */
} cr_epp_server_config;

extern const cr_option_table cr_epp_server_options;

/* The door's settings (admit.h; its rows: cr_admit_server_options, group
 * "admit", in config_admit.c). No door while --objectives is empty. */
typedef struct cr_admit_server_config {
    char *objectives;        /* --objectives, cr_admit_objectives_parse's text; "" = no door */
    double budget_ms;        /* --admit-budget-ms; 0 = half the tightest critical SLO */
    uint32_t max_queued;     /* --admit-max-queued */
    uint32_t max_per_id;     /* --admit-max-per-id */
    uint64_t max_held_bytes; /* --admit-max-held-bytes */
    double max_wait_ms;      /* --admit-max-wait-ms */
    uint32_t tracked_ids;    /* --admit-tracked-ids */
    double pressure;         /* --admit-pressure, a share; 0 = always acts, by the budget */
    double pressure_off;     /* --admit-pressure-off; 0 = half of pressure */
    double pressure_tau_s;   /* --admit-pressure-tau-s */
    int meet_slo;            /* --admit-meet-slo: CR_ADMIT_MEET_* (off, pressed, always) */
} cr_admit_server_config;

extern const cr_option_table cr_admit_server_options;

/* The door a's settings make: its config into *cfg and its objectives
 * into t[] (room for CR_ADMIT_MAX_OBJECTIVES), *n of them. 1 for a door,
 * 0 for none (--objectives empty), -1 with err naming what is wrong. */
int cr_config_door(const cr_admit_server_config *a, cr_admit_config *cfg, cr_admit_objective *t,
                   size_t *n, cr_error *err);

/* --reservations, in its choices' order. */
typedef enum cr_reservations { CR_RESERVATIONS_ADMINS, CR_RESERVATIONS_ANYONE } cr_reservations;
/* --route-access, in its choices' order. */
typedef enum cr_route_access {
    CR_ROUTE_ACCESS_IDENTIFIED,
    CR_ROUTE_ACCESS_ANYONE
} cr_route_access;

#define CR_CONFIG_MAX_OPTIONS 192 /* rows over every composed table */

typedef struct cr_config {
    cr_server_config server;
    cr_core_config core;
    cr_replica_config replica;
    cr_epp_server_config epp;
    cr_admit_server_config admit;
    cr_discover_config discover;
    cr_scrape_config scrape;
    /* CR_SOURCE_* of each row, in --help order (cr_config_composition's
     * walk). */
    unsigned char source[CR_CONFIG_MAX_OPTIONS];
    uint64_t memory_limit; /* the cgroup's (cr_memory_limit), 0 for none */
} cr_config;

/* --kv-events parsed, one engine a value, into out (room for
 * CR_KV_MAX_ENGINES); *n of them. CR_EINVAL naming the flag and value for
 * a bad value, more than CR_KV_MAX_ENGINES, a shard at or past
 * --n-shards or a shard given twice. */
cr_status cr_config_kv_engines(const cr_config *cfg, cr_kv_engine *out, size_t *n,
                               cr_error *err);

/* The composition, in --help order: the server's rows, the core's parts
 * (core.h), the replica's, the endpoint picker's, discovery's, the
 * scraper's. Names are unique over all of them. */
extern const cr_composition cr_config_composition;

/* Fills cfg: every row's default, then each variable whose flag is not on
 * the command line (a flag overrides even a bad variable, and a repeatable
 * flag replaces its variable's list), then the flags in order, then every
 * component's own check (cr_compose_parse, cr_compose_check). Returns 0 to
 * run, 1 when --help or --version printed what was asked (--help also
 * warns on stderr, in one line, about each variable the sidecar would
 * refuse), 2 for --check-config (cfg is loaded and valid; the caller
 * prints it and exits), -1 on a bad flag or value with a one-line message
 * naming it (the flag, or the variable and the flag) in err. cfg owns its
 * strings; free it with cr_config_free whatever the return. */
int cr_config_load(cr_config *cfg, int argc, char **argv, cr_error *err);

/* The effective configuration as a JSON object (for the start-up log and
 * --check-config): each table's rows by key, at the top level or in the
 * table's group object ("planner", "estimator", "inject", "probe"), null
 * for a row without a value; then "options", one {"flag", "env", "value",
 * "source"} per row in --help order. NULL when out of memory. */
json_t *cr_config_json(const cr_config *cfg);
void cr_config_free(cr_config *cfg);
void cr_config_usage(FILE *out);

#endif
