/* Internal to the core: the handle, and what its files share: the
 * installed table (installed.c), the plan path (plan.c), the replanner
 * (replan.c), the state file (state/) and the owners touched for replicas
 * (touched.h). */
#ifndef CR_CORE_INTERNAL_H
#define CR_CORE_INTERNAL_H

#include <pthread.h>

#include "core.h"
#include "state/state.h"
#include "touched.h"

/* A table made current; its generation lives in the cr_published. */
typedef struct cr_installed {
    cr_ref ref;
    cr_table *table;
} cr_installed;

struct cr_core {
    cr_planner_config planner; /* what a Plan without config uses */
    cr_replan_config replan;   /* the replanner's mode */
    double replan_interval_s;
    cr_core_hooks hooks;
    cr_clock_source clock;
    double epoch; /* cr_mono_s at creation, for the real clock */
    cr_estimator *estimator;
    cr_injector *injector;
    cr_probe *probe;
    cr_published table; /* of cr_installed */
    cr_ticker *replanner;
    pthread_mutex_t tick_lock; /* guards last_replan */
    pthread_mutex_t install_lock; /* one install at a time, so each plan's
                                   * churn is against the table it replaced */
    double last_replan;
    cr_receipt_store *receipts; /* NULL with --receipts 0 */
    cr_loop_figures *figures;
    cr_router *router;
    cr_route_config route;     /* its configuration (Route's bounds) */
    atomic_int model_stale;    /* the router's prefill model (route.c); 1 at start */
    pthread_mutex_t model_lock; /* one update of it at a time */
    /* The state file (state.c) */
    char *state_path; /* NULL = none */
    int state_lock_fd; /* its lock (cr_state_lock); -1 = none */
    double snapshot_interval_s;
    cr_state_fingerprint fingerprint;
    cr_ticker *snapshotter;
    pthread_mutex_t state_lock; /* one snapshot at a time */
    int started, final_snapshot; /* cr_core_start ran; the stop's snapshot was taken */
    _Atomic(cr_touched *) touched; /* replicas: owners since the last push; NULL = off */
    atomic_int tables_external;    /* cr_core_set_tables_external */
    /* The endpoints (endpoints.c) */
    cr_endpoints_config endpoints_cfg;
    cr_published members;          /* of cr_endpoints; none until a set is given */
    pthread_mutex_t members_lock;  /* one change at a time; guards errors */
    _Atomic uint32_t member_slots; /* the set's n_slots (it never shrinks); 0: no set */
    _Atomic double next_retry;     /* the set's next_retry_s */
    struct cr_core_errors *errors; /* per slot: errors in the current window */
    /* Replicas (adopt_endpoints.c) */
    atomic_int members_followed;   /* cr_core_follow_endpoints */
    uint64_t members_adopted;      /* the last adopted version; under members_lock */
    cr_endpoint_spec *own;         /* the last set given here (file, SetEndpoints), one
                                    * block; under members_lock; NULL: none */
    size_t n_own;
    cr_admit *door;                /* cr_core_set_door; NULL: none (door.c) */
};

/* The core's own option rows on cr_core_config (options.c): --replan-interval
 * and --receipts; the state file's --state-file and --snapshot-interval.
 * Composed into cr_core_parts (parts.c). */
extern const cr_option_table cr_core_options;
extern const cr_option_table cr_core_state_options;

/* Every component's check, in cr_core_parts' order: CR_EINVAL with err
 * naming the first bad field (parts.c). cr_core_new runs it. */
cr_status cr_core_config_check(const cr_core_config *cfg, cr_error *err);

/* Owners handed to the estimator per batch (RecordArrival, GetRates): their
 * rates fit on the stack, and it groups as many at a time. */
#define CR_CORE_BATCH 1024

/* The core's clock, seconds (cr_core_now, inline for its own files). */
static inline double core_now(const cr_core *c) { return c->clock.now(c->clock.ctx); }

/* ---- installed.c ---- */

/* The installed table with a reference, or NULL before the first install. */
cr_installed *cr_core_acquire(cr_core *c, uint64_t *generation);
void cr_installed_release(cr_installed *t);
/* Wraps table (ownership taken) with one reference for the caller; NULL,
 * table freed, when out of memory. */
cr_installed *cr_installed_new(cr_table *table);
/* Makes t current (the caller keeps its own reference) as generation as,
 * or the next one when as is 0; returns its generation. */
uint64_t cr_core_install(cr_core *c, cr_installed *t, uint64_t as);
/* With install, makes held current (as cr_core_install, under
 * install_lock) into out->generation; either way out->churn and
 * churn_generation against the table it replaced, or without install the
 * current one. out NULL: the install only, no churn (an O(table) pass no
 * one reads for a follower's install). Returns the core's clock when the
 * table became current. */
double cr_core_publish(cr_core *c, cr_installed *held, int install, uint64_t as,
                       cr_core_plan_result *out);
/* ---- route.c ---- */

/* The prefill model routes predict with is GPU 0's, calibrated; the
 * router keeps a copy. Something it depends on changed for gpu (a probe,
 * an outcome calibrated from): the copy is stale when gpu is 0. Cheap. */
void cr_core_route_model_changed(cr_core *c, uint32_t gpu);
/* Before a route: the router's copy made anew when it is stale. */
void cr_core_route_model_update(cr_core *c);

