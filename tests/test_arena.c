/* The per-call arena requests decode into (server/grpc/arena.h): aligned,
 * bounded (what it holds against what was asked of it, and what a thread
 * keeps between calls), one per thread and never shared by nested calls,
 * and a real request decoded into it matches the malloc decode. */
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cunit_main.h"
#include "reply.h"

static void test_aligned_and_writable(void)
{
    cr_arena a;
    cr_arena_init(&a);
    size_t sizes[] = {1, 0, 7, 16, 100, 5000, 70000, 3u << 20, 24};
    unsigned char *prev = NULL;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned char *p = cr_arena_alloc(&a, sizes[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        CU_ASSERT_EQUAL((uintptr_t)p % alignof(max_align_t), 0);
        CU_ASSERT_PTR_NOT_EQUAL(p, prev);
        memset(p, 0xab, sizes[i]); /* ASan: every byte is the arena's */
        prev = p;
    }
    cr_arena_destroy(&a);
    CU_ASSERT_EQUAL(cr_arena_held(&a), 0);
}

/* A call that asks for B bytes in small pieces holds under 2B, plus the
 * spare it may reuse (at most CR_ARENA_KEEP_LAZY); after reset the arena
 * keeps at most CR_ARENA_KEEP (its big chunk is the process's spare), and
 * a second call is served the same way. */
static void test_bounded(void)
{
    cr_arena a;
    cr_arena_init(&a);
    for (int round = 0; round < 2; round++) {
        size_t asked = 0;
        for (int i = 0; i < 1000000; i++) {
            unsigned char *p = cr_arena_alloc(&a, 40);
            CU_ASSERT_PTR_NOT_NULL_FATAL(p);
            memset(p, round + 1, 40); /* reused pages are writable */
            asked += 48;              /* 40 rounded up to the alignment */
        }
        CU_ASSERT(cr_arena_held(&a) >= asked);
        CU_ASSERT(cr_arena_held(&a) <= 2 * asked + CR_ARENA_KEEP_LAZY);
        cr_arena_reset(&a);
        CU_ASSERT(cr_arena_held(&a) <= CR_ARENA_KEEP);
        CU_ASSERT(cr_arena_held(&a) > 0); /* the next small call mallocs nothing */
    }
    cr_arena_destroy(&a);
}

/* A chunk past CR_ARENA_KEEP_LAZY goes back at reset (untouched: only its
 * address space is taken). */
static void test_huge_not_kept(void)
{
    cr_arena a;
    cr_arena_init(&a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cr_arena_alloc(&a, 100));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cr_arena_alloc(&a, CR_ARENA_KEEP_LAZY + 1));
    cr_arena_reset(&a);
    CU_ASSERT(cr_arena_held(&a) <= CR_ARENA_KEEP);
    cr_arena_destroy(&a);
}

static void test_overflow_refused(void)
{
    cr_arena a;
    cr_arena_init(&a);
    CU_ASSERT_PTR_NULL(cr_arena_alloc(&a, SIZE_MAX));
    CU_ASSERT_PTR_NULL(cr_arena_alloc(&a, SIZE_MAX - 8));
    CU_ASSERT_PTR_NULL(cr_arena_alloc(&a, SIZE_MAX - (3u << 20))); /* the mapping's size */
    CU_ASSERT_PTR_NULL(cr_arena_alloc(&a, SIZE_MAX / 2));           /* no such memory */
    CU_ASSERT_PTR_NOT_NULL(cr_arena_alloc(&a, 8)); /* still usable */
    cr_arena_destroy(&a);
}

static void *take_in_thread(void *arg)
{
    cr_arena *a = cr_arena_take();
    *(cr_arena **)arg = a;
    if (a)
        cr_arena_put(a);
    return NULL;
}

static void test_one_per_thread_not_nested(void)
{
    cr_arena *a = cr_arena_take();
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NULL(cr_arena_take()); /* taken: a nested call uses its own */
    cr_arena *other = NULL;
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, take_in_thread, &other), 0);
    pthread_join(t, NULL);
    CU_ASSERT_PTR_NOT_NULL(other);
    CU_ASSERT_PTR_NOT_EQUAL(other, a);
    cr_arena_put(a);
    CU_ASSERT_PTR_EQUAL(cr_arena_take(), a); /* given back: the same again */
    cr_arena_put(a);
}

/* Big calls on four threads at once share the one spare: each sees only
 * its own bytes (a spare is never in two arenas), under TSan too. */
static void *big_calls(void *arg)
{
    unsigned char mark = (unsigned char)(uintptr_t)arg;
    int ok = 1;
    for (int round = 0; round < 20; round++) {
        cr_arena *a = cr_arena_take();
        if (!a)
            return NULL;
        size_t n = (3u << 20) + (size_t)round * 4096;
        unsigned char *p = cr_arena_alloc(a, n);
        if (!p) {
            cr_arena_put(a);
            return NULL;
        }
        memset(p, mark, n);
        for (size_t i = 0; i < n; i += 4093)
            ok &= p[i] == mark;
        cr_arena_put(a);
    }
    return ok ? arg : NULL;
}

