/* cacheroute planner: which sessions get a warm slot, and on which shards.
 *
 * A plan admits sessions by decreasing request rate until the warm-slot
 * budget (n_shards * warm_slots_per_shard) is spent, gives each admitted
 * session kb = min(R, max(1, ceil(rate / qcap))) shards, and places sessions
 * in admission order on the kb least-loaded shards (LPT). The arithmetic is
 * done in doubles in a fixed order, so the same input gives bit-identical
 * tables on every run and platform.
 *
 * The result is an immutable routing table. Nothing here takes locks: a
 * table may be read from any number of threads once built.
 */
#ifndef CR_PLANNER_H
#define CR_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"  /* cr_status, cr_error */
#include "options.h" /* cr_option_table */

#define CR_MAX_SHARDS 65536u
/* A session's rate at most: far above any fleet's, and low enough that the
 * sums over every session a plan can hold (2^32 of them) stay finite. */
#define CR_PLAN_MAX_RATE 1e15

/* Defaults and bounds: the rows of cr_planner_options. */
typedef struct cr_planner_config {
    uint32_t n_shards;           /* R, --n-shards */
    double qcap;                 /* requests/s one shard serves, --qcap */
    double warm_slots_per_shard; /* W, --warm-slots-per-shard */
} cr_planner_config;

/* The planner's option rows (--n-shards, --qcap, --warm-slots-per-shard),
 * on cr_planner_config; group "planner". */
extern const cr_option_table cr_planner_options;

/* The rows' defaults into cfg. */
void cr_planner_config_default(cr_planner_config *cfg);

typedef struct cr_session_rate {
    int64_t owner;
    double rate; /* requests per second (or per call in calls mode); >= 0 */
} cr_session_rate;

typedef struct cr_placement {
    int64_t owner;
    uint64_t first;           /* index of this owner's first shard in the table's shard list */
    uint32_t kb;              /* number of shards held */
    uint32_t preferred_shard; /* own shard with the smallest (final load, id) */
} cr_placement;

typedef struct cr_table cr_table;

/* Checks a config against its rows' bounds; on failure fills err (field
 * and value named as "config.<field>") and returns CR_EINVAL. */
cr_status cr_planner_config_check(const cr_planner_config *cfg, cr_error *err);

/* Plans n sessions. On success stores a new table in *out (the caller frees it
 * with cr_table_free) and returns CR_OK. On failure *out is NULL, err names the
 * first offending entry ("rates[3].rate must be finite and >= 0, got -1",
 * "rates[0].rate must be at most 1e+15, got 1e+16",
 * "rates[4].owner 7 duplicates rates[1].owner") or config field, and nothing is
 * allocated. rates is only read, and may be freed once this returns.
 * Thread-safe: no shared state. */
cr_status cr_planner_plan(const cr_planner_config *cfg, const cr_session_rate *rates,
                          size_t n, cr_table **out, cr_error *err);

/* What a plan holds, known after admission and before placement (the
 * costly part: O(slots log R) time, 4 bytes a slot). */
typedef struct cr_plan_size {
    uint32_t n_shards; /* R */
    size_t sessions;   /* admitted */
    uint64_t slots;    /* the sum of the admitted sessions' kb */
} cr_plan_size;

/* A check on a plan's size; nonzero refuses the plan, with err filled. */
typedef int (*cr_plan_size_check)(void *ctx, const cr_plan_size *size, cr_error *err);

/* cr_planner_plan, calling check (when not NULL) with the plan's size
 * once admission is done and before anything is placed: a refused plan
 * costs one sort of the rates and no placement, and returns CR_ENOMEM
 * with err as check left it, *out NULL. */
cr_status cr_planner_plan_checked(const cr_planner_config *cfg, const cr_session_rate *rates,
                                  size_t n, cr_plan_size_check check, void *ctx, cr_table **out,
                                  cr_error *err);

void cr_table_free(cr_table *t);

/* Read-only accessors; all O(1) unless noted. Pointers stay valid until
 * cr_table_free. */
uint32_t cr_table_n_shards(const cr_table *t);
size_t cr_table_n_placements(const cr_table *t);
/* i-th admitted session, in admission order; i < cr_table_n_placements. */
const cr_placement *cr_table_placement(const cr_table *t, size_t i);
/* The kb shard ids of p, ascending. */
const uint32_t *cr_table_shards(const cr_table *t, const cr_placement *p);
/* Expected load per shard (requests/s), cr_table_n_shards entries. */
const double *cr_table_expected_load(const cr_table *t);
double cr_table_admitted_rate_total(const cr_table *t);
double cr_table_unadmitted_rate_total(const cr_table *t);
/* max load / mean load; 1.0 when the mean is <= 0. */
double cr_table_imbalance(const cr_table *t);

/* The owner's placement, or NULL when it is not admitted. O(1) expected. */
const cr_placement *cr_table_find(const cr_table *t, int64_t owner);
/* out[i] = cr_table_find(t, owners[i]) for i < n, duplicates and misses
 * included; faster for a batch: the lookups' memory reads are issued
 * together (hashes, then slots, then placements) rather than one lookup's
 * after another's. out does not alias owners. */
void cr_table_find_batch(const cr_table *t, const int64_t *owners, size_t n,
                         const cr_placement **out);
int cr_table_is_admitted(const cr_table *t, int64_t owner);
/* The owner's preferred shard, or fallback when it is not admitted. */
uint32_t cr_table_preferred_shard(const cr_table *t, int64_t owner, uint32_t fallback);

