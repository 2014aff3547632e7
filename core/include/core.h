/* cacheroute core: the sidecar's application logic as a gRPC-free library
 * with one opaque handle. It owns the rate estimator, the installed routing
 * table, the injector with its reservation timelines, the node prober and
 * the replanner, and offers each RPC as a C call in C types; the gRPC server
 * only decodes, makes one cr_core_* call and encodes.
 *
 * Rules that exist exactly once, here:
 *   route     an owner admitted in the installed table goes to its
 *             preferred shard; any other owner to cr_core_fallback_shard
 *             over the installed table's shards (the configured n_shards
 *             before the first install)
 *   plan      validate -> plan -> (install) -> report, for RPC plans and the
 *             replanner alike, timed over the same span
 *
 * Time: every call reads the clock given to cr_core_new (seconds, any
 * monotonic origin); NULL means the real monotonic clock. With a clock of
 * its own a caller drives the core in virtual time and calls cr_core_tick
 * after advancing it, instead of cr_core_start's thread (the replay tool
 * does this, far faster than real time).
 *
 * Reports (counting and logging) go to the hooks given to cr_core_new, so
 * the core itself neither logs nor knows about metrics.
 *
 * Thread safety: after cr_core_new returns, every call but cr_core_free may
 * run concurrently from any number of threads.
 */
#ifndef CR_CORE_H
#define CR_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "estimator.h"
#include "inject.h"
#include "options.h"
#include "planner.h"
#include "probe.h"

/* Everything the core is configured with: one struct per component, plus
 * the core's own rows (cr_core_options). */
typedef struct cr_core_config {
    cr_planner_config planner;     /* the plan an RPC without config uses */
    cr_estimator_config estimator;
    cr_inject_config inject;
    cr_probe_config probe;
    double replan_interval_s;      /* --replan-interval; 0 = no replanner */
} cr_core_config;

/* The core's own option rows (--replan-interval), on cr_core_config. */
extern const cr_option_table cr_core_options;

/* Every component's defaults (from their option rows) into cfg. */
void cr_core_config_default(cr_core_config *cfg);

/* ---- reports ------------------------------------------------------------ */

typedef struct cr_core_plan_event {
    const char *by;      /* "rpc" or "replanner" */
    double seconds;      /* validate + plan (+ install) */
    int installed;       /* 1 when the plan became the current table */
    uint64_t generation; /* the installed generation; 0 when not installed */
    size_t admitted;     /* sessions holding warm slots; 0 on failure */
    double imbalance;
    const char *error;   /* why a plan failed; NULL when it did not */
} cr_core_plan_event;

/* Optional callbacks, each called on the thread that did the work, after
 * the fact, outside every core lock. Any may be NULL. */
typedef struct cr_core_hooks {
    void (*planned)(void *ctx, const cr_core_plan_event *ev);
    void (*recorded)(void *ctx, uint64_t arrivals);
    void (*selected)(void *ctx, const cr_inject_response *r);
    void (*probed)(void *ctx, const cr_node_snapshot *snap); /* each new snapshot */
    void *ctx;
} cr_core_hooks;

typedef struct cr_core cr_core;

/* Checks cfg (every component's check), copies it, creates the estimator
 * and the injector and takes the first probe (cfg->probe's time: the node
 * probe runs here, and hooks->probed sees it). Starts no replanner: see
 * cr_core_start. NULL with err naming the field on a bad config, out of
 * memory, or a prober that cannot start. hooks and clock are copied; NULL
 * for none / the real clock. */
cr_core *cr_core_new(const cr_core_config *cfg, const cr_core_hooks *hooks,
                     const cr_clock_source *clock, cr_error *err);

/* Starts the replanner thread when replan_interval_s > 0 (a replan every
 * interval, counted from the end of the last). CR_ENOMEM with err when the
 * thread cannot start. Call at most once. */
cr_status cr_core_start(cr_core *c, cr_error *err);

/* Stops the replanner thread (promptly; a replan in progress is finished
 * first), so no plan is reported after it returns; the prober keeps
 * running until cr_core_free. Every call keeps working. Idempotent; not
 * concurrent with cr_core_start. */
void cr_core_stop(cr_core *c);

/* cr_core_stop, then frees everything. Every other call must have
 * returned. NULL is ignored. */
void cr_core_free(cr_core *c);

/* The core's clock, seconds. */
double cr_core_now(const cr_core *c);

/* Virtual-time driving: replans when replan_interval_s > 0 and at least
 * that long has passed on the core's clock since the last replan (or since
 * cr_core_new). Returns 1 when it replanned, 0 when nothing was due. */
