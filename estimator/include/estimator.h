/* cacheroute rate estimator: per-session request rate, updated per arrival.
 *
 * Each owner keeps an exponentially decayed arrival count: constant-size state
 * (16 bytes plus table slack: 21..32 bytes an owner), no per-arrival
 * history. Two clocks:
 *
 *   CR_CLOCK_SECONDS  a real rate in arrivals per second: rate(t) is the sum
 *                     over the owner's arrivals i of w_i ln(2)/H
 *                     2^(-(t - t_i)/H). A steady Poisson stream of lambda/s
 *                     converges to lambda; idle owners decay. Kept by forward
 *                     decay: N = sum w_i ln(2)/H 2^((t_i - epoch)/H) per
 *                     owner with one epoch per partition, rate(t) =
 *                     N 2^(-(t - epoch)/H); a partition's Ns are
 *                     renormalised onto a new epoch (O(partition)) when an
 *                     arrival comes more than 512 half-lives after it: once
 *                     per 2.8 hours at H = 20 s, on nearly every arrival
 *                     with a half-life far below the arrivals' spacing.
 *   CR_CLOCK_CALLS    the seed's count: r = r * 0.5^(1/H) + w per record(),
 *                     H counted in the owner's own calls; rate() = r.
 *
 * w is the arrival's weight: 1 for cr_estimator_record, so a rate counts
 * requests; with cr_estimator_record_weighted a rate is in the weight's
 * unit per second (per call), e.g. prompt tokens/s when each arrival weighs
 * its prompt tokens: a steady stream of lambda arrivals/s of weight w
 * converges to lambda * w.
 *
 * Times are seconds on any monotonic clock the caller chooses (tests inject
 * one). An arrival stamped earlier than others (two threads racing) counts
 * at its own time. A rate read at t before its partition's epoch (the
 * latest renormalisation, or the first arrival into an empty partition,
 * never later than the clock) is its rate at the epoch: never grown.
 *
 * Memory is bounded by max_owners: a new owner arriving at a full table
 * takes the place of the coldest owner on its own lookup walk when that
 * one is no hotter than the newcomer just after its arrival, and otherwise
 * evicts an owner of about the lowest rate among a few neighbours in its
 * partition, found by a CLOCK hand that sweeps the partition (the cost of
 * an eviction is a short run of slots whatever the table's size; owners are
 * compared by their Ns, exact, no exp2). The owner being recorded is never
 * the one evicted, and owners hotter than most survive any flood of new ids.
 *
 * Thread safety: every function may be called concurrently on one estimator;
 * owners are spread over lock-striped partitions, so threads recording
 * different owners rarely contend.
 */
#ifndef CR_ESTIMATOR_H
#define CR_ESTIMATOR_H

#include <stddef.h>
#include <stdint.h>

#include "planner.h"

typedef enum cr_clock { CR_CLOCK_SECONDS = 0, CR_CLOCK_CALLS = 1 } cr_clock;

/* Defaults and bounds: the rows of cr_estimator_options. */
typedef struct cr_estimator_config {
    cr_clock clock;      /* --estimator-clock */
    double half_life;    /* H: seconds, or calls in CR_CLOCK_CALLS; --half-life */
    uint32_t window;     /* --window; accepted for seed compatibility, unused */
    uint64_t max_owners; /* --max-owners */
} cr_estimator_config;

/* The estimator's option rows (--half-life, --window, --estimator-clock,
 * --max-owners), on cr_estimator_config; group "estimator". */
extern const cr_option_table cr_estimator_options;

typedef struct cr_estimator cr_estimator;

/* The rows' defaults into cfg. */
void cr_estimator_config_default(cr_estimator_config *cfg);

/* Checks cfg against its rows' bounds; on failure fills err naming the
 * field and value ("half_life must be finite and > 0, got 0"). */
cr_status cr_estimator_config_check(const cr_estimator_config *cfg, cr_error *err);

/* Returns a new estimator, or NULL with err filled (bad config, out of memory). */
cr_estimator *cr_estimator_new(const cr_estimator_config *cfg, cr_error *err);
void cr_estimator_free(cr_estimator *e);

/* Records one arrival of owner at time now; returns its rate just after.
 * The same as cr_estimator_record_weighted with weight 1, bit for bit. */
double cr_estimator_record(cr_estimator *e, int64_t owner, double now);

