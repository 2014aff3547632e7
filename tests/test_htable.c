/* The open-addressing index (common/include/htable.h): lookups, wrap-around
 * at the array's end, backward-shift deletion keeping every probe run
 * whole, a table one slot short of full, resizing. The entries carry their
 * hashes, so a test places keys in the slots it wants. */
#include <stdlib.h>

#include "cunit_main.h"
#include "htable.h"

typedef struct ent {
    uint64_t key, hash;
} ent;

static uint64_t ent_hash(const void *ctx, uint32_t e) { return ((const ent *)ctx)[e].hash; }

static int ent_is(const void *ctx, uint32_t e, const void *key)
{
    return ((const ent *)ctx)[e].key == *(const uint64_t *)key;
}

static cr_htable_keys keys_of(const ent *es) { return (cr_htable_keys){ent_hash, es}; }

static uint32_t find(const cr_htable *t, const ent *es, uint64_t key, uint64_t hash)
{
    return cr_htable_find(t, hash, ent_is, es, &key);
}

/* Adds entry e of es, absent until now. */
static void add(cr_htable *t, const ent *es, uint32_t e)
{
    uint64_t i = cr_htable_slot(t, es[e].hash, ent_is, es, &es[e].key);
    CU_ASSERT_EQUAL(cr_htable_at(t, i), CR_HTABLE_NONE);
    cr_htable_put(t, i, e);
}

static void drop(cr_htable *t, const ent *es, uint32_t e)
{
    uint64_t i = cr_htable_slot(t, es[e].hash, ent_is, es, &es[e].key);
    CU_ASSERT_EQUAL(cr_htable_at(t, i), e);
    cr_htable_delete(t, i, keys_of(es));
}

/* Every entry sits after its home with no empty slot between, and the
 * count is right: what linear probing needs for every lookup to hit. */
static void check_runs(const cr_htable *t, const ent *es)
{
    uint64_t used = 0;
    for (uint64_t i = 0; i <= t->mask; i++) {
        uint32_t e = cr_htable_at(t, i);
        if (e == CR_HTABLE_NONE)
            continue;
        used++;
        for (uint64_t j = es[e].hash & t->mask; j != i; j = (j + 1) & t->mask)
            CU_ASSERT_NOT_EQUAL(cr_htable_at(t, j), CR_HTABLE_NONE);
        CU_ASSERT_EQUAL(find(t, es, es[e].key, es[e].hash), e);
    }
    CU_ASSERT_EQUAL(used, t->used);
}

static void test_empty_misses(void)
{
    cr_htable t = CR_HTABLE_EMPTY;
    ent es[1] = {{7, 7}};
    CU_ASSERT_EQUAL(find(&t, es, 7, 7), CR_HTABLE_NONE);
    CU_ASSERT_EQUAL(cr_htable_bytes(&t), 0);
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 8, keys_of(es)), 0);
    CU_ASSERT_EQUAL(find(&t, es, 7, 7), CR_HTABLE_NONE);
    CU_ASSERT_EQUAL(cr_htable_bytes(&t), 8 * sizeof(uint32_t));
    cr_htable_free(&t);
    CU_ASSERT_PTR_NULL(t.slots);
}

static void test_insert_find_delete(void)
{
    ent es[4] = {{10, 1}, {11, 1}, {12, 2}, {13, 5}};
    cr_htable t = CR_HTABLE_EMPTY;
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 8, keys_of(es)), 0);
    for (uint32_t e = 0; e < 4; e++)
        add(&t, es, e);
    /* 10 at its home 1, 11 after it, 12 pushed from 2 to 3, 13 at 5 */
    CU_ASSERT_EQUAL(cr_htable_at(&t, 1), 0);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 2), 1);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 3), 2);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 5), 3);
    CU_ASSERT_EQUAL(find(&t, es, 99, 1), CR_HTABLE_NONE); /* a miss runs to slot 4 */
    check_runs(&t, es);
    drop(&t, es, 0); /* 11 and 12 shift back one each */
    CU_ASSERT_EQUAL(cr_htable_at(&t, 1), 1);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 2), 2);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 3), CR_HTABLE_NONE);
    CU_ASSERT_EQUAL(find(&t, es, 10, 1), CR_HTABLE_NONE);
    CU_ASSERT_EQUAL(t.used, 3);
    check_runs(&t, es);
    cr_htable_free(&t);
}

