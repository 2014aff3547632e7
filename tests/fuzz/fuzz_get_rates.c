/* GetRates: GetRatesRequest decode, the listed owners' rates or every
 * tracked owner's, and the answer-size check. Read-only. merged is
 * FAILED_PRECONDITION here: the target's sidecar has no --state-backend. */
#include <math.h>

#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    const Cacheroute__V1__GetRatesRequest *req = (const void *)request;
    const Cacheroute__V1__GetRatesResponse *resp = (const void *)response;
    CR_FUZZ_CHECK(resp->tracked_owners == 16, "%llu owners tracked, not the seeded 16",
                  (unsigned long long)resp->tracked_owners);
    size_t want = req->n_owners ? req->n_owners : resp->tracked_owners;
    CR_FUZZ_CHECK(resp->n_rates == want, "%zu rates, want %zu", resp->n_rates, want);
    for (size_t i = 0; i < resp->n_rates; i++) {
        const Cacheroute__V1__SessionRate *r = resp->rates[i];
        CR_FUZZ_CHECK(isfinite(r->rate) && r->rate >= 0, "rate %zu is %g", i, r->rate);
        if (req->n_owners)
            CR_FUZZ_CHECK(r->owner == req->owners[i], "rate %zu is owner %lld, asked %lld", i,
                          (long long)r->owner, (long long)req->owners[i]);
        else if (i > 0)
            CR_FUZZ_CHECK(r->owner > resp->rates[i - 1]->owner, "all rates not sorted at %zu",
                          i);
    }
}

static const cr_fuzz_method get_rates = {
    .handle = cr_handle_get_rates,
    .request = &cacheroute__v1__get_rates_request__descriptor,
    .response = &cacheroute__v1__get_rates_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED | CR_CODE(GRPC_STATUS_FAILED_PRECONDITION),
    .read_only = 1,
    .route_by = CR_ROUTE_PLAN,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(get_rates)
