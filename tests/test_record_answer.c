/* RecordArrival's answer written straight from the core's routes
 * (answer/answers.c) is byte for byte what protobuf-c packs from the
 * same RecordArrivalResponse: random owners (negative, 0, 10-byte), every
 * kind of double protobuf-c takes (0, -0.0, subnormals, infinities, NaNs,
 * random bit patterns), admitted 0, 1 and other non-zero ints, shards 0 to
 * UINT32_MAX, 0, 1 and 1000 routes, recorded and generation 0 to their
 * widest; and never past its bound. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "cacheroute/v1/cacheroute.pb-c.h"
#include "common.h"
#include "cunit_main.h"
#include "named.h"

static uint64_t seed = 14;

static uint64_t draw(void) { return cr_mix64(seed++); }

static double any_double(void)
{
    static const double special[] = {0.0, -0.0, 5e-324, -5e-324, 2.2250738585072009e-308,
                                     1.0, 1e300, INFINITY, -INFINITY, NAN, -NAN};
    uint64_t r = draw();
    if (r % 3 == 0)
        return special[(r >> 8) % (sizeof special / sizeof special[0])];
    uint64_t bits = draw(); /* any pattern: finite, subnormal, inf, NaN payloads */
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static cr_route_answer any_route(void)
{
    static const int64_t owners[] = {0, 1, -1, 127, 128, INT64_MIN, INT64_MAX};
    static const uint32_t shards[] = {0, 1, 127, 128, 65535, 65536, 1u << 28, UINT32_MAX};
    static const int admitted[] = {0, 1, 7, -1};
    uint64_t r = draw();
    cr_route_answer rt;
    rt.owner = r % 4 == 0 ? owners[(r >> 8) % 7] : (int64_t)(draw() >> (r >> 16) % 64);
    rt.rate = any_double();
    rt.admitted = admitted[(r >> 24) % 4];
    rt.shard = r % 5 == 0 ? shards[(r >> 32) % 8] : (uint32_t)(draw() % 300);
    return rt;
}

/* protobuf-c's own bytes for the same answer. */
static uint8_t *reference(const cr_route_answer *routes, size_t n, uint32_t recorded, uint64_t gen,
                          const cr_endpoints *named, size_t *len)
{
    Cacheroute__V1__Route *msgs = calloc(n + 1, sizeof *msgs);
    Cacheroute__V1__Route **ptrs = calloc(n + 1, sizeof *ptrs);
    for (size_t i = 0; i < n; i++) {
        cacheroute__v1__route__init(&msgs[i]);
        msgs[i].owner = routes[i].owner;
        msgs[i].rate = routes[i].rate;
        msgs[i].admitted = routes[i].admitted;
        msgs[i].preferred_shard = routes[i].shard;
        if (named && routes[i].shard < named->n_slots) {
            msgs[i].endpoint_id = (char *)named->slot[routes[i].shard].id;
            msgs[i].endpoint_address = (char *)named->slot[routes[i].shard].address;
        }
        ptrs[i] = &msgs[i];
    }
    Cacheroute__V1__RecordArrivalResponse resp = CACHEROUTE__V1__RECORD_ARRIVAL_RESPONSE__INIT;
    resp.n_routes = n;
    resp.routes = ptrs;
    resp.recorded = recorded;
    resp.table_generation = gen;
    *len = protobuf_c_message_get_packed_size(&resp.base);
    uint8_t *out = malloc(*len + 1);
    CU_ASSERT_EQUAL(protobuf_c_message_pack(&resp.base, out), *len);
    free(msgs);
    free(ptrs);
    return out;
}

static void agrees_named(const cr_route_answer *routes, size_t n, uint32_t recorded, uint64_t gen,
                         const cr_endpoints *named)
{
    size_t ref_len, bound = cr_record_answer_bound(n, named);
    uint8_t *ref = reference(routes, n, recorded, gen, named, &ref_len);
    uint8_t *ours = malloc(bound + 1);
    ours[bound] = 0xa5; /* a canary just past the bound */
    size_t len = cr_record_answer_pack(routes, n, recorded, gen, named, ours);
    CU_ASSERT_EQUAL(len, ref_len);
    CU_ASSERT(len <= bound);
    CU_ASSERT_EQUAL(ours[bound], 0xa5);
    CU_ASSERT(len == ref_len && memcmp(ours, ref, len) == 0);
    free(ref);
    free(ours);
}

static void agrees(const cr_route_answer *routes, size_t n, uint32_t recorded, uint64_t gen)
{
    agrees_named(routes, n, recorded, gen, NULL);
}

