/* cacheroute core: the sidecar's application logic as a gRPC-free library
 * with one opaque handle. It owns the rate estimator, the installed routing
 * table, the injector with its reservation timelines, the node prober and
 * the replanner, and offers each RPC as a C call in C types; the gRPC server
 * only decodes, makes one cr_core_* call and encodes.
 *
 * Rules that exist exactly once, here:
 *   route     over the installed table's shards (the configured n_shards
 *             before the first install), by the rule the router decides
 *             (--route-by, route.h), one request shape (request.h)
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

#include "admit.h"
#include "common.h"
#include "endpoints.h"
#include "estimator.h"
#include "inject.h"
#include "loop.h"
#include "options.h"
#include "planner.h"
#include "probe.h"
#include "request.h"
#include "route.h"

#define CR_CORE_MAX_WEIGHT 1e9        /* a RecordArrival weight's upper bound */
/* The largest table generation taken from outside (a state file, a
 * leader's publish): far from 2^64, so counting on from it never wraps. */
#define CR_CORE_MAX_GENERATION ((uint64_t)1 << 62)

/* Everything the core is configured with: one struct per component, plus
 * the core's own rows (cr_core_options). */
typedef struct cr_core_config {
    cr_planner_config planner;     /* the plan an RPC without config uses */
    cr_replan_config replan;       /* the replanner's (--replan ...); Plan calls plan fresh */
    cr_estimator_config estimator;
    cr_inject_config inject;
    cr_probe_config probe;
    double replan_interval_s;      /* --replan-interval; 0 = no replanner */
    uint64_t receipts;             /* --receipts: decision receipts kept; 0 = none */
    cr_route_config route;         /* the route rule (route.h) */
    cr_endpoints_config endpoints; /* the failure detector (endpoints.h) */
    /* State that survives a restart (see "state" below) */
    char *state_file;              /* --state-file; "" or NULL = none */
    double snapshot_interval_s;    /* --snapshot-interval; 0 = only at stop */
} cr_core_config;

/* The components of cr_core_config, once: their option tables in --help
 * order, each with where its struct lies (the core's own rows, on
 * cr_core_config itself: --replan-interval and --receipts, then the state
 * file's --state-file and --snapshot-interval; the route's, the
 * endpoints', the planner's, the replan's, the estimator's, the injector's, the probe's on
 * their members). The sidecar and the replay compose their flags from it. */
#define CR_CORE_N_PARTS 9
extern const cr_option_part cr_core_parts[CR_CORE_N_PARTS];
/* The probe's part is the last: a core driven in virtual time on a quiet
 * probe (the replay tool) composes the first CR_CORE_N_PARTS - 1. */
#define CR_CORE_N_NODELESS_PARTS (CR_CORE_N_PARTS - 1)

/* Every component's defaults into cfg (cr_options_parts_defaults over
 * cr_core_parts). */
void cr_core_config_default(cr_core_config *cfg);

/* The probe's defaults but one that finds nothing, at once, on any
 * machine (no sysfs, no CUDA, no sampling, no host-to-device timing): for
 * cores driven in virtual time (the replay tool, tests, benchmarks) whose
 * results must not depend on the host they run on. */
void cr_core_quiet_probe(cr_probe_config *p);

/* ---- reports ------------------------------------------------------------ */

typedef struct cr_core_plan_event {
    const char *by;      /* "rpc", "replanner" or "leader" (cr_core_install_planned) */
    double seconds;      /* validate + plan (+ install) */
    int installed;       /* 1 when the plan became the current table */
    uint64_t generation; /* the installed generation; 0 when not installed */
    size_t admitted;     /* sessions holding warm slots; 0 on failure */
    double imbalance;
    const char *error;   /* why a plan failed; NULL when it did not */
    /* The plan against the table it replaced (installed) or the table
     * current when it was made (not installed), and that table's
     * generation (0: none, so every session is admitted_in). All 0 on
     * failure. */
    cr_churn churn;
    uint64_t churn_generation;
} cr_core_plan_event;

struct cr_receipt;
typedef struct cr_core_members_event cr_core_members_event; /* see "endpoints" below */
typedef struct cr_core_state_event cr_core_state_event; /* see "state" below */

/* Optional callbacks, each called on the thread that did the work, after
 * the fact, outside every core lock. Any may be NULL. */