/* ---- saving and restoring (the state file; planner/table_state.c) ----
 *
 * A table's section: u32 n_shards, u64 placements, u64 shard slots (the
 * sum of kb), f64 admitted and unadmitted rate totals, f64 load per shard,
 * then per placement in admission order i64 owner, u32 kb and its kb u32
 * shard ids ascending; little-endian (bytes.h). Preferred shards and the
 * imbalance are not stored: rule 7 recomputes them from the loads, bit for
 * bit. */

struct cr_buf;
struct cr_cursor;

/* Appends t's section to b (b->failed when out of memory). */
void cr_table_save(const cr_table *t, struct cr_buf *b);

/* Reads one section from c into a new table in *out (NULL on error).
 * Every count is checked against the bytes left before anything is
 * allocated for it. CR_EINVAL with err naming what is wrong ("table
 * placements[3].shards[1] 9 must be < n_shards 8") for a short or
 * inconsistent section, CR_ENOMEM when out of memory. Pure. */
cr_status cr_table_load(struct cr_cursor *c, cr_table **out, cr_error *err);

/* ---- stable replans -------------------------------------------------------
 *
 * A replan that starts from the table it replaces and moves only what must
 * move; the rules are numbered S1-S7 in planner/replan.c. */

typedef enum cr_replan_mode {
    CR_REPLAN_STABLE, /* cr_planner_replan's rules S1-S7 */
    CR_REPLAN_FRESH   /* cr_planner_plan, ignoring the previous table */
} cr_replan_mode;

/* Defaults and bounds: the rows of cr_replan_options. Kept apart from
 * cr_planner_config, which is the wire's PlannerConfig. */
typedef struct cr_replan_config {
    int mode;                /* cr_replan_mode; --replan stable|fresh */
    double max_imbalance;    /* --max-imbalance: a shard's expected load may
                              * reach this times the mean before sessions are
                              * moved off it; >= 1 */
    double admit_hysteresis; /* --admit-hysteresis: a session displaces an
                              * admitted one only when its rate exceeds the
                              * other's times 1 + this; a fraction, >= 0 */
} cr_replan_config;

/* The replan rows (--replan, --max-imbalance, --admit-hysteresis), on
 * cr_replan_config; group "replan". */
extern const cr_option_table cr_replan_options;

void cr_replan_config_default(cr_replan_config *cfg);
/* As cr_planner_config_check, fields named "replan.<field>". */
cr_status cr_replan_config_check(const cr_replan_config *cfg, cr_error *err);

/* Where sessions were before a replan: the placements of table (the one
 * the replan will replace), and for an owner table does not admit, the
 * shard its requests went to, home(ctx, owner, n_shards) (the caller's
 * route for unadmitted owners; a pure function; a result >= n_shards means
 * none), or none when home is NULL. */
typedef struct cr_replan_prev {
    const cr_table *table;
    uint32_t (*home)(void *ctx, int64_t owner, uint32_t n_shards);
    void *ctx;
} cr_replan_prev;

/* Plans n sessions starting from prev (NULL, or a NULL table: none; a
 * table over another number of shards than cfg's counts as none). With
 * mode fresh, or no previous table and no home function, the result is
 * exactly cr_planner_plan's. Otherwise rules S1-S7 (planner/replan.c): the
 * same validation and errors as cr_planner_plan (the replan config is
 * checked after cfg); a session admitted before keeps its shard set when
 * it is admitted again with the same kb and its shards stay within
 * max_imbalance; a newly admitted one with kb 1 goes to its home shard
 * when that stays within the bound; the rest are placed by LPT.
 * Deterministic: the same prev, rates and configs give a bit-identical
 * table. prev and rates are only read. Memory: at most 64 bytes per entry
 * at the peak, besides prev and the result (measured by `planner_bench
 * 1000000 64 3`). Thread-safe: no shared state. */
cr_status cr_planner_replan(const cr_planner_config *cfg, const cr_replan_config *replan,
                            const cr_replan_prev *prev, const cr_session_rate *rates, size_t n,
                            cr_table **out, cr_error *err);

/* What changed from one table to the next, counted over sessions. */
typedef struct cr_churn {
    uint64_t moved;        /* admitted in both, with another shard set */
    uint64_t admitted_in;  /* admitted in next only */
    uint64_t admitted_out; /* admitted in prev only */
    uint64_t left_home;    /* of admitted_in, placed elsewhere than {its home}
                            * (cr_table_churn_homed; 0 otherwise) */
} cr_churn;

/* Compares the tables' placements by owner. prev NULL = an empty table
 * (everything in next is admitted_in). Shard sets are compared as sets of
 * ids (a placement's shards ascend), so a table over another shard count
 * compares the same way. Pure; O(placements of next) expected. */
cr_churn cr_table_churn(const cr_table *prev, const cr_table *next);

/* cr_table_churn, and of the sessions admitted_in, those placed elsewhere
 * than the one shard where they went unadmitted, home(ctx, owner,
 * n_shards) over prev's shards (next's when prev is NULL): moved +
 * left_home are the sessions whose cache a new table moves. */
cr_churn cr_table_churn_homed(const cr_table *prev, const cr_table *next,
                              uint32_t (*home)(void *ctx, int64_t owner, uint32_t n_shards),
                              void *ctx);

#endif
