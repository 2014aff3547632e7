/* Handlers for cacheroute.v1.CacheRoute, one file each, named as the RPC
 * (and as its file in core/): decode, one cr_core_* call, encode. Every
 * rule, and every check that can reject a call before state changes, is
 * the core's; here are only the wire's own limits. ctx is a cr_handlers. */
#ifndef CR_HANDLERS_H
#define CR_HANDLERS_H

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "core.h"
#include "duplex.h"
#include "epp.h"
#include "replica.h"
#include "rpc.h"

typedef struct cr_handlers {
    cr_core *core;
    size_t max_message; /* --max-message-bytes: the largest answer */
    size_t max_arrivals; /* --max-arrivals-per-call: owners a RecordArrival */
    cr_replica *replica; /* --state-backend's; NULL when standalone */
} cr_handlers;

/* Each handler takes one serialized request (len bytes at data, the
 * caller's) and fills out: OK with the serialized answer in out->body, or
 * an error status and message, state unchanged. Thread-safe; decoding and
 * the handler's scratch use the calling thread's arena (arena.h), so no
 * call mallocs per element. */
void cr_handle_plan(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
/* One RecordArrivalRequest to its RecordArrivalResponse, wire checks
 * included: what a stream handler calls per inbound message too (out must
 * start zeroed, as run_handler's does; its body is the caller's). */
void cr_handle_record_arrival(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
/* One RouteRequest to its RouteResponse, wire checks included: what the
 * Routes stream calls per inbound message too. */
void cr_handle_route(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_report_kv_events(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_rates(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_forget(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_select_injection(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_clear_reservations(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_node_profile(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_report_outcome(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_decision(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_stats(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_set_endpoints(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_drain_endpoint(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_list_endpoints(void *ctx, const uint8_t *data, size_t len, cr_reply *out);

/* ---- messages built from core types, shared by the handlers ---- */

/* ev's counts as an EndpointsChange (m initialised here). */
void cr_endpoints_change_msg(Cacheroute__V1__EndpointsChange *m,
                             const cr_core_members_event *ev);

/* ev as a serialized EndpointChange (lost 0) in a new malloc'd buffer:
 * *body (the caller's, free()) holds *len bytes. 0, or -1 when out of
 * memory. For the WatchEndpoints feed. */
int cr_endpoint_change_pack(const cr_core_members_event *ev, uint8_t **body, size_t *len);

/* e (NULL: no set) as an EndpointsResponse into out, with ev's change
 * when ev is not NULL (SetEndpoints, DrainEndpoint). */
void cr_endpoints_answer(const cr_handlers *h, const cr_endpoints *e,
                         const cr_core_members_event *ev, cr_reply *out);

/* The answer to a SetEndpoints or DrainEndpoint the core took (ev): when
 * the set follows the leader's (ev->followed), f is first forwarded
 * (cr_replica_forward; a full queue is RESOURCE_EXHAUSTED naming its
 * bound) and answered forwarded; then the current set with ev's change. */
void cr_endpoints_reply(const cr_handlers *h, const cr_core_members_event *ev,
                        const cr_forward *f, cr_reply *out);

/* Fill m (initialised here) from c / model; strings point into model. */
void cr_breakdown_msg(Cacheroute__V1__CostBreakdown *m, const cr_cost_breakdown *c);
void cr_cost_model_msg(Cacheroute__V1__CostModel *m, const cr_inject_model *model);

/* A DecisionReceipt pointing at r's fields (r must outlive it). */
typedef struct cr_receipt_msg {
    Cacheroute__V1__DecisionReceipt r;
    Cacheroute__V1__DecidedRequest req;
    Cacheroute__V1__CostModel model;
    Cacheroute__V1__CostBreakdown text, kv;
    Cacheroute__V1__TermError errors[CR_N_TERMS];
    Cacheroute__V1__TermError *ptrs[CR_N_TERMS];
} cr_receipt_msg;
void cr_receipt_msg_init(cr_receipt_msg *m, const cr_receipt *r);

/* r as a serialized DecisionReceipt (lost 0) in a new malloc'd buffer:
 * *body (the caller's, free()) holds *len bytes. Returns 0, or -1 when out
 * of memory. For GetDecision and the WatchDecisions feed alike. */
int cr_receipt_pack(const cr_receipt *r, uint8_t **body, size_t *len);

/* envoy.service.ext_proc.v3.ExternalProcessor/Process (epp.c): the ops of
 * a duplex method (duplex.h) whose sessions are e's streams; the caller
 * tag the rpc layer computes for the client is the stream's caller. */
cr_duplex_ops cr_epp_ops(cr_epp *e);

#endif
