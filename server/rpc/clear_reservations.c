/* ClearReservations: the reservation timelines dropped (an admin call). */
#include "handlers.h"
#include "reply.h"

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
