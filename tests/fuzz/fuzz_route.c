/* Route: RouteRequest decode, the wire's count and answer bounds, the
 * core's field checks and the ttft rule over a small prefix index (64
 * blocks a shard, so inputs evict): one decision per request, each in
 * range and consistent with its request, and the index never over its
 * bound. And on every input the request decoded straight from the wire
 * (cr_wire_route_request, what the handler takes it with) against
 * protobuf-c's; the answer written straight is checked by the driver
 * (it packs back to the same bytes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wire.h"

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

/* A string the decoder points at (len bytes) as protobuf-c's copy m. */
static int same_string(const char *s, size_t len, const char *m)
{
    if (!s || !m)
        return !s && !m;
    return strlen(m) == len && memcmp(s, m, len) == 0;
}

/* Item i as decoded straight (w) and by protobuf-c (m). */
static void check_item(size_t i, const cr_route_request *w, const Cacheroute__V1__RouteItem *m)
{
    CR_FUZZ_CHECK(w->has_owner == m->has_owner && w->owner == m->owner &&
                      w->has_prompt_tokens == m->has_prompt_tokens &&
                      w->prompt_tokens == m->prompt_tokens,
                  "item %zu: owner or prompt_tokens differ", i);
    CR_FUZZ_CHECK(w->n_hashes == m->n_block_hashes &&
                      (!w->n_hashes ||
                       memcmp(w->hashes, m->block_hashes, w->n_hashes * sizeof *w->hashes) == 0),
                  "item %zu: %zu hashes decoded, %zu unpacked, or different", i, w->n_hashes,
                  m->n_block_hashes);
    CR_FUZZ_CHECK(same_string(w->space, w->space_len, m->namespace_) &&
                      same_string(w->request_id, w->request_id ? strlen(w->request_id) : 0,
                                  m->request_id),
                  "item %zu: namespace or request_id differ", i);
}

/* Where the decoder takes the bytes, sized as the handler sizes them,
 * protobuf-c takes them too with the same items, and the string check
 * passes them. */
static void check_decode(const uint8_t *data, size_t len)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__route_request__descriptor;
    size_t max_hashes, max = cr_wire_route_size(data, len, &max_hashes);
    CR_FUZZ_CHECK(max == cr_wire_count(d, data, len, "requests") &&
                      max_hashes <= cr_wire_route_hashes_bound(data, len),
                  "sized %zu items, %zu hashes, against cr_wire_count's and the bound", max,
                  max_hashes);
    cr_wire_route_out out = {.items = malloc((max + 1) * sizeof *out.items), .max_items = max,
                             .hashes = malloc((max_hashes + 1) * sizeof *out.hashes),
                             .max_hashes = max_hashes, .text = malloc(len + 1), .text_cap = len};
    CR_FUZZ_CHECK(out.items && out.hashes && out.text, "out of memory");
    Cacheroute__V1__RouteRequest *w = NULL;
    cr_error err;
    if (cr_wire_route_request(data, len, &out) == 0 &&
        (w = (void *)cr_fuzz_split_agrees(d, data, len, data, 0)) != NULL) {
        CR_FUZZ_CHECK(cr_wire_check_strings(d, data, len, &err) == 0,
                      "decoded straight, but the string check says: %s", err.msg);
        CR_FUZZ_CHECK(out.n_items == w->n_requests, "%zu items decoded, %zu unpacked",
                      out.n_items, w->n_requests);
        for (size_t i = 0; i < out.n_items; i++)
            check_item(i, &out.items[i], w->requests[i]);
        protobuf_c_message_free_unpacked(&w->base, NULL);
    }
    free(out.items);
    free(out.hashes);
    free(out.text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_decode(data, size);
    return cr_fuzz_unary(&route, data, size);
}