/* A run that starts near the end and wraps to slot 0 probes and shifts
 * back round the end. */
static void test_wrap_around(void)
{
    ent es[5] = {{1, 6}, {2, 6}, {3, 7}, {4, 7}, {5, 0}};
    cr_htable t = CR_HTABLE_EMPTY;
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 8, keys_of(es)), 0);
    for (uint32_t e = 0; e < 5; e++)
        add(&t, es, e);
    /* slots 6, 7, 0, 1, 2: homes 6, 6, 7, 7, 0 */
    CU_ASSERT_EQUAL(cr_htable_at(&t, 0), 2);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 1), 3);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 2), 4);
    check_runs(&t, es);
    drop(&t, es, 1); /* the gap at 7 takes 3 (home 7) from 0, then 4 and 5 follow */
    CU_ASSERT_EQUAL(cr_htable_at(&t, 7), 2);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 0), 3);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 1), 4);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 2), CR_HTABLE_NONE);
    check_runs(&t, es);
    drop(&t, es, 0); /* the gap at 6: 3 (home 7) may not move before its home */
    CU_ASSERT_EQUAL(cr_htable_at(&t, 6), CR_HTABLE_NONE);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 7), 2);
    check_runs(&t, es);
    cr_htable_free(&t);
}

/* Deleting from the middle of a run keeps entries that are at their home,
 * or between home and the gap, where they are. */
static void test_delete_keeps_runs(void)
{
    ent es[5] = {{1, 2}, {2, 2}, {3, 4}, {4, 3}, {5, 2}};
    cr_htable t = CR_HTABLE_EMPTY;
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 16, keys_of(es)), 0);
    for (uint32_t e = 0; e < 5; e++)
        add(&t, es, e);
    /* slots 2..6: homes 2, 2, 4, 3, 2 */
    drop(&t, es, 1); /* gap at 3: 3 (home 4) stays, 4 (home 3) moves in, 5 to 5 */
    CU_ASSERT_EQUAL(cr_htable_at(&t, 3), 3);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 4), 2);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 5), 4);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 6), CR_HTABLE_NONE);
    check_runs(&t, es);
    cr_htable_free(&t);
}

/* A table with one empty slot left still ends every probe. */
static void test_one_short_of_full(void)
{
    ent es[7];
    cr_htable t = CR_HTABLE_EMPTY;
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 8, keys_of(es)), 0);
    for (uint32_t e = 0; e < 7; e++) {
        es[e] = (ent){100 + e, 5};
        add(&t, es, e);
    }
    CU_ASSERT_EQUAL(t.used, 7);
    CU_ASSERT_EQUAL(find(&t, es, 1, 5), CR_HTABLE_NONE);
    CU_ASSERT_EQUAL(find(&t, es, 106, 5), 6);
    check_runs(&t, es);
    /* no resize below what it holds, nor to a size not a power of two */
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 4, keys_of(es)), -1);
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 12, keys_of(es)), -1);
    CU_ASSERT_EQUAL(t.mask, 7);
    for (uint32_t e = 0; e < 7; e++)
        drop(&t, es, e);
    CU_ASSERT_EQUAL(t.used, 0);
    for (uint64_t i = 0; i <= t.mask; i++)
        CU_ASSERT_EQUAL(cr_htable_at(&t, i), CR_HTABLE_NONE);
    cr_htable_free(&t);
}

/* Resizing keeps every entry, placed again in the order of the old slots. */
static void test_resize(void)
{
    enum { N = 300 };
    ent *es = malloc(N * sizeof *es);
    cr_htable t = CR_HTABLE_EMPTY, want = CR_HTABLE_EMPTY;
    CU_ASSERT_EQUAL(cr_htable_resize(&t, 4, keys_of(es)), 0);
    for (uint32_t e = 0; e < N; e++) {
        es[e] = (ent){e, (uint64_t)e * 0x9e3779b97f4a7c15ull};
        if ((t.used + 1) * 2 > t.mask + 1) { /* the old slot order, by hand */
            CU_ASSERT_EQUAL(cr_htable_resize(&want, 2 * (t.mask + 1), keys_of(es)), 0);
            cr_htable_clear(&want);
            for (uint64_t i = 0; i <= t.mask; i++)
                if (cr_htable_at(&t, i) != CR_HTABLE_NONE)
                    cr_htable_insert(&want, es[cr_htable_at(&t, i)].hash, cr_htable_at(&t, i));
            CU_ASSERT_EQUAL(cr_htable_resize(&t, 2 * (t.mask + 1), keys_of(es)), 0);
            for (uint64_t i = 0; i <= t.mask; i++)
                CU_ASSERT_EQUAL(t.slots[i], want.slots[i]);
        }
        add(&t, es, e);
    }
    CU_ASSERT_EQUAL(t.mask + 1, 1024);
    check_runs(&t, es);
    cr_htable_clear(&t);
    CU_ASSERT_EQUAL(find(&t, es, 5, es[5].hash), CR_HTABLE_NONE);
    cr_htable_free(&t);
    cr_htable_free(&want);
    free(es);
}

