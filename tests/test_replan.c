/* Stable replans (planner/replan.c, rules S1-S7) and churn: hand-computed
 * replans for each rule, the hysteresis at its edge, validation, fresh
 * mode and the fallbacks to it bit for bit against cr_planner_plan over
 * test_planner's property inputs, determinism, invariants over random
 * replans, and the remapped owner index. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "planner.h"

static const cr_replan_config STABLE = {CR_REPLAN_STABLE, 1.25, 0.1};

static cr_table *fresh_ok(const cr_planner_config *cfg, const cr_session_rate *r, size_t n)
{
    cr_table *t = NULL;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_planner_plan(cfg, r, n, &t, &err), CR_OK);
    return t;
}

static cr_table *replan_home(const cr_planner_config *cfg, const cr_replan_config *rc,
                             const cr_replan_prev *prev, const cr_session_rate *r, size_t n)
{
    cr_table *t = NULL;
    cr_error err;
    cr_status st = cr_planner_replan(cfg, rc, prev, r, n, &t, &err);
    CU_ASSERT_EQUAL_FATAL(st, CR_OK);
    CU_ASSERT_STRING_EQUAL(err.msg, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    return t;
}

/* A stable replan from prev without a home function. */
static cr_table *replan_ok(const cr_planner_config *cfg, const cr_table *prev,
                           const cr_session_rate *r, size_t n)
{
    cr_replan_prev from = {prev, NULL, NULL};
    return replan_home(cfg, &STABLE, &from, r, n);
}

/* owner's shards in t are want[0..kb). */
static void assert_set(const cr_table *t, int64_t owner, const uint32_t *want, uint32_t kb)
{
    const cr_placement *p = cr_table_find(t, owner);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(p->kb, kb);
    CU_ASSERT_EQUAL(memcmp(cr_table_shards(t, p), want, kb * sizeof *want), 0);
}

static void assert_churn(const cr_table *prev, const cr_table *next, uint64_t moved, uint64_t in,
                         uint64_t out)
{
    cr_churn c = cr_table_churn(prev, next);
    CU_ASSERT_EQUAL(c.moved, moved);
    CU_ASSERT_EQUAL(c.admitted_in, in);
    CU_ASSERT_EQUAL(c.admitted_out, out);
}

/* One hand-computed case: the fresh plan of before, the stable replan of
 * after from it, and after's fresh plan to compare with. */
typedef struct hand_case {
    cr_table *prev, *t, *fresh;
} hand_case;

static hand_case open_case(const cr_planner_config *cfg, const cr_session_rate *before, size_t nb,
                           const cr_session_rate *after, size_t na)
{
    hand_case c = {fresh_ok(cfg, before, nb), NULL, fresh_ok(cfg, after, na)};
    c.t = replan_ok(cfg, c.prev, after, na);
    return c;
}