typedef struct cr_core_hooks {
    void (*planned)(void *ctx, const cr_core_plan_event *ev);
    void (*recorded)(void *ctx, uint64_t arrivals);
    void (*selected)(void *ctx, const cr_inject_response *r);
    void (*probed)(void *ctx, const cr_node_snapshot *snap); /* each new snapshot */
    /* Each new decision receipt (r->outcomes == 0) and each outcome matched
     * to one (r->outcomes > 0), on the thread of the cr_core_select or
     * cr_core_report that made it; r is valid for the call only. It runs
     * inside those calls, so it must be short and never block (copy r into
     * a bounded buffer and return): a slow hook slows every decision. */
    void (*receipted)(void *ctx, const struct cr_receipt *r);
    /* Each restore (in cr_core_new) and snapshot of the state file. */
    void (*state)(void *ctx, const cr_core_state_event *ev);
    /* Each change of the endpoints ("endpoints" below), after the new set
     * is current. */
    void (*members)(void *ctx, const cr_core_members_event *ev);
    /* A scraped engine whose KV block size (block_size tokens) disagrees
     * with --block-tokens, once per shard until another engine takes its
     * slot (cr_core_engine_load): the core does not log, so this is where
     * the sidecar logs it. */
    void (*block_size)(void *ctx, uint32_t shard, uint32_t block_size, uint32_t block_tokens);
    void *ctx;
} cr_core_hooks;

typedef struct cr_core cr_core;

/* Checks cfg (every component's check), copies it, creates the estimator
 * and the injector and takes the first probe (cfg->probe's time: the node
 * probe runs here, and hooks->probed sees it); with a state file, restores
 * it (see "state" below; never an error: a bad file is moved aside and
 * reported to hooks->state). Starts no replanner: see cr_core_start. NULL
 * with err naming the field on a bad config, out of memory, or a prober
 * that cannot start. hooks and clock are copied; NULL
 * for none / the real clock. */
cr_core *cr_core_new(const cr_core_config *cfg, const cr_core_hooks *hooks,
                     const cr_clock_source *clock, cr_error *err);

/* Starts the replanner thread when replan_interval_s > 0 (a replan every
 * interval, counted from the end of the last), and with a state file and
 * snapshot_interval_s > 0 the snapshot thread (cr_core_snapshot every
 * interval). A replan plans from the
 * estimator with the configured --replan mode (cr_planner_replan, the
 * installed table as the previous one) and installs. CR_ENOMEM with err
 * when the thread cannot start. Call at most once. */
cr_status cr_core_start(cr_core *c, cr_error *err);

/* Stops the replanner and snapshot threads (promptly; a replan or snapshot
 * in progress is finished first), so no plan is reported after it returns;
 * then, on a started core with a state file, writes the final snapshot
 * (once). The prober keeps running until cr_core_free. Every call keeps working. Idempotent; not
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

/* Weights: each arrival may weigh its work (its prompt tokens, say, or its
 * predicted prefill ms) instead of 1. The estimator adds the weight (see
 * estimator.h), so rates are in the weight's unit per second and so must
 * --qcap be (per shard); outstanding work is in that unit too. Routes
 * follow the rule of --route-by (route.h) over the installed table. */

/* Records one arrival per owner, in order, at the core's now. weights is
 * NULL or n_weights 0 (every weight 1), or one per owner, each finite and
 * in (0, CR_CORE_MAX_WEIGHT]. With routes not NULL fills routes[i] for
 * owners[i] (request.h's answer: owner, rate, admitted and shard; under
 * ttft the predictions too), all from one installed table (whose generation, 0 before the
 * first install, goes to *generation when not NULL); only routes answered
 * count as outstanding work. CR_EINVAL in field order, nothing recorded
 * then: "owners must not be empty" when n is 0, "weights must be empty or
 * one per owner (4), got 3", "weights[2] must be in (0, 1e+09], got -1". */
cr_status cr_core_record(cr_core *c, const int64_t *owners, size_t n, const double *weights,
                         size_t n_weights, cr_route_answer *routes, uint64_t *generation,
                         cr_error *err);
/* The same for the client whose identity has tag caller (the server's;
 * 0 = nobody in particular, as cr_core_record): the work its routes add
 * counts against its --inflight-per-caller and only its outcomes release
 * it (cr_core_report_as). */
cr_status cr_core_record_as(cr_core *c, uint64_t caller, const int64_t *owners, size_t n,
                            const double *weights, size_t n_weights, cr_route_answer *routes,
                            uint64_t *generation, cr_error *err);

/* ---- Route -------------------------------------------------------------- */

#define CR_CORE_MAX_ROUTES 4096    /* requests in one Route call */
#define CR_CORE_NAMESPACE_MAX 256  /* bytes in a Route namespace */

