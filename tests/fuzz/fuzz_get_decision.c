/* GetDecision: GetDecisionRequest decode and the receipt lookup (the
 * seeded "r0" .. "r3" are found). Read-only. */
#include <string.h>

#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    const Cacheroute__V1__GetDecisionRequest *req = (const void *)request;
    const Cacheroute__V1__DecisionReceipt *r = (const void *)response;
    CR_FUZZ_CHECK(!strcmp(r->request_id, req->request_id), "asked '%s', got '%s'",
                  req->request_id, r->request_id);
    CR_FUZZ_CHECK(r->request && r->cost_model && r->text && r->seq >= 1 && r->seq <= 4,
                  "receipt '%s' incomplete or seq %llu", r->request_id,
                  (unsigned long long)r->seq);
}

static const cr_fuzz_method get_decision = {
    .handle = cr_handle_get_decision,
    .request = &cacheroute__v1__get_decision_request__descriptor,
    .response = &cacheroute__v1__decision_receipt__descriptor,
    .codes = CR_CODE(GRPC_STATUS_OK) | CR_CODE(GRPC_STATUS_INVALID_ARGUMENT) |
             CR_CODE(GRPC_STATUS_NOT_FOUND),
    .read_only = 1,
    .route_by = CR_ROUTE_PLAN,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(get_decision)
