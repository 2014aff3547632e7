/* SelectInjection and GetNodeProfile: the injection decision and the node
 * profile behind it, from the prober's latest snapshot. */
#include <stdlib.h>
#include <string.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__SelectInjectionRequest SelectRequest;
typedef Cacheroute__V1__CostBreakdown CostBreakdown;

void cr_breakdown_msg(CostBreakdown *m, const cr_cost_breakdown *c)
{
    cacheroute__v1__cost_breakdown__init(m);
    m->queue_wait_ms = c->queue_wait_ms;
    m->prefill_ms = c->prefill_ms;
    m->link_wait_ms = c->link_wait_ms;
    m->transfer_ms = c->transfer_ms;
    m->load_ms = c->load_ms;
    m->total_ms = c->total_ms;
}

/* The answer for r, pointing at r's strings and req's request_id; text
 * and kv are the caller's storage. */
typedef struct select_msg {
    Cacheroute__V1__SelectInjectionResponse resp;
    CostBreakdown text, kv;
} select_msg;

static void select_msg_init(select_msg *m, const SelectRequest *req, const cr_inject_response *r)
{
    cacheroute__v1__select_injection_response__init(&m->resp);
    cr_breakdown_msg(&m->text, &r->text);
    cr_breakdown_msg(&m->kv, &r->kv);
    m->resp.mode = (Cacheroute__V1__InjectionMode)r->mode;
    m->resp.source = (char *)r->source;
    m->resp.text = &m->text;
    m->resp.kv = r->has_kv ? &m->kv : NULL;
    m->resp.saving_ms = r->saving_ms;
    m->resp.reason = (char *)cr_inject_reason_name(r->reason);
    m->resp.request_id = req->request_id;
}

/* The answer's size is known before deciding: its strings are the
 * request_id echoed, a source name of the request (at most
 * CR_INJECT_NAME_MAX bytes, the core checks) and a reason, the rest fixed.
 * Sized with the widest of each, so an answer that could not be sent is
 * refused before anything is reserved, counted or kept. */
static int select_fits(const cr_handlers *h, const SelectRequest *req, cr_reply *out)
{
    cr_cost_breakdown every = {-1, -1, -1, -1, -1, -1}; /* every double encoded */
    cr_inject_response widest = {.mode = CR_INJECT_KV_CACHE, .text = every, .has_kv = 1,
                                 .kv = every, .saving_ms = -1,
                                 .reason = CR_REASON_KV_HIDDEN_BY_QUEUE}; /* the longest */
    memset(widest.source, 'x', CR_INJECT_NAME_MAX);
    select_msg m;
    select_msg_init(&m, req, &widest);
    size_t need = protobuf_c_message_get_packed_size(&m.resp.base);
    if (need <= h->max_message)
        return 0;
    cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                   "the answer could need %zu bytes, over the %zu-byte message limit "
                   "(--max-message-bytes), with a %zu-byte request_id; nothing was reserved",
                   need, h->max_message, strlen(req->request_id));
    return -1;
}

static void select_injection(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const SelectRequest *req = message;
    if (select_fits(h, req, out) != 0)
        return;
    cr_kv_source *sources = malloc((req->n_sources ? req->n_sources : 1) * sizeof *sources);
    if (!sources) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < req->n_sources; i++)
        sources[i] = (cr_kv_source){req->sources[i]->name, req->sources[i]->cached_tokens};
    cr_inject_request ir = {
        .prompt_tokens = req->prompt_tokens,
        .knowledge_tokens = req->knowledge_tokens,
        .sources = sources,
        .n_sources = req->n_sources,
        .has_queue_wait = req->queue_case == CACHEROUTE__V1__SELECT_INJECTION_REQUEST__QUEUE_QUEUE_WAIT_MS,
        .queue_wait_ms = req->queue_wait_ms,
        .gpu = req->gpu,
        .dry_run = req->dry_run,
    };
    cr_inject_response r;
    cr_error err;
    cr_status st = cr_core_select(h->core, req->request_id, &ir, &r, &err);
    select_msg m;
    if (st != CR_OK) {
        cr_reply_core_error(out, st, &err);
    } else {
        select_msg_init(&m, req, &r);
        cr_reply_message(out, &m.resp.base, h->max_message, NULL);
    }
    free(sources);
}

void cr_handle_select_injection(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__select_injection_request__descriptor;
    if (cr_refuse_entries(out, "sources", cr_wire_count(d, data, len, "sources"),
                          CR_INJECT_MAX_SOURCES, GRPC_STATUS_INVALID_ARGUMENT, NULL) != 0)
        return;
    cr_run_decoded(ctx, d, data, len, out, select_injection);
}

/* ---- ClearReservations ---- */

static void clear_reservations(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const Cacheroute__V1__ClearReservationsRequest *req = message;
    cr_inject_clear which = {
        .has_gpu = req->has_gpu,
        .gpu = req->gpu,
        /* absent: NULL (protoc-c < 1.5) or "" (1.5's proto3 optional) */
        .source = req->source && *req->source ? req->source : NULL,
    };
    cr_inject_cleared cleared;
    cr_error err;
    cr_status st = cr_core_clear_reservations(h->core, &which, &cleared, &err);
    if (st != CR_OK) {
        cr_reply_core_error(out, st, &err);
        return;
    }
    Cacheroute__V1__ClearReservationsResponse resp =
        CACHEROUTE__V1__CLEAR_RESERVATIONS_RESPONSE__INIT;
    resp.gpus_cleared = cleared.gpus;
    resp.links_cleared = cleared.links;
    resp.cleared_ms = cleared.ms;
    cr_reply_message(out, &resp.base, h->max_message, NULL);
}

void cr_handle_clear_reservations(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__clear_reservations_request__descriptor, data, len, out,
                   clear_reservations);
}

/* ---- GetNodeProfile ---- */

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

void cr_cost_model_msg(Cacheroute__V1__CostModel *m, const cr_inject_model *model)
{
    cacheroute__v1__cost_model__init(m);
    m->prefill_fixed_ms = model->prefill_fixed_ms;
    m->prefill_ms_per_token = model->prefill_ms_per_token;
    m->prefill_ms_per_token2 = model->prefill_ms_per_token2;
    m->kv_bytes_per_token = model->kv_bytes_per_token;
    m->link_gbps = model->link_gbps;
    m->h2d_gbps = model->h2d_gbps;
    m->decision_margin_ms = model->decision_margin_ms;
    m->link_queue_penalty = model->link_queue_penalty;
    m->source = (char *)model->source;
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
