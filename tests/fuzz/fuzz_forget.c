/* Forget: ForgetRequest decode and the estimator's drop; afterwards none
 * of the listed owners is tracked. */
#include <stdlib.h>

#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    const Cacheroute__V1__ForgetRequest *req = (const void *)request;
    const Cacheroute__V1__ForgetResponse *resp = (const void *)response;
    CR_FUZZ_CHECK(resp->forgotten <= req->n_owners && resp->forgotten <= 16,
                  "forgot %u of %zu listed, 16 tracked", resp->forgotten, req->n_owners);
    cr_session_rate *rates;
    size_t n;
    uint64_t tracked;
    cr_error err;
    CR_FUZZ_CHECK(cr_core_rates(env->core, NULL, 0, &rates, &n, &tracked, &err) == CR_OK,
                  "GetRates after Forget: %s", err.msg);
    CR_FUZZ_CHECK(tracked == 16 - resp->forgotten, "%llu tracked after forgetting %u of 16",
                  (unsigned long long)tracked, resp->forgotten);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < req->n_owners; k++)
            CR_FUZZ_CHECK(rates[i].owner != req->owners[k], "owner %lld still tracked",
                          (long long)rates[i].owner);
    free(rates);
}

static const cr_fuzz_method forget = {
    .handle = cr_handle_forget,
    .request = &cacheroute__v1__forget_request__descriptor,
    .response = &cacheroute__v1__forget_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED,
    .route_by = CR_ROUTE_PLAN,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(forget)
