/* Unary handlers for cacheroute.v1.CacheRoute; ctx is the cr_sidecar. */
#ifndef CR_HANDLERS_H
#define CR_HANDLERS_H

#include "rpc.h"
#include "sidecar.h"

void cr_handle_plan(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_record_arrival(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_rates(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_forget(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_select_injection(void *ctx, const uint8_t *data, size_t len, cr_reply *out);
void cr_handle_get_node_profile(void *ctx, const uint8_t *data, size_t len, cr_reply *out);

#endif
