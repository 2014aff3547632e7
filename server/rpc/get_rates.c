/* GetRates: this sidecar's rates, or (merged) the cluster's. */
#include <stdio.h>
#include <stdlib.h>

#include "answer.h"
#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__GetRatesRequest GetRatesRequest;
typedef Cacheroute__V1__SessionRate SessionRate;

/* The rates to answer: this sidecar's, or (merged) the cluster's from the
 * replica; 0, or -1 with the reply made (the core's error, no backend,
 * backend down, out of memory). */
static int read_rates(const cr_handlers *h, const GetRatesRequest *req, cr_session_rate **all,
                      size_t *n, uint64_t *tracked, cr_reply *out)
{
    cr_error err;
    if (!req->merged) {
        cr_status st = cr_core_rates(h->core, req->owners, req->n_owners, all, n, tracked, &err);
        if (st != CR_OK)
            cr_reply_core_error(out, st, &err);
        return st == CR_OK ? 0 : -1;
    }
    if (!h->replica) {
        cr_reply_error(out, GRPC_STATUS_FAILED_PRECONDITION,
                       "merged needs --state-backend (this sidecar is standalone)");
        return -1;
    }
    switch (cr_replica_rates(h->replica, req->owners, req->n_owners, all, n, tracked, &err)) {
    case CR_REPLICA_RATES:
        return 0;
    case CR_REPLICA_UNAVAILABLE:
        cr_reply_error(out, GRPC_STATUS_UNAVAILABLE, "%s", err.msg);
        return -1;
    default:
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "%s", err.msg);
        return -1;
    }
}

static void get_rates(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const GetRatesRequest *req = message;
    cr_session_rate *all;
    size_t n;
    uint64_t tracked;
    if (read_rates(h, req, &all, &n, &tracked, out) != 0)
        return;
    SessionRate *rates = cr_arena_alloc(scratch, n * sizeof *rates);
    SessionRate **ptrs = cr_arena_alloc(scratch, n * sizeof *ptrs);
    if (!rates || !ptrs) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu rates", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        cacheroute__v1__session_rate__init(&rates[i]);
        rates[i].owner = all[i].owner;
        rates[i].rate = all[i].rate;
        ptrs[i] = &rates[i];
    }
    Cacheroute__V1__GetRatesResponse resp = CACHEROUTE__V1__GET_RATES_RESPONSE__INIT;
    resp.n_rates = n;
    resp.rates = ptrs;
    resp.tracked_owners = tracked;
    cr_reply_message(out, &resp.base, h->max_message,
                     "list the owners to read, or raise --max-message-bytes");
done:
    free(all);
}

/* Each listed owner is answered, so their count bounds the answer: refused
 * before decoding, as protobuf-c and the answer would spend ~100 bytes on
 * each (a 33.5 MB request of 1-byte owners took 2.4 GB). */
void cr_handle_get_rates(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__get_rates_request__descriptor;
    size_t n = cr_wire_count(d, data, len, "owners"), each = cr_wire_rate_bytes();
    char why[160];
    snprintf(why, sizeof why,
             "their answer could need %zu bytes, over the %zu-byte message limit "
             "(--max-message-bytes); list fewer owners",
             n * each + CR_WIRE_ANSWER_SLACK, h->max_message);
    if (cr_refuse_entries(out, "owners", n, (h->max_message - CR_WIRE_ANSWER_SLACK) / each,
                          GRPC_STATUS_RESOURCE_EXHAUSTED, why) != 0)
        return;
    cr_run_decoded_in(ctx, d, data, len, out, get_rates);
}