static void test_spare_shared_by_threads(void)
{
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, big_calls, (void *)(i + 1)), 0);
    for (uintptr_t i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        CU_ASSERT_PTR_EQUAL(r, (void *)(i + 1));
    }
}

/* Issue 30 R3-10: the arenas of all calls together stay within the
 * budget: a second call that would pass it is refused (its arena says
 * so), the spare goes before any call is refused, and what a call gives
 * back is counted back. */
static void test_budget_over_all_calls(void)
{
    const size_t MB = 1u << 20;
    cr_arena a, b;
    cr_arena_init(&a);
    cr_arena_init(&b);
    cr_arena_set_budget(1); /* an earlier test's spare goes */
    CU_ASSERT_PTR_NULL(cr_arena_alloc(&a, 300 * MB)); /* past any spare */
    cr_arena_reset(&a);
    size_t base = cr_arena_held_all();
    cr_arena_set_budget(base + 12 * MB);
    CU_ASSERT_PTR_NOT_NULL(cr_arena_alloc(&a, 7 * MB));
    CU_ASSERT_PTR_NULL(cr_arena_alloc(&b, 6 * MB)); /* 7 + 6 MiB and headers: over */
    CU_ASSERT_TRUE(b.refused);
    CU_ASSERT_FALSE(a.refused);
    CU_ASSERT_TRUE(cr_arena_held_all() <= base + 12 * MB);
    CU_ASSERT_PTR_NOT_NULL(cr_arena_alloc(&b, 3 * MB)); /* what fits still does */
    cr_arena_reset(&a); /* its 7 MiB chunk: the spare, still counted */
    cr_arena_reset(&b);
    CU_ASSERT_FALSE(b.refused);
    CU_ASSERT_PTR_NOT_NULL(cr_arena_alloc(&b, 9 * MB)); /* the spare made way */
    CU_ASSERT_TRUE(cr_arena_held_all() <= base + 12 * MB);
    cr_arena_destroy(&a);
    cr_arena_destroy(&b);
    CU_ASSERT_TRUE(cr_arena_held_all() <= base + 12 * MB);
    cr_arena_set_budget(0);
}

/* The budget under four threads' big calls (TSan): never passed. */
static void *budgeted_calls(void *arg)
{
    size_t most = *(size_t *)arg;
    for (int round = 0; round < 50; round++) {
        cr_arena *a = cr_arena_take();
        if (!a)
            return NULL;
        unsigned char *p = cr_arena_alloc(a, (3u << 20) + (size_t)round * 8192);
        if (p)
            p[0] = 1;
        if (cr_arena_held_all() > most)
            return NULL;
        cr_arena_put(a);
    }
    return arg;
}

static void test_budget_under_threads(void)
{
    size_t most = cr_arena_held_all() + (10u << 20);
    cr_arena_set_budget(most);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, budgeted_calls, &most), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        CU_ASSERT_PTR_EQUAL(r, &most);
    }
    cr_arena_set_budget(0);
}

/* ---- requests decoded into the arena ---- */

#define N_RATES 5000

static uint8_t *plan_request(size_t *len)
{
    Cacheroute__V1__PlanRequest req = CACHEROUTE__V1__PLAN_REQUEST__INIT;
    Cacheroute__V1__SessionRate *r = calloc(N_RATES, sizeof *r);
    Cacheroute__V1__SessionRate **ptrs = calloc(N_RATES, sizeof *ptrs);
    for (size_t i = 0; i < N_RATES; i++) {
        cacheroute__v1__session_rate__init(&r[i]);
        r[i].owner = (int64_t)(i * 7919) - 1000;
        r[i].rate = (double)i / 3.0;
        ptrs[i] = &r[i];
    }
    req.n_rates = N_RATES;
    req.rates = ptrs;
    req.install = 1;
    uint8_t *body;
    CU_ASSERT_EQUAL(cr_pack(&req.base, SIZE_MAX, &body, len), 0);
    free(r);
    free(ptrs);
    return body;
}

typedef struct seen {
    const uint8_t *inner;
    size_t inner_len;
    int calls, nested_ok;
    size_t n_rates;
    int64_t owner_last;
    double rate_last;
    int install;
} seen;

static void inner(void *ctx, const void *message, cr_reply *out)
{
    (void)out;
    const Cacheroute__V1__GetRatesRequest *m = message;
    ((seen *)ctx)->nested_ok = m->n_owners == 3 && m->owners[2] == -5;
}