/* Each n with recorded and generation at 0, 1 and their widest. */
static void random_answers(size_t n, int rounds)
{
    cr_route_answer *routes = calloc(n + 1, sizeof *routes);
    static const uint64_t gens[] = {0, 1, 128, UINT64_MAX};
    for (int k = 0; k < rounds; k++) {
        for (size_t i = 0; i < n; i++)
            routes[i] = any_route();
        uint32_t recorded = k % 3 == 0 ? (uint32_t)n : k % 3 == 1 ? 0 : UINT32_MAX;
        agrees(routes, n, recorded, gens[k % 4]);
    }
    free(routes);
}

static void test_none(void) { random_answers(0, 8); } /* omit_routes: only the tail */
static void test_one(void) { random_answers(1, 4000); }
static void test_few(void) { random_answers(16, 500); }
static void test_thousand(void) { random_answers(1000, 40); }

/* The widest route of all fills the bound exactly. */
static void test_widest(void)
{
    cr_route_answer r = {.owner = INT64_MIN, .rate = NAN, .admitted = 1, .shard = UINT32_MAX};
    cr_route_answer many[3] = {r, r, r};
    agrees(many, 3, UINT32_MAX, UINT64_MAX);
    uint8_t buf[3 * 30 + 17];
    CU_ASSERT_EQUAL(cr_record_answer_pack(many, 3, UINT32_MAX, UINT64_MAX, NULL, buf),
                    cr_record_answer_bound(3, NULL));
}

/* With an endpoint set, each route to one of its shards (a gone one too)
 * names it; others do not. */
static void test_named(void)
{
    cr_endpoints *e = cr_test_named_set();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    cr_route_answer routes[16];
    for (int k = 0; k < 300; k++) {
        for (size_t i = 0; i < 16; i++) {
            routes[i] = any_route();
            routes[i].shard %= 5;
        }
        agrees_named(routes, 1 + (size_t)k % 16, (uint32_t)k, (uint64_t)k, e);
    }
    cr_endpoints_release(e);
}

static void field_is(const ProtobufCMessageDescriptor *d, const char *name, unsigned number,
                     ProtobufCType type, ProtobufCLabel label)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(f->id, number);
    CU_ASSERT_EQUAL(f->type, type);
    CU_ASSERT_EQUAL(f->label, label);
}

/* The numbers and types answers.c writes are the .proto's, and there
 * are no other fields it would leave out. */
static void test_descriptors(void)
{
    const ProtobufCMessageDescriptor *resp = &cacheroute__v1__record_arrival_response__descriptor;
    const ProtobufCMessageDescriptor *route = &cacheroute__v1__route__descriptor;
    CU_ASSERT_EQUAL(resp->n_fields, 3);
    field_is(resp, "routes", 1, PROTOBUF_C_TYPE_MESSAGE, PROTOBUF_C_LABEL_REPEATED);
    field_is(resp, "recorded", 2, PROTOBUF_C_TYPE_UINT32, PROTOBUF_C_LABEL_NONE);
    field_is(resp, "table_generation", 3, PROTOBUF_C_TYPE_UINT64, PROTOBUF_C_LABEL_NONE);
    CU_ASSERT_EQUAL(route->n_fields, 6);
    field_is(route, "owner", 1, PROTOBUF_C_TYPE_INT64, PROTOBUF_C_LABEL_NONE);
    field_is(route, "rate", 2, PROTOBUF_C_TYPE_DOUBLE, PROTOBUF_C_LABEL_NONE);
    field_is(route, "admitted", 3, PROTOBUF_C_TYPE_BOOL, PROTOBUF_C_LABEL_NONE);
    field_is(route, "preferred_shard", 4, PROTOBUF_C_TYPE_UINT32, PROTOBUF_C_LABEL_NONE);
    field_is(route, "endpoint_id", 5, PROTOBUF_C_TYPE_STRING, PROTOBUF_C_LABEL_NONE);
    field_is(route, "endpoint_address", 6, PROTOBUF_C_TYPE_STRING, PROTOBUF_C_LABEL_NONE);
}

static const cr_test_case ANSWER[] = {
    {"fields as the .proto numbers them", test_descriptors},
    {"no route (omit_routes)", test_none},
    {"one route, 4000 random ones", test_one},
    {"16 routes", test_few},
    {"1000 routes", test_thousand},
    {"widest routes fill the bound", test_widest},
    {"endpoint names with a set", test_named},
    {NULL, NULL},
};

static const cr_test_suite SUITES[] = {{"record answer", ANSWER}};
CR_TEST_MAIN(SUITES)
