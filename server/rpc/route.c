/* Route, and each message of the Routes stream: the requests as the
 * core's, one cr_core_route, the decisions as a RouteResponse. Every check
 * of a request's fields is the core's; here are the wire's: the count of
 * requests before decoding, and the answer's size before routing. */
#include <string.h>

#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__RouteRequest RouteRequest;
typedef Cacheroute__V1__RouteItem RouteItem;
typedef Cacheroute__V1__RouteDecision RouteDecision;

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

static void answer(const cr_handlers *h, const cr_route_answer *a, size_t n, uint64_t generation,
                   cr_arena *scratch, cr_reply *out)
{
    RouteDecision *d = cr_arena_alloc(scratch, n * sizeof *d);
    RouteDecision **ptrs = cr_arena_alloc(scratch, n * sizeof *ptrs);
    if (!d || !ptrs) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu decisions", n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        d[i] = (RouteDecision)CACHEROUTE__V1__ROUTE_DECISION__INIT;
        d[i].shard = a[i].shard;
        d[i].admitted = a[i].admitted;
        d[i].cached_tokens = a[i].cached_tokens;
        d[i].queue_wait_ms = a[i].queue_wait_ms;
        d[i].prefill_ms = a[i].prefill_ms;
        d[i].reason = (char *)cr_route_reason_name(a[i].reason);
        ptrs[i] = &d[i];
    }
    Cacheroute__V1__RouteResponse resp = CACHEROUTE__V1__ROUTE_RESPONSE__INIT;
    resp.routes = ptrs;
    resp.n_routes = n;
    resp.table_generation = generation;
    cr_reply_message(out, &resp.base, h->max_message, NULL);
}

static void route(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const RouteRequest *req = message;
    size_t n = req->n_requests;
    cr_core_route_item *items = cr_arena_alloc(scratch, (n ? n : 1) * sizeof *items);
    cr_route_answer *a = cr_arena_alloc(scratch, (n ? n : 1) * sizeof *a);
    if (!items || !a) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu requests", n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        item_of(req->requests[i], &items[i]);
    uint64_t generation;
    cr_error err;
    cr_status st = cr_core_route(h->core, items, n, a, &generation, &err);
    if (st != CR_OK)
        cr_reply_core_error(out, st, &err);
    else
        answer(h, a, n, generation, scratch, out);
}

/* The requests' count bounds the decode (a RouteItem of 2 wire bytes is a
 * struct of ~100) and the answer; both refused before decoding. */
void cr_handle_route(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__route_request__descriptor;
    size_t n = cr_wire_count(d, data, len, "requests");
    if (cr_refuse_entries(out, "requests", n, CR_CORE_MAX_ROUTES, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "send them in several calls") != 0)
        return;
    size_t each = cr_wire_decision_bytes();
    if (n > (h->max_message - CR_WIRE_ANSWER_SLACK) / each) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%zu requests could need %zu response bytes, over the %zu-byte message "
                       "limit (--max-message-bytes); send fewer requests per call",
                       n, n * each + CR_WIRE_ANSWER_SLACK, h->max_message);
        return;
    }
    cr_run_decoded_in(ctx, d, data, len, out, route);
}