/* Routes n requests (request.h: the struct the server's decoder and the
 * replay fill) in order under the installed table with the calibrated
 * prefill model of GPU 0 (cr_router_place), answering out[0..n-1] (shard,
 * admitted, predictions, reason) and the table's generation; each owner
 * given is recorded as one arrival of weight 1. A namespace is at most
 * CR_CORE_NAMESPACE_MAX bytes, a request id at most CR_LOOP_REQUEST_ID_MAX.
 * CR_EINVAL in field order, nothing recorded or routed:
 * "requests must not be empty", "requests must be at most 4096, got N",
 * "requests[3].block_hashes has 9000 hashes, at most 8192
 * (--max-route-hashes)", "requests[1].prompt_tokens must be at most
 * 10000000, got N", "requests[0].namespace must be at most 256 bytes, got
 * N", "requests[2].request_id must be at most 128 bytes, got N".
 * Thread-safe. */
cr_status cr_core_route(cr_core *c, const cr_route_request *items, size_t n,
                        cr_route_answer *out, uint64_t *generation, cr_error *err);

/* Keeps a receipt for a route just made with cr_core_route (q and its
 * answer a), as SelectInjection keeps one for a decision: the endpoint
 * picker's routes, so that GetDecision, WatchDecisions and the outcome's
 * measured-minus-predicted errors show them. The decision is the text
 * path (a route injects no knowledge): the predicted queue wait and
 * prefill, their sum the TTFT predicted; the receipt's prompt and cached
 * tokens are the route's L and predicted hit. Reported to
 * hooks->receipted. 0 kept; -1 not (no request id, --receipts 0, no
 * shard, out of memory). Thread-safe. */
int cr_core_receipt_route(cr_core *c, const cr_route_request *q, const cr_route_answer *a);

/* ---- admission at the door (admit.h, docs/admission.md; core/door.c) -----
 *
 * With a door (cr_core_set_door), cr_core_route runs it around the rule
 * for every request that names an objective, a priority or an SLO
 * (request.h): the door weighs the rule's pick's predicted TTFT (queue
 * wait + prefill) against the objective (cr_admit_offer); a sheddable
 * request is predicted first (cr_router_predict) and placed only when
 * routed, a critical one placed as always. With the door's meet_slo
 * (by default while the door acts, cr_admit_acts: pressed, or no
 * pressure bound), a request with an SLO its pick would miss is placed
 * where the rule predicts it meets it, when a shard does (request.h's
 * meet_ms). Routed: the answer is the rule's (so while the door is idle,
 * meet_slo not always, every route is what it was without a door).
 * Queued or shed: nothing was placed (no blocks, session or work kept),
 * the answer's door says so, admitted is 0; a queued request is copied
 * and held until cr_core_admit_dispatch sends or drops it.
 * Requests without an objective never meet the door: their routes are
 * byte for byte those of a core without one. */

/* Gives the core a door with cfg's bounds over the objectives t[0..n)
 * (copied). Once, before the core serves. CR_EINVAL naming the field
 * (cr_admit_config_check), CR_ESTATE when it has one, CR_ENOMEM. */
cr_status cr_core_set_door(cr_core *c, const cr_admit_config *cfg, const cr_admit_objective *t,
                           size_t n, cr_error *err);

/* The door, or NULL: its figures (cr_admit_stats_read) and outcomes
 * (cr_admit_outcome) go to it directly. */
cr_admit *cr_core_door(cr_core *c);

/* A held request that left the door: dispatched (routed now: answer as
 * cr_core_route's, door ROUTED) or dropped at its deadline (door SHED,
 * no shard). request_id is the request's, "" for none. */
typedef struct cr_core_dispatched {
    uint64_t held;       /* the handle its queued answer carried */
    int dropped;
    double held_ms;      /* how long it was held */
    char request_id[CR_LOOP_REQUEST_ID_MAX + 1];
    uint64_t caller;     /* the request's (its request id is its caller's) */
    int64_t owner;
    int has_owner;
    cr_route_answer answer;
} cr_core_dispatched;

/* At the core's now: drops the held requests past their deadline, then
 * dispatches held requests in the door's order (strict priority, then
 * deficit round robin over fairness ids) while the head's bound is met
 * where the rule would place it now (cr_router_predict: its wait within
 * the budget, wait plus prefill within its SLO less what it waited; a
 * predicted wait fell: outcomes, the clock), and places it there; while
 * the door is pressed, only in the head's last budget before its deadline
 * (cr_admit_next). Up to max of both into out[]; how many. Call after outcomes and as the clock moves (the
 * replay: every tick); calling it again returns the rest. Thread-safe. */
