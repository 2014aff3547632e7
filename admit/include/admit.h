/* cacheroute admit: admission at the door. Before a request is sent on,
 * the door weighs the route rule's predicted TTFT against the request's
 * objective and says route (where), hold (queue it) or shed (429).
 * docs/admission.md is the design; here are the contracts.
 *
 *   objectives  a request's objective: priority (>= 0 critical, < 0
 *               sheddable), TTFT SLO (0 = none), fairness id; a table of
 *               named ones (name -> priority, default SLO) parsed here
 *   decision    cr_admit_decide: pure, over the rule's ranked candidates
 *   queue       bounded (requests, per fairness id, held bytes, wait);
 *               strict priorities, deficit round robin over fairness ids
 *               within one; thread-safe (one mutex)
 *   counters    admitted, queued, shed, dropped per objective and per
 *               fairness id (a bounded table, overflow under "other"), SLO
 *               attainment from outcomes
 *
 * Time is the caller's clock in seconds (the core's, virtual in the
 * replay). Uses common.h only: no router, no core; the core calls it
 * around the route (core.h). */
#ifndef CR_ADMIT_H
#define CR_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define CR_ADMIT_NAME_MAX 63        /* bytes of an objective's or fairness id's name */
#define CR_ADMIT_MAX_OBJECTIVES 64  /* entries in the table */
#define CR_ADMIT_MAX_SLO_MS 86400000.0 /* a day */
#define CR_ADMIT_NO_OBJECTIVE UINT32_MAX /* a request with no named objective */
#define CR_ADMIT_MAX_CANDIDATES 9   /* the rule's pick and its alternatives */

/* ---- objectives ------------------------------------------------------------ */

/* One named objective of the table. */
typedef struct cr_admit_objective {
    char name[CR_ADMIT_NAME_MAX + 1]; /* NUL-terminated, [A-Za-z0-9_.-], unique */
    int32_t priority;                 /* >= 0 critical, < 0 sheddable */
    double slo_ms;                    /* default TTFT SLO; 0 = none */
} cr_admit_objective;

/* Parses the table of named objectives from its text form, the value of
 * the config's objectives option: entries "name:priority[:slo_ms]"
 * separated by commas (spaces around each part ignored), e.g.
 * "interactive:0:2000,batch:-1:30000". An empty text is an empty table.
 * priority an integer in [-1000, 1000], slo_ms a number in
 * [0, CR_ADMIT_MAX_SLO_MS] (absent = 0, none). At most
 * CR_ADMIT_MAX_OBJECTIVES entries into out[] (room for that many); *n
 * their count. CR_EINVAL naming the entry and field, nothing kept:
 * "objectives[1] (batch): priority must be an integer in [-1000, 1000],
 * got \"x\"", "objectives[2]: name must be 1 to 63 of [A-Za-z0-9_.-], got
 * \"\"", "objectives[3] (a): name repeats objectives[0]". Pure. */
cr_status cr_admit_objectives_parse(const char *text, cr_admit_objective *out, size_t *n,
                                    cr_error *err);

/* The index of the objective called name (len bytes) in t[0..n), or
 * CR_ADMIT_NO_OBJECTIVE. Pure. */
uint32_t cr_admit_objective_find(const cr_admit_objective *t, size_t n, const char *name,
                                 size_t len);

/* What the door knows of one request. A request with neither a priority
 * nor an SLO given (has_objective 0) is never looked at: it is routed as
 * the rule says and counted nowhere. */
typedef struct cr_admit_ask {
    int has_objective;  /* priority or SLO given (by name, field or header) */
    uint32_t objective; /* table index, or CR_ADMIT_NO_OBJECTIVE */
    int32_t priority;   /* >= 0 critical, < 0 sheddable */
    double slo_ms;      /* TTFT SLO; 0 = none */
    const char *fairness; /* fairness id (tenant), fairness_len bytes; NULL/0 = "" */
    size_t fairness_len;
    int can_wait;       /* its caller waits for a dispatch: it may be held */
    int spare;          /* a critical request's: some shard had no queue when
                         * it was placed, so the cluster had room and a miss
                         * is its placement's, not the load's (the pressure
                         * counts it 0) */
} cr_admit_ask;

