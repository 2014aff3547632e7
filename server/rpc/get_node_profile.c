/* GetNodeProfile: the node profile (GPUs, NICs) and GPU 0's cost model. */
#include <stdlib.h>

#include "handlers.h"
#include "reply.h"

typedef struct profile_msg {
    Cacheroute__V1__NodeProfile node;
    Cacheroute__V1__GpuInfo *gpus, **gpu_ptrs;
    Cacheroute__V1__NicInfo *nics, **nic_ptrs;
    Cacheroute__V1__CostModel cost;
} profile_msg;

static int profile_devices(profile_msg *m, const cr_node_snapshot *snap)
{
    m->gpus = calloc(snap->n_gpus + 1, sizeof *m->gpus);
    m->gpu_ptrs = calloc(snap->n_gpus + 1, sizeof *m->gpu_ptrs);
    m->nics = calloc(snap->n_nics + 1, sizeof *m->nics);
    m->nic_ptrs = calloc(snap->n_nics + 1, sizeof *m->nic_ptrs);
    if (!m->gpus || !m->gpu_ptrs || !m->nics || !m->nic_ptrs)
        return -1;
    for (size_t i = 0; i < snap->n_gpus; i++) {
        const cr_gpu_info *g = &snap->gpus[i];
        Cacheroute__V1__GpuInfo *gm = &m->gpus[i];
        cacheroute__v1__gpu_info__init(gm);
        gm->index = g->index;
        gm->name = (char *)g->name;
        gm->uuid = (char *)g->uuid;
        gm->sm_count = g->sm_count;
        gm->cc_major = g->cc_major;
        gm->cc_minor = g->cc_minor;
        gm->memory_total_bytes = g->memory_total_bytes;
        gm->h2d_gbps = g->h2d_gbps;
        gm->peak_tflops = g->peak_tflops;
        m->gpu_ptrs[i] = gm;
    }
    for (size_t i = 0; i < snap->n_nics; i++) {
        const cr_nic_info *n = &snap->nics[i];
        Cacheroute__V1__NicInfo *nm = &m->nics[i];
        cacheroute__v1__nic_info__init(nm);
        nm->name = (char *)n->name;
        nm->speed_gbps = n->speed_gbps;
        nm->up = n->up;
        nm->utilization = n->utilization;
        m->nic_ptrs[i] = nm;
    }
    m->node.cuda_available = snap->cuda_available;
    m->node.n_gpus = snap->n_gpus;
    m->node.gpus = m->gpu_ptrs;
    m->node.n_nics = snap->n_nics;
    m->node.nics = m->nic_ptrs;
    return 0;
}

static void get_node_profile(void *ctx, const void *message, cr_reply *out)
{
    (void)message; /* GetNodeProfileRequest has no fields */
    const cr_handlers *h = ctx;
    const cr_node_snapshot *snap;
    profile_msg m = {0};
    cr_inject_model model;
    cr_error err;
    cacheroute__v1__node_profile__init(&m.node);
    if (cr_core_profile(h->core, &snap, &model, &err) != CR_OK)
        cr_reply_error(out, GRPC_STATUS_INTERNAL, "%s", err.msg);
    else if (profile_devices(&m, snap) != 0)
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    else {
        cr_cost_model_msg(&m.cost, &model);
        m.node.cost_model = &m.cost;
        cr_reply_message(out, &m.node.base, h->max_message, NULL);
    }
    free(m.gpus);
    free(m.gpu_ptrs);
    free(m.nics);
    free(m.nic_ptrs);
    cr_node_snapshot_release(snap);
}

void cr_handle_get_node_profile(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__get_node_profile_request__descriptor, data, len, out,
                   get_node_profile);
}
