/* GetDecision: a kept receipt as a DecisionReceipt. */
#include <string.h>

#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__GetDecisionRequest DecisionRequest;

static void get_decision(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const DecisionRequest *req = message;
    cr_receipt r;
    if (!cr_core_decision(h->core, req->request_id, &r)) {
        size_t n = strlen(req->request_id);
        cr_reply_error(out, GRPC_STATUS_NOT_FOUND,
                       "no receipt for request_id '%.*s%s': never decided (or a dry run), or "
                       "evicted (--receipts) or replaced since",
                       n > CR_LOOP_REQUEST_ID_MAX ? CR_LOOP_REQUEST_ID_MAX : (int)n,
                       req->request_id, n > CR_LOOP_REQUEST_ID_MAX ? "..." : "");
        return;
    }
    cr_receipt_msg m;
    cr_receipt_msg_init(&m, &r);
    cr_reply_message(out, &m.r.base, h->max_message, NULL);
}

void cr_handle_get_decision(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__get_decision_request__descriptor, data, len, out,
                   get_decision);
}
