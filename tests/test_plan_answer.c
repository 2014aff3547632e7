/* The Plan answer encoded straight from the table (answer/plan_answer.c)
 * is byte for byte what protobuf-c packs from the same PlanResponse: tables
 * with negative, zero and large owners, one shard and 300 (two-byte ids),
 * preferred shard 0 and not, no placement at all, owners of every varint
 * width at 128 shards (one-byte ids) and 129, a table's length narrower
 * than estimated, buffers grown from 1 byte, and generation and churn from
 * 0 to UINT64_MAX; its size is the packed size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "common.h"
#include "cunit_main.h"

/* protobuf-c's own encoding of the answer, for comparison. */
static uint8_t *reference(const cr_plan_answer *a, size_t *len)
{
    const cr_table *t = a->table;
    size_t n = cr_table_n_placements(t);
    Cacheroute__V1__Placement *pm = calloc(n + 1, sizeof *pm);
    Cacheroute__V1__Placement **ptrs = calloc(n + 1, sizeof *ptrs);
    for (size_t i = 0; i < n; i++) {
        const cr_placement *p = cr_table_placement(t, i);
        cacheroute__v1__placement__init(&pm[i]);
        pm[i].owner = p->owner;
        pm[i].n_shards = p->kb;
        pm[i].shards = (uint32_t *)cr_table_shards(t, p);
        pm[i].preferred_shard = p->preferred_shard;
        ptrs[i] = &pm[i];
    }
    Cacheroute__V1__RoutingTable rt = a->rest;
    rt.n_placements = n;
    rt.placements = ptrs;
    Cacheroute__V1__PlanChurn churn = a->churn;
    Cacheroute__V1__PlanResponse resp = CACHEROUTE__V1__PLAN_RESPONSE__INIT;
    resp.table = &rt;
    resp.churn = &churn;
    *len = protobuf_c_message_get_packed_size(&resp.base);
    uint8_t *out = malloc(*len + 1);
    CU_ASSERT_EQUAL(protobuf_c_message_pack(&resp.base, out), *len);
    free(pm);
    free(ptrs);
    return out;
}

/* The numbers install and churn fill in. */
typedef struct numbers {
    uint64_t generation, moved, in, out, compared;
} numbers;

/* t's answer with n, written into a buffer of at most max_first bytes
 * first, against protobuf-c's; returns its size. */
static size_t same_bytes(const cr_table *t, size_t max_first, numbers n)
{
    cr_plan_answer a;
    CU_ASSERT_EQUAL_FATAL(cr_plan_answer_init(&a, t, max_first), 0);
    a.rest.generation = n.generation;
    a.churn.moved = n.moved;
    a.churn.admitted_in = n.in;
    a.churn.admitted_out = n.out;
    a.churn.compared_generation = n.compared;
    size_t ref_len, len = 0, size = cr_plan_answer_size(&a);
    uint8_t *ref = reference(&a, &ref_len);
    uint8_t *ours = cr_plan_answer_finish(&a, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ours);
    CU_ASSERT_PTR_NULL(a.buf); /* given away */
    CU_ASSERT_EQUAL(size, ref_len);
    CU_ASSERT_EQUAL(len, ref_len);
    CU_ASSERT(memcmp(ours, ref, ref_len) == 0);
    free(ref);
    free(ours);
    return size;
}

/* n sessions with owners from owner_of, rates spread so that some need one
 * shard and the hottest all of them. */
static cr_table *plan(size_t n, uint32_t shards, int64_t (*owner_of)(size_t))
{
    cr_session_rate *r = calloc(n ? n : 1, sizeof *r); /* gcc -O3: maybe-uninitialized */
    for (size_t i = 0; i < n; i++)
        r[i] = (cr_session_rate){owner_of(i), 10.0 * shards / (double)(i + 1)};
    cr_planner_config cfg = {shards, 10.0, 1e12};
    cr_table *t = NULL;
    cr_error err;
    CU_ASSERT_EQUAL(cr_planner_plan(&cfg, r, n, &t, &err), CR_OK);
    free(r);
    return t;
}

static int64_t mixed(size_t i) { return (int64_t)cr_mix64(i); } /* half negative */
static int64_t small(size_t i) { return (int64_t)i; }           /* owner 0 included */
/* Every varint width from 1 to 10 bytes, near both ends of its range
 * (distinct for i < 1200). */
static int64_t widths(size_t i)
{
    unsigned w = (unsigned)(i / 2 % 10);
    uint64_t lo = w ? (uint64_t)1 << (7 * w) : 1;
    uint64_t hi = w < 9 ? ((uint64_t)1 << (7 * w + 7)) - 1 : UINT64_MAX;
    return (int64_t)(i % 2 ? hi - i / 20 : lo + i / 20);
}

/* Every table with its buffer sized from the sample, and started at 0
 * and 64 bytes (grown many times), with 0, small and widest numbers. */
static void check_table(cr_table *t)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    static const size_t caps[] = {SIZE_MAX, 0, 64};
    const uint64_t M = UINT64_MAX;
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        same_bytes(t, caps[i], (numbers){0, 0, 0, 0, 0});
        same_bytes(t, caps[i], (numbers){1, 0, 300, 0, 0});
        size_t widest = same_bytes(t, caps[i], (numbers){M, M, M, M, M});
        /* what the handler relies on: its bound is the widest size */
        CU_ASSERT(same_bytes(t, caps[i], (numbers){7, 0, M, M, 5}) <= widest);
    }
    cr_plan_answer a; /* written, never finished */
    CU_ASSERT_EQUAL_FATAL(cr_plan_answer_init(&a, t, SIZE_MAX), 0);
    cr_plan_answer_free(&a);
    cr_plan_answer_free(&a);
    cr_table_free(t);
}

static void test_mixed_owners(void) { check_table(plan(5000, 64, mixed)); }
static void test_small_owners_many_shards(void) { check_table(plan(3000, 300, small)); }
static void test_one_shard(void) { check_table(plan(100, 1, small)); }
static void test_empty(void) { check_table(plan(0, 8, small)); }
/* A table under 128 bytes: its length one byte, narrower than the
 * estimate's (the placements move). */
static void test_few(void) { check_table(plan(5, 1, small)); }
/* The last table of one-byte shard ids, and the first with two. */
static void test_owner_widths(void)
{
    check_table(plan(1200, 128, widths));
    check_table(plan(1200, 129, widths));
}

static const cr_test_case ANSWER[] = {
    {"negative and large owners, 64 shards", test_mixed_owners},
    {"owner 0, two-byte shard ids", test_small_owners_many_shards},
    {"one shard (preferred 0 everywhere)", test_one_shard},
    {"no placement", test_empty},
    {"a few placements, the table's length one byte", test_few},
    {"owners of every width, 128 and 129 shards", test_owner_widths},
    {NULL, NULL},
};

static const cr_test_suite SUITES[] = {{"plan answer", ANSWER}};
CR_TEST_MAIN(SUITES)
