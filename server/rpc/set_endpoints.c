/* SetEndpoints: the whole set, one cr_core_set_endpoints (every check is
 * the core's but the count, taken on the wire before decoding), forwarded
 * to the leader when this replica follows its set. */
#include <stdlib.h>

#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__SetEndpointsRequest SetEndpointsRequest;

static void set_endpoints(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const SetEndpointsRequest *req = message;
    size_t n = req->n_endpoints;
    cr_endpoint_spec *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu endpoints", n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (cr_endpoint_spec){.id = req->endpoints[i]->id,
                                  .address = req->endpoints[i]->address,
                                  .weight = req->endpoints[i]->weight,
                                  .kv_events = req->endpoints[i]->kv_events};
    cr_core_members_event ev;
    cr_error err;
    cr_status st = cr_core_set_endpoints(h->core, v, n, &ev, &err);
    if (st != CR_OK)
        cr_reply_core_error(out, st, &err);
    else
        cr_endpoints_reply(h, &ev, &(cr_forward){.kind = CR_FORWARD_SET, .specs = v, .n = n},
                           out);
    free(v);
}

void cr_handle_set_endpoints(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__set_endpoints_request__descriptor;
    if (cr_refuse_entries(out, "endpoints", cr_wire_count(d, data, len, "endpoints"),
                          CR_ENDPOINTS_MAX, GRPC_STATUS_INVALID_ARGUMENT,
                          "a set holds at most that many") != 0)
        return;
    cr_run_decoded(ctx, d, data, len, out, set_endpoints);
}
