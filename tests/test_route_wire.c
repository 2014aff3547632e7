/* Route's answer written straight from the core's decisions
 * (answer/answers.c) is byte for byte what protobuf-c packs from the
 * same RouteResponse: shards and cached tokens 0 to UINT32_MAX, admitted
 * 0, 1 and other ints, every reason and door word (an unknown one too), the doubles
 * protobuf-c leaves out or writes (0, -0.0, subnormals, infinities, NaNs,
 * any bit pattern), 0 to 300 decisions, generation 0 to its widest; never
 * past its bound. The request side, cr_wire_route_request, is compared
 * with protobuf-c in test_wire_pairs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "cacheroute/v1/cacheroute.pb-c.h"
#include "common.h"
#include "cunit_main.h"
#include "named.h"
#include "wire.h"

#define MAX_DECISIONS 300

typedef Cacheroute__V1__RouteDecision RouteDecision;

static const double DOUBLES[] = {0.0,  -0.0, 5e-324, -5e-324,  2.2250738585072009e-308,
                                 0.25, 1.0,  1e300,  INFINITY, -INFINITY,
                                 NAN,  -NAN};
#define N_DOUBLES (sizeof DOUBLES / sizeof DOUBLES[0])
static const uint32_t UINTS[] = {0, 1, 127, 128, 16383, 16384, 1u << 28, UINT32_MAX};
#define N_UINTS (sizeof UINTS / sizeof UINTS[0])

static uint64_t counter = 99;

/* A decision drawn from r: each field from its table or from random
 * bits. */
static cr_route_answer decision(uint64_t r)
{
    uint64_t bits = cr_mix64(r ^ 0x5bd1e995u);
    double wait, prefill;
    memcpy(&wait, &bits, sizeof wait);
    prefill = DOUBLES[(r >> 40) % N_DOUBLES];
    if (r & 1)
        wait = DOUBLES[(r >> 1) % N_DOUBLES];
    return (cr_route_answer){
        .shard = r & 2 ? UINTS[(r >> 8) % N_UINTS] : (uint32_t)(r >> 32) % 64,
        .admitted = (int)((r >> 16) % 4) - 1, /* -1, 0, 1, 2 */
        .cached_tokens = r & 4 ? UINTS[(r >> 20) % N_UINTS] : (uint32_t)(bits >> 40),
        .queue_wait_ms = wait,
        .prefill_ms = prefill,
        .reason = (cr_route_reason)((r >> 24) % (CR_ROUTE_N_WHY + 1)), /* + an unknown one */
        .door = (int)((r >> 44) % 4), /* routed, queued, shed, an unknown one */
    };
}

/* protobuf-c's bytes for the same RouteResponse, malloc'd; *len of them. */
static uint8_t *packed_by_protobuf_c(const cr_route_answer *a, size_t n, uint64_t gen,
                                     const cr_endpoints *named, size_t *len)
{
    static RouteDecision d[MAX_DECISIONS];
    static RouteDecision *ptrs[MAX_DECISIONS];
    for (size_t i = 0; i < n; i++) {
        cacheroute__v1__route_decision__init(&d[i]);
        d[i].shard = a[i].shard;
        d[i].admitted = a[i].admitted;
        d[i].cached_tokens = a[i].cached_tokens;
        d[i].queue_wait_ms = a[i].queue_wait_ms;
        d[i].prefill_ms = a[i].prefill_ms;
        d[i].reason = (char *)cr_route_reason_name(a[i].reason);
        d[i].door = (char *)cr_route_door_name(a[i].door);
        if (named && a[i].shard < named->n_slots) {
            d[i].endpoint_id = (char *)named->slot[a[i].shard].id;
            d[i].endpoint_address = (char *)named->slot[a[i].shard].address;
        }
        ptrs[i] = &d[i];
    }
    Cacheroute__V1__RouteResponse resp = CACHEROUTE__V1__ROUTE_RESPONSE__INIT;
    resp.routes = ptrs;
    resp.n_routes = n;
    resp.table_generation = gen;
    *len = protobuf_c_message_get_packed_size(&resp.base);
    uint8_t *buf = malloc(*len + 1);
    CU_ASSERT_FATAL(buf && protobuf_c_message_pack(&resp.base, buf) == *len);
    return buf;
}

/* Ours is protobuf-c's, within the bound (a canary just past it). */
static void same_named(const cr_route_answer *a, size_t n, uint64_t gen,
                       const cr_endpoints *named)
{
    size_t theirs_len, bound = cr_route_answer_bound(n, named);
    uint8_t *theirs = packed_by_protobuf_c(a, n, gen, named, &theirs_len);
    uint8_t *ours = malloc(bound + 1);
    CU_ASSERT_FATAL(ours != NULL);
    ours[bound] = 0x5a;
    size_t len = cr_route_answer_pack(a, n, gen, named, ours);
    CU_ASSERT(len <= bound && ours[bound] == 0x5a);
    CU_ASSERT_EQUAL(len, theirs_len);
    CU_ASSERT(len == theirs_len && memcmp(ours, theirs, len) == 0);
    free(theirs);
    free(ours);
}

static void same_bytes(const cr_route_answer *a, size_t n, uint64_t gen)
{
    same_named(a, n, gen, NULL);
}

/* rounds batches of n decisions, generation 0, 1, 128 and UINT64_MAX by
 * turns. */
