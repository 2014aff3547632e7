/* Internal to the planner library: the table layout, the owner index, and
 * the pieces of a plan that the fresh and the stable path share. */
#ifndef CR_PLANNER_INTERNAL_H
#define CR_PLANNER_INTERNAL_H

#include "planner.h"

/* Open-addressing index from owner id to a position in some array of records
 * that each start with an int64 owner (stride bytes apart), for the
 * duplicate checks over a plan's input. A slot holds position + 1 in its
 * low bits (pos_mask) and a tag of the owner's hash in the others; 0 is
 * empty. Load factor <= 1/2, linear probing. */
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

/* A table's own index (table_index.c): owner -> placement position and
 * preferred shard, in the slot itself, so a lookup reads one slot. */
typedef struct cr_table_slot {
    int64_t owner;
    uint32_t pos1;  /* the placement's position + 1; 0 marks an empty slot */
    uint32_t shard; /* that placement's preferred_shard */
} cr_table_slot;

typedef struct cr_table_index {
    cr_table_slot *slots;
    size_t cap;
} cr_table_index;

/* An empty index with room for n owners (n < 2^32 - 1). */
cr_status cr_table_index_init(cr_table_index *ix, size_t n);
void cr_table_index_free(cr_table_index *ix);
/* Puts p[0..n) in (after rule 7: their preferred shards are final);
 * SIZE_MAX, or the first i whose owner repeats, with *earlier the position
 * holding it (p[i..n) are not in the index then). */
size_t cr_table_index_build(cr_table_index *ix, const cr_placement *p, size_t n,
                            size_t *earlier);
/* owner's slot, or NULL. */
const cr_table_slot *cr_table_index_find(const cr_table_index *ix, int64_t owner);
/* Starts loading owner's home slot, for a find some iterations later. */
void cr_table_index_prefetch(const cr_table_index *ix, int64_t owner);
/* The most owners cr_table_index_find_group takes at once. */
#define CR_TABLE_INDEX_GROUP 32
/* out[j] = cr_table_index_find(ix, owners[j]) for j < n <=
 * CR_TABLE_INDEX_GROUP, every home slot loading before any is read. */
void cr_table_index_find_group(const cr_table_index *ix, const int64_t *owners, size_t n,
                               const cr_table_slot **out);

struct cr_table {
    uint32_t n_shards;
    size_t n_placements;
    cr_placement *placements; /* admission order */
    uint32_t *shards;         /* all placements' shard ids, concatenated */
    double *load;             /* n_shards */
    double admitted_rate_total;
    double unadmitted_rate_total;
    double imbalance;
    cr_table_index index; /* owner -> placement, preferred shard */
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
 * owner index (CR_OK, or CR_ENOMEM). */
void cr_plan_rule7(cr_table *t);
cr_status cr_plan_finish(cr_table *t);
/* t's owner index over its placements (rule 7 done), as
 * cr_table_index_build gives it: SIZE_MAX, or the first repeat (*earlier
 * set); SIZE_MAX and *st CR_ENOMEM when out of memory, else *st CR_OK. */
size_t cr_plan_index(cr_table *t, size_t *earlier, cr_status *st);

/* A plan's large arrays (placements, indexes, the sorted items): from
 * 2 MiB up a mapping of their own, so cr_plan_free gives the pages back at
 * once, with huge pages where the kernel grants them; malloc below. Free
 * with cr_plan_free only (NULL is a no-op). NULL when out of memory. */
void *cr_plan_alloc(size_t bytes);
void cr_plan_free(void *p);

/* Shortest "%.{15,16,17}g" text that reads back as v. */
void cr_fmt_double(char *buf, size_t len, double v);

#endif
