/* The sidecar's shared state: the estimator, the installed routing table and
 * the replanner thread. Every function is thread-safe. */
#ifndef CR_SIDECAR_H
#define CR_SIDECAR_H

#include <pthread.h>
#include <stdatomic.h>

#include "config.h"
#include "estimator.h"
#include "inject.h"
#include "metrics.h"
#include "planner.h"
#include "probe.h"

/* An installed table. Readers hold a reference while they use it, so a swap
 * never frees a table under a reader and no reader sees half a table. */
typedef struct cr_installed {
    cr_table *table;
    uint64_t generation; /* 1 for the first installed table */
    _Atomic long refs;
} cr_installed;

typedef struct cr_sidecar {
    const cr_config *cfg;
    cr_estimator *estimator;
    cr_metrics *metrics;   /* set by the caller before serving; not owned */
    cr_prober *prober;     /* likewise */
    cr_injector *injector; /* likewise */
    double epoch;        /* CLOCK_MONOTONIC at start, seconds */

    pthread_mutex_t table_lock; /* guards current and generation */
    cr_installed *current;
    uint64_t generation;

    pthread_mutex_t replan_lock; /* guards stopping; replan_wake signals it */
    pthread_cond_t replan_wake;
    int stopping;
    int replan_started;
    pthread_t replan_thread;
} cr_sidecar;

/* Returns NULL with err filled on a bad estimator config or out of memory. */
cr_sidecar *cr_sidecar_new(const cr_config *cfg, cr_error *err);
void cr_sidecar_free(cr_sidecar *s);

/* Seconds since the sidecar started, on the monotonic clock. */
double cr_sidecar_now(const cr_sidecar *s);

/* The current table with a reference taken, or NULL before the first install.
 * Release with cr_installed_release. */
cr_installed *cr_sidecar_acquire(cr_sidecar *s);
void cr_installed_release(cr_installed *t);

/* Makes t (ownership taken) the current table. Returns it with a reference
 * taken for the caller, or NULL (t freed) when out of memory. */
cr_installed *cr_sidecar_install(cr_sidecar *s, cr_table *t);

/* Logs an installed table: generation, admitted sessions, imbalance, and
 * the planning time (seconds); by says who installed it. */
void cr_sidecar_log_install(const cr_installed *t, const char *by, double seconds);

/* Plans from a snapshot of the estimator taken now. */
cr_status cr_sidecar_plan_estimator(cr_sidecar *s, const cr_planner_config *cfg, cr_table **out,
                                    cr_error *err);

/* Starts the replanner when --replan-interval > 0: plan from the estimator
 * with the configured planner and install, every interval. Returns 0 on
 * success. Stop joins it promptly. */
int cr_sidecar_start_replanner(cr_sidecar *s);
void cr_sidecar_stop_replanner(cr_sidecar *s);

/* Writes the scrape-time gauges (estimator, installed table) onto a metrics
 * page; a cr_metrics_sample_fn with ctx = the sidecar. */
void cr_sidecar_gauges(void *ctx, cr_page *page);

/* Logs a probe snapshot (a cr_probe_config.on_snapshot). */
void cr_sidecar_log_probe(void *ctx, const cr_node_snapshot *snap);

/* Where an owner without warm slots goes: splitmix64(owner) mod n_shards. */
uint32_t cr_fallback_shard(int64_t owner, uint32_t n_shards);

#endif
