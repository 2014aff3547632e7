/* GetStats: an empty request (unknown fields and all) and the closed
 * loop's figures. Read-only. */
#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    (void)request;
    const Cacheroute__V1__GetStatsResponse *s = (const void *)response;
    CR_FUZZ_CHECK(s->served && s->receipts && s->outcomes, "GetStats without its parts");
    CR_FUZZ_CHECK(s->receipts->kept == 4 && s->receipts->kept <= s->receipts->capacity,
                  "%llu receipts kept of %llu, the seed made 4",
                  (unsigned long long)s->receipts->kept,
                  (unsigned long long)s->receipts->capacity);
}

static const cr_fuzz_method get_stats = {
    .handle = cr_handle_get_stats,
    .request = &cacheroute__v1__get_stats_request__descriptor,
    .response = &cacheroute__v1__get_stats_response__descriptor,
    .codes = CR_CODE(GRPC_STATUS_OK) | CR_CODE(GRPC_STATUS_INVALID_ARGUMENT),
    .read_only = 1,
    .route_by = CR_ROUTE_PLAN,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(get_stats)