/* Records one arrival of owner of weight w at time now (see the clocks
 * above); returns its rate just after. w must be finite and > 0: callers
 * check it (cr_core_record names a bad one). An increment too small to
 * represent counts as the smallest normal double, so a tracked owner's
 * count is never 0. */
double cr_estimator_record_weighted(cr_estimator *e, int64_t owner, double w, double now);

/* Records n arrivals at now: owners[i] of weight weights[i] (weights NULL:
 * 1 each; each as for cr_estimator_record_weighted). rates_out, when not
 * NULL, has n places: rates_out[i] gets the rate just after arrival i.
 * Without other threads recording meanwhile, the same as n calls of
 * cr_estimator_record_weighted in order, bit for bit: an owner listed twice
 * sees its own arrivals in order. Owners are grouped by partition, up to
 * 1024 at a time, so each partition's lock is taken once per group and
 * home slots are prefetched ahead of their probes; while the table is
 * filling up to max_owners (and in tables with an empty partition) the
 * arrivals are recorded one by one instead. No allocation: about 10 KB of
 * stack. */
void cr_estimator_record_batch(cr_estimator *e, const int64_t *owners, const double *weights,
                               size_t n, double now, double *rates_out);

/* Current rate of owner at now; 0 for an owner not tracked. */
double cr_estimator_rate(const cr_estimator *e, int64_t owner, double now);

/* cr_estimator_rate of each of n owners into rates_out (n places), grouped
 * by partition as cr_estimator_record_batch is. */
void cr_estimator_rate_batch(const cr_estimator *e, const int64_t *owners, size_t n,
                             double now, double *rates_out);

/* Snapshot of every tracked owner's rate at now, sorted by owner id. Returns a
 * malloc'd array of *n entries (the caller frees it), or NULL on allocation
 * failure. Partitions are copied one at a time, so arrivals racing with the
 * snapshot may or may not be in it. Sorted by radix, O(n); peak memory
 * 32 bytes per owner (the answer and the sort's scratch). */
cr_session_rate *cr_estimator_rates(const cr_estimator *e, double now, size_t *n);

/* Drops owner; returns 1 if it was tracked, 0 otherwise. */
int cr_estimator_forget(cr_estimator *e, int64_t owner);

/* ---- saving and restoring (the state file) ---- */

/* One owner's raw state: its decayed count as of t_last (seconds on the
 * estimator's clock; unused, 0, in calls mode). rate(t) = count *
 * 2^(-(t - t_last)/H) in seconds mode, count in calls mode. Exported,
 * t_last is the owner's partition's epoch, not its last arrival: no later
 * than the latest arrival into the partition, the same across many
 * arrivals, moved on at a renormalisation (so count, the rate at t_last,
 * may be up to 2^512 times the rate now). */
typedef struct cr_estimator_entry {
    int64_t owner;
    double count;
    double t_last;
} cr_estimator_entry;

/* Every tracked owner's raw state, sorted by owner id: a malloc'd array of
 * *n entries (the caller frees it), or NULL when out of memory. Racing
 * arrivals may or may not be in it, as for cr_estimator_rates. */
cr_estimator_entry *cr_estimator_export(const cr_estimator *e, size_t *n);

/* Puts n entries into an estimator that tracks no owner yet, each as an
 * arrival of count at t_last would be (no eviction; a count that decayed
 * below the smallest double reads as it). Checked first, nothing inserted
 * on error: CR_EINVAL naming the entry unless the estimator is empty, n <=
 * max_owners, owners strictly ascend, each count is finite and > 0 and
 * each t_last finite; CR_ENOMEM (the estimator left empty) when out of
 * memory. Not concurrent with other calls on e. */
cr_status cr_estimator_import(cr_estimator *e, const cr_estimator_entry *v, size_t n,
                              cr_error *err);

uint64_t cr_estimator_size(const cr_estimator *e);      /* owners tracked now */
uint64_t cr_estimator_evictions(const cr_estimator *e); /* since creation */
const cr_estimator_config *cr_estimator_get_config(const cr_estimator *e);

/* One owner's raw state into *out: 1 when owner is tracked, 0 (out
 * untouched) when not. For replicas, which push each touched owner's own
 * count and t_last. Thread-safe; one partition lock. */
int cr_estimator_lookup(const cr_estimator *e, int64_t owner, cr_estimator_entry *out);

#endif
