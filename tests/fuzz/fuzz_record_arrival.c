/* RecordArrival: RecordArrivalRequest decode, the answer-size bound, the
 * core's owner and weight checks and routing (--route-by bounded, so the
 * outstanding-work path runs too). */
#include <math.h>

#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    const Cacheroute__V1__RecordArrivalRequest *req = (const void *)request;
    const Cacheroute__V1__RecordArrivalResponse *resp = (const void *)response;
    CR_FUZZ_CHECK(resp->recorded == req->n_owners, "recorded %u of %zu", resp->recorded,
                  req->n_owners);
    CR_FUZZ_CHECK(resp->table_generation == 1, "table generation %llu, not the seeded 1",
                  (unsigned long long)resp->table_generation);
    CR_FUZZ_CHECK(resp->n_routes == (req->omit_routes ? 0 : req->n_owners),
                  "%zu routes for %zu owners (omit_routes %d)", resp->n_routes, req->n_owners,
                  (int)req->omit_routes);
    for (size_t i = 0; i < resp->n_routes; i++) {
        const Cacheroute__V1__Route *r = resp->routes[i];
        CR_FUZZ_CHECK(r->owner == req->owners[i], "route %zu is owner %lld, asked %lld", i,
                      (long long)r->owner, (long long)req->owners[i]);
        CR_FUZZ_CHECK(r->preferred_shard < 8, "route %zu to shard %u of the table's 8", i,
                      r->preferred_shard);
        CR_FUZZ_CHECK(isfinite(r->rate) && r->rate > 0, "route %zu: rate %g after an arrival", i,
                      r->rate);
    }
}

static const cr_fuzz_method record_arrival = {
    .handle = cr_handle_record_arrival,
    .request = &cacheroute__v1__record_arrival_request__descriptor,
    .response = &cacheroute__v1__record_arrival_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED,
    .route_by = CR_ROUTE_BOUNDED,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(record_arrival)
