/* Planner: every numbered rule with hand-computed cases, validation errors,
 * determinism, a property test against a sort-based reference, and the
 * table's lookups (one at a time and batched, hits, misses and repeats,
 * before and after a save and load). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "cunit_main.h"
#include "planner.h"

static const cr_planner_config SEED_CFG = {4, 50, 200};

static cr_table *plan_ok(const cr_planner_config *cfg, const cr_session_rate *r, size_t n)
{
    cr_table *t = NULL;
    cr_error err;
    cr_status st = cr_planner_plan(cfg, r, n, &t, &err);
    CU_ASSERT_EQUAL_FATAL(st, CR_OK);
    CU_ASSERT_STRING_EQUAL(err.msg, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    return t;
}

static void assert_shards(const cr_table *t, size_t i, int64_t owner, const uint32_t *want,
                          uint32_t kb)
{
    const cr_placement *p = cr_table_placement(t, i);
    CU_ASSERT_EQUAL(p->owner, owner);
    CU_ASSERT_EQUAL_FATAL(p->kb, kb);
    if (want)
        CU_ASSERT_EQUAL(memcmp(cr_table_shards(t, p), want, kb * sizeof *want), 0);
}

static void test_seed_example(void)
{
    cr_session_rate r[] = {{1, 10}, {2, 80}};
    cr_table *t = plan_ok(&SEED_CFG, r, 2);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 2);
    assert_shards(t, 0, 2, (uint32_t[]){0, 1}, 2);
    assert_shards(t, 1, 1, (uint32_t[]){2}, 1);
    const double *load = cr_table_expected_load(t);
    CU_ASSERT_EQUAL(load[0], 40);
    CU_ASSERT_EQUAL(load[1], 40);
    CU_ASSERT_EQUAL(load[2], 10);
    CU_ASSERT_EQUAL(load[3], 0);
    CU_ASSERT_EQUAL(cr_table_n_shards(t), 4);
    CU_ASSERT_EQUAL(cr_table_admitted_rate_total(t), 90);
    CU_ASSERT_EQUAL(cr_table_unadmitted_rate_total(t), 0);
    /* max 40 / mean 22.5 */
    CU_ASSERT_DOUBLE_EQUAL(cr_table_imbalance(t), 40.0 / 22.5, 1e-15);
    CU_ASSERT_TRUE(cr_table_is_admitted(t, 2));
    CU_ASSERT_FALSE(cr_table_is_admitted(t, 3));
    CU_ASSERT_EQUAL(cr_table_preferred_shard(t, 2, 99), 0); /* 40 == 40: lower id */
    CU_ASSERT_EQUAL(cr_table_preferred_shard(t, 1, 99), 2);
    CU_ASSERT_EQUAL(cr_table_preferred_shard(t, 7, 99), 99);
    cr_table_free(t);
}