/* ---- the decision ------------------------------------------------------------- */

/* One endpoint the rule would send the request to, with its prediction. */
typedef struct cr_admit_candidate {
    uint32_t shard;
    double wait_ms;     /* predicted queue wait there */
    double ttft_ms;     /* predicted: queue wait + prefill there */
} cr_admit_candidate;

typedef enum cr_admit_verdict {
    CR_ADMIT_ROUTE, /* send it to candidate *pick */
    CR_ADMIT_HOLD,  /* sheddable, nothing meets its bound now: queue it */
    CR_ADMIT_SHED   /* sheddable and it cannot wait: 429 now */
} cr_admit_verdict;

/* The verdict's wire word ("route", "queued", "shed"). Pure. */
const char *cr_admit_verdict_name(cr_admit_verdict v);

/* The door's decision for a request given the rule's candidates c[0..n)
 * (c[0] the rule's own pick, the rest its alternatives, best first):
 *   - no objective, or no SLO and critical: ROUTE c[0] (the rule's pick)
 *   - a candidate meets the request when its ttft_ms is within the SLO
 *     (none: any) and, for a sheddable request, its wait_ms within
 *     budget_ms (the door's saturation bound: sheddable work joins no
 *     queue longer than that, so the critical traffic keeps its room; 0 =
 *     none): ROUTE the first candidate, in rank order, that meets it (so
 *     c[0] whenever it does: with no overload routes are the rule's)
 *   - critical and none meets it: ROUTE c[0]; a critical request is never
 *     held or shed
 *   - sheddable and none meets it: HOLD when can_wait, else SHED.
 * waited_ms (what it waited at the door already) counts against its SLO.
 * n == 0 (no usable endpoint): ROUTE with *pick 0 for the caller to
 * answer as the rule did. *pick is the candidate's index. Pure. */
cr_admit_verdict cr_admit_decide(const cr_admit_ask *q, const cr_admit_candidate *c, size_t n,
                                 double budget_ms, double waited_ms, int can_wait,
                                 uint32_t *pick);

/* ---- the door: queue and counters -------------------------------------------- */

/* Its bounds; every one a flag (admitwire's rows) and a metric. */
typedef struct cr_admit_config {
    uint32_t max_queued;     /* requests held at once, all ids; 0 = no queue (shed at once) */
    uint32_t max_per_id;     /* held at once per fairness id */
    uint64_t max_bytes;      /* held bytes at once (the requests' copies) */
    double max_wait_ms;      /* the longest a request is held; then dropped (429) */
    double budget_ms;        /* the longest queue sheddable work joins (cr_admit_decide) and
                              * held work is dispatched to; 0 = none */
    double pressure;         /* the door acts once the share of critical requests that
                              * queues make miss their SLO (cr_admit_pressure) is above
                              * this, in [0, 1]; 0 = it always acts, by the budget alone */
    double pressure_off;     /* ... and stops once it is back at or below this, in
                              * [0, pressure]; 0 = half of pressure */
    double pressure_tau_s;   /* that share's time constant, > 0 */
    double quantum;          /* deficit round robin: work credited per turn, > 0 */
    uint32_t tracked_ids;    /* fairness ids counted apart; the rest are "other" */
    int meet_slo;            /* CR_ADMIT_MEET_*: when a request with an SLO goes
                              * where it is predicted to meet it, the rule's pick
                              * predicted to miss it and another shard not (the
                              * core's door) */
} cr_admit_config;

/* cr_admit_config.meet_slo: never (the rule's pick, whatever its SLO);
 * while the door acts (cr_admit_acts), so that an idle door changes no
 * route; or always, an idle door too. */
enum { CR_ADMIT_MEET_OFF, CR_ADMIT_MEET_PRESSED, CR_ADMIT_MEET_ALWAYS };

/* The defaults: 1024 held, 256 per id, 64 MiB, 30 s wait, budget 0 (set
 * to half the tightest critical SLO of the table by the caller), pressure
 * on above 0.1 and off at 0.05, over 120 s, quantum 1
 * (the items' cost unit: a request each unless the caller weighs them),
 * 64 tracked ids, meet_slo CR_ADMIT_MEET_PRESSED. */
