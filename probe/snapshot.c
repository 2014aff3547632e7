/* Immutable snapshots: one allocation holding the reference count (a cr_ref),
 * the public struct and both arrays, so a reader's reference keeps all of it
 * alive. */
#include "internal.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct snapshot_box {
    cr_ref ref;
    cr_node_snapshot snap;
    alignas(max_align_t) unsigned char arrays[]; /* gpus, then nics */
} snapshot_box;

static void box_free(cr_ref *ref)
{
    free((snapshot_box *)((char *)ref - offsetof(snapshot_box, ref)));
}

cr_node_snapshot *cr_snapshot_new(const cr_gpu_info *gpus, size_t n_gpus, const cr_nic_info *nics,
                                  size_t n_nics)
{
    size_t gpu_bytes = n_gpus * sizeof *gpus;
    snapshot_box *b = calloc(1, sizeof *b + gpu_bytes + n_nics * sizeof *nics);
    if (!b)
        return NULL;
    cr_ref_init(&b->ref, box_free);
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
cr_ref *cr_snapshot_ref(const cr_node_snapshot *snap)
{
    if (!snap)
        return NULL;
    snapshot_box *b = (snapshot_box *)((char *)(uintptr_t)snap - offsetof(snapshot_box, snap));
    return &b->ref;
}

const cr_node_snapshot *cr_snapshot_of_ref(cr_ref *ref)
{
    if (!ref)
        return NULL;
    return &((snapshot_box *)((char *)ref - offsetof(snapshot_box, ref)))->snap;
}

void cr_node_snapshot_release(const cr_node_snapshot *snap)
{
    cr_ref_release(cr_snapshot_ref(snap)); /* NULL is ignored */
}