static void expect_error(const cr_planner_config *cfg, const cr_session_rate *r, size_t n,
                         const char *msg)
{
    cr_table *t = (cr_table *)&t; /* must be reset to NULL */
    cr_error err;
    CU_ASSERT_EQUAL(cr_planner_plan(cfg, r, n, &t, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
}

static void test_rule1_rate_errors(void)
{
    cr_session_rate r[] = {{1, 1}, {2, 2}, {3, 3}, {4, -1}};
    expect_error(&SEED_CFG, r, 4, "rates[3].rate must be finite and >= 0, got -1");
    r[3].rate = NAN;
    expect_error(&SEED_CFG, r, 4, "rates[3].rate must be finite and >= 0, got nan");
    r[3].rate = INFINITY;
    expect_error(&SEED_CFG, r, 4, "rates[3].rate must be finite and >= 0, got inf");
    r[3].rate = -0.1;
    expect_error(&SEED_CFG, r, 4, "rates[3].rate must be finite and >= 0, got -0.1");
    r[3].rate = 0; /* zero is valid */
    r[1].owner = 3;
    expect_error(&SEED_CFG, r, 4, "rates[2].owner 3 duplicates rates[1].owner");
}

static void test_rule1_first_error_wins(void)
{
    /* A bad rate later in the list is reported before a duplicate earlier:
     * rates are checked first, then owners. Config is checked before both. */
    cr_session_rate r[] = {{5, 1}, {5, 2}, {6, -2}};
    expect_error(&SEED_CFG, r, 3, "rates[2].rate must be finite and >= 0, got -2");
    cr_planner_config bad = {0, 50, 200};
    expect_error(&bad, r, 3, "config.n_shards must be in 1..65536, got 0");
}

static void test_rule1_config_errors(void)
{
    cr_session_rate r[] = {{1, 1}};
    expect_error(&(cr_planner_config){0, 50, 200}, r, 1,
                 "config.n_shards must be in 1..65536, got 0");
    expect_error(&(cr_planner_config){65537, 50, 200}, r, 1,
                 "config.n_shards must be in 1..65536, got 65537");
    expect_error(&(cr_planner_config){4, 0, 200}, r, 1, "config.qcap must be finite and > 0, got 0");
    expect_error(&(cr_planner_config){4, NAN, 200}, r, 1,
                 "config.qcap must be finite and > 0, got nan");
    expect_error(&(cr_planner_config){4, -INFINITY, 200}, r, 1,
                 "config.qcap must be finite and > 0, got -inf");
    expect_error(&(cr_planner_config){4, 50, 0}, r, 1,
                 "config.warm_slots_per_shard must be finite and > 0, got 0");
    expect_error(&(cr_planner_config){4, 50, INFINITY}, r, 1,
                 "config.warm_slots_per_shard must be finite and > 0, got inf");
    /* The edges are valid. */
    cr_table_free(plan_ok(&(cr_planner_config){1, 1e-300, 1e-300}, r, 1));
    cr_table_free(plan_ok(&(cr_planner_config){65536, 1e300, 1e300}, r, 1));
}

static void test_rule2_zero_rates_ignored(void)
{
    /* R=2, W=1: budget 2 slots. The zero owner is neither admitted nor
     * counted as unadmitted, and does not use a slot. */
    cr_session_rate r[] = {{1, 0}, {2, 5}, {3, 0}, {4, 3}};
    cr_table *t = plan_ok(&(cr_planner_config){2, 50, 1}, r, 4);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 2);
    CU_ASSERT_FALSE(cr_table_is_admitted(t, 1));
    CU_ASSERT_FALSE(cr_table_is_admitted(t, 3));
    CU_ASSERT_EQUAL(cr_table_admitted_rate_total(t), 8);
    CU_ASSERT_EQUAL(cr_table_unadmitted_rate_total(t), 0);
    cr_table_free(t);
    /* All zeros: empty table, loads 0, imbalance 1 (mean 0). */
    cr_session_rate z[] = {{1, 0}, {2, 0}};
    t = plan_ok(&SEED_CFG, z, 2);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 0);
    CU_ASSERT_EQUAL(cr_table_expected_load(t)[3], 0);
    CU_ASSERT_EQUAL(cr_table_imbalance(t), 1.0);
    cr_table_free(t);
    t = plan_ok(&SEED_CFG, NULL, 0);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 0);
    cr_table_free(t);
}

static void test_rule3_order_and_stable_ties(void)
{
    cr_session_rate r[] = {{10, 1}, {11, 7}, {12, 7}, {13, 2}, {14, 7}};
    cr_table *t = plan_ok(&(cr_planner_config){8, 100, 10}, r, 5);
    int64_t want[] = {11, 12, 14, 13, 10};
    for (size_t i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(cr_table_placement(t, i)->owner, want[i]);
    cr_table_free(t);
}

static void test_rule4_kb_and_skip(void)
{
    /* R=4, qcap=10, W=1: budget 4 slots.
     * owner 1 rate 35 -> ceil(3.5)=4 > ... kb 4 (used 4, budget full)
     * owner 2 rate 25 -> kb 3: 4+3 > 4 skip (unadmitted 25)
     * owner 3 rate 0.5 -> kb max(1, ceil(0.05)) = 1: 4+1 > 4 skip */
    cr_session_rate r[] = {{1, 35}, {2, 25}, {3, 0.5}};
    cr_table *t = plan_ok(&(cr_planner_config){4, 10, 1}, r, 3);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 1);
    CU_ASSERT_EQUAL(cr_table_placement(t, 0)->kb, 4);
    CU_ASSERT_EQUAL(cr_table_unadmitted_rate_total(t), 25.5);
    cr_table_free(t);
    /* Skip, do not stop: budget 5 (R=5, W=1). Owner 1 needs 4 (used 4),
     * owner 2 needs 3 -> skipped, owner 3 needs 1 -> admitted (used 5). */
    t = plan_ok(&(cr_planner_config){5, 10, 1}, r, 3);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 2);
    CU_ASSERT_EQUAL(cr_table_placement(t, 1)->owner, 3);
    CU_ASSERT_EQUAL(cr_table_admitted_rate_total(t), 35.5);
    CU_ASSERT_EQUAL(cr_table_unadmitted_rate_total(t), 25);
    cr_table_free(t);
    /* kb capped at R: rate 1000 at qcap 1 on 3 shards holds 3 shards. */
    cr_session_rate hot[] = {{9, 1000}};
    t = plan_ok(&(cr_planner_config){3, 1, 10}, hot, 1);
    assert_shards(t, 0, 9, (uint32_t[]){0, 1, 2}, 3);
    cr_table_free(t);
    /* Exact fit: rate exactly 2*qcap needs 2, not 3. */
    cr_session_rate exact[] = {{9, 100}};
    t = plan_ok(&SEED_CFG, exact, 1);
    CU_ASSERT_EQUAL(cr_table_placement(t, 0)->kb, 2);
    cr_table_free(t);
    /* Fractional budget: R=3, W=0.5 -> 1.5 slots: one kb=1 session fits. */
    cr_session_rate two[] = {{1, 1}, {2, 1}};
    t = plan_ok(&(cr_planner_config){3, 10, 0.5}, two, 2);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), 1);
    cr_table_free(t);
}

