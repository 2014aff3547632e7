/* Plan: PlanRequest decode, the core's validation, planning, install, and
 * the answer's size check; and the rates decoded straight from the wire
 * (cr_wire_split_pairs, what the handler takes them with) against
 * protobuf-c's on every input. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wire.h"

typedef Cacheroute__V1__RoutingTable Table;

static void check_placements(const Table *t)
{
    uint32_t r = t->n_shards;
    uint32_t *mark = calloc(r ? r : 1, sizeof *mark); /* placement i + 1 that took it */
    CR_FUZZ_CHECK(mark, "out of memory");
    for (size_t i = 0; i < t->n_placements; i++) {
        const Cacheroute__V1__Placement *p = t->placements[i];
        int preferred = 0;
        CR_FUZZ_CHECK(p->n_shards >= 1 && p->n_shards <= r, "owner %lld on %zu of %u shards",
                      (long long)p->owner, p->n_shards, r);
        for (size_t k = 0; k < p->n_shards; k++) {
            uint32_t s = p->shards[k];
            CR_FUZZ_CHECK(s < r && mark[s] != i + 1, "owner %lld: shard %u twice or >= %u",
                          (long long)p->owner, s, r);
            mark[s] = (uint32_t)(i + 1);
            preferred |= s == p->preferred_shard;
        }
        CR_FUZZ_CHECK(preferred, "owner %lld prefers shard %u, not one of its own",
                      (long long)p->owner, p->preferred_shard);
    }
    free(mark);
}

static void check_ok(const cr_fuzz_env *env, const ProtobufCMessage *request,
                     const ProtobufCMessage *response)
{
    const Cacheroute__V1__PlanRequest *req = (const void *)request;
    const Cacheroute__V1__PlanResponse *resp = (const void *)response;
    const Table *t = resp->table;
    CR_FUZZ_CHECK(t && resp->churn, "a plan without its table or churn");
    CR_FUZZ_CHECK(t->n_shards >= 1 && t->n_shards <= CR_MAX_SHARDS &&
                      t->n_expected_load == t->n_shards,
                  "%u shards, %zu loads", t->n_shards, t->n_expected_load);
    for (size_t s = 0; s < t->n_expected_load; s++)
        CR_FUZZ_CHECK(isfinite(t->expected_load[s]) && t->expected_load[s] >= 0,
                      "shard %zu's load %g", s, t->expected_load[s]);
    CR_FUZZ_CHECK(isfinite(t->imbalance) && t->imbalance >= 1 - 1e-9, "imbalance %g",
                  t->imbalance);
    check_placements(t);
    cr_core_plan_result cur;
    cr_core_current(env->core, &cur);
    uint64_t want = req->install ? 2 : 0; /* the seeded table is generation 1 */
    CR_FUZZ_CHECK(t->generation == want && cur.generation == (req->install ? 2 : 1),
                  "install %d: answered generation %llu, current %llu", (int)req->install,
                  (unsigned long long)t->generation, (unsigned long long)cur.generation);
    cr_core_plan_result_free(&cur);
}

static const cr_fuzz_method plan = {
    .handle = cr_handle_plan,
    .request = &cacheroute__v1__plan_request__descriptor,
    .response = &cacheroute__v1__plan_response__descriptor,
    .codes = CR_FUZZ_CODES_CHECKED,
    .route_by = CR_ROUTE_PLAN,
    .check_ok = check_ok,
};

/* Where the split takes the bytes and protobuf-c the rest it leaves,
 * protobuf-c takes the whole too, with the same rates in the same order. */
static void check_split(const uint8_t *data, size_t len)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__plan_request__descriptor;
    size_t max = cr_wire_count(d, data, len, "rates"), left;
    cr_session_rate *got = malloc((max + 1) * sizeof *got);
    uint8_t *rest = malloc(len + 1);
    CR_FUZZ_CHECK(got && rest, "out of memory");
    cr_wire_pairs out = {got, max, sizeof *got, offsetof(cr_session_rate, owner),
                         offsetof(cr_session_rate, rate), 0};
    Cacheroute__V1__PlanRequest *w = NULL;
    if (cr_wire_split_pairs(data, len, 2, &out, rest, &left) == 0 &&
        (w = (void *)cr_fuzz_split_agrees(d, data, len, rest, left)) != NULL) {
        for (size_t i = 0; i < out.n; i++)
            CR_FUZZ_CHECK(i < w->n_rates && got[i].owner == w->rates[i]->owner &&
                              memcmp(&got[i].rate, &w->rates[i]->rate, sizeof(double)) == 0,
                          "rates[%zu] of %zu split differently", i, out.n);
        CR_FUZZ_CHECK(out.n == w->n_rates, "%zu rates split, %zu unpacked", out.n, w->n_rates);
        protobuf_c_message_free_unpacked(&w->base, NULL);
    }
    free(rest);
    free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_split(data, size);
    return cr_fuzz_unary(&plan, data, size);
}