static void batches(size_t n, int rounds)
{
    static const uint64_t gens[] = {0, 1, 128, UINT64_MAX};
    cr_route_answer a[MAX_DECISIONS];
    for (int k = 0; k < rounds; k++) {
        for (size_t i = 0; i < n; i++)
            a[i] = decision(cr_mix64(counter++));
        same_bytes(a, n, gens[k % 4]);
    }
}

static void test_empty(void) { batches(0, 4); }
static void test_single(void) { batches(1, 5000); }
static void test_several(void) { batches(17, 400); }
static void test_many(void) { batches(MAX_DECISIONS, 20); }

/* Every special double in both places, with every other field 0. */
static void test_each_double(void)
{
    for (size_t i = 0; i < N_DOUBLES; i++)
        for (size_t j = 0; j < N_DOUBLES; j++) {
            cr_route_answer a = {.queue_wait_ms = DOUBLES[i], .prefill_ms = DOUBLES[j]};
            same_bytes(&a, 1, 0);
        }
}

/* The widest decision: the bound is what cr_wire_decision_bytes says. */
static void test_widest(void)
{
    cr_route_answer w = {.shard = UINT32_MAX, .admitted = 1, .cached_tokens = UINT32_MAX,
                         .queue_wait_ms = NAN, .prefill_ms = -INFINITY,
                         .reason = CR_ROUTE_N_WHY - 1};
    uint8_t buf[128];
    size_t most = 0;
    for (int r = 0; r < CR_ROUTE_N_WHY; r++)
        for (int k = 0; k < 4; k++) {
            w.reason = (cr_route_reason)r;
            w.door = k; /* 3: "unknown", the longest */
            same_bytes(&w, 1, UINT64_MAX);
            size_t n = cr_route_answer_pack(&w, 1, UINT64_MAX, NULL, buf);
            most = n > most ? n : most;
        }
    CU_ASSERT_EQUAL(most, cr_route_answer_bound(1, NULL));
}

/* With an endpoint set, each decision on one of its shards (a gone one
 * too) names it; one past them does not. The longest names fill the
 * bound's share. */
static void test_named(void)
{
    cr_endpoints *e = cr_test_named_set();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    cr_route_answer a[MAX_DECISIONS];
    for (int k = 0; k < 200; k++) {
        size_t n = 1 + (size_t)k % 17;
        for (size_t i = 0; i < n; i++) {
            a[i] = decision(cr_mix64(counter++));
            a[i].shard = (uint32_t)(cr_mix64(counter) % 5);
        }
        same_named(a, n, (uint64_t)k, e);
    }
    cr_route_answer w = {.shard = 1, .admitted = 1, .cached_tokens = UINT32_MAX,
                         .queue_wait_ms = NAN, .prefill_ms = -INFINITY,
                         .reason = CR_ROUTE_WHY_LEAST_LOADED, .door = CR_ROUTE_DOOR_QUEUED};
    uint8_t buf[1024];
    CU_ASSERT(cr_route_answer_pack(&w, 1, UINT64_MAX, e, buf) <= cr_route_answer_bound(1, e));
    CU_ASSERT(cr_route_answer_pack(&w, 1, UINT64_MAX, e, buf) >
              cr_route_answer_bound(1, NULL) + CR_ENDPOINT_ID_MAX + CR_ENDPOINT_ADDRESS_MAX);
    cr_endpoints_release(e);
}

/* The numbers and types answers.c writes, and no field it would
 * leave out. */
static void test_descriptors(void)
{
    static const struct {
        const char *name;
        ProtobufCType type;
    } want[] = {{"shard", PROTOBUF_C_TYPE_UINT32},
                {"admitted", PROTOBUF_C_TYPE_BOOL},
                {"cached_tokens", PROTOBUF_C_TYPE_UINT32},
                {"queue_wait_ms", PROTOBUF_C_TYPE_DOUBLE},
                {"prefill_ms", PROTOBUF_C_TYPE_DOUBLE},
                {"reason", PROTOBUF_C_TYPE_STRING},
                {"endpoint_id", PROTOBUF_C_TYPE_STRING},
                {"endpoint_address", PROTOBUF_C_TYPE_STRING},
                {"door", PROTOBUF_C_TYPE_STRING}};
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__route_decision__descriptor;
    const ProtobufCMessageDescriptor *resp = &cacheroute__v1__route_response__descriptor;
    CU_ASSERT_EQUAL_FATAL(d->n_fields, 9);
    for (unsigned i = 0; i < 9; i++)
        CU_ASSERT(d->fields[i].id == i + 1 && strcmp(d->fields[i].name, want[i].name) == 0 &&
                  d->fields[i].type == want[i].type &&
                  d->fields[i].label == PROTOBUF_C_LABEL_NONE);
    CU_ASSERT_EQUAL_FATAL(resp->n_fields, 2);
    CU_ASSERT(resp->fields[0].id == 1 && resp->fields[0].label == PROTOBUF_C_LABEL_REPEATED &&
              resp->fields[0].descriptor == d);
    CU_ASSERT(resp->fields[1].id == 2 && resp->fields[1].type == PROTOBUF_C_TYPE_UINT64 &&
              resp->fields[1].label == PROTOBUF_C_LABEL_NONE);
}

static const cr_test_case tests[] = {
    {"no decisions", test_empty},
    {"one decision", test_single},
    {"17 decisions", test_several},
    {"300 decisions", test_many},
    {"every special double", test_each_double},
    {"widest decision fills the bound", test_widest},
    {"endpoint names with a set", test_named},
    {"descriptors agree", test_descriptors},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"route answer", tests}};
CR_TEST_MAIN(suites)
