/* Internal to the inject library: request checks and the link table. */
#ifndef CR_INJECT_INTERNAL_H
#define CR_INJECT_INTERNAL_H

#include "inject.h"

/* GPUs a request may name: max(1, probed), at most CR_PROBE_MAX_GPUS. */
size_t cr_inject_n_gpus(const cr_node_snapshot *snap);
/* CR_EINVAL naming "gpu" when gpu is not below cr_inject_n_gpus(snap). */
cr_status cr_inject_check_gpu(const cr_node_snapshot *snap, uint32_t gpu, cr_error *err);

/* Every input check of cr_inject_select; err names the wire field. */
cr_status cr_inject_request_check(const cr_inject_request *req, const cr_node_snapshot *snap,
                                  double now_ms, cr_error *err);

/* Per source name, the time its link is busy until: a fixed pool of cap
 * entries chained from a power-of-two bucket array. Not thread-safe. */
typedef struct cr_link_entry {
    char name[CR_INJECT_NAME_MAX + 1];
    double busy_until_ms;
    int32_t next; /* bucket chain, or free list; -1 ends either */
} cr_link_entry;

typedef struct cr_link_table {
    cr_link_entry *pool;
    int32_t *buckets;
    size_t mask; /* buckets - 1 */
    size_t cap, used;
    int32_t free_head;
} cr_link_table;

cr_status cr_link_table_init(cr_link_table *t, size_t cap);
void cr_link_table_free(cr_link_table *t);
/* Lw: how long name's link stays busy after now_ms (0 when untracked). */
double cr_link_table_wait(const cr_link_table *t, const char *name, double now_ms);
/* Appends busy_ms of transfer to name's link, from now_ms at the earliest. */
void cr_link_table_reserve(cr_link_table *t, const char *name, double now_ms, double busy_ms);

#endif
