/* SelectInjection: the injection decision against the prober's latest
 * snapshot, its answer sized before anything is reserved. */
#include <stdlib.h>
#include <string.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__SelectInjectionRequest SelectRequest;
typedef Cacheroute__V1__CostBreakdown CostBreakdown;

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
