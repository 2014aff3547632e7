/* DrainEndpoint: one cr_core_drain_endpoint, forwarded to the leader when
 * this replica follows its set. */
#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__DrainEndpointRequest DrainEndpointRequest;

static void drain_endpoint(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const DrainEndpointRequest *req = message;
    cr_core_members_event ev;
    cr_error err;
    cr_status st = cr_core_drain_endpoint(h->core, req->id, !req->undrain, &ev, &err);
    cr_forward f = {.kind = req->undrain ? CR_FORWARD_UNDRAIN : CR_FORWARD_DRAIN, .id = req->id};
    if (st != CR_OK)
        cr_reply_core_error(out, st, &err);
    else
        cr_endpoints_reply(h, &ev, &f, out);
}

void cr_handle_drain_endpoint(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__drain_endpoint_request__descriptor, data, len, out,
                   drain_endpoint);
}
