/* ReportKvEvents: the wire's count bound, the core's field checks (all
 * before anything is applied) and the index's map over a small prefix
 * index (64 blocks a shard, so inputs evict): what an OK answer counts
 * never exceeds the blocks the request named, kind by kind. */
#include "fuzz.h"

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    (void)env;
    const Cacheroute__V1__ReportKvEventsRequest *req = (const void *)request;
    const Cacheroute__V1__ReportKvEventsResponse *resp = (const void *)response;
    uint64_t stored = 0, removed = 0;
    for (size_t i = 0; i < req->n_events; i++) {
        const Cacheroute__V1__KvEvent *e = req->events[i];
        if (e->event_case == CACHEROUTE__V1__KV_EVENT__EVENT_BLOCK_STORED)
            stored += e->block_stored->n_block_hashes;
        else if (e->event_case == CACHEROUTE__V1__KV_EVENT__EVENT_BLOCK_REMOVED)
            removed += e->block_removed->n_block_hashes;
    }
    CR_FUZZ_CHECK(resp->stored + resp->orphans <= stored,
                  "%llu stored and %llu orphans of %llu blocks named",
                  (unsigned long long)resp->stored, (unsigned long long)resp->orphans,
                  (unsigned long long)stored);
    CR_FUZZ_CHECK(resp->removed + resp->unknown <= removed,
                  "%llu removed and %llu unknown of %llu blocks named",
                  (unsigned long long)resp->removed, (unsigned long long)resp->unknown,
                  (unsigned long long)removed);
}

static const cr_fuzz_method report_kv_events = {
    .handle = cr_handle_report_kv_events,
    .request = &cacheroute__v1__report_kv_events_request__descriptor,
    .response = &cacheroute__v1__report_kv_events_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED,
    .route_by = CR_ROUTE_TTFT,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(report_kv_events)