void cr_admit_config_default(cr_admit_config *cfg);

/* CR_EINVAL naming the field (max_per_id <= max_queued, finite wait and
 * budget >= 0, quantum > 0, tracked_ids 1..4096, meet_slo a
 * CR_ADMIT_MEET_*). Pure. */
cr_status cr_admit_config_check(const cr_admit_config *cfg, cr_error *err);

/* One held request: what the caller needs to dispatch it later. */
typedef struct cr_admit_item {
    uint64_t handle;     /* the caller's: which request this is */
    int32_t priority;    /* < 0 (only sheddable requests are held) */
    uint32_t objective;  /* table index or CR_ADMIT_NO_OBJECTIVE */
    uint32_t id;         /* fairness id's counter slot (cr_admit_offer fills it) */
    double slo_ms;
    double cost;         /* its work for the round robin (> 0; e.g. 1, or tokens) */
    uint64_t bytes;      /* what holding it keeps in memory */
    double service_ms;   /* its predicted prefill (the caller's; 0 = unknown) */
    double arrived_s;    /* when it reached the door */
    double deadline_s;   /* dropped after: arrival + min(max wait, SLO less
                          * service_ms: past that it cannot meet its SLO) */
} cr_admit_item;

typedef struct cr_admit cr_admit;

/* A door with cfg's bounds over the table t[0..n) (copied). NULL with err
 * naming the field on a bad config, or out of memory. */
cr_admit *cr_admit_new(const cr_admit_config *cfg, const cr_admit_objective *t, size_t n,
                       cr_error *err);
void cr_admit_free(cr_admit *a); /* NULL is ignored */

/* The bounds it was made with, pressure_off 0 resolved to half of
 * pressure. */
const cr_admit_config *cr_admit_config_of(const cr_admit *a);

/* The table it was made with. */
const cr_admit_objective *cr_admit_objectives(const cr_admit *a, size_t *n);

/* The door's verdict for q at now over the candidates. With a pressure
 * bound the door is idle until it is pressed (cr_admit_pressure): every
 * request is ROUTE at the first candidate (the rule's pick), exactly as
 * without a door. Pressed, or with no pressure bound, or while anything
 * of q's priority or above is held: cr_admit_decide with the config's
 * budget and the wait q has left, a sheddable request held whenever
 * pressed, then the queue:
 *   ROUTE  counted admitted; but a sheddable request is held instead
 *          (when there is room) while any request of its priority or above
 *          is held: a new arrival never passes a held one
 *   HOLD   pushed as *it (handle, cost and bytes the caller's; the rest
 *          filled here) when every bound has room (requests, per id,
 *          bytes) and its deadline is ahead; counted queued
 *   SHED   otherwise; counted shed
 * per objective and per fairness id. Without a queue (max_queued 0)
 * HOLD is SHED. Thread-safe. */
cr_admit_verdict cr_admit_offer(cr_admit *a, const cr_admit_ask *q, const cr_admit_candidate *c,
                                size_t n, double now, cr_admit_item *it, uint32_t *pick);

/* The door's overload signal: the share of critical requests with an SLO
 * that the queues make miss it, as predicted at the rule's pick (the
 * candidates' first, given to cr_admit_offer): 1 when its ttft_ms is over
 * the SLO while its prefill alone (ttft_ms - wait_ms) is within it, else
 * 0; a request too long for its SLO on an idle engine says nothing of the
 * queues and is no sample. Averaged with weight 1 - exp(-dt /
 * pressure_tau_s) for a sample dt after the one before, from 0 at the
 * first sample (which weighs nothing): a fresh door has seen no overload.
 * The door is pressed from when it rises above the config's pressure
 * until it falls to pressure_off; pressed, no sheddable request is routed,
 * nor dispatched before its last budget (cr_admit_next): the critical
 * traffic already misses for the queues, and sheddable work would
 * lengthen them. Thread-safe. */
double cr_admit_pressure(cr_admit *a);

