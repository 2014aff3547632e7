/* SelectInjection: SelectInjectionRequest decode, request_id and source
 * checks, the cost model's decision and its reservations. */
#include <math.h>
#include <string.h>

#include "fuzz.h"

static const char *const reasons[] = {"no_knowledge", "no_kv_available", "kv_faster",
                                      "kv_hidden_by_queue", "text_faster", "link_congested"};

static int finite_breakdown(const Cacheroute__V1__CostBreakdown *b)
{
    return b && isfinite(b->queue_wait_ms) && isfinite(b->prefill_ms) &&
           isfinite(b->link_wait_ms) && isfinite(b->transfer_ms) && isfinite(b->load_ms) &&
           isfinite(b->total_ms) && b->total_ms >= 0;
}

static int names_a_source(const Cacheroute__V1__SelectInjectionRequest *req, const char *name)
{
    for (size_t i = 0; i < req->n_sources; i++)
        if (!strcmp(req->sources[i]->name, name))
            return 1;
    return 0;
}

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    const Cacheroute__V1__SelectInjectionRequest *req = (const void *)request;
    const Cacheroute__V1__SelectInjectionResponse *resp = (const void *)response;
    CR_FUZZ_CHECK(!strcmp(resp->request_id, req->request_id), "request_id '%s' echoed as '%s'",
                  req->request_id, resp->request_id);
    CR_FUZZ_CHECK(cr_fuzz_one_of(resp->reason, reasons, sizeof reasons / sizeof *reasons),
                  "reason '%s'", resp->reason);
    CR_FUZZ_CHECK(resp->mode == CACHEROUTE__V1__INJECTION_MODE__INJECTION_MODE_TEXT ||
                      resp->mode == CACHEROUTE__V1__INJECTION_MODE__INJECTION_MODE_KV_CACHE,
                  "mode %d", (int)resp->mode);
    CR_FUZZ_CHECK(finite_breakdown(resp->text), "text path breakdown not finite");
    CR_FUZZ_CHECK(!resp->kv || finite_breakdown(resp->kv), "KV path breakdown not finite");
    CR_FUZZ_CHECK(!*resp->source || names_a_source(req, resp->source),
                  "source '%s' is none of the request's", resp->source);
    if (resp->mode == CACHEROUTE__V1__INJECTION_MODE__INJECTION_MODE_KV_CACHE)
        CR_FUZZ_CHECK(resp->kv && *resp->source, "KV chosen without a source or breakdown");
}

static const cr_fuzz_method select_injection = {
    .handle = cr_handle_select_injection,
    .request = &cacheroute__v1__select_injection_request__descriptor,
    .response = &cacheroute__v1__select_injection_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED,
    .route_by = CR_ROUTE_PLAN,
    /* An answer is ~130 bytes plus request_id and the source's name (128
     * bytes each at most): 256 puts "answer too large" in reach. */
    .max_message = 256,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(select_injection)