static void test_rule5_unadmitted_spread(void)
{
    /* R=2, W=0.5: budget 1 slot. Owner 1 (rate 6) admitted on shard 0;
     * owner 2 (rate 4) unadmitted -> every shard starts at 4/2 = 2.
     * Owner 1 takes the smallest (2, id 0): loads [8, 2]. */
    cr_session_rate r[] = {{1, 6}, {2, 4}};
    cr_table *t = plan_ok(&(cr_planner_config){2, 10, 0.5}, r, 2);
    const double *load = cr_table_expected_load(t);
    CU_ASSERT_EQUAL(load[0], 8);
    CU_ASSERT_EQUAL(load[1], 2);
    CU_ASSERT_DOUBLE_EQUAL(cr_table_imbalance(t), 8.0 / 5.0, 1e-15);
    cr_table_free(t);
}

static void test_rule6_lpt_placement(void)
{
    /* R=3, qcap=10: rates 25 (kb 3), 12 (kb 2), 9, 8, 1 (kb 1).
     * 25/3 on every shard: [8.33, 8.33, 8.33]
     * 12 -> shards 0,1 (ties by id) +6: [14.33, 14.33, 8.33]
     * 9 -> shard 2: [14.33, 14.33, 17.33]
     * 8 -> shard 0: [22.33, 14.33, 17.33]
     * 1 -> shard 1: [22.33, 15.33, 17.33] */
    cr_session_rate r[] = {{5, 1}, {1, 25}, {4, 8}, {2, 12}, {3, 9}};
    cr_table *t = plan_ok(&(cr_planner_config){3, 10, 100}, r, 5);
    assert_shards(t, 0, 1, (uint32_t[]){0, 1, 2}, 3);
    assert_shards(t, 1, 2, (uint32_t[]){0, 1}, 2);
    assert_shards(t, 2, 3, (uint32_t[]){2}, 1);
    assert_shards(t, 3, 4, (uint32_t[]){0}, 1);
    assert_shards(t, 4, 5, (uint32_t[]){1}, 1);
    const double *load = cr_table_expected_load(t);
    double third = 25.0 / 3;
    CU_ASSERT_EQUAL(load[0], third + 6 + 8);
    CU_ASSERT_EQUAL(load[1], third + 6 + 1);
    CU_ASSERT_EQUAL(load[2], third + 9);
    /* Preferred: owner 1 holds all: lowest final load is shard 1. */
    CU_ASSERT_EQUAL(cr_table_preferred_shard(t, 1, 0), 1);
    CU_ASSERT_EQUAL(cr_table_preferred_shard(t, 2, 0), 1);
    CU_ASSERT_EQUAL(cr_table_preferred_shard(t, 4, 9), 0);
    cr_table_free(t);
}