/* Shards routes go over with table t (NULL = none installed): an
 * endpoint set's slots once one is given. A DOWN endpoint whose retry
 * time has passed is made ACTIVE first. */
uint32_t cr_core_shards(cr_core *c, const cr_installed *t);

/* ---- door.c ---- */

/* Sets q's meet_ms, the SLO the rule places it to meet: its own, else its
 * objective's, when the door's meet_slo says so now (always, or pressed
 * while it acts for q's priority: cr_admit_acts); else 0. q is the core's
 * copy of a caller's request. */
void cr_core_door_meet(cr_core *c, cr_route_request *q);

/* Before q is placed (cr_core_route, one request at a time) under table t
 * over shards: 1 when the door has its word and q is not to be placed (a
 * sheddable request held or shed: *a says so, nothing placed; its pick
 * was the rule's prediction, cr_router_predict, or none when it waits
 * behind a held one); 0: place it, then ask cr_core_door_after. */
int cr_core_door_before(cr_core *c, const cr_table *t, uint32_t shards,
                        const cr_route_request *q, cr_route_answer *a, double now);
/* The door for q just placed as *a at now over shards: a critical
 * request's prediction sampled for the pressure (a miss counts 0 while
 * some shard idles: cr_router_any_idle), counted; nothing for the others
 * (the door had its word before). */
void cr_core_door_after(cr_core *c, uint32_t shards, const cr_route_request *q,
                        cr_route_answer *a, double now);
/* The held requests freed, the door with them. */
void cr_core_door_free(cr_core *c);

/* ---- endpoints.c ---- */

void cr_members_init(cr_core *c, const cr_endpoints_config *cfg);
void cr_members_destroy(cr_core *c);
/* An error reported for shard at now (an outcome with CR_OUT_ERROR): may
 * mark its endpoint DOWN. 1 when the shard is an endpoint's. */
int cr_members_error(cr_core *c, uint32_t shard, double now);
/* Makes DOWN endpoints whose retry time has passed ACTIVE. */
void cr_members_retry(cr_core *c, double now);
/* The current set with a reference, or NULL. */
const cr_endpoints *cr_members_current(cr_core *c);
/* members_lock held: makes e (its reference taken over) current after old,
 * telling the router first; the event's version, slots and sessions to
 * move into *ev. CR_ENOMEM (e released, nothing changed) when the
 * router's mask could not be made. */
cr_status cr_members_publish(cr_core *c, const cr_endpoints *old, cr_endpoints *e,
                             cr_core_members_event *ev, cr_error *err);
/* members_lock held: slot's endpoint into state at now (DOWN until
 * until_s), published; *ev's change too. */
cr_status cr_members_set_state(cr_core *c, const cr_endpoints *old, uint32_t slot,
                               cr_endpoint_state state, double now, double until_s,
                               cr_core_members_event *ev, cr_error *err);
/* 1 while the set is the leader's (cr_core_follow_endpoints). */
static inline int cr_members_followed(cr_core *c)
{
    return atomic_load_explicit(&c->members_followed, memory_order_relaxed);
}
/* members_lock held: keeps a copy of v[0..n) as this replica's own set;
 * CR_ENOMEM when out of memory (the old copy kept). */
cr_status cr_members_keep_own(cr_core *c, const cr_endpoint_spec *v, size_t n, cr_error *err);
/* Reports ev to hooks->members; call outside every lock. */
void cr_members_report(cr_core *c, const cr_core_members_event *ev);

/* ---- plan.c ---- */

/* The one plan path: validate, plan (rc: cr_planner_replan from the
 * installed table, as the replanner does; NULL: fresh), the caller's fits,
 * install when asked, report to hooks->planned as by ("rpc",
 * "replanner"). Errors as cr_core_plan. */
cr_status cr_core_plan_and_install(cr_core *c, const cr_core_plan_request *req, const char *by,
                                   const cr_replan_config *rc, cr_core_plan_result *out,
                                   cr_error *err);
/* Reports a plan to hooks->planned: r the plan made (table, generation,
 * churn) or NULL for none, error NULL or why it failed. */
void cr_core_report_plan(cr_core *c, const char *by, double seconds,
                         const cr_core_plan_result *r, const char *error);

/* ---- replan.c ---- */

/* Starts the replanner's ticker when replan_interval_s > 0. */
cr_status cr_replanner_start(cr_core *c, cr_error *err);
/* Stops it (a replan in progress is finished first). */
void cr_replanner_stop(cr_core *c);
/* cr_core_tick: a replan when one is due on the core's clock. */
int cr_replan_if_due(cr_core *c);

/* An outcome's measured TTFT for receipt r's route, counted toward its
 * objective's SLO attainment at the door (route_receipt.c). */
void cr_core_door_outcome(cr_core *c, const cr_receipt *r, double ttft_ms);

/* ---- core.c ---- */

/* GPUs in the latest node snapshot, at least 1. */
uint32_t cr_core_gpu_count(cr_core *c);

/* ---- state/state.c ---- */

/* Restores c's state file (c->state_path set) into the fresh components,
 * reporting to hooks->state; 0, or -1 when a failed restore could not even
 * make fresh components (out of memory: err unset). */
int cr_state_restore(cr_core *c, const cr_core_config *cfg);
/* Marks c started and starts the snapshot ticker when configured. */
cr_status cr_state_start(cr_core *c, cr_error *err);
/* Stops the ticker; the final snapshot of a started core, once. */
void cr_state_stop(cr_core *c);

#endif
