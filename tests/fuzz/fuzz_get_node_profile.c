/* GetNodeProfile: an empty request (unknown fields and all) and the quiet
 * probe's profile. Read-only. */
#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    (void)request;
    const Cacheroute__V1__NodeProfile *p = (const void *)response;
    CR_FUZZ_CHECK(!p->cuda_available && p->n_gpus == 0 && p->n_nics == 0,
                  "the quiet probe found cuda %d, %zu GPUs, %zu NICs", (int)p->cuda_available,
                  p->n_gpus, p->n_nics);
    CR_FUZZ_CHECK(p->cost_model && p->cost_model->kv_bytes_per_token > 0 &&
                      *p->cost_model->source,
                  "no cost model, or one without its source");
}

static const cr_fuzz_method get_node_profile = {
    .handle = cr_handle_get_node_profile,
    .request = &cacheroute__v1__get_node_profile_request__descriptor,
    .response = &cacheroute__v1__node_profile__descriptor,
    .codes = CR_CODE(GRPC_STATUS_OK) | CR_CODE(GRPC_STATUS_INVALID_ARGUMENT),
    .read_only = 1,
    .route_by = CR_ROUTE_PLAN,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(get_node_profile)
