/* Immutable snapshots: one allocation holding a reference count, the public
 * struct and both arrays, so a reader's reference keeps all of it alive. */
#include "internal.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct snapshot_box {
    atomic_size_t refs;
    cr_node_snapshot snap;
    alignas(max_align_t) unsigned char arrays[]; /* gpus, then nics */
} snapshot_box;

cr_node_snapshot *cr_snapshot_new(const cr_gpu_info *gpus, size_t n_gpus, const cr_nic_info *nics,
                                  size_t n_nics)
{
    size_t gpu_bytes = n_gpus * sizeof *gpus;
    snapshot_box *b = calloc(1, sizeof *b + gpu_bytes + n_nics * sizeof *nics);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    cr_gpu_info *g = (cr_gpu_info *)b->arrays;
    cr_nic_info *c = (cr_nic_info *)(b->arrays + gpu_bytes);
    if (n_gpus)
        memcpy(g, gpus, gpu_bytes);
    if (n_nics)
        memcpy(c, nics, n_nics * sizeof *nics);
    b->snap.gpus = g;
    b->snap.n_gpus = n_gpus;
    b->snap.nics = c;
    b->snap.n_nics = n_nics;
    return &b->snap;
}

/* Snapshots are handed out const; the count is the one mutable part. */
static snapshot_box *box_of(const cr_node_snapshot *snap)
{
    return (snapshot_box *)((char *)(uintptr_t)snap - offsetof(snapshot_box, snap));
}

void cr_node_snapshot_release(const cr_node_snapshot *snap)
{
    if (!snap)
        return;
    snapshot_box *b = box_of(snap);
    /* acq_rel: the last releaser must see every other holder's reads done. */
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        free(b);
}

/* The caller holds a reference (or the lock that keeps one alive), so a
 * relaxed add is enough: nothing is read through this count. */
void cr_snapshot_retain(const cr_node_snapshot *snap)
{
    atomic_fetch_add_explicit(&box_of(snap)->refs, 1, memory_order_relaxed);
}