/* Keeps what it saw, and decodes another message while this one lives. */
static void outer(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    seen *s = ctx;
    const Cacheroute__V1__PlanRequest *m = message;
    s->calls++;
    s->n_rates = m->n_rates;
    s->owner_last = m->rates[m->n_rates - 1]->owner;
    s->rate_last = m->rates[m->n_rates - 1]->rate;
    s->install = m->install;
    /* no malloc per element: the message, its array and every entry are
     * the arena's */
    int all_in = cr_arena_owns(scratch, m) && cr_arena_owns(scratch, m->rates);
    for (size_t i = 0; i < m->n_rates; i++)
        all_in &= cr_arena_owns(scratch, m->rates[i]);
    CU_ASSERT_EQUAL(all_in, 1);
    int local;
    CU_ASSERT_EQUAL(cr_arena_owns(scratch, &local), 0);
    CU_ASSERT_PTR_NOT_NULL(cr_arena_alloc(scratch, 1000));
    cr_reply inner_out;
    memset(&inner_out, 0, sizeof inner_out);
    cr_run_decoded(s, &cacheroute__v1__get_rates_request__descriptor, s->inner, s->inner_len,
                   &inner_out, inner);
    CU_ASSERT_EQUAL(inner_out.status, GRPC_STATUS_OK);
    /* the outer message is intact after the nested decode */
    CU_ASSERT_EQUAL(m->rates[0]->owner, -1000);
    out->status = GRPC_STATUS_OK;
}

static void test_decoded_into_the_arena(void)
{
    size_t len;
    uint8_t *body = plan_request(&len);
    int64_t owners[] = {1, 2, -5};
    Cacheroute__V1__GetRatesRequest g = CACHEROUTE__V1__GET_RATES_REQUEST__INIT;
    g.n_owners = 3;
    g.owners = owners;
    uint8_t *inner_body;
    size_t inner_len;
    CU_ASSERT_EQUAL_FATAL(cr_pack(&g.base, SIZE_MAX, &inner_body, &inner_len), 0);
    seen s = {.inner = inner_body, .inner_len = inner_len};
    for (int round = 0; round < 3; round++) { /* the thread's arena, reused */
        cr_reply out;
        memset(&out, 0, sizeof out);
        cr_run_decoded_in(&s, &cacheroute__v1__plan_request__descriptor, body, len, &out, outer);
        CU_ASSERT_EQUAL(out.status, GRPC_STATUS_OK);
    }
    CU_ASSERT_EQUAL(s.calls, 3);
    CU_ASSERT_EQUAL(s.nested_ok, 1);
    CU_ASSERT_EQUAL(s.n_rates, N_RATES);
    CU_ASSERT_EQUAL(s.owner_last, (int64_t)((N_RATES - 1) * 7919) - 1000);
    CU_ASSERT_DOUBLE_EQUAL(s.rate_last, (N_RATES - 1) / 3.0, 0);
    CU_ASSERT_EQUAL(s.install, 1);
    /* the arena came back reset, down to what a thread keeps */
    cr_arena *a = cr_arena_take();
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT(cr_arena_held(a) <= CR_ARENA_KEEP);
    cr_arena_put(a);
    free(body);
    free(inner_body);
}

static void never(void *ctx, const void *message, cr_reply *out)
{
    (void)message;
    (void)out;
    (*(int *)ctx)++;
}

/* Malformed bytes: the same answer as before the arena, no call. */
static void test_malformed_still_refused(void)
{
    const uint8_t bad[] = {0x12, 0x05, 0x08}; /* rates: length past the end */
    int calls = 0;
    cr_reply out;
    memset(&out, 0, sizeof out);
    cr_run_decoded(&calls, &cacheroute__v1__plan_request__descriptor, bad, sizeof bad, &out,
                   never);
    CU_ASSERT_EQUAL(calls, 0);
    CU_ASSERT_EQUAL(out.status, GRPC_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_STRING_EQUAL(out.message, "malformed cacheroute.v1.PlanRequest message (3 bytes)");
}

static const cr_test_case ARENA[] = {
    {"aligned, distinct, writable", test_aligned_and_writable},
    {"holds under twice what it was asked, keeps one small chunk", test_bounded},
    {"a chunk past CR_ARENA_KEEP_LAZY is not kept", test_huge_not_kept},
    {"a size past SIZE_MAX is refused", test_overflow_refused},
    {"one per thread, a nested take gets none", test_one_per_thread_not_nested},
    {"big calls on four threads share the spare safely", test_spare_shared_by_threads},
    {"a budget over all calls", test_budget_over_all_calls},
    {"the budget under four threads", test_budget_under_threads},
    {NULL, NULL},
};

static const cr_test_case DECODE[] = {
    {"a request decoded into the arena, nested and reused", test_decoded_into_the_arena},
    {"malformed bytes are still refused", test_malformed_still_refused},
    {NULL, NULL},
};

static const cr_test_suite SUITES[] = {{"arena", ARENA}, {"decode", DECODE}};
CR_TEST_MAIN(SUITES)