static void test_rule6_shards_recorded_ascending(void)
{
    /* R=4: owner 1 (rate 5, kb 1) takes shard 0, owner 2 (rate 4) shard 1,
     * owner 3 (rate 3) shard 2; owner 4 (rate 60, kb... ) placed first by
     * rate. Build a case where the chosen shards come out of the heap out of
     * id order: loads [5, 1, 3, 0] -> a kb=3 owner takes 3, 1, 2 -> recorded
     * as 1, 2, 3. */
    cr_session_rate r[] = {{1, 5}, {2, 3}, {3, 1}, {4, 0.3}};
    cr_planner_config cfg = {4, 1.0, 10};
    cr_table *t = plan_ok(&cfg, r, 4);
    /* kb: 5 -> 4 (capped), 3 -> 3, 1 -> 1, 0.3 -> 1.
     * 5/4=1.25 each: [1.25]*4; 3 -> shards 0,1,2 +1: [2.25,2.25,2.25,1.25];
     * 1 -> shard 3: [2.25,2.25,2.25,2.25]; 0.3 -> shard 0. */
    assert_shards(t, 1, 2, (uint32_t[]){0, 1, 2}, 3);
    assert_shards(t, 2, 3, (uint32_t[]){3}, 1);
    assert_shards(t, 3, 4, (uint32_t[]){0}, 1);
    cr_table_free(t);

    cr_session_rate s[] = {{1, 5}, {2, 3}, {3, 1}, {4, 2.5}};
    cfg.qcap = 1;
    /* kb: 5->4, 3->3, 2.5->3, 1->1. [1.25]*4; 3 -> 0,1,2: [2.25,2.25,2.25,1.25];
     * 2.5 -> smallest three: 3 (1.25), 0, 1 -> recorded 0,1,3. */
    t = plan_ok(&cfg, s, 4);
    assert_shards(t, 2, 4, (uint32_t[]){0, 1, 3}, 3);
    cr_table_free(t);
}

static void test_many_shards_per_owner(void)
{
    /* kb above the insertion-sort cutoff. R=100, qcap=1: owner 2 (rate 70)
     * goes first and loads shards 0..69; owner 1 (rate 50) then pops the 30
     * empty shards 70..99 before 0..19, and records them ascending. */
    enum { R = 100 };
    cr_session_rate r[] = {{1, 50}, {2, 70}};
    cr_table *t = plan_ok(&(cr_planner_config){R, 1, 10}, r, 2);
    assert_shards(t, 0, 2, NULL, 70);
    const cr_placement *p = cr_table_placement(t, 1);
    CU_ASSERT_EQUAL_FATAL(p->kb, 50);
    const uint32_t *s = cr_table_shards(t, p);
    for (uint32_t i = 0; i < 50; i++)
        CU_ASSERT_EQUAL(s[i], i < 20 ? i : i + 50);
    cr_table_free(t);
}

static void test_determinism(void)
{
    enum { N = 5000 };
    cr_session_rate *r = malloc(N * sizeof *r);
    srand(7);
    for (int i = 0; i < N; i++)
        r[i] = (cr_session_rate){i * 7919LL - 100000, (rand() % 1000) / 7.0};
    cr_planner_config cfg = {13, 3.3, 50};
    cr_table *a = plan_ok(&cfg, r, N), *b = plan_ok(&cfg, r, N);
    CU_ASSERT_EQUAL(memcmp(cr_table_expected_load(a), cr_table_expected_load(b),
                           13 * sizeof(double)), 0);
    CU_ASSERT_EQUAL_FATAL(cr_table_n_placements(a), cr_table_n_placements(b));
    for (size_t i = 0; i < cr_table_n_placements(a); i++) {
        const cr_placement *pa = cr_table_placement(a, i), *pb = cr_table_placement(b, i);
        CU_ASSERT_EQUAL(pa->owner, pb->owner);
        CU_ASSERT_EQUAL(pa->kb, pb->kb);
        CU_ASSERT_EQUAL(memcmp(cr_table_shards(a, pa), cr_table_shards(b, pb), pa->kb * 4), 0);
    }
    double ia = cr_table_imbalance(a), ib = cr_table_imbalance(b);
    CU_ASSERT_EQUAL(memcmp(&ia, &ib, sizeof ia), 0);
    cr_table_free(a);
    cr_table_free(b);
    free(r);
}

/* ---- reference: the rules written the plain way (sorts everywhere) ---- */