/* 1 when a request of priority would be held behind one already held
 * (one of its priority or above is): cr_admit_offer holds or sheds it
 * whatever the candidates, so the caller need not ask the rule for any.
 * Thread-safe. */
int cr_admit_behind(cr_admit *a, int32_t priority);

/* 1 when cr_admit_offer would weigh the candidates of a request of
 * priority now, rather than route the pick as if there were no door: no
 * pressure bound, the door pressed, or one of its priority or above
 * held. What the core asks before it moves a pick to meet an SLO, so
 * that an idle door changes no route. Thread-safe. */
int cr_admit_acts(cr_admit *a, int32_t priority);

/* The next held request to dispatch at now: the highest priority held,
 * and within it the fairness id whose turn it is by deficit round robin
 * (each id is credited quantum per turn and sends its head while its
 * credit covers the head's cost, so ids share dispatches' work equally
 * whatever their arrival rates). While the door is pressed that head is
 * asked only once its deadline is within the budget of now (its last
 * chance). When ready(ctx, item) says yes (1) it is taken out into *out
 * and 1 returned (counted admitted); no (0): nothing changes, 0 returned
 * (the caller tries again when a predicted wait falls). 0 when nothing
 * is held. ready runs under the door's lock: it must not call the door.
 * Thread-safe. */
int cr_admit_next(cr_admit *a, double now, int (*ready)(void *ctx, const cr_admit_item *it),
                  void *ctx, cr_admit_item *out);

/* Takes out up to max held requests whose deadline is before now into
 * out[] (any order), counted dropped; how many. Call until it answers
 * below max. Thread-safe. */
size_t cr_admit_expire(cr_admit *a, double now, cr_admit_item *out, size_t max);

/* Takes out the first held request that match(ctx, item) says 1 of
 * (its caller left: a closed stream) into *out, counted dropped; 0 when
 * none matches (it was dispatched or dropped already). match runs under
 * the door's lock: it must not call the door. Thread-safe. */
int cr_admit_cancel(cr_admit *a, int (*match)(const void *ctx, const cr_admit_item *it),
                    const void *ctx, cr_admit_item *out);

/* An outcome: a request of objective and fairness id (as asked) measured
 * ttft_ms; counts toward its objective's attainment (ttft <= its SLO)
 * when slo_ms > 0. Thread-safe. */
void cr_admit_outcome(cr_admit *a, const cr_admit_ask *q, double ttft_ms);

/* ---- figures ------------------------------------------------------------------ */

typedef struct cr_admit_counts {
    uint64_t admitted; /* routed at once, or dispatched from the queue */
    uint64_t queued;   /* held (each is later admitted or dropped) */
    uint64_t shed;     /* refused at once */
    uint64_t dropped;  /* held past its deadline, refused then; or its
                        * caller left while it was held (cr_admit_cancel) */
    uint64_t outcomes, met; /* outcomes with an SLO; of them within it */
} cr_admit_counts;

typedef struct cr_admit_id_counts {
    char name[CR_ADMIT_NAME_MAX + 1]; /* the fairness id; "other" for the overflow */
    cr_admit_counts c;
    uint32_t held;     /* held now */
} cr_admit_id_counts;

typedef struct cr_admit_stats {
    uint32_t held;       /* requests held now */
    uint64_t held_bytes; /* their bytes */
    double oldest_s;     /* the longest any has been held, at the read's now */
    double pressure;     /* cr_admit_pressure */
    int pressed;         /* the door acts (cr_admit_offer) */
    /* per objective: [0..n_objectives) the table's, [n_objectives] none */
    size_t n_objectives;
    cr_admit_counts objective[CR_ADMIT_MAX_OBJECTIVES + 1];
} cr_admit_stats;

/* The figures at now; ids[0..max_ids) get the tracked fairness ids, the
 * overflow "other" last when anything was counted there; *n_ids their
 * count (at most max_ids). Thread-safe. */
void cr_admit_stats_read(cr_admit *a, double now, cr_admit_stats *out, cr_admit_id_counts *ids,
                         size_t max_ids, size_t *n_ids);

#endif
