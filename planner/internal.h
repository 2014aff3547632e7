/* Internal to the planner library: the table layout, the owner index, and
 * the pieces of a plan that the fresh and the stable path share. */
#ifndef CR_PLANNER_INTERNAL_H
#define CR_PLANNER_INTERNAL_H

#include "planner.h"

/* Open-addressing index from owner id to a position in some array of records
 * that each start with an int64 owner (stride bytes apart). A slot holds
 * position + 1 in its low bits (pos_mask) and a tag of the owner's hash in
 * the others; 0 is empty. Load factor <= 1/2, linear probing. */
typedef struct cr_owner_index {
    uint32_t *slots;
    uint64_t mask;
    uint32_t pos_mask; /* from the capacity and the records alone */
    const char *base;
    size_t stride;
} cr_owner_index;

/* Room for n owners at positions below records (>= n; < 2^32 - 1). */
cr_status cr_owner_index_init(cr_owner_index *ix, size_t n, size_t records, const void *base,
                              size_t stride);
void cr_owner_index_free(cr_owner_index *ix);
/* Inserts position pos (whose owner is read from base); returns pos, or the
 * position already holding the same owner (nothing inserted then). */
size_t cr_owner_index_insert(cr_owner_index *ix, size_t pos);
/* Position of owner, or SIZE_MAX. */
size_t cr_owner_index_find(const cr_owner_index *ix, int64_t owner);
/* For a batch of finds: start loading what finding owner will read, the
 * slot (stage 0, some iterations ahead) or the record the slot names
 * (stage 1, once the slot has had time to arrive). Changes nothing. */
void cr_owner_index_prefetch(const cr_owner_index *ix, int64_t owner, int stage);
/* The most owners cr_owner_index_find_group takes at once. */
#define CR_OWNER_INDEX_GROUP 32
/* pos[j] = cr_owner_index_find(ix, owners[j]) for j < n <=
 * CR_OWNER_INDEX_GROUP, with every home slot loaded before any is read,
 * and every first candidate's record before any owner is compared. The
 * owners are compared in records (stride bytes apart, each starting with
 * the same owner as ix's record at the same position), so a caller that
 * reads a larger record next can have the lookup read that one instead. */
void cr_owner_index_find_group(const cr_owner_index *ix, const int64_t *owners, size_t n,
                               size_t *pos, const void *records, size_t stride);
/* Fills ix (just initialised, over other records) from another index of
 * the same capacity and positions' width: a slot of from holding position p
 * gets remap[p] (a position in ix's records + 1, or 0 for a record ix does
 * not hold), and in each run of slots that lost a record the later ones are
 * inserted again, so lookups find what plain inserts would. One pass over
 * the slots instead of a random access per record. -1 when the capacities
 * differ. */
int cr_owner_index_remap(cr_owner_index *ix, const cr_owner_index *from, const uint32_t *remap);

struct cr_table {
    uint32_t n_shards;
    size_t n_placements;
    cr_placement *placements; /* admission order */
    uint32_t *shards;         /* all placements' shard ids, concatenated */
    double *load;             /* n_shards */
    double admitted_rate_total;
    double unadmitted_rate_total;
    double imbalance;
    cr_owner_index index; /* owner -> placement */
    int64_t *owners;      /* placements[i].owner at i: the index's records, 8 B
                           * apart, so a replan's lookups (one per session)
                           * read a compact array; a route's batch lookups
                           * compare the placements' owners instead, the one
                           * record a hit then reads */
};

/* ---- pieces of the plan shared by the fresh and the stable path ---- */

#define CR_PLAN_MAX_ENTRIES ((size_t)UINT32_MAX - 1) /* positions are stored as uint32 + 1 */

/* A session to sort: its rate's bit pattern inverted (positive doubles
 * order like their bits, so ascending keys are decreasing rates), and the
 * owner or, in a stable replan, its position in the previous table. */
typedef struct cr_plan_item {
    uint64_t key;
    union {
        int64_t owner;
        uint64_t prev;
    };
} cr_plan_item;
/* Sorted by cr_sort_records (common.h): the key first, 16 bytes. */
_Static_assert(sizeof(cr_plan_item) == CR_SORT_RECORD_BYTES && offsetof(cr_plan_item, key) == 0,
               "cr_plan_item is a cr_sort_records record");

/* The rate a key was made from; the key's top bit is ignored (always set
 * for a positive rate, so a replan may use it as a flag). */
double cr_plan_item_rate(const cr_plan_item *it);
/* Rule 1 (see planner.c): CR_ENOMEM for too many entries, CR_EINVAL for a
 * bad one, err naming it. cr_plan_check_rates is its first half: the count
 * and the rates, not the owners. */
cr_status cr_plan_validate(const cr_session_rate *rates, size_t n, cr_error *err);
cr_status cr_plan_check_rates(const cr_session_rate *rates, size_t n, cr_error *err);
/* Eq. 1: shards a session of this rate needs, at most r. */
uint32_t cr_plan_kb(double rate, double qcap, uint32_t r);
/* The table with room for m placements, loads uninitialised. */
cr_table *cr_plan_table_alloc(uint32_t r, size_t m);

/* Min-heap of shard ids ordered by (load, id). */
typedef struct cr_shard_heap {
    uint32_t *id;
    uint32_t n;
    const double *load;
} cr_shard_heap;

void cr_shard_heap_push(cr_shard_heap *h, uint32_t x);
/* Rule 6 for one session: its kb shards are the kb smallest (load, id)
 * of h, written to mine ascending; each gets share added to load. */
void cr_plan_lpt(cr_shard_heap *h, double *load, uint32_t *mine, uint32_t kb, double share);
/* Rule 7, plus each placement's preferred shard; cr_plan_finish adds the
 * owner index. */
void cr_plan_rule7(cr_table *t);
cr_status cr_plan_finish(cr_table *t);
/* t's owners array and an empty owner index over it. */
cr_status cr_plan_index_init(cr_table *t);

/* malloc for an array that lookups read at random (a table's placements,
 * an index's slots): huge pages when it is large enough. free() frees it;
 * NULL when out of memory. */
void *cr_plan_alloc_lookup(size_t bytes);

/* Shortest "%.{15,16,17}g" text that reads back as v. */
void cr_fmt_double(char *buf, size_t len, double v);

#endif
