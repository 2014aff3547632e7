/* RecordArrival, and each message of the RecordArrivals stream: the owners
 * decoded straight from the wire when they can be, one cr_core_record, the
 * answer written straight from the routes (answer.h), with the endpoint
 * set taken once for the call (the size check and the answer's names). */
#include <stdlib.h>

#include "answer.h"
#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__RecordArrivalRequest RecordArrivalRequest;

/* A RecordArrival call: its owners, decoded straight from the wire
 * (split_owners) or, when that was unsure, protobuf-c's; and the endpoint
 * set its answer names from, taken before anything is routed (its slots
 * only ever grow: a route to a slot added meanwhile goes unnamed, as one
 * answered before the slot came). */
typedef struct record_call {
    const cr_handlers *h;
    const cr_endpoints *named;
    size_t max_owners; /* cr_wire_count's count */
    int64_t *owners;
    size_t n_owners;
    int split;
} record_call;

/* The answer, written straight from the core's routes into a body of its
 * bound; routes NULL (omit_routes) answers none. The request's count was
 * checked against the message limit before anything was recorded, so the
 * limit is only checked again here, as protobuf-c's answer was. */
static void answer_routes(const record_call *c, const cr_route_answer *routes, size_t n,
                          uint64_t generation, cr_reply *out)
{
    const cr_handlers *h = c->h;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__record_arrival_response__descriptor;
    size_t n_routes = routes ? n : 0;
    const cr_endpoints *named = n_routes ? c->named : NULL;
    uint8_t *body = malloc(cr_record_answer_bound(n_routes, named));
    if (!body) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory packing %s", d->name);
        return;
    }
    size_t len = cr_record_answer_pack(routes, n_routes, (uint32_t)n, generation, named, body);
    if (len > h->max_message) {
        free(body);
        cr_reply_too_big(out, d, len, h->max_message, NULL);
        return;
    }
    out->status = GRPC_STATUS_OK;
    out->body = body;
    out->len = len;
}

static int split_owners(void *ctx, const uint8_t *data, size_t len, cr_arena *a,
                        const uint8_t **rest, size_t *rest_len)
{
    record_call *c = ctx;
    cr_wire_varints out = {cr_arena_alloc(a, (c->max_owners ? c->max_owners : 1) *
                                                 sizeof *c->owners),
                           c->max_owners, 0};
    uint8_t *left = cr_arena_alloc(a, len ? len : 1);
    if (!out.values || !left ||
        cr_wire_split_varints(data, len, CR_WIRE_RECORD_OWNERS_FIELD, &out, left, rest_len) != 0)
        return -1;
    c->owners = out.values;
    c->n_owners = out.n;
    c->split = 1;
    *rest = left;
    return 0;
}

static void record_arrival(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    const record_call *c = ctx;
    const cr_handlers *h = c->h;
    const RecordArrivalRequest *req = message;
    const int64_t *owners = c->split ? c->owners : req->owners;
    size_t n = c->split ? c->n_owners : req->n_owners;
    /* Allocated before anything is recorded: a call that could not be
     * answered records nothing (only the body is allocated after). */
    cr_route_answer *routes =
        req->omit_routes ? NULL : cr_arena_alloc(scratch, n * sizeof *routes);
    uint64_t generation;
    cr_error err;
    cr_status st;
    if (!req->omit_routes && !routes)
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu routes", n);
    else if ((st = cr_core_record_as(h->core, out->caller, owners, n, req->weights,
                                     req->n_weights, routes, &generation, &err)) != CR_OK)
        cr_reply_core_error(out, st, &err);
    else
        answer_routes(c, routes, n, generation, out);
}

/* Owners bound the decode (8 bytes each in the arena, so a message of
 * 1-byte owners would take 8 times its size: --max-arrivals-per-call), and
 * routed ones the answer: counted on the wire, before decoding. */
void cr_handle_record_arrival(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__record_arrival_request__descriptor;
    size_t max = h->max_message;
    record_call c = {.h = h, .max_owners = cr_wire_count(d, data, len, "owners")};
    size_t n = cr_wire_last_varint(d, data, len, "omit_routes", 0) ? 0 : c.max_owners;
    c.named = cr_core_endpoints(h->core);
    size_t each = cr_wire_route_bytes(CR_MAX_SHARDS) + cr_wire_named_bytes(c.named);
    if (n > (max - CR_WIRE_ANSWER_SLACK) / each)
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%zu owners could need %zu response bytes, over the %zu-byte message "
                       "limit (--max-message-bytes); set omit_routes or send fewer owners",
                       n, n * each + CR_WIRE_ANSWER_SLACK, max);
    else if (cr_refuse_entries(out, "owners", c.max_owners, h->max_arrivals,
                               GRPC_STATUS_RESOURCE_EXHAUSTED,
                               "the limit of --max-arrivals-per-call; send them in several "
                               "calls") == 0)
        cr_run_split_in(&c, d, data, len, out, split_owners, record_arrival);
    cr_endpoints_release(c.named);
}
