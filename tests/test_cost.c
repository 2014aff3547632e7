/* The cost model's terms (cost/): each formula on numbers worked by hand,
 * and the clamps the callers rely on: s taken into [0, L], a prefill never
 * below 0, a load of nothing free. */
#include <math.h>

#include "cost.h"
#include "cunit_main.h"

#define EPS 1e-12

/* a + b (L - s) + c (L^2 - s^2) */
static void test_prefill(void)
{
    cr_prefill_cost k = {.fixed_ms = 1, .ms_per_token = 0.01, .ms_per_token2 = 1e-3};
    CU_ASSERT_DOUBLE_EQUAL(cr_prefill_ms(&k, 100, 300), 1 + 2 + 80, EPS);
    CU_ASSERT_DOUBLE_EQUAL(cr_prefill_ms(&k, 0, 300), 1 + 3 + 90, EPS);
    CU_ASSERT_DOUBLE_EQUAL(cr_prefill_ms(&k, 0, 0), 1, EPS);
}

static void test_prefill_clamps(void)
{
    cr_prefill_cost k = {.fixed_ms = 1, .ms_per_token = 0.01, .ms_per_token2 = 1e-3};
    /* more cached than the prompt: all of it is; none: none is */
    CU_ASSERT_EQUAL(cr_prefill_ms(&k, 500, 300), cr_prefill_ms(&k, 300, 300));
    CU_ASSERT_EQUAL(cr_prefill_ms(&k, -5, 300), cr_prefill_ms(&k, 0, 300));
    /* coefficients no source gives (each is >= 0): still never below 0 */
    cr_prefill_cost neg = {.fixed_ms = -10, .ms_per_token = -1};
    CU_ASSERT_EQUAL(cr_prefill_ms(&neg, 0, 300), 0);
    CU_ASSERT_FALSE(signbit(cr_prefill_ms(&(cr_prefill_cost){0}, 0, 300)));
}

/* rtt + bytes 8 / (Gb/s 10^6) */
static void test_transfer(void)
{
    cr_transfer_cost k = {.rtt_ms = 0.2, .gbps = 8};
    CU_ASSERT_DOUBLE_EQUAL(cr_transfer_ms(&k, 1e6), 0.2 + 1, EPS); /* 8 Mb at 8 Gb/s */
    CU_ASSERT_DOUBLE_EQUAL(cr_transfer_ms(&k, 0), 0.2, EPS);
}

/* fixed + bytes / (GB/s 10^6); nothing to load costs nothing */
static void test_load(void)
{
    cr_load_cost k = {.fixed_ms = 2, .h2d_gbps = 25};
    CU_ASSERT_DOUBLE_EQUAL(cr_load_ms(&k, 50e6), 2 + 2, EPS);
    CU_ASSERT_EQUAL(cr_load_ms(&k, 0), 0);
    CU_ASSERT_EQUAL(cr_load_ms(&(cr_load_cost){0}, 0), 0); /* no rate needed then */
}

static const cr_test_case COST[] = {
    {"prefill", test_prefill},
    {"prefill clamps", test_prefill_clamps},
    {"transfer", test_transfer},
    {"load", test_load},
    {NULL, NULL},
};

static const cr_test_suite SUITES[] = {{"cost", COST}};
CR_TEST_MAIN(SUITES)
