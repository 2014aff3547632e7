/* Route, and each message of the Routes stream: the requests decoded
 * straight from the wire into request.h's cr_route_request when they can
 * be (cr_wire_route_request), else protobuf-c's items filling the same
 * struct, one cr_core_route, the decisions written straight as a
 * RouteResponse (cr_route_answer_pack). Every check of a request's fields
 * is the core's; here are the wire's: the count of requests before
 * decoding, and the answer's size before routing, with the endpoint set
 * taken once for the call (the size check and the answer's names). */
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__RouteRequest RouteRequest;
typedef Cacheroute__V1__RouteItem RouteItem;

/* A Route call: its items, decoded straight from the wire (split_items)
 * or, when that was unsure, protobuf-c's; and the endpoint set it names
 * answers from. */
typedef struct route_call {
    const cr_handlers *h;
    size_t max_items, max_hashes; /* cr_wire_route_size's */
    const cr_endpoints *named;
    cr_wire_route_out items;
    int split;
} route_call;

/* The one request shape from protobuf-c's item (the slow path). */
static cr_route_request request_of(const RouteItem *m)
{
    return (cr_route_request){
        .has_owner = m->has_owner,
        .has_prompt_tokens = m->has_prompt_tokens,
        .owner = m->owner,
        .prompt_tokens = m->prompt_tokens,
        .hashes = m->block_hashes,
        .n_hashes = m->n_block_hashes,
        .space = m->namespace_,
        .space_len = m->namespace_ ? strlen(m->namespace_) : 0,
        .request_id = m->request_id,
        .objective = m->objective,
        .objective_len = m->objective ? strlen(m->objective) : 0,
        .has_priority = m->has_priority,
        .priority = m->priority,
        .slo_ttft_ms = m->ttft_slo_ms,
        .fairness = m->fairness_id,
        .fairness_len = m->fairness_id ? strlen(m->fairness_id) : 0,
    };
}

/* The answer, written straight from the core's decisions into a body of
 * its bound, with the names of the set the call took. The request's count
 * was checked against the message limit before routing, so the limit is
 * only checked again here, as protobuf-c's answer was. */
static void answer(const route_call *c, const cr_route_answer *a, size_t n, uint64_t generation,
                   cr_reply *out)
{
    const cr_handlers *h = c->h;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__route_response__descriptor;
    uint8_t *body = malloc(cr_route_answer_bound(n, c->named));
    size_t len = body ? cr_route_answer_pack(a, n, generation, c->named, body) : 0;
    if (!body) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory packing %s", d->name);
    } else if (len > h->max_message) {
        free(body);
        cr_reply_too_big(out, d, len, h->max_message, NULL);
    } else {
        out->status = GRPC_STATUS_OK;
        out->body = body;
        out->len = len;
    }
}

/* The routes that met the door, each with a request id, kept as the
 * picker's are (GetDecision, WatchDecisions: the objective and the door's
 * word), so that their outcomes count toward their objective's SLO
 * attainment; the others' are not, as before. */
static void receipts(cr_core *core, const cr_route_request *q, const cr_route_answer *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((q[i].objective_len || q[i].has_priority || q[i].slo_ttft_ms > 0) &&
            q[i].request_id && q[i].request_id[0])
            cr_core_receipt_route(core, &q[i], &a[i]);
}

/* Decodes all of data into the call's arena, leaving protobuf-c nothing:
 * items and hashes (sized already), and text for the request ids (at most
 * the request's bytes). */
static int split_items(void *ctx, const uint8_t *data, size_t len, cr_arena *a,
                       const uint8_t **rest, size_t *rest_len)
{
    route_call *c = ctx;
    c->items = (cr_wire_route_out){
        .items = cr_arena_alloc(a, (c->max_items ? c->max_items : 1) * sizeof *c->items.items),
        .max_items = c->max_items,
        .hashes = cr_arena_alloc(a, (c->max_hashes ? c->max_hashes : 1) * sizeof(uint64_t)),
        .max_hashes = c->max_hashes,
        .text = cr_arena_alloc(a, len ? len : 1),
        .text_cap = len,
    };
    if (!c->items.items || !c->items.hashes || !c->items.text ||
        cr_wire_route_request(data, len, &c->items) != 0)
        return -1;
    c->split = 1;
    *rest = data;
    *rest_len = 0;
    return 0;
}

static void route(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    const route_call *c = ctx;
    const RouteRequest *req = message;
    size_t n = c->split ? c->items.n_items : req->n_requests;
    cr_route_request *items = c->split ? c->items.items : NULL;
    cr_route_answer *a = cr_arena_alloc(scratch, (n ? n : 1) * sizeof *a);
    if (!items) /* protobuf-c's: into the same shape */
        items = cr_arena_alloc(scratch, (n ? n : 1) * sizeof *items);
    if (!items || !a) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu requests", n);
        return;
    }
    for (size_t i = 0; i < n; i++) { /* each its caller's: its ids and its quota */
        if (!c->split)
            items[i] = request_of(req->requests[i]);
        items[i].caller = out->caller;
    }
    uint64_t generation;
    cr_error err;
    cr_status st = cr_core_route(c->h->core, items, n, a, &generation, &err);
    if (st != CR_OK) {
        cr_reply_core_error(out, st, &err);
        return;
    }
    receipts(c->h->core, items, a, n);
    answer(c, a, n, generation, out);
}

/* The requests' count bounds the decode (a RouteItem of 2 wire bytes is a
 * struct of ~100) and the answer; both refused before decoding. The
 * endpoint set is taken once: the answer's bound checked here is the one
 * its names are written by. */
void cr_handle_route(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__route_request__descriptor;
    route_call c = {.h = h};
    c.max_items = cr_wire_route_size(data, len, &c.max_hashes);
    size_t n = c.max_items;
    if (cr_refuse_entries(out, "requests", n, CR_CORE_MAX_ROUTES, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "send them in several calls") != 0)
        return;
    c.named = cr_core_endpoints(h->core);
    size_t each = cr_wire_decision_bytes() + cr_wire_named_bytes(c.named);
    if (n > (h->max_message - CR_WIRE_ANSWER_SLACK) / each)
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%zu requests could need %zu response bytes, over the %zu-byte message "
                       "limit (--max-message-bytes); send fewer requests per call",
                       n, n * each + CR_WIRE_ANSWER_SLACK, h->max_message);
    else
        cr_run_split_in(&c, d, data, len, out, split_items, route);
    cr_endpoints_release(c.named);
}
