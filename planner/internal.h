/* Internal to the planner library: the table layout and the owner index. */
#ifndef CR_PLANNER_INTERNAL_H
#define CR_PLANNER_INTERNAL_H

#include "planner.h"

/* Open-addressing index from owner id to a position in some array of records
 * that each start with an int64 owner (stride bytes apart). Slots hold
 * position + 1; 0 is empty. Load factor <= 1/2, linear probing. */
typedef struct cr_owner_index {
    uint32_t *slots;
    uint64_t mask;
    const char *base;
    size_t stride;
} cr_owner_index;

cr_status cr_owner_index_init(cr_owner_index *ix, size_t n, const void *base, size_t stride);
void cr_owner_index_free(cr_owner_index *ix);
/* Inserts position pos (whose owner is read from base); returns pos, or the
 * position already holding the same owner (nothing inserted then). */
size_t cr_owner_index_insert(cr_owner_index *ix, size_t pos);
/* Position of owner, or SIZE_MAX. */
size_t cr_owner_index_find(const cr_owner_index *ix, int64_t owner);

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
};

/* Shortest "%.{15,16,17}g" text that reads back as v. */
void cr_fmt_double(char *buf, size_t len, double v);

#endif