typedef struct ref_placement {
    int64_t owner;
    uint32_t kb;
    uint32_t shards[64];
} ref_placement;

typedef struct ref_table {
    size_t n;
    ref_placement *p;
    double load[64];
    double adm, unadm;
} ref_table;

static const double *ref_load;

static int ref_cmp_shard(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (ref_load[x] != ref_load[y])
        return ref_load[x] < ref_load[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static int ref_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void ref_plan(const cr_planner_config *cfg, const cr_session_rate *r, size_t n,
                     ref_table *out)
{
    uint32_t R = cfg->n_shards;
    size_t *idx = malloc((n + 1) * sizeof *idx), m = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].rate != 0)
            idx[m++] = i;
    /* Stable insertion sort by decreasing rate. */
    for (size_t i = 1; i < m; i++) {
        size_t x = idx[i], j = i;
        for (; j > 0 && r[idx[j - 1]].rate < r[x].rate; j--)
            idx[j] = idx[j - 1];
        idx[j] = x;
    }
    out->p = calloc(m + 1, sizeof *out->p);
    out->n = 0;
    out->adm = out->unadm = 0;
    double used = 0;
    for (size_t i = 0; i < m; i++) {
        double rate = r[idx[i]].rate;
        double kbd = fmin((double)R, fmax(1.0, ceil(rate / cfg->qcap)));
        uint32_t kb = (uint32_t)kbd;
        if (used + kb <= (double)R * cfg->warm_slots_per_shard) {
            used += kb;
            out->adm += rate;
            out->p[out->n].owner = r[idx[i]].owner;
            out->p[out->n++].kb = kb;
        } else {
            out->unadm += rate;
        }
    }
    for (uint32_t s = 0; s < R; s++)
        out->load[s] = out->unadm > 0 ? out->unadm / R : 0.0;
    ref_load = out->load;
    for (size_t i = 0; i < out->n; i++) {
        uint32_t all[64];
        for (uint32_t s = 0; s < R; s++)
            all[s] = s;
        qsort(all, R, sizeof *all, ref_cmp_shard);
        ref_placement *p = &out->p[i];
        double rate = 0;
        for (size_t k = 0; k < n; k++)
            if (r[k].owner == p->owner)
                rate = r[k].rate;
        for (uint32_t k = 0; k < p->kb; k++) {
            p->shards[k] = all[k];
            out->load[all[k]] += rate / p->kb;
        }
        qsort(p->shards, p->kb, sizeof *p->shards, ref_cmp_u32);
    }
    free(idx);
}

