/* ReportOutcome: ReportOutcomeRequest decode with every optional field,
 * the batch bound, each outcome's checks (all or nothing), matching to the
 * seeded receipts "r0" .. "r3", calibration and the served hits. */
#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    const Cacheroute__V1__ReportOutcomeRequest *req = (const void *)request;
    const Cacheroute__V1__ReportOutcomeResponse *resp = (const void *)response;
    CR_FUZZ_CHECK((size_t)resp->accepted + resp->rejected == req->n_outcomes,
                  "accepted %u + rejected %u of %zu", resp->accepted, resp->rejected,
                  req->n_outcomes);
    CR_FUZZ_CHECK(resp->matched <= resp->accepted, "matched %u of %u accepted", resp->matched,
                  resp->accepted);
    CR_FUZZ_CHECK(!resp->rejected == !*resp->first_rejection,
                  "%u rejected, first rejection '%s'", resp->rejected, resp->first_rejection);
}

static const cr_fuzz_method report_outcome = {
    .handle = cr_handle_report_outcome,
    .request = &cacheroute__v1__report_outcome_request__descriptor,
    .response = &cacheroute__v1__report_outcome_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED,
    .route_by = CR_ROUTE_BOUNDED, /* an outcome releases its route's work */
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(report_outcome)