static void close_case(hand_case *c)
{
    cr_table_free(c->fresh);
    cr_table_free(c->t);
    cr_table_free(c->prev);
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Every observable of the two tables, bit for bit. */
static int tables_equal(const cr_table *a, const cr_table *b)
{
    uint32_t r = cr_table_n_shards(a);
    size_t n = cr_table_n_placements(a);
    int ok =
        r == cr_table_n_shards(b) && n == cr_table_n_placements(b) &&
        memcmp(cr_table_expected_load(a), cr_table_expected_load(b), r * sizeof(double)) == 0 &&
        same_bits(cr_table_admitted_rate_total(a), cr_table_admitted_rate_total(b)) &&
        same_bits(cr_table_unadmitted_rate_total(a), cr_table_unadmitted_rate_total(b)) &&
        same_bits(cr_table_imbalance(a), cr_table_imbalance(b));
    for (size_t i = 0; ok && i < n; i++) {
        const cr_placement *p = cr_table_placement(a, i), *q = cr_table_placement(b, i);
        ok = p->owner == q->owner && p->kb == q->kb && p->first == q->first &&
             p->preferred_shard == q->preferred_shard &&
             memcmp(cr_table_shards(a, p), cr_table_shards(b, q), p->kb * 4) == 0 &&
             cr_table_find(b, p->owner) == q;
    }
    return ok;
}

static void test_s4_unchanged_rates_keep_the_table(void)
{
    /* test_planner's rule 6 example: loads [22.33, 15.33, 17.33], mean
     * 18.33, B = 22.92: nothing over, so the replan is the same table. */
    cr_session_rate r[] = {{5, 1}, {1, 25}, {4, 8}, {2, 12}, {3, 9}};
    cr_planner_config cfg = {3, 10, 100};
    hand_case c = open_case(&cfg, r, 5, r, 5);
    CU_ASSERT_TRUE(tables_equal(c.prev, c.t));
    assert_churn(c.prev, c.t, 0, 0, 0);
    /* And again from the replan: still the same. */
    cr_table *again = replan_ok(&cfg, c.t, r, 5);
    CU_ASSERT_TRUE(tables_equal(c.prev, again));
    cr_table_free(again);
    close_case(&c);
}

static void test_s3_new_hot_session_moves_only_what_it_displaces(void)
{
    /* R=2, qcap=100, W=1: budget 2. Before: A(1)=10 on 0, B(2)=8 on 1, C(3)=1
     * unadmitted. D(4)=50 arrives: D (50 > 10 * 1.1) then A fill the
     * budget; B and C are unadmitted (start 4.5 each). A keeps shard 0
     * ([14.5, 4.5]); D goes by LPT to shard 1 ([14.5, 54.5]). */
    cr_planner_config cfg = {2, 100, 1};
    cr_session_rate before[] = {{1, 10}, {2, 8}, {3, 1}};
    cr_session_rate after[] = {{1, 10}, {2, 8}, {3, 1}, {4, 50}};
    hand_case c = open_case(&cfg, before, 3, after, 4);
    assert_set(c.prev, 1, (uint32_t[]){0}, 1);
    CU_ASSERT_EQUAL_FATAL(cr_table_n_placements(c.t), 2);
    CU_ASSERT_EQUAL(cr_table_placement(c.t, 0)->owner, 4);
    CU_ASSERT_EQUAL(cr_table_placement(c.t, 1)->owner, 1);
    assert_set(c.t, 1, (uint32_t[]){0}, 1);
    assert_set(c.t, 4, (uint32_t[]){1}, 1);
    CU_ASSERT_FALSE(cr_table_is_admitted(c.t, 2));
    CU_ASSERT_EQUAL(cr_table_expected_load(c.t)[0], 14.5);
    CU_ASSERT_EQUAL(cr_table_expected_load(c.t)[1], 54.5);
    CU_ASSERT_EQUAL(cr_table_unadmitted_rate_total(c.t), 9);
    CU_ASSERT_DOUBLE_EQUAL(cr_table_imbalance(c.t), 54.5 / 34.5, 1e-15);
    assert_churn(c.prev, c.t, 0, 1, 1);
    /* From scratch D would take shard 0 and push A to shard 1. */
    assert_churn(c.prev, c.fresh, 1, 1, 1);
    close_case(&c);
}

static void test_s4_kb_change_replaces_only_that_session(void)
{
    /* R=3, qcap=10: A(1)=8, B(2)=6, C(3)=4 on shards 0, 1, 2. A goes to 15
     * (kb 2): B and C keep theirs ([0, 6, 4]); A takes the two least loaded,
     * 0 and 2, 7.5 each: [7.5, 6, 11.5]. */
    cr_planner_config cfg = {3, 10, 100};
    cr_session_rate before[] = {{1, 8}, {2, 6}, {3, 4}};
    cr_session_rate after[] = {{1, 15}, {2, 6}, {3, 4}};
    hand_case c = open_case(&cfg, before, 3, after, 3);
    assert_set(c.t, 1, (uint32_t[]){0, 2}, 2);
    assert_set(c.t, 2, (uint32_t[]){1}, 1);
    assert_set(c.t, 3, (uint32_t[]){2}, 1);
    const double *load = cr_table_expected_load(c.t);
    CU_ASSERT(load[0] == 7.5 && load[1] == 6 && load[2] == 11.5);
    CU_ASSERT_EQUAL(cr_table_preferred_shard(c.t, 1, 9), 0);
    assert_churn(c.prev, c.t, 1, 0, 0);
    assert_churn(c.prev, c.fresh, 2, 0, 0); /* fresh: A on 0, 1; B on 2; C on 2 */
    close_case(&c);
}

static void test_s5_bound_moves_the_largest_movable(void)
{
    /* R=2, qcap=100. Before: A(1)=10, D(4)=2.5 on shard 0; B(2)=9, C(3)=3,
     * E(5)=2 on shard 1. B goes to 16: kept loads [12.5, 21], mean 16.75,
     * B = 20.9375, movable at most 4.1875 (C and E; without both, 16 <= B).
     * C, the largest, leaves ([12.5, 18] is within B) and LPT puts it on
     * shard 0: [15.5, 18]. E stays. */
    cr_planner_config cfg = {2, 100, 10};
    cr_session_rate before[] = {{1, 10}, {2, 9}, {3, 3}, {4, 2.5}, {5, 2}};
    cr_session_rate after[] = {{1, 10}, {2, 16}, {3, 3}, {4, 2.5}, {5, 2}};
    hand_case c = open_case(&cfg, before, 5, after, 5);
    cr_table *prev = c.prev, *t;
    assert_set(prev, 3, (uint32_t[]){1}, 1);
    assert_set(prev, 5, (uint32_t[]){1}, 1);
    assert_set(c.t, 3, (uint32_t[]){0}, 1);
    assert_set(c.t, 5, (uint32_t[]){1}, 1);
    assert_set(c.t, 2, (uint32_t[]){1}, 1);
    CU_ASSERT_EQUAL(cr_table_expected_load(c.t)[0], 15.5);
    CU_ASSERT_EQUAL(cr_table_expected_load(c.t)[1], 18);
    CU_ASSERT_DOUBLE_EQUAL(cr_table_imbalance(c.t), 18 / 16.75, 1e-15);
    assert_churn(prev, c.t, 1, 0, 0);
    /* With --max-imbalance 1.5 (B = 25.125) nothing is over: nothing moves. */
    cr_replan_config loose = STABLE;
    loose.max_imbalance = 1.5;
    cr_replan_prev from = {prev, NULL, NULL};
    t = replan_home(&cfg, &loose, &from, after, 5);
    assert_churn(prev, t, 0, 0, 0);
    CU_ASSERT_EQUAL(cr_table_expected_load(t)[1], 21);
    cr_table_free(t);
    /* B at 30: [12.5, 35], mean 23.75, B = 29.6875; without C and E shard
     * 1 still holds 30: moving them would not meet the bound, so none
     * moves. */
    after[1].rate = 30;
    t = replan_ok(&cfg, prev, after, 5);
    assert_churn(prev, t, 0, 0, 0);
    CU_ASSERT_EQUAL(cr_table_expected_load(t)[1], 35);
    cr_table_free(t);
    close_case(&c);
}

static void test_s3_hysteresis_edge(void)
{
    /* R=1, W=1: one slot. A(1)=1 holds it. A newcomer B(2) takes it only
     * with a rate above 1 * (1 + 0.1), which is the double 1.1. */
    CU_ASSERT_TRUE(1.0 * (1 + 0.1) == 1.1);
    cr_planner_config cfg = {1, 100, 1};
    cr_session_rate before[] = {{1, 1}, {2, 0.5}};
    cr_table *prev = fresh_ok(&cfg, before, 2);
    cr_session_rate at[] = {{1, 1}, {2, 1.1}};
    cr_table *t = replan_ok(&cfg, prev, at, 2);
    CU_ASSERT_TRUE(cr_table_is_admitted(t, 1));
    CU_ASSERT_FALSE(cr_table_is_admitted(t, 2));
    CU_ASSERT_EQUAL(cr_table_unadmitted_rate_total(t), 1.1);
    assert_churn(prev, t, 0, 0, 0);
    cr_table_free(t);
    at[1].rate = nextafter(1.1, 2);
    t = replan_ok(&cfg, prev, at, 2);
    CU_ASSERT_TRUE(cr_table_is_admitted(t, 2));
    CU_ASSERT_FALSE(cr_table_is_admitted(t, 1));
    assert_churn(prev, t, 0, 1, 1);
    cr_table_free(t);
    /* Hysteresis 0: a tie keeps the incumbent, anything above displaces. */
    cr_replan_config none = STABLE;
    none.admit_hysteresis = 0;
    cr_replan_prev from = {prev, NULL, NULL};
    at[1].rate = 1;
    t = replan_home(&cfg, &none, &from, at, 2);
    CU_ASSERT_TRUE(cr_table_is_admitted(t, 1));
    cr_table_free(t);
    at[1].rate = nextafter(1, 2);
    t = replan_home(&cfg, &none, &from, at, 2);
    CU_ASSERT_TRUE(cr_table_is_admitted(t, 2));
    cr_table_free(t);
    cr_table_free(prev);
}

static uint32_t fixed_home(void *ctx, int64_t owner, uint32_t n_shards)
{
    (void)owner;
    (void)n_shards;
    return *(const uint32_t *)ctx;
}

static void test_s6_newcomer_goes_home_within_the_bound(void)
{
    /* R=4: owners 1..4 at 10 on shards 0..3. E(5) = 3 with home 2: mean
     * 10.75, B = 13.4375, 10 + 3 <= B: home. E = 5: 15 > B = 14.0625: LPT
     * (all at 10: shard 0). A home out of range is none. */
    cr_planner_config cfg = {4, 100, 10};
    cr_session_rate r[] = {{1, 10}, {2, 10}, {3, 10}, {4, 10}, {5, 3}};
    cr_table *prev = fresh_ok(&cfg, r, 4);
    uint32_t home = 2;
    cr_replan_prev from = {prev, fixed_home, &home};
    cr_table *t = replan_home(&cfg, &STABLE, &from, r, 5);
    assert_set(t, 5, (uint32_t[]){2}, 1);
    CU_ASSERT_EQUAL(cr_table_expected_load(t)[2], 13);
    assert_churn(prev, t, 0, 1, 0);
    cr_table_free(t);
    r[4].rate = 5;
    t = replan_home(&cfg, &STABLE, &from, r, 5);
    assert_set(t, 5, (uint32_t[]){0}, 1);
    cr_table_free(t);
    r[4].rate = 3;
    home = 4;
    t = replan_home(&cfg, &STABLE, &from, r, 5);
    assert_set(t, 5, (uint32_t[]){0}, 1);
    cr_table_free(t);
    cr_table_free(prev);
}

static void test_s2_zero_rates_leave(void)
{
    /* An incumbent at 0 leaves; a newcomer at 0 or -0.0 is ignored. */
    cr_planner_config cfg = {2, 100, 10};
    cr_session_rate before[] = {{1, 5}, {2, 3}};
    cr_session_rate after[] = {{1, 0}, {2, 3}, {3, 0}, {4, -0.0}};
    hand_case c = open_case(&cfg, before, 2, after, 4);
    CU_ASSERT_EQUAL(cr_table_n_placements(c.t), 1);
    assert_set(c.t, 2, (uint32_t[]){1}, 1);
    CU_ASSERT_EQUAL(cr_table_admitted_rate_total(c.t), 3);
    CU_ASSERT_EQUAL(cr_table_unadmitted_rate_total(c.t), 0);
    assert_churn(c.prev, c.t, 0, 0, 1);
    assert_set(c.fresh, 2, (uint32_t[]){0}, 1); /* fresh would move it */
    close_case(&c);
}

static void expect_error(const cr_planner_config *cfg, const cr_replan_config *rc,
                         const cr_table *prev, const cr_session_rate *r, size_t n, const char *msg)
{
    cr_table *t = (cr_table *)&t; /* must be reset to NULL */
    cr_error err;
    cr_replan_prev from = {prev, NULL, NULL};
    CU_ASSERT_EQUAL(cr_planner_replan(cfg, rc, &from, r, n, &t, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
}

static void test_s1_validation_as_rule_1(void)
{
    cr_planner_config cfg = {4, 50, 200};
    cr_session_rate before[] = {{5, 1}, {6, 1}};
    cr_table *prev = fresh_ok(&cfg, before, 2);
    cr_session_rate inc[] = {{5, 1}, {5, 2}};
    expect_error(&cfg, &STABLE, prev, inc, 2, "rates[1].owner 5 duplicates rates[0].owner");
    cr_session_rate news[] = {{7, 1}, {8, 1}, {7, 0}};
    expect_error(&cfg, &STABLE, prev, news, 3, "rates[2].owner 7 duplicates rates[0].owner");
    cr_session_rate mixed[] = {{9, 1}, {6, 0}, {9, 2}, {6, 3}};
    expect_error(&cfg, &STABLE, prev, mixed, 4, "rates[2].owner 9 duplicates rates[0].owner");
    cr_session_rate bad[] = {{5, 1}, {5, 2}, {6, -2}};
    expect_error(&cfg, &STABLE, prev, bad, 3, "rates[2].rate must be finite and >= 0, got -2");
    cr_replan_config rc = STABLE;
    rc.max_imbalance = 0.5;
    expect_error(&cfg, &rc, prev, before, 2,
                 "replan.max_imbalance must be finite and >= 1, got 0.5");
    rc = STABLE;
    rc.admit_hysteresis = -0.1;
    expect_error(&cfg, &rc, prev, before, 2,
                 "replan.admit_hysteresis must be finite and >= 0, got -0.1");
    rc.mode = CR_REPLAN_FRESH; /* checked in fresh mode too */
    expect_error(&cfg, &rc, prev, before, 2,
                 "replan.admit_hysteresis must be finite and >= 0, got -0.1");
    rc = STABLE;
    rc.mode = 2;
    expect_error(&cfg, &rc, prev, before, 2, "replan.mode must be one of stable, fresh, got 2");
    expect_error(&(cr_planner_config){0, 50, 200}, &rc, prev, before, 2,
                 "config.n_shards must be in 1..65536, got 0");
    cr_table_free(prev);
}

/* ---- fresh mode and the fallbacks, over test_planner's property inputs ---- */

static cr_session_rate *property_input(cr_planner_config *cfg, size_t *n)
{
    cfg->n_shards = 1 + (uint32_t)(rand() % 64);
    cfg->qcap = (1 + rand() % 200) / 4.0;
    cfg->warm_slots_per_shard = (1 + rand() % 40) / 8.0;
    *n = (size_t)(rand() % 120);
    cr_session_rate *r = malloc((*n + 1) * sizeof *r);
    for (size_t i = 0; i < *n; i++) {
        int kind = rand() % 10;
        double rate = kind == 0 ? 0 : kind < 5 ? (rand() % 8) * 12.5 : rand() / 1e6;
        r[i] = (cr_session_rate){(int64_t)(i * 2654435761u) - 5000, rate};
    }
    return r;
}

static uint32_t no_home(void *ctx, int64_t owner, uint32_t n_shards)
{
    (void)ctx;
    (void)owner;
    return n_shards; /* out of range: none */
}

static void test_fresh_mode_is_the_fresh_plan(void)
{
    srand(12345); /* test_planner's property test's inputs */
    int mismatches = 0;
    cr_replan_config fresh = STABLE;
    fresh.mode = CR_REPLAN_FRESH;
    for (int iter = 0; iter < 3000; iter++) {
        cr_planner_config cfg;
        size_t n;
        cr_session_rate *r = property_input(&cfg, &n);
        cr_table *want = fresh_ok(&cfg, r, n);
        /* A previous table from other rates, and one over another R. */
        cr_session_rate *other = malloc((n + 1) * sizeof *other);
        for (size_t i = 0; i < n; i++)
            other[i] = (cr_session_rate){r[i].owner, (double)(rand() % 50)};
        cr_table *prev = fresh_ok(&cfg, other, n);
        cr_planner_config wider = cfg;
        wider.n_shards++;
        cr_table *prev_r = fresh_ok(&wider, other, n);
        /* fresh mode; another R and no home; no table; none at all; and
         * no table with a home that never answers, which takes S2-S7. */
        cr_replan_prev from[] = {
            {prev, NULL, NULL}, {prev_r, NULL, NULL}, {NULL, NULL, NULL}, {NULL, no_home, NULL}};
        for (int k = 0; k < 5; k++) {
            cr_table *t = replan_home(&cfg, k ? &STABLE : &fresh, k < 4 ? &from[k] : NULL, r, n);
            mismatches += !tables_equal(want, t);
            cr_table_free(t);
        }
        cr_table_free(prev);
        cr_table_free(prev_r);
        cr_table_free(want);
        free(other);
        free(r);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
}

/* ---- random replans ---- */

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

/* Rates after a round: most kept, some changed, some to 0, some gone, some
 * new owners; shuffled. *n in/out. */
static cr_session_rate *perturb(const cr_session_rate *r, size_t *n, unsigned seed)
{
    static int64_t new_owner = 1000000000; /* never seen before */
    size_t m = 0, cap = *n + *n / 4 + 8;
    cr_session_rate *out = malloc(cap * sizeof *out);
    for (size_t i = 0; i < *n; i++) {
        int k = (int)(next_rand(&seed) % 20);
        if (k == 0)
            continue; /* gone */
        double rate = k == 1  ? 0
                      : k < 4 ? r[i].rate * (0.5 + next_rand(&seed) % 100 / 40.0)
                              : r[i].rate;
        out[m++] = (cr_session_rate){r[i].owner, rate};
    }
    for (size_t i = 0; i < *n / 8 + 1 && m < cap; i++)
        out[m++] = (cr_session_rate){new_owner++, (next_rand(&seed) % 4000) / 16.0};
    for (size_t i = m; i > 1; i--) {
        size_t j = next_rand(&seed) % i;
        cr_session_rate x = out[i - 1];
        out[i - 1] = out[j];
        out[j] = x;
    }
    *n = m;
    return out;
}

static double rate_of(const cr_session_rate *r, size_t n, int64_t owner)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].owner == owner)
            return r[i].rate;
    return -1;
}

/* The invariants every plan keeps: kb by Eq. 1, within budget, shards
 * ascending and in range, totals, lookups, preferred shards. */
static int plan_invariants(const cr_planner_config *cfg, const cr_table *t,
                           const cr_session_rate *r, size_t n)
{
    uint32_t R = cfg->n_shards;
    double used = 0, sum = 0, total = 0;
    int ok = 1;
    const double *load = cr_table_expected_load(t);
    for (size_t i = 0; ok && i < cr_table_n_placements(t); i++) {
        const cr_placement *p = cr_table_placement(t, i);
        const uint32_t *s = cr_table_shards(t, p);
        double rate = rate_of(r, n, p->owner);
        double kb = fmin((double)R, fmax(1.0, ceil(rate / cfg->qcap)));
        ok = rate > 0 && p->kb == kb && cr_table_find(t, p->owner) == p;
        for (uint32_t j = 0; ok && j < p->kb; j++)
            ok = s[j] < R && (j == 0 || s[j - 1] < s[j]) && load[p->preferred_shard] <= load[s[j]];
        used += p->kb;
    }
    for (size_t i = 0; ok && i < n; i++) {
        total += r[i].rate;
        const cr_placement *p = cr_table_find(t, r[i].owner);
        ok = !p || p->owner == r[i].owner;
    }
    for (uint32_t s = 0; s < R; s++)
        sum += load[s];
    double adm = cr_table_admitted_rate_total(t), unadm = cr_table_unadmitted_rate_total(t);
    return ok && used <= R * cfg->warm_slots_per_shard &&
           fabs(adm + unadm - total) <= 1e-9 * total && fabs(sum - total) <= 1e-9 * total + 1e-12;
}

static void test_random_replans_keep_the_invariants(void)
{
    srand(777);
    int bad = 0, fewer = 0;
    for (int iter = 0; iter < 400; iter++) {
        cr_planner_config cfg;
        size_t n;
        cr_session_rate *r = property_input(&cfg, &n);
        cr_table *prev = fresh_ok(&cfg, r, n);
        for (int round = 0; round < 3; round++) {
            cr_session_rate *next = perturb(r, &n, (unsigned)(iter * 31 + round));
            cr_table *t = replan_ok(&cfg, prev, next, n), *f = fresh_ok(&cfg, next, n);
            bad += !plan_invariants(&cfg, t, next, n);
            cr_churn cs = cr_table_churn(prev, t), cf = cr_table_churn(prev, f);
            fewer += cs.moved <= cf.moved;
            cr_table_free(f);
            cr_table_free(prev);
            free(r);
            prev = t;
            r = next;
        }
        cr_table_free(prev);
        free(r);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* Not a rule, a sanity check: stable moves no more than fresh in
     * nearly every round. */
    CU_ASSERT_TRUE(fewer >= 1150);
}

static void test_determinism(void)
{
    size_t n = 5000;
    cr_session_rate *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++) /* 13 shards, qcap 3.3: kb up to 4, budget binding */
        r[i] = (cr_session_rate){(int64_t)cr_mix64(i), (double)(cr_mix64(i + n) % 7000) / 700};
    cr_planner_config cfg = {13, 3.3, 50};
    cr_table *prev = fresh_ok(&cfg, r, n);
    cr_session_rate *next = perturb(r, &n, 5);
    uint32_t home = 3;
    cr_replan_prev from = {prev, fixed_home, &home};
    cr_table *a = replan_home(&cfg, &STABLE, &from, next, n);
    cr_table *b = replan_home(&cfg, &STABLE, &from, next, n);
    CU_ASSERT_TRUE(tables_equal(a, b));
    CU_ASSERT_TRUE(plan_invariants(&cfg, a, next, n));
    cr_table_free(a);
    cr_table_free(b);
    cr_table_free(prev);
    free(next);
    free(r);
}

static void test_remapped_index_finds_every_owner(void)
{
    /* 100,000 sessions: the index has 2^18 slots. 85,000 of them after
     * departures and arrivals keep that capacity (remapped, with holes
     * re-probed); 40,000 do not (built by insertion). */
    enum { N = 100000 };
    cr_session_rate *r = malloc(N * sizeof *r), *next = malloc(N * sizeof *next);
    for (int i = 0; i < N; i++)
        r[i] = (cr_session_rate){(int64_t)cr_mix64((uint64_t)i), 1.0 + (i % 977) / 10.0};
    cr_planner_config cfg = {64, 1e9, 1e9};
    cr_table *prev = fresh_ok(&cfg, r, N);
    for (int keep = 85000; keep >= 40000; keep -= 45000) {
        size_t n = 0;
        for (int i = 0; i < N; i++) {
            int gone = (int)(cr_mix64((uint64_t)i * 3 + 1) % N) >= keep;
            int64_t owner = gone && i % 4 == 0 ? -1 - i : r[i].owner; /* some new */
            if (!gone || i % 4 == 0)
                next[n++] = (cr_session_rate){owner, r[i].rate};
        }
        cr_table *t = replan_ok(&cfg, prev, next, n);
        int found = 1;
        for (size_t i = 0; i < n; i++) {
            const cr_placement *p = cr_table_find(t, next[i].owner);
            found &= p != NULL && p->owner == next[i].owner;
        }
        for (int i = 0; i < N; i++) {
            int gone = (int)(cr_mix64((uint64_t)i * 3 + 1) % N) >= keep;
            found &= cr_table_is_admitted(t, r[i].owner) == !gone;
        }
        CU_ASSERT_TRUE(found);
        CU_ASSERT_EQUAL(cr_table_n_placements(t), n);
        cr_table_free(t);
    }
    cr_table_free(prev);
    free(next);
    free(r);
}

static void test_churn_counts(void)
{
    /* R=2, qcap=100. prev: 1 on {0}, 2 on {1}, 3 on {1}. next: 2 on {0},
     * 1 on {1}, 4 on {1}: 1 and 2 moved, 4 in, 3 out. */
    cr_planner_config cfg = {2, 100, 10};
    cr_session_rate a[] = {{1, 10}, {2, 9}, {3, 2}}, b[] = {{2, 20}, {1, 10}, {4, 1}};
    cr_table *prev = fresh_ok(&cfg, a, 3), *next = fresh_ok(&cfg, b, 3);
    assert_set(prev, 3, (uint32_t[]){1}, 1);
    assert_set(next, 4, (uint32_t[]){1}, 1);
    assert_churn(prev, next, 2, 1, 1);
    assert_churn(next, prev, 2, 1, 1);
    assert_churn(NULL, next, 0, 3, 0);
    assert_churn(next, next, 0, 0, 0);
    /* kb differs: another set. */
    cr_session_rate c[] = {{1, 150}, {2, 9}, {3, 2}};
    cr_table *wide = fresh_ok(&cfg, c, 3);
    assert_set(wide, 1, (uint32_t[]){0, 1}, 2);
    assert_churn(prev, wide, 2, 0, 0); /* 1 on {0, 1}, 2 on {0}, 3 stays on {1} */
    cr_table_free(wide);
    cr_table_free(next);
    cr_table_free(prev);
}

static void test_replan_options(void)
{
    cr_replan_config rc;
    memset(&rc, 0xff, sizeof rc);
    cr_replan_config_default(&rc);
    CU_ASSERT_EQUAL(rc.mode, CR_REPLAN_STABLE); /* the default, by the replay evidence */
    CU_ASSERT_EQUAL(rc.max_imbalance, 1.25);
    CU_ASSERT_EQUAL(rc.admit_hysteresis, 0.1);
    CU_ASSERT_STRING_EQUAL(cr_replan_options.group, "replan");
    cr_error err;
    const cr_option *o = cr_option_find(&cr_replan_options, "replan", 6);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_EQUAL(cr_option_set(&cr_replan_options, o, &rc, "stable", &err), CR_OK);
    CU_ASSERT_EQUAL(rc.mode, CR_REPLAN_STABLE);
    CU_ASSERT_EQUAL(cr_option_set(&cr_replan_options, o, &rc, "Stable", &err), CR_EINVAL);
    CU_ASSERT_EQUAL(cr_replan_config_check(&rc, &err), CR_OK);
}

static const cr_test_case replan_tests[] = {
    {"S4: unchanged rates keep the table", test_s4_unchanged_rates_keep_the_table},
    {"S3: a new hot session moves only what it displaces",
     test_s3_new_hot_session_moves_only_what_it_displaces},
    {"S4: a kb change re-places that session", test_s4_kb_change_replaces_only_that_session},
    {"S5: the bound moves the largest movable", test_s5_bound_moves_the_largest_movable},
    {"S3: hysteresis at its edge", test_s3_hysteresis_edge},
    {"S6: a newcomer goes home within the bound", test_s6_newcomer_goes_home_within_the_bound},
    {"S2: zero rates leave", test_s2_zero_rates_leave},
    {"S1: validation as rule 1", test_s1_validation_as_rule_1},
    {"fresh mode and fallbacks are the fresh plan", test_fresh_mode_is_the_fresh_plan},
    {"random replans keep the invariants", test_random_replans_keep_the_invariants},
    {"determinism", test_determinism},
    {"remapped owner index", test_remapped_index_finds_every_owner},
    {"churn counts", test_churn_counts},
    {"replan options", test_replan_options},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"replan", replan_tests}};
CR_TEST_MAIN(suites)
