/* Route: RouteRequest decode, the wire's count and answer bounds, the
 * core's field checks and the ttft rule over a small prefix index (64
 * blocks a shard, so inputs evict): one decision per request, each in
 * range and consistent with its request, and the index never over its
 * bound. */
#include <math.h>
#include <string.h>

#include "fuzz.h"

static const char *const REASONS[] = {"prefix", "session", "planned", "spill", "least_loaded",
                                      "rule"};

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    const Cacheroute__V1__RouteRequest *req = (const void *)request;
    const Cacheroute__V1__RouteResponse *resp = (const void *)response;
    CR_FUZZ_CHECK(resp->n_routes == req->n_requests, "%zu decisions for %zu requests",
                  resp->n_routes, req->n_requests);
    CR_FUZZ_CHECK(resp->table_generation == 1, "table generation %llu, not the seeded 1",
                  (unsigned long long)resp->table_generation);
    for (size_t i = 0; i < resp->n_routes; i++) {
        const Cacheroute__V1__RouteDecision *d = resp->routes[i];
        const Cacheroute__V1__RouteItem *q = req->requests[i];
        uint64_t tokens = q->prompt_tokens ? q->prompt_tokens : q->n_block_hashes * 16ull;
        CR_FUZZ_CHECK(d->shard < 8, "decision %zu to shard %u of the table's 8", i, d->shard);
        CR_FUZZ_CHECK(d->cached_tokens <= tokens, "decision %zu: %u cached of %llu tokens", i,
                      d->cached_tokens, (unsigned long long)tokens);
        /* without hashes only the owner's session predicts a hit */
        CR_FUZZ_CHECK(!q->n_block_hashes ? q->has_owner || !d->cached_tokens
                                         : d->cached_tokens <= q->n_block_hashes * 16ull,
                      "decision %zu: %u cached of %zu blocks", i, d->cached_tokens,
                      q->n_block_hashes);
        CR_FUZZ_CHECK(isfinite(d->queue_wait_ms) && d->queue_wait_ms >= 0 &&
                          isfinite(d->prefill_ms) && d->prefill_ms >= 0,
                      "decision %zu: wait %g, prefill %g ms", i, d->queue_wait_ms, d->prefill_ms);
        CR_FUZZ_CHECK(cr_fuzz_one_of(d->reason, REASONS, sizeof REASONS / sizeof REASONS[0]),
                      "decision %zu: reason \"%s\"", i, d->reason);
        CR_FUZZ_CHECK(!d->admitted || (q->has_owner && q->owner >= 1 && q->owner <= 16),
                      "decision %zu admitted an owner the seeded table does not hold", i);
    }
    cr_route_stats st;
    cr_core_route_stats_read(env->core, &st, NULL, 0);
    CR_FUZZ_CHECK(st.index_blocks <= 8 * 64, "%llu blocks indexed, over 8 shards x 64",
                  (unsigned long long)st.index_blocks);
}

static const cr_fuzz_method route = {
    .handle = cr_handle_route,
    .request = &cacheroute__v1__route_request__descriptor,
    .response = &cacheroute__v1__route_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED,
    .route_by = CR_ROUTE_TTFT,
    .check_ok = check_ok,
};

CR_FUZZ_UNARY_TARGET(route)
