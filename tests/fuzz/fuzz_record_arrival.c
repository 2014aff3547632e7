/* RecordArrival: RecordArrivalRequest decode, the answer-size bound, the
 * core's owner and weight checks and routing (--route-by bounded, so the
 * outstanding-work path runs too); and the owners decoded straight from the
 * wire (cr_wire_split_varints, what the handler takes them with) against
 * protobuf-c's on every input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wire.h"

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

/* Where the split takes the bytes and protobuf-c the rest it leaves,
 * protobuf-c takes the whole too, with the same owners in the same order. */
static void check_split(const uint8_t *data, size_t len)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__record_arrival_request__descriptor;
    size_t max = cr_wire_count(d, data, len, "owners"), left;
    int64_t *got = malloc((max + 1) * sizeof *got);
    uint8_t *rest = malloc(len + 1);
    CR_FUZZ_CHECK(got && rest, "out of memory");
    cr_wire_varints out = {got, max, 0};
    Cacheroute__V1__RecordArrivalRequest *w = NULL;
    if (cr_wire_split_varints(data, len, 1, &out, rest, &left) == 0 &&
        (w = (void *)cr_fuzz_split_agrees(d, data, len, rest, left)) != NULL) {
        CR_FUZZ_CHECK(out.n == w->n_owners &&
                          (!out.n || memcmp(got, w->owners, out.n * sizeof *got) == 0),
                      "%zu owners split, %zu unpacked, or different", out.n, w->n_owners);
        protobuf_c_message_free_unpacked(&w->base, NULL);
    }
    free(rest);
    free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_split(data, size);
    return cr_fuzz_unary(&record_arrival, data, size);
}
