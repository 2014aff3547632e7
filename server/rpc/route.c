/* Route, and each message of the Routes stream: the requests decoded
 * straight from the wire when they can be (cr_wire_route_request, else
 * protobuf-c's), one cr_core_route, the decisions written straight as a
 * RouteResponse (cr_route_answer_pack). Every check of a request's fields
 * is the core's; here are the wire's: the count of requests before
 * decoding, and the answer's size before routing. */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__RouteRequest RouteRequest;
typedef Cacheroute__V1__RouteItem RouteItem;

/* A Route call: its items, decoded straight from the wire (split_items)
 * or, when that was unsure, protobuf-c's. */
typedef struct route_call {
    const cr_handlers *h;
    size_t max_items; /* cr_wire_count's count */
    cr_wire_route_out items;
    int split;
} route_call;

static void item_of_wire(const cr_wire_route_item *w, cr_core_route_item *q)
{
    *q = (cr_core_route_item){
        .has_owner = w->has_owner,
        .owner = w->owner,
        .prompt_tokens = w->prompt_tokens,
        .hashes = w->hashes,
        .n_hashes = w->n_hashes,
        .space = w->space,
        .space_len = w->space_len,
        .request_id = w->request_id,
    };
}

static void item_of(const RouteItem *m, cr_core_route_item *q)
{
    *q = (cr_core_route_item){
        .has_owner = m->has_owner,
        .owner = m->owner,
        .prompt_tokens = m->prompt_tokens,
        .hashes = m->block_hashes,
        .n_hashes = m->n_block_hashes,
        .space = m->namespace_,
        .space_len = m->namespace_ ? strlen(m->namespace_) : 0,
        .request_id = m->request_id,
    };
}

/* The answer, written straight from the core's decisions into a body of
 * its bound. The request's count was checked against the message limit
 * before routing, so the limit is only checked again here, as
 * protobuf-c's answer was. */
static void answer(const cr_handlers *h, const cr_route_answer *a, size_t n, uint64_t generation,
                   cr_reply *out)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__route_response__descriptor;
    const cr_endpoints *named = cr_core_endpoints(h->core); /* as RecordArrival's */
    uint8_t *body = malloc(cr_route_answer_bound(n, named));
    size_t len = body ? cr_route_answer_pack(a, n, generation, named, body) : 0;
    cr_endpoints_release(named);
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

/* Decodes all of data into the call's arena, leaving protobuf-c nothing:
 * items (counted already), hashes (at most a byte each), and text for the
 * request ids and the decoder's scratch (at most the request's bytes). */
static int split_items(void *ctx, const uint8_t *data, size_t len, cr_arena *a,
                       const uint8_t **rest, size_t *rest_len)
{
    route_call *c = ctx;
    size_t max_hashes = cr_wire_route_hashes_bound(data, len);
    c->items = (cr_wire_route_out){
        .items = cr_arena_alloc(a, (c->max_items ? c->max_items : 1) * sizeof *c->items.items),
        .max_items = c->max_items,
        .hashes = cr_arena_alloc(a, (max_hashes ? max_hashes : 1) * sizeof(uint64_t)),
        .max_hashes = max_hashes,
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
    cr_core_route_item *items = cr_arena_alloc(scratch, (n ? n : 1) * sizeof *items);
    cr_route_answer *a = cr_arena_alloc(scratch, (n ? n : 1) * sizeof *a);
    if (!items || !a) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu requests", n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (c->split)
            item_of_wire(&c->items.items[i], &items[i]);
        else
            item_of(req->requests[i], &items[i]);
    }
    uint64_t generation;
    cr_error err;
    cr_status st = cr_core_route_as(c->h->core, out->caller, items, n, a, &generation, &err);
    if (st != CR_OK)
        cr_reply_core_error(out, st, &err);
    else
        answer(c->h, a, n, generation, out);
}

/* The requests' count bounds the decode (a RouteItem of 2 wire bytes is a
 * struct of ~100) and the answer; both refused before decoding. */
void cr_handle_route(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__route_request__descriptor;
    route_call c = {.h = h, .max_items = cr_wire_count(d, data, len, "requests")};
    size_t n = c.max_items;
    if (cr_refuse_entries(out, "requests", n, CR_CORE_MAX_ROUTES, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "send them in several calls") != 0)
        return;
    const cr_endpoints *named = cr_core_endpoints(h->core);
    size_t each = cr_wire_decision_bytes() + cr_wire_named_bytes(named);
    cr_endpoints_release(named);
    if (n > (h->max_message - CR_WIRE_ANSWER_SLACK) / each) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%zu requests could need %zu response bytes, over the %zu-byte message "
                       "limit (--max-message-bytes); send fewer requests per call",
                       n, n * each + CR_WIRE_ANSWER_SLACK, h->max_message);
        return;
    }
    cr_run_split_in(&c, d, data, len, out, split_items, route);
}