int cr_core_tick(cr_core *c);

/* ---- RecordArrival ------------------------------------------------------ */

typedef struct cr_route {
    int64_t owner;
    double rate;              /* just after this arrival */
    int admitted;             /* in the table the routes were read from */
    uint32_t preferred_shard; /* see "route" at the top */
} cr_route;

/* Records one arrival per owner, in order, at the core's now. With routes
 * not NULL fills routes[i] for owners[i], all from one installed table
 * (whose generation, 0 before the first install, goes to *generation when
 * not NULL). CR_EINVAL "owners must not be empty" when n is 0; nothing
 * recorded then. */
cr_status cr_core_record(cr_core *c, const int64_t *owners, size_t n, cr_route *routes,
                         uint64_t *generation, cr_error *err);

/* Where an owner without warm slots goes: cr_mix64(owner) % n_shards. */
uint32_t cr_core_fallback_shard(int64_t owner, uint32_t n_shards);

/* ---- Plan --------------------------------------------------------------- */

typedef struct cr_core_plan_request {
    const cr_session_rate *rates; /* explicit rates, or */
    size_t n_rates;
    int from_estimator;           /* the estimator's rates now */
    /* Each config field given (has_*) replaces the configured one; the others
     * keep the sidecar's. A given invalid value is an error naming it. */
    int has_n_shards, has_qcap, has_warm_slots_per_shard;
    uint32_t n_shards;
    double qcap, warm_slots_per_shard;
    int install; /* make the plan the current table */
    /* Optional: a last check before install (the caller's answer must fit
     * its message limit, say). Nonzero refuses the plan: nothing is
     * installed and cr_core_plan returns CR_ENOMEM with err as fits left
     * it. */
    int (*fits)(void *ctx, const cr_table *t, int install, cr_error *err);
    void *fits_ctx;
} cr_core_plan_request;

typedef struct cr_core_plan_result {
    const cr_table *table; /* valid until cr_core_plan_result_free */
    uint64_t generation;   /* when installed; else 0 */
    cr_ref *hold;          /* private */
} cr_core_plan_result;

/* Plans and, when asked, installs. CR_EINVAL for bad input (both or neither
 * of rates and from_estimator; a bad rate, owner or config field, named);
 * CR_ENOMEM when memory runs out or fits refused. State changes only on
 * success with install. Reports hooks->planned either way (but for
 * CR_EINVAL). */
cr_status cr_core_plan(cr_core *c, const cr_core_plan_request *req, cr_core_plan_result *out,
                       cr_error *err);
void cr_core_plan_result_free(cr_core_plan_result *r);

/* The installed table and its generation, held until
 * cr_core_plan_result_free; table NULL and generation 0 before the first
 * install. */
void cr_core_current(cr_core *c, cr_core_plan_result *out);

/* ---- GetRates, Forget --------------------------------------------------- */

/* Rates at now of the n listed owners (0 for untracked ones), or with n 0
 * of every tracked owner sorted by id. *out is malloc'd (the caller frees
 * it), *n_out entries; *tracked = owners tracked. CR_ENOMEM when out of
 * memory. */
cr_status cr_core_rates(cr_core *c, const int64_t *owners, size_t n, cr_session_rate **out,
                        size_t *n_out, uint64_t *tracked, cr_error *err);

/* Drops the owners from the estimator; returns how many were tracked. */
uint32_t cr_core_forget(cr_core *c, const int64_t *owners, size_t n);

/* ---- SelectInjection, GetNodeProfile ------------------------------------ */

/* cr_inject_select against the prober's latest snapshot at the core's now,
 * reported to hooks->selected on success. CR_EINVAL with err naming the
 * field; nothing reserved then. */
cr_status cr_core_select(cr_core *c, const cr_inject_request *req, cr_inject_response *out,
                         cr_error *err);

/* The latest node snapshot (a reference: release it with
 * cr_node_snapshot_release) and GPU 0's cost model against it. */
cr_status cr_core_profile(cr_core *c, const cr_node_snapshot **snap, cr_inject_model *model,
                          cr_error *err);

/* ---- scrape-time figures ------------------------------------------------ */

typedef struct cr_core_stats {
    uint64_t tracked_owners, evictions;
    uint64_t generation; /* of the installed table; 0 before the first */
    size_t admitted;
    double admitted_rate, unadmitted_rate, imbalance; /* 0, 0, 1 before */
} cr_core_stats;

void cr_core_stats_read(cr_core *c, cr_core_stats *out);

#endif
