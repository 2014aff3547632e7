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
 * "rates[4].owner 7 duplicates rates[1].owner") or config field, and nothing is
 * allocated. rates is only read, and may be freed once this returns.
 * Thread-safe: no shared state. */
cr_status cr_planner_plan(const cr_planner_config *cfg, const cr_session_rate *rates,
                          size_t n, cr_table **out, cr_error *err);

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
int cr_table_is_admitted(const cr_table *t, int64_t owner);
/* The owner's preferred shard, or fallback when it is not admitted. */
uint32_t cr_table_preferred_shard(const cr_table *t, int64_t owner, uint32_t fallback);

#endif