size_t cr_core_admit_dispatch(cr_core *c, cr_core_dispatched *out, size_t max);

/* The held request whose queued answer carried held, and whose request id
 * is request_id (held handles are addresses, which a later hold may
 * reuse: the id tells them apart), taken out of the door and freed,
 * counted dropped: its caller left. 1 when it was held; 0 when it is not
 * (already dispatched or dropped: cr_core_admit_dispatch gives it).
 * Thread-safe. */
int cr_core_admit_cancel(cr_core *c, uint64_t held, const char *request_id);

/* ---- ReportKvEvents ------------------------------------------------------ */

#define CR_CORE_MAX_KV_EVENTS 10000        /* events in one ReportKvEvents */
#define CR_CORE_MAX_BLOCK_TOKENS (1u << 20) /* a KV event's block_size */

/* Applies engines' KV events (route.h, "KV events") to the prefix index, in
 * order, after checking the whole batch: CR_EINVAL naming the first bad
 * event and field, nothing applied ("events[2].shard must be below the 8
 * shards, got 9", "events[0].token_ids has 10 tokens, 3 blocks of 4 need
 * 12", block_size in 1..2^20, at most --max-route-hashes hashes and
 * CR_CORE_MAX_KV_EVENTS events, a namespace of at most 256 bytes);
 * CR_ENOMEM when the index could not grow (what fit is applied). *out
 * counts what they did. Thread-safe. */
cr_status cr_core_kv_events(cr_core *c, const cr_kv_event *ev, size_t n, cr_kv_applied *out,
                            cr_error *err);

/* The engine load scraped from shard's engine (route.h, "The engines' own
 * load"; the scraper in scrape.h calls it), taken at the core's now. The
 * route rule uses it from now until it is older than two scrape intervals
 * (--scrape-interval, on the core's clock against load->at_s), then falls
 * back to its own view of the shard (counted: cr_route_stats'
 * engine_stale); gpu_blocks sizes the shard's prefix index (at most
 * --index-blocks); a block_size other than --block-tokens is reported
 * once to hooks->block_size (the core does not log). CR_EINVAL naming the
 * field, nothing kept: a shard past the shards routed over ("shard must be
 * below the 8 shards, got 9"), at_s not finite, a count negative or
 * infinite (NAN is "not reported"), kv_usage outside 0..1, block_size
 * over CR_CORE_MAX_BLOCK_TOKENS, n_lora over CR_ENGINE_LORA_MAX or a name
 * without its NUL. CR_ENOMEM when the shard's place could not be made.
 * Thread-safe. */
cr_status cr_core_engine_load(cr_core *c, uint32_t shard, const cr_engine_load *load,
                              cr_error *err);

/* cr_router_home of the core's router: where an owner without warm slots
 * goes over n_shards. Thread-safe. */
uint32_t cr_core_home_shard(cr_core *c, int64_t owner, uint32_t n_shards);

/* cr_router_stats of the core's router at the core's now. */
void cr_core_route_stats_read(cr_core *c, cr_route_stats *out, double *work,
                              uint32_t max_shards);

/* ---- endpoints (core/endpoints.c) -------------------------------------------
 *
 * Without endpoints a shard is a number below the table's (or the
 * configured) shard count. Once a set is given (an endpoints file,
 * SetEndpoints) the shards are its slots (endpoints.h): routes go over its
 * n_slots, and every rule sends new requests only to usable slots
 * (cr_endpoints_usable): a DRAINING or DOWN endpoint takes none, and a
 * session whose last shard left service goes where the rule sends it
 * then (counted in cr_route_stats.moved[1]). A GONE or DOWN slot's prefix
 * index, KV-event map and outstanding work are dropped (its cache went
 * with it); a DRAINING one keeps them until it is gone. A slot reused by
 * a new endpoint starts empty. The installed table still decides who is
 * admitted; a placement on an unusable shard is skipped like a full one.
 *
 * Failures: an outcome with an error (CR_OUT_ERROR) counts against its
 * shard; cr_endpoints_config's fail_errors of them within fail_window_s
 * make it DOWN for down_s, then it is ACTIVE again (reported with by
 * "errors" and "retry"). */

struct cr_core_members_event {
    const char *by;  /* "set", "drain", "undrain", "errors", "retry"; with replicas
                      * "leader" (a follower adopted the leader's set) and "lead"
                      * (a new leader applied its own set: replicas below) */
    const char *id;  /* the endpoint a drain, undrain, errors or retry names;
                      * NULL for "set" */
    uint64_t version;          /* the set's now */
    uint32_t n_slots;
    cr_endpoints_change change;
    /* Sessions whose last shard left service with this change (drained,
     * down or removed): the least any rule must move. */
    uint64_t sessions_to_move;
    /* 1 when the set follows a leader's (cr_core_follow_endpoints): the
     * call was checked and changed nothing here; version and n_slots are
     * the routed set's, and the caller forwards the call to the leader. */
    int followed;
};