static void test_property_against_reference(void)
{
    srand(12345);
    int mismatches = 0;
    for (int iter = 0; iter < 3000; iter++) {
        cr_planner_config cfg;
        cfg.n_shards = 1 + (uint32_t)(rand() % 64);
        cfg.qcap = (1 + rand() % 200) / 4.0;
        cfg.warm_slots_per_shard = (1 + rand() % 40) / 8.0;
        size_t n = (size_t)(rand() % 120);
        cr_session_rate *r = malloc((n + 1) * sizeof *r);
        for (size_t i = 0; i < n; i++) {
            int kind = rand() % 10;
            /* zeros, ties from a small set, and arbitrary values */
            double rate = kind == 0 ? 0 : kind < 5 ? (rand() % 8) * 12.5 : rand() / 1e6;
            r[i] = (cr_session_rate){(int64_t)(i * 2654435761u) - 5000, rate};
        }
        cr_table *t = plan_ok(&cfg, r, n);
        ref_table ref;
        ref_plan(&cfg, r, n, &ref);
        int ok = cr_table_n_placements(t) == ref.n &&
                 memcmp(cr_table_expected_load(t), ref.load, cfg.n_shards * sizeof(double)) == 0 &&
                 cr_table_admitted_rate_total(t) == ref.adm &&
                 cr_table_unadmitted_rate_total(t) == ref.unadm;
        for (size_t i = 0; ok && i < ref.n; i++) {
            const cr_placement *p = cr_table_placement(t, i);
            ok = p->owner == ref.p[i].owner && p->kb == ref.p[i].kb &&
                 memcmp(cr_table_shards(t, p), ref.p[i].shards, p->kb * 4) == 0 &&
                 cr_table_find(t, p->owner) == p;
            /* preferred: own shard with the smallest (load, id) */
            uint32_t best = ref.p[i].shards[0];
            for (uint32_t k = 1; k < p->kb; k++)
                if (ref.load[ref.p[i].shards[k]] < ref.load[best])
                    best = ref.p[i].shards[k];
            ok = ok && p->preferred_shard == best;
        }
        /* Owners with zero rate or skipped are never found. */
        for (size_t i = 0; ok && i < n; i++) {
            int admitted = 0;
            for (size_t k = 0; k < ref.n; k++)
                admitted |= ref.p[k].owner == r[i].owner;
            ok = cr_table_is_admitted(t, r[i].owner) == admitted;
        }
        mismatches += !ok;
        free(ref.p);
        free(r);
        cr_table_free(t);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
}

static void test_large_plan_admits_by_budget(void)
{
    /* 200,000 sessions, budget for exactly half of them (kb 1 each): the
     * admitted ones are the top half by rate, the loads sum to the total. */
    enum { N = 200000 };
    cr_session_rate *r = malloc(N * sizeof *r);
    for (int i = 0; i < N; i++)
        r[i] = (cr_session_rate){(int64_t)i * 31 + 1, 1.0 + (i % 1000)};
    cr_planner_config cfg = {64, 1e9, N / 2 / 64.0};
    cr_table *t = plan_ok(&cfg, r, N);
    CU_ASSERT_EQUAL(cr_table_n_placements(t), N / 2);
    double last = INFINITY;
    int sorted = 1;
    for (size_t i = 0; i < cr_table_n_placements(t); i++) {
        const cr_placement *p = cr_table_placement(t, i);
        double rate = 1.0 + (double)(((p->owner - 1) / 31) % 1000);
        sorted &= rate <= last;
        last = rate;
    }
    CU_ASSERT_TRUE(sorted);
    CU_ASSERT_TRUE(last >= 500); /* the lower half of rates is left out */
    double sum = 0;
    for (int s = 0; s < 64; s++)
        sum += cr_table_expected_load(t)[s];
    CU_ASSERT_DOUBLE_EQUAL(sum, cr_table_admitted_rate_total(t) + cr_table_unadmitted_rate_total(t),
                           1e-6 * sum);
    cr_table_free(t);
    free(r);
}

/* The size check sees admission's outcome before any placement, and a
 * refusal leaves nothing. */
typedef struct size_seen {
    cr_plan_size size;
    int calls, refuse;
} size_seen;

static int note_size(void *ctx, const cr_plan_size *s, cr_error *err)
{
    size_seen *seen = ctx;
    seen->size = *s;
    seen->calls++;
    if (seen->refuse)
        snprintf(err->msg, sizeof err->msg, "refused at %llu slots", (unsigned long long)s->slots);
    return seen->refuse ? -1 : 0;
}

static void test_size_check(void)
{
    /* A budget of 4 x 1 slots: owner 4 (rate 500, kb 4) takes them all, 2
     * (kb 2) and 1 (kb 1) are skipped, 3 (rate 0) is ignored. */
    cr_planner_config cfg = {4, 50, 1};
    cr_session_rate r[] = {{1, 10}, {2, 80}, {3, 0}, {4, 500}};
    size_seen seen = {.refuse = 0};
    cr_table *t = NULL;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_planner_plan_checked(&cfg, r, 4, note_size, &seen, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(seen.calls, 1);
    CU_ASSERT_EQUAL(seen.size.n_shards, 4);
    CU_ASSERT_EQUAL(seen.size.sessions, cr_table_n_placements(t));
    CU_ASSERT_EQUAL(seen.size.sessions, 1);
    CU_ASSERT_EQUAL(seen.size.slots, 4);
    cr_table *plain = plan_ok(&cfg, r, 4);
    CU_ASSERT_EQUAL(cr_table_n_placements(plain), cr_table_n_placements(t));
    CU_ASSERT_EQUAL(memcmp(cr_table_expected_load(plain), cr_table_expected_load(t),
                           4 * sizeof(double)),
                    0);
    cr_table_free(plain);
    cr_table_free(t);
    seen = (size_seen){.refuse = 1};
    t = (cr_table *)&seen; /* must come back NULL */
    CU_ASSERT_EQUAL(cr_planner_plan_checked(&SEED_CFG, r, 4, note_size, &seen, &t, &err),
                    CR_ENOMEM);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_EQUAL(seen.size.sessions, 3);
    CU_ASSERT_EQUAL(seen.size.slots, 2 + 1 + 4);
    CU_ASSERT_STRING_EQUAL(err.msg, "refused at 7 slots");
    /* Bad input is named before any check runs. */
    seen.calls = 0;
    r[0].rate = -1;
    CU_ASSERT_EQUAL(cr_planner_plan_checked(&SEED_CFG, r, 4, note_size, &seen, &t, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(seen.calls, 0);
}

/* ---- lookups: one at a time, in batches, after a round trip ---- */

/* A plan of n sessions with owners 31 i + 1 whose budget admits half of
 * them (kb 1 each, rates 1..1000 by i). */
static cr_table *half_admitted(size_t n)
{
    cr_session_rate *r = malloc(n * sizeof *r);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (size_t i = 0; i < n; i++)
        r[i] = (cr_session_rate){(int64_t)i * 31 + 1, 1.0 + (double)(i % 1000)};
    cr_planner_config cfg = {64, 1e9, (double)n / 2 / 64.0};
    cr_table *t = plan_ok(&cfg, r, n);
    free(r);
    return t;
}

/* Owners to look up: every planned one (admitted or left out), as many
 * never planned (31 i + 2), the extremes, then the last 1,000 again (500
 * planned with the top rates, admitted for n >= 1,000):
 * hits, misses and duplicates, in a count that is no multiple of a batch
 * group. *m gets the count. */
static int64_t *lookup_mix(size_t n, size_t *m)
{
    int64_t *q = malloc((2 * n + 1004) * sizeof *q);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        q[k++] = (int64_t)i * 31 + 1;
        q[k++] = (int64_t)i * 31 + 2;
    }
    q[k++] = INT64_MIN;
    q[k++] = INT64_MAX;
    q[k++] = 0;
    q[k++] = -1;
    for (size_t i = 2 * n - (n < 500 ? n : 500) * 2; i < 2 * n; i++)
        q[k++] = q[i];
    *m = k;
    return q;
}

/* Each owner's placement by a scan of the placements (not the index):
 * what any lookup must answer. */
static const cr_placement **reference(const cr_table *t, const int64_t *q, size_t m, size_t n)
{
    const cr_placement **by_i = calloc(n, sizeof *by_i), **want = calloc(m, sizeof *want);
    CU_ASSERT_PTR_NOT_NULL_FATAL(by_i);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    for (size_t i = 0; i < cr_table_n_placements(t); i++) {
        const cr_placement *p = cr_table_placement(t, i);
        by_i[(p->owner - 1) / 31] = p;
    }
    for (size_t j = 0; j < m; j++)
        if (q[j] > 0 && (q[j] - 1) % 31 == 0 && (size_t)((q[j] - 1) / 31) < n)
            want[j] = by_i[(q[j] - 1) / 31];
    free(by_i);
    return want;
}

/* cr_table_find and cr_table_find_batch (over all of q, and over every
 * short prefix: a batch group's edges) both give want's answers. */
static void assert_lookups(const cr_table *t, const int64_t *q, size_t m,
                           const cr_placement **want)
{
    const cr_placement **got = malloc((m + 1) * sizeof *got); /* + a sentinel */
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    size_t single = 0, batch = 0;
    cr_table_find_batch(t, q, m, got);
    for (size_t j = 0; j < m; j++) {
        single += cr_table_find(t, q[j]) != want[j];
        batch += got[j] != want[j];
    }
    for (size_t len = 0; len <= 70 && len <= m; len++) {
        got[len] = (const cr_placement *)got; /* a sentinel that must stay */
        cr_table_find_batch(t, q, len, got);
        for (size_t j = 0; j < len; j++)
            batch += got[j] != want[j];
        batch += got[len] != (const cr_placement *)got;
    }
    CU_ASSERT_EQUAL(single, 0);
    CU_ASSERT_EQUAL(batch, 0);
    free(got);
}

static void test_batch_lookups_equal_single(void)
{
    enum { N = 100000 };
    cr_table *t = half_admitted(N);
    CU_ASSERT_EQUAL_FATAL(cr_table_n_placements(t), N / 2);
    size_t m;
    int64_t *q = lookup_mix(N, &m);
    const cr_placement **want = reference(t, q, m, N);
    size_t hits = 0;
    for (size_t j = 0; j < m; j++)
        hits += want[j] != NULL;
    CU_ASSERT_EQUAL(hits, N / 2 + 500); /* half the planned, and their repeats */
    assert_lookups(t, q, m, want);
    free(want);
    free(q);
    cr_table_free(t);
}

static void test_batch_lookups_small_tables(void)
{
    cr_session_rate none[] = {{5, 0}, {6, 0}}; /* rule 2: nothing admitted */
    cr_table *t = plan_ok(&SEED_CFG, none, 2);
    int64_t q[] = {5, 6, 5, 7, INT64_MIN};
    const cr_placement *want[5] = {NULL}, *got[5];
    assert_lookups(t, q, 5, want);
    cr_table_free(t);
    cr_session_rate one[] = {{6, 10}};
    t = plan_ok(&SEED_CFG, one, 1);
    want[1] = cr_table_placement(t, 0);
    cr_table_find_batch(t, q, 5, got);
    CU_ASSERT_PTR_EQUAL(got[1], want[1]);
    CU_ASSERT_EQUAL(got[1]->owner, 6);
    assert_lookups(t, q, 5, want);
    cr_table_free(t);
}

/* Saved, loaded and saved again: the same bytes, placements in the same
 * order, and every lookup answering the same position. */
static void test_table_round_trip_unchanged(void)
{
    enum { N = 20000 };
    cr_table *t = half_admitted(N);
    cr_buf a = CR_BUF_INIT, b = CR_BUF_INIT;
    cr_table_save(t, &a);
    CU_ASSERT_FALSE_FATAL(a.failed);
    cr_cursor c = cr_cursor_of(a.p, a.len);
    cr_table *u = NULL;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_table_load(&c, &u, &err), CR_OK);
    CU_ASSERT_EQUAL(c.left, 0);
    cr_table_save(u, &b);
    CU_ASSERT_EQUAL_FATAL(b.len, a.len);
    CU_ASSERT_EQUAL(memcmp(a.p, b.p, a.len), 0);
    CU_ASSERT_EQUAL_FATAL(cr_table_n_placements(u), cr_table_n_placements(t));
    size_t m, moved = 0;
    int64_t *q = lookup_mix(N, &m);
    const cr_placement **want = reference(t, q, m, N), **there = reference(u, q, m, N);
    for (size_t j = 0; j < m; j++) /* the same position in each table */
        moved += (want[j] ? want[j] - cr_table_placement(t, 0) : -1) !=
                 (there[j] ? there[j] - cr_table_placement(u, 0) : -1);
    CU_ASSERT_EQUAL(moved, 0);
    for (size_t i = 0; i < cr_table_n_placements(t); i++) {
        const cr_placement *p = cr_table_placement(t, i), *r = cr_table_placement(u, i);
        moved += p->owner != r->owner || p->kb != r->kb ||
                 p->preferred_shard != r->preferred_shard;
    }
    CU_ASSERT_EQUAL(moved, 0);
    assert_lookups(u, q, m, there);
    free(want);
    free(there);
    free(q);
    cr_buf_free(&a);
    cr_buf_free(&b);
    cr_table_free(u);
    cr_table_free(t);
}

static const cr_test_case planner_tests[] = {
    {"seed example", test_seed_example},
    {"rule 1: rate errors", test_rule1_rate_errors},
    {"rule 1: first error wins", test_rule1_first_error_wins},
    {"rule 1: config errors", test_rule1_config_errors},
    {"rule 2: zero rates ignored", test_rule2_zero_rates_ignored},
    {"rule 3: order, stable ties", test_rule3_order_and_stable_ties},
    {"rule 4: kb and skip", test_rule4_kb_and_skip},
    {"rule 5: unadmitted spread", test_rule5_unadmitted_spread},
    {"rule 6: LPT placement", test_rule6_lpt_placement},
    {"rule 6: shards ascending", test_rule6_shards_recorded_ascending},
    {"rule 6: many shards per owner", test_many_shards_per_owner},
    {"determinism", test_determinism},
    {"property vs reference", test_property_against_reference},
    {"large plan by budget", test_large_plan_admits_by_budget},
    {"size check before placing", test_size_check},
    {"batch lookups equal single ones", test_batch_lookups_equal_single},
    {"batch lookups in small tables", test_batch_lookups_small_tables},
    {"table round trip unchanged", test_table_round_trip_unchanged},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"planner", planner_tests}};
CR_TEST_MAIN(suites)