/* Removal by entry number finds the slot without comparing keys; reset
 * leaves empty slots for the caller to fill in its own order. */
static void test_remove_and_reset(void)
{
    ent es[4] = {{1, 7}, {2, 7}, {3, 7}, {4, 0}};
    cr_htable t = CR_HTABLE_EMPTY;
    CU_ASSERT_EQUAL(cr_htable_reset(&t, 8), 0);
    for (uint32_t e = 0; e < 4; e++)
        add(&t, es, e);
    cr_htable_remove(&t, es[1].hash, 1, keys_of(es)); /* slot 0: 2 and 3 shift back */
    CU_ASSERT_EQUAL(cr_htable_at(&t, 0), 2);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 1), 3);
    CU_ASSERT_EQUAL(find(&t, es, 2, 7), CR_HTABLE_NONE);
    check_runs(&t, es);
    CU_ASSERT_EQUAL(cr_htable_reset(&t, 6), -1);
    CU_ASSERT_EQUAL(t.used, 3);
    CU_ASSERT_EQUAL(cr_htable_reset(&t, 16), 0);
    CU_ASSERT_EQUAL(t.used, 0);
    CU_ASSERT_EQUAL(t.mask, 15);
    uint32_t order[3] = {2, 0, 3}; /* the caller's order places them */
    for (int k = 0; k < 3; k++)
        cr_htable_insert(&t, es[order[k]].hash, order[k]);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 7), 2);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 8), 0);
    CU_ASSERT_EQUAL(cr_htable_at(&t, 0), 3);
    CU_ASSERT_EQUAL(t.used, 3);
    check_runs(&t, es);
    cr_htable_free(&t);
}

/* Random inserts and deletes on few homes (long runs, many wraps) against
 * a presence array. */
static void test_random_against_reference(void)
{
    enum { N = 48, SLOTS = 64 };
    ent es[N];
    int in[N] = {0};
    cr_htable t = CR_HTABLE_EMPTY;
    CU_ASSERT_EQUAL(cr_htable_resize(&t, SLOTS, keys_of(es)), 0);
    uint64_t x = 12345;
    for (uint32_t e = 0; e < N; e++)
        es[e] = (ent){1000 + e, 0};
    for (int step = 0; step < 20000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t e = (uint32_t)(x >> 33) % N;
        if (in[e]) {
            drop(&t, es, e);
            in[e] = 0;
        } else {
            es[e].hash = 56 + (x >> 20) % 12; /* homes 56..67: round the end */
            add(&t, es, e);
            in[e] = 1;
        }
        if (step % 97 == 0)
            check_runs(&t, es);
        for (uint32_t k = 0; k < N; k++)
            if (find(&t, es, es[k].key, es[k].hash) != (in[k] ? k : CR_HTABLE_NONE))
                CU_FAIL("lookup disagrees with the reference");
    }
    check_runs(&t, es);
    cr_htable_free(&t);
}

static const cr_test_case table_tests[] = {
    {"empty table misses", test_empty_misses},
    {"insert, find, delete", test_insert_find_delete},
    {"wrap-around at the array end", test_wrap_around},
    {"deletion keeps probe runs whole", test_delete_keeps_runs},
    {"one slot short of full", test_one_short_of_full},
    {"resize keeps entries in old slot order", test_resize},
    {"remove by entry number, reset", test_remove_and_reset},
    {"random against a reference", test_random_against_reference},
    {NULL, NULL}};

static const cr_test_suite suites[] = {{"table", table_tests}};

CR_TEST_MAIN(suites)