/* Replaces the endpoint set by v[0..n) (cr_endpoints_apply at the core's
 * now): CR_EINVAL as cr_endpoints_check names the first bad entry, or
 * "endpoints must not be empty" (removing the last endpoint is refused),
 * nothing changed then; CR_ENOMEM. *out (may be NULL) gets the change,
 * also reported to hooks->members. v is also kept as this process's own
 * set (replicas, below). While the set follows a leader's, it is checked
 * the same way and kept, but nothing routed changes (out->followed).
 * Thread-safe: changes are serialized, routes keep running on the set
 * they read. */
cr_status cr_core_set_endpoints(cr_core *c, const cr_endpoint_spec *v, size_t n,
                                cr_core_members_event *out, cr_error *err);

/* Drains (drain 1) or undrains (drain 0: ACTIVE again) the endpoint id:
 * CR_EINVAL "endpoint \"x\" is not in the set" (or no set yet: "no
 * endpoints are set"), nothing changed; draining a draining endpoint is no
 * error (nothing changes, version kept). *out and the hook as
 * cr_core_set_endpoints; while the set follows a leader's, checked only
 * (out->followed). Thread-safe. */
cr_status cr_core_drain_endpoint(cr_core *c, const char *id, int drain,
                                 cr_core_members_event *out, cr_error *err);

/* The current set with a reference (cr_endpoints_release), or NULL while
 * none was given. A DOWN endpoint whose retry time has passed is made
 * ACTIVE first (reported as "retry"). Thread-safe. */
const cr_endpoints *cr_core_endpoints(cr_core *c);

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
    /* Optional: the most bytes the caller's answer may take (its message
     * limit; 0 = none), and the caller's bound of its answer for a plan of
     * a size (wire.h's cr_wire_plan_bound; NULL = none). A fresh plan
     * whose answer could be larger, bounded from the admitted sessions and
     * their shard slots before any is placed, is refused up front:
     * CR_ENOMEM naming the sessions, the slots, the bound and the limit,
     * nothing placed or reported. fits below stays the exact check. */
    size_t max_answer_bytes;
    uint64_t (*answer_bound)(const cr_plan_size *s);
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
    cr_churn churn;        /* as in cr_core_plan_event */
    uint64_t churn_generation;
    cr_ref *hold;          /* private */
} cr_core_plan_result;

