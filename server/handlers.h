/* Handlers for cacheroute.v1.CacheRoute: decode, one cr_core_* call,
 * encode. ctx is a cr_handlers. */
#ifndef CR_HANDLERS_H
#define CR_HANDLERS_H

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "core.h"
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
void cr_handle_get_rates(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_forget(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_select_injection(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_clear_reservations(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_node_profile(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_report_outcome(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_decision(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_stats(void *ctx, const uint8_t *data, size_t len, cr_reply *out);

/* ---- messages built from core types, shared by the handlers ---- */

/* Fill m (initialised here) from c / model; strings point into model. */
void cr_breakdown_msg(Cacheroute__V1__CostBreakdown *m, const cr_cost_breakdown *c);
void cr_cost_model_msg(Cacheroute__V1__CostModel *m, const cr_inject_model *model);

/* r as a serialized DecisionReceipt (lost 0) in a new malloc'd buffer:
 * *body (the caller's, free()) holds *len bytes. Returns 0, or -1 when out
 * of memory. For GetDecision and the WatchDecisions feed alike. */
int cr_receipt_pack(const cr_receipt *r, uint8_t **body, size_t *len);

/* A core error as the reply, with err's text: CR_EINVAL is
 * INVALID_ARGUMENT, CR_ESTATE FAILED_PRECONDITION, CR_ENOMEM
 * RESOURCE_EXHAUSTED. */
void cr_reply_core_error(cr_reply *out, cr_status st, const cr_error *err);

#endif
