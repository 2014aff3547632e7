/* Forget: owners dropped from the estimator (an admin call). */
#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__ForgetRequest ForgetRequest;

static void forget(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ForgetRequest *req = message;
    Cacheroute__V1__ForgetResponse resp = CACHEROUTE__V1__FORGET_RESPONSE__INIT;
    resp.forgotten = cr_core_forget(h->core, req->owners, req->n_owners);
    cr_reply_message(out, &resp.base, h->max_message, NULL);
}

void cr_handle_forget(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__forget_request__descriptor, data, len, out, forget);
}