/* Plans and, when asked, installs. CR_EINVAL for bad input (both or neither
 * of rates and from_estimator; a bad rate, owner or config field, named);
 * CR_ENOMEM when memory runs out or fits refused; CR_ESTATE for install
 * while tables are external (cr_core_set_tables_external). State changes
 * only on success with install. Reports hooks->planned either way (but for
 * CR_EINVAL). Always a fresh plan (cr_planner_plan), whatever --replan
 * says: explicit rates give the seed's table, and a caller comparing with
 * the library gets the same bytes; only the replanner plans stable. The
 * churn is counted against the table the install replaced (installs are
 * serialized for that) or, without install, the current one. */
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
 * reported to hooks->selected on success. request_id (NULL or "" = none;
 * at most CR_LOOP_REQUEST_ID_MAX bytes) is checked first, then req:
 * CR_EINVAL with err naming the field ("request_id must be at most 128
 * bytes, got 200"); nothing reserved or kept then. A successful selection
 * that is not a dry run and has a request_id leaves a receipt (see "the
 * closed loop" below) and reports it to hooks->receipted. Thread-safe. */
cr_status cr_core_select(cr_core *c, const char *request_id, const cr_inject_request *req,
                         cr_inject_response *out, cr_error *err);

/* ClearReservations (an admin call): cr_injector_clear at the core's now
 * against the latest snapshot; which names the timelines (see
 * cr_inject_clear) and *out counts what was dropped. CR_EINVAL naming
 * "gpu" or "source", nothing cleared. Receipts and calibration are kept.
 * Thread-safe. */
cr_status cr_core_clear_reservations(cr_core *c, const cr_inject_clear *which,
                                     cr_inject_cleared *out, cr_error *err);

/* The latest node snapshot (a reference: release it with
 * cr_node_snapshot_release) and GPU 0's cost model against it. */
cr_status cr_core_profile(cr_core *c, const cr_node_snapshot **snap, cr_inject_model *model,
                          cr_error *err);

/* ---- the closed loop: receipts, outcomes, served hits -------------------- */

/* The receipt for request_id, copied into *out: 1 when found, 0 when not
 * (never kept, evicted, replaced, or an id NULL, empty or too long).
 * Thread-safe; one short lock. */
int cr_core_decision(cr_core *c, const char *request_id, cr_receipt *out);

/* Ingests a batch of n outcomes (ReportOutcome). Validates the whole batch
 * first, entry by entry in field order, against nothing but the installed
 * table's shard count (the configured n_shards before the first install)
 * and the latest snapshot's GPU count:
 *   n <= CR_LOOP_MAX_OUTCOMES; request_id <= CR_LOOP_REQUEST_ID_MAX bytes;
 *   mode 0, 1 or 2; source <= CR_INJECT_NAME_MAX bytes; has only CR_OUT_*
 *   bits; shard < shards; prompt_tokens <= CR_INJECT_MAX_TOKENS;
 *   cached_tokens <= prompt_tokens (when both given); every time finite
 *   and >= 0; prefilled_from <= prefilled_to <= CR_INJECT_MAX_TOKENS; gpu
 *   < GPUs. The first failure is CR_EINVAL with err naming entry and field
 *   ("outcomes[3].prefill_ms must be finite and >= 0, got -1") and nothing
 *   is applied. Then each entry, in order:
 *   match     by request_id to a receipt: the receipt gets the measured
 *             terms and their errors (see cr_receipt) and is reported to
 *             hooks->receipted. An unknown or absent id is no error: the
 *             entry counts as unmatched.
 *   calibrate cr_injector_observe (the injector ignores it unless
 *             --calibrate is on) with what is self-contained: prefill_ms
 *             with from and to, transfer_ms with transfer_bytes (and a
 *             source), load_ms with transfer_bytes, queue_wait_ms. For a
 *             matched entry the receipt supplies what the outcome omits:
 *             gpu, source, [s, L) = [C or 0 by the path used, P + K) and
 *             the bytes C * kv_bytes_per_token. gpu defaults to 0.
 *   served    with prompt_tokens and cached_tokens: hit and miss tokens,
 *             split by admitted (owner given and admitted in the table
 *             now) and by shard (given, else the owner's route)
 *   errors    matched: rolling error per path and term, and regret (see
 *             cr_loop_stats)
 *   release   with owner and shard, under --route-by bounded or live: the
 *             owner's oldest outstanding work on that shard is done (see
 *             RecordArrival)
 * An entry no step can use (no receipt, nothing to calibrate, no tokens,
 * no work released) is rejected: counted, the first one's reason kept in *out. A request_id
 * reported twice updates its receipt twice (the latest outcome wins there;
 * the rolling figures count both). O(1) per entry; thread-safe (short
 * locks per entry). */
cr_status cr_core_report(cr_core *c, const cr_outcome *o, size_t n, cr_outcome_counts *out,
                         cr_error *err);
/* The same from the client whose identity has tag caller: an outcome
 * releases only the outstanding work that caller routed (same request id
 * and same caller, or same owner, shard and caller). */
cr_status cr_core_report_as(cr_core *c, uint64_t caller, const cr_outcome *o, size_t n,
                            cr_outcome_counts *out, cr_error *err);

/* The closed loop's figures into *out; shards[0..max_shards-1] (may be
 * NULL with max_shards 0) get shards 0.. of at most out->n_shards, and
 * gpus[0..max_gpus-1] each GPU's cr_injector_calibration (of at most
 * out->n_gpus; CR_PROBE_MAX_GPUS is enough). Thread-safe; one short lock
 * for the figures, O(n_shards + n_gpus). */
void cr_core_loop_stats_read(cr_core *c, cr_loop_stats *out, cr_loop_shard_stats *shards,
                             uint32_t max_shards, cr_inject_calibration *gpus, uint32_t max_gpus);

/* ---- state: what survives a restart (core/state/) --------------------------
 *
 * With --state-file PATH the core keeps in PATH the estimator's owners
 * (each one's decayed count and how long before the snapshot its last
 * arrival was), the installed table with its generation, and the
 * calibration (inject.h); not receipts, reservations, outstanding routes or
 * figures, which are seconds long or describe the past process. Written
 * atomically: PATH.tmp in the same folder, write, fsync, rename over PATH,
 * fsync the folder; a crash at any point leaves the previous PATH whole.
 *
 * The file's layout and the fingerprint of the configuration it was
 * written under are core/state/state.h's.
 *
 * Restore (cr_core_new): no file is a clean start (CR_STATE_NONE); a file
 * that is truncated, corrupt (checksum), of another version or another
 * fingerprint, or inconsistent anywhere is refused (CR_STATE_REJECTED,
 * the reason naming what), renamed to PATH.corrupt (replacing an older
 * one) and the core starts empty; never half-restored. Rates decay by the
 * wall time that passed: an owner's last arrival is placed age + (wall now
 * - wall written) seconds before the core's now (a wall clock that went
 * back counts as no time), so its rate is exactly what it would read had
 * the sidecar run on without arrivals. Under the calls clock rates have no
 * time: counts are restored as they were. More owners than --max-owners
 * keeps the highest rates. The restored table keeps its generation;
 * installs count on from it.
 *
 * Tests stall a snapshot half-written through core_test.h. */

typedef enum cr_state_result {
    CR_STATE_RESTORED, /* restore: the file's state is the core's now */
    CR_STATE_NONE,     /* restore: no file, a clean start */
    CR_STATE_REJECTED, /* restore: refused and moved aside; the core starts empty */
    CR_STATE_WRITTEN,  /* snapshot: written */
    CR_STATE_FAILED    /* snapshot: not written; the previous file stays */
} cr_state_result;

struct cr_core_state_event {
    cr_state_result result;
    const char *path;
    const char *by;       /* "start" (restore), "ticker", "call", "stop" */
    const char *error;    /* REJECTED, FAILED: why; NULL otherwise */
    const char *moved_to; /* REJECTED: PATH.corrupt; NULL when it could not be
                           * moved (error then says why too) */
    double seconds;       /* the whole restore or snapshot */
    uint64_t bytes;       /* the file's size */
    uint64_t owners, placements, generation; /* what it held */
    double age_s;         /* RESTORED: wall seconds since it was written */
};

/* Writes the state file now (atomically, as above) and reports it to
 * hooks->state with by "call". CR_EINVAL without a state file; CR_ENOMEM
 * when out of memory or the file cannot be written (err names the path
 * and the system's reason; the previous file stays). Thread-safe:
 * snapshots are serialized, every other call keeps running. */
cr_status cr_core_snapshot(cr_core *c, cr_error *err);

/* Checks len bytes as a state file for this core (everything restore
 * checks, the fingerprint against c's configuration) and changes nothing.
 * CR_EINVAL with err naming the reason, CR_ENOMEM out of memory. Bounded
 * as the loader is. Thread-safe. */
cr_status cr_core_state_check(cr_core *c, const void *bytes, size_t len, cr_error *err);

/* ---- replicas: what replica.h's sync thread needs (core/cluster.c) -------
 *
 * Several sidecars over one state backend each record arrivals locally; a
 * background thread pushes the owners each touched, the leader plans from
 * the merged rates and every replica installs the leader's table with the
 * leader's generation. These calls are that thread's view of the core. */

/* Starts keeping the owners cr_core_record touches: at most max_entries
 * (>= 1) owners, repeats counted, between two cr_core_touched_take calls
 * (8 B each, allocated here; appended on the hot path, made distinct at
 * the take); past that it only remembers it overflowed. Call once, before
 * the core serves. CR_ENOMEM when out of memory, CR_EINVAL when already
 * tracking. */
cr_status cr_core_track_touched(cr_core *c, size_t max_entries, cr_error *err);

/* The raw estimator state (cr_estimator_lookup: count and t_last on the
 * core's clock) of every owner touched since the last take, in a malloc'd
 * array of *n (the caller frees it; NULL with *n 0 when none), and empties
 * the set. *all = 1 when the set overflowed (or memory ran out) since the
 * last take: the array then holds every tracked owner
 * (cr_estimator_export), so nothing touched is missed. Owners touched and
 * since evicted are left out. Thread-safe. */
cr_estimator_entry *cr_core_touched_take(cr_core *c, size_t *n, int *all);

/* Every tracked owner's raw state (cr_estimator_export); NULL when out of
 * memory. */
cr_estimator_entry *cr_core_export(cr_core *c, size_t *n);

/* Plans rates (the cluster's merged rates, any order, each owner once) as
 * the replanner would: the configured planner and --replan mode, from the
 * installed table. Installs nothing. *out for the caller (cr_table_free).
 * Errors as cr_planner_replan. Thread-safe. */
cr_status cr_core_cluster_plan(cr_core *c, const cr_session_rate *rates, size_t n,
                               cr_table **out, cr_error *err);

/* Makes t (ownership taken, even on error) the installed table with
 * generation: every route from then on reads it, and later local installs
 * count on from generation. Generations only move forward: CR_ESTATE when
 * generation is not above the installed one's, CR_EINVAL outside
 * 1..CR_CORE_MAX_GENERATION, nothing installed; CR_ENOMEM when out of
 * memory. Thread-safe. */
cr_status cr_core_install_as(cr_core *c, cr_table *t, uint64_t generation, cr_error *err);

/* cr_core_install_as for a table this core planned (cr_core_cluster_plan)
 * and published as generation: also reported to hooks->planned as an
 * installed plan by "leader", seconds from started_s (cr_core_now read
 * before the cluster plan) to the table being current, so they include the
 * publish in between; churn against the table the install replaced. A
 * follower's install of a fetched table (cr_core_install_as) is no plan:
 * not reported. Errors and thread safety as cr_core_install_as. */
cr_status cr_core_install_planned(cr_core *c, cr_table *t, uint64_t generation,
                                  double started_s, cr_error *err);

/* Tables external: while on, the installed table comes only from
 * cr_core_install_as (a replica installs its leader's published table, so
 * every replica routes by the same one). cr_core_plan with install is then
 * refused with CR_ESTATE, whatever the rest of the request, before anything
 * is planned, reported or installed: err "install=true with
 * --state-backend: every replica routes by the leader's published table
 * (plan with install=false)". Plans without install go on as before. The
 * replanner (cr_core_start's thread, cr_core_tick) plans nothing while on:
 * the leader's cluster plans replace it. Off at cr_core_new. Thread-safe;
 * calls that start after it returns see it. */
void cr_core_set_tables_external(cr_core *c, int on);

/* The endpoint set with replicas (core/adopt_endpoints.c). The leader's
 * set is the cluster's: a follower routes by the set it adopts from the
 * leader, slot for slot, and keeps what it is given itself (its endpoints
 * file, SetEndpoints) as its own set, checked but not routed; a replica
 * that takes the lead applies its own set onto the cluster's (so no slot
 * is renumbered) and that becomes what it publishes. A follower marks no
 * endpoint down and retries none: the leader's detector decides and its
 * changes come adopted. */

/* follow 1: from now on the set follows a leader's (adopted only; the
 * changes above are checked, kept and answered out->followed). follow 0:
 * this replica leads: its own set, when it has one, is applied onto the
 * routed set (cr_endpoints_apply, reported with by "lead"; *out may be
 * NULL) and the failure detector runs again. CR_OK when nothing was to
 * apply; else cr_core_set_endpoints's errors (the routed set then stays,
 * and it leads with it). Thread-safe. */
cr_status cr_core_follow_endpoints(cr_core *c, int follow, cr_core_members_event *out,
                                   cr_error *err);

/* Makes the leader's set, slots[0..n) (since_s and down_until_s on this
 * core's clock) under version, the routed set: cr_endpoints_adopt's
 * checks (CR_EINVAL naming the slot and field), then the path every change
 * takes (the router's mask, what a departed engine leaves; a slot that
 * names another endpoint than before counts as departed), reported to
 * hooks->members with by "leader". Versions only move forward: CR_ESTATE
 * when version is not above the last adopted one, nothing changed.
 * CR_ENOMEM. Thread-safe. */
cr_status cr_core_adopt_endpoints(cr_core *c, const cr_endpoint *slots, uint32_t n,
                                  uint64_t version, cr_core_members_event *out, cr_error *err);

/* Puts a replica's own previous counts (ascending owners, t_last on the
 * core's clock) into the estimator when it tracks no owner yet (a restart):
 * cr_estimator_import's checks and errors. Only its own: merged counts
 * would be pushed back as its own and counted twice. Not concurrent with
 * cr_core_record. */
cr_status cr_core_seed(cr_core *c, const cr_estimator_entry *v, size_t n, cr_error *err);

/* The configured shard count (--n-shards), which routes go over before
 * the first table. */
uint32_t cr_core_n_shards(const cr_core *c);

/* The estimator's configuration (its clock and half-life). */
const cr_estimator_config *cr_core_estimator_config(const cr_core *c);

/* ---- scrape-time figures ------------------------------------------------ */

typedef struct cr_core_stats {
    uint64_t tracked_owners, evictions;
    uint64_t generation; /* of the installed table; 0 before the first */
    size_t admitted;
    double admitted_rate, unadmitted_rate, imbalance; /* 0, 0, 1 before */
} cr_core_stats;

void cr_core_stats_read(cr_core *c, cr_core_stats *out);

#endif
