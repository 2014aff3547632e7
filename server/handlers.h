/* Handlers for cacheroute.v1.CacheRoute: decode, one cr_core_* call,
 * encode. ctx is a cr_handlers. */
#ifndef CR_HANDLERS_H
#define CR_HANDLERS_H

#include "core.h"
#include "rpc.h"

typedef struct cr_handlers {
    cr_core *core;
    size_t max_message; /* --max-message-bytes: the largest answer */
} cr_handlers;

void cr_handle_plan(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_record_arrival(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_rates(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_forget(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_select_injection(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_node_profile(void *ctx, const uint8_t *data, size_t len, cr_reply *out);

/* A core error as the reply: CR_EINVAL is INVALID_ARGUMENT, anything else
 * RESOURCE_EXHAUSTED, with err's text. */
void cr_reply_core_error(cr_reply *out, cr_status st, const cr_error *err);

#endif
