/* What the sidecar makes of the core's reports: metrics and log lines, and
 * the scrape-time gauges read from the core. */
#ifndef CR_OBSERVE_H
#define CR_OBSERVE_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "discover.h"
#include "endpoints_file.h"
#include "epp.h"
#include "kvevents.h"
#include "metrics.h"
#include "replica.h"
#include "scrape.h"
#include "watch_decisions.h"

/* Where the reports go and the gauges come from. */
typedef struct cr_observer {
    cr_metrics *metrics;
    cr_watch_hub *watch; /* WatchDecisions: each receipt, encoded, when watched */
    cr_core *core;       /* for the gauges: set once the core is built */
    cr_replica *replica; /* --state-backend's, once started; NULL when standalone */
    cr_kv_subscriber *kv; /* --kv-events', once started; NULL without */
    cr_endpoints_watch *endpoints; /* --endpoints-file's, once started; NULL without */
    cr_watch_hub *members; /* WatchEndpoints: each change of the set, encoded, when watched */
    cr_epp *epp;           /* --epp-listen's picker, once built; NULL without */
    cr_dns_watch *dns;     /* --endpoints-dns', once started; NULL without */
    cr_scraper *scrape;    /* the engines' /metrics scraper, once started; NULL when off */
    cr_k8s *k8s;           /* --endpoints-k8s-pool's watcher, once started; NULL without */
    /* kv again, for the members hook, which may run on another thread
     * (the endpoints file's, the subscriber's own) while it is set */
    _Atomic(cr_kv_subscriber *) kv_follow;
} cr_observer;

/* Hooks that count into o->metrics, log, and publish receipts to o->watch;
 * o and what it points to must outlive the core. */
cr_core_hooks cr_observe_hooks(cr_observer *o);

/* A cr_metrics_sample_fn with ctx = the cr_observer: estimator, installed
 * table, probed node and cost-model gauges, and the closed loop's (served
 * tokens, prediction errors, regret, receipts, watchers). */
void cr_observe_gauges(void *ctx, cr_page *page);

/* A counter or gauge family with a single unlabeled sample, read from a
 * struct of figures (cr_loop_stats, cr_replica_stats, ...): one row of a
 * table that cr_observe_rows writes in order. */
typedef enum cr_observe_kind { CR_OBSERVE_INT, CR_OBSERVE_U64, CR_OBSERVE_DOUBLE } cr_observe_kind;
typedef struct cr_observe_row {
    const char *name, *type, *help; /* type "counter" or "gauge" */
    size_t at;                      /* the value's offset in the struct */
    cr_observe_kind kind;           /* and its C type */
} cr_observe_row;

/* The row of field of struct T, its kind taken from the field's type (an
 * int, uint64_t or double; any other fails the build). */
#define CR_OBSERVE_ROW(T, field, name, type, help)                                             \
    {(name), (type), (help), offsetof(T, field),                                               \
     _Generic(((T *)0)->field, int: CR_OBSERVE_INT, uint64_t: CR_OBSERVE_U64,                  \
              double: CR_OBSERVE_DOUBLE)}
#define CR_OBSERVE_N(rows) (sizeof(rows) / sizeof *(rows))

/* The n rows' families, each with its sample read from figures. */
void cr_observe_rows(cr_page *p, const cr_observe_row *rows, size_t n, const void *figures);

/* One sample of family name labelled shard="<shard>". */
void cr_observe_shard(cr_page *p, const char *name, uint32_t shard, double v);

/* observe_replica.c: hooks that log each replica event once (backend up
 * and down, leader and follower, skewed pushes, refused publishes), and
 * the cacheroute_state_backend_up and cacheroute_replica_* gauges (none
 * when standalone). */
cr_replica_hooks cr_observe_replica_hooks(cr_observer *o);
void cr_observe_replica_gauges(cr_replica *r, cr_page *page);

/* observe_kv.c: hooks that log the KV-event subscriber's reports (drops
 * at most once a minute a shard, each reset, each replay), and its
 * cacheroute_kv_* families by shard (none without --kv-events). */
cr_kv_hooks cr_observe_kv_hooks(cr_observer *o);
void cr_observe_kv_gauges(cr_kv_subscriber *kv, cr_page *page);

/* observe_endpoints.c: a log line per change of the endpoint set and its
 * message to WatchEndpoints' watchers (o->members), and the
 * cacheroute_endpoint* families (none before a set is given). */
void cr_observe_members(void *ctx, const cr_core_members_event *ev);
void cr_observe_endpoint_gauges(const cr_observer *o, cr_page *page);

/* observe_discover.c: hooks that log the discovery sources' reports,
 * and their cacheroute_dns_* and cacheroute_k8s_* families (none without
 * --endpoints-dns, --endpoints-k8s-pool). */
cr_discover_hooks cr_observe_discover_hooks(cr_observer *o);
void cr_observe_discover_gauges(const cr_observer *o, cr_page *page);

/* observe_epp.c: the endpoint picker's cacheroute_epp_* families (streams,
 * routes, outcomes, body bytes, errors by reason, tokenizer fallbacks). */
void cr_observe_epp_gauges(cr_epp *e, cr_page *page);

/* observe_door.c: with --objectives, the door's cacheroute_door_* families
 * (held, bounds, verdicts per objective and per fairness id, SLO
 * attainment); nothing without a door. */
void cr_observe_door_gauges(cr_core *core, cr_page *page);
/* observe_scrape.c: hooks that log a shard's failed scrapes (at most once
 * a minute a shard, scrape.h), and the cacheroute_engine_scrape* families
 * (none while scraping is off). */
cr_scrape_hooks cr_observe_scrape_hooks(cr_observer *o);
/* The core's block_size hook: a scraped engine's KV block size other than
 * --block-tokens, logged (the core reports it once a shard). */
void cr_observe_block_size(void *ctx, uint32_t shard, uint32_t block_size,
                           uint32_t block_tokens);
void cr_observe_scrape_gauges(cr_scraper *s, cr_page *page);

/* observe_route.c: the cacheroute_routes_placed_total{reason},
 * cacheroute_route_* gauges and the hit-prediction error counters. */
void cr_observe_route_gauges(cr_core *core, cr_page *page);

#endif
