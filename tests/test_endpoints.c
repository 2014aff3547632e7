/* The fleet as named endpoints: sets (endpoints.h: slots in order, a
 * removal's GONE slot and its quarantine, states kept across sets, the
 * usable fallback, every check's message, the slot bound), the endpoints
 * file (JSON and YAML alike, each error's "NAME:LINE:"), the core in
 * virtual time (routes only over the set's endpoints, drain and undrain,
 * removal and join, the failure detector's down and retry, a down
 * endpoint's prefix index dropped, the members hook), the router's
 * cr_router_members alone (forget, speed), and one threaded case (routes
 * while the set changes under them). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "core_config.h"
#include "cunit_main.h"
#include "endpoints.h"
#include "route.h"

static const cr_endpoint_spec ABC[] = {{.id = "a", .address = "10.0.0.1:8000", .weight = 0},
                                       {.id = "b", .address = "10.0.0.2:8000", .weight = 2.5},
                                       {.id = "c", .address = "10.0.0.3:8000", .weight = 1}};

/* cr_endpoints_apply that must succeed. */
static cr_endpoints *apply_ok(const cr_endpoints *old, const cr_endpoint_spec *v, size_t n,
                              double now, cr_endpoints_change *chg)
{
    cr_endpoints *e = NULL;
    cr_error err;
    cr_status st = cr_endpoints_apply(old, v, n, now, &e, chg, &err);
    CU_ASSERT_EQUAL_FATAL(st, CR_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    return e;
}

static cr_endpoints *with_ok(const cr_endpoints *old, uint32_t slot, cr_endpoint_state s,
                             double now, double until, cr_endpoints_change *chg)
{
    cr_endpoints *e = NULL;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_endpoints_with_state(old, slot, s, now, until, &e, chg, &err), CR_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    return e;
}

static int change_is(const cr_endpoints_change *c, uint32_t joined, uint32_t removed,
                     uint32_t drained, uint32_t undrained, uint32_t failed, uint32_t recovered)
{
    return c->joined == joined && c->removed == removed && c->drained == drained &&
           c->undrained == undrained && c->failed == failed && c->recovered == recovered;
}

/* ---- sets ------------------------------------------------------------------ */

static void test_first_set_in_order(void)
{
    cr_endpoints_change chg;
    cr_endpoints *e = apply_ok(NULL, ABC, 3, 7, &chg);
    CU_ASSERT_EQUAL(e->version, 1);
    CU_ASSERT_EQUAL(e->n_slots, 3);
    CU_ASSERT(change_is(&chg, 3, 0, 0, 0, 0, 0));
    for (uint32_t s = 0; s < 3; s++) {
        CU_ASSERT_STRING_EQUAL(e->slot[s].id, ABC[s].id);
        CU_ASSERT_STRING_EQUAL(e->slot[s].address, ABC[s].address);
        CU_ASSERT_EQUAL(e->slot[s].state, CR_ENDPOINT_ACTIVE);
        CU_ASSERT_EQUAL(e->slot[s].since_s, 7);
        CU_ASSERT_EQUAL(cr_endpoints_find(e, ABC[s].id), s);
    }
    CU_ASSERT_EQUAL(e->slot[0].weight, 1); /* 0: the default */
    CU_ASSERT_EQUAL(e->slot[1].weight, 2.5);
    CU_ASSERT_EQUAL(e->n_state[CR_ENDPOINT_ACTIVE], 3);
    CU_ASSERT_EQUAL(e->n_state[CR_ENDPOINT_GONE], 0);
    CU_ASSERT(isinf(e->next_retry_s));
    CU_ASSERT_EQUAL(cr_endpoints_find(e, "zz"), UINT32_MAX);
    CU_ASSERT_EQUAL(cr_endpoints_find(e, NULL), UINT32_MAX);
    CU_ASSERT_EQUAL(cr_endpoints_find(NULL, "a"), UINT32_MAX);
    /* the same list again: nothing changed, but the next version */
    cr_endpoints *same = apply_ok(e, ABC, 3, 8, &chg);
    CU_ASSERT_EQUAL(same->version, 2);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(same->slot[2].since_s, 7);
    cr_endpoints_release(same);
    cr_endpoints_release(e);
}

static void test_state_names(void)
{
    CU_ASSERT_STRING_EQUAL(cr_endpoint_state_name(CR_ENDPOINT_ACTIVE), "active");
    CU_ASSERT_STRING_EQUAL(cr_endpoint_state_name(CR_ENDPOINT_DRAINING), "draining");
    CU_ASSERT_STRING_EQUAL(cr_endpoint_state_name(CR_ENDPOINT_DOWN), "down");
    CU_ASSERT_STRING_EQUAL(cr_endpoint_state_name(CR_ENDPOINT_GONE), "gone");
    CU_ASSERT_STRING_EQUAL(cr_endpoint_state_name((cr_endpoint_state)9), "unknown");
}

/* Dropping b leaves slot 1 GONE (id and address kept), a and c where they
 * were; the old set is untouched. */
static void test_removal_leaves_gone_slot(void)
{
    cr_endpoints_change chg;
    cr_endpoints *e1 = apply_ok(NULL, ABC, 3, 0, &chg);
    const cr_endpoint_spec ac[] = {ABC[2], ABC[0]}; /* another order: slots stay */
    cr_endpoints *e2 = apply_ok(e1, ac, 2, 5, &chg);
    CU_ASSERT_EQUAL(e2->version, 2);
    CU_ASSERT_EQUAL(e2->n_slots, 3);
    CU_ASSERT(change_is(&chg, 0, 1, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(cr_endpoints_find(e2, "a"), 0);
    CU_ASSERT_EQUAL(cr_endpoints_find(e2, "c"), 2);
    CU_ASSERT_EQUAL(cr_endpoints_find(e2, "b"), UINT32_MAX);
    CU_ASSERT_EQUAL(e2->slot[1].state, CR_ENDPOINT_GONE);
    CU_ASSERT_EQUAL(e2->slot[1].since_s, 5);
    CU_ASSERT_STRING_EQUAL(e2->slot[1].id, "b");
    CU_ASSERT_STRING_EQUAL(e2->slot[1].address, "10.0.0.2:8000");
    CU_ASSERT_EQUAL(e2->slot[0].since_s, 0);
    CU_ASSERT_EQUAL(e2->n_state[CR_ENDPOINT_ACTIVE], 2);
    CU_ASSERT_EQUAL(e2->n_state[CR_ENDPOINT_GONE], 1);
    /* immutable: the set routes may still hold */
    CU_ASSERT_EQUAL(e1->slot[1].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(e1->version, 1);
    /* a set leaving it out again removes nothing more */
    cr_endpoints *e3 = apply_ok(e2, ac, 2, 6, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(e3->slot[1].since_s, 5);
    cr_endpoints_release(e3);
    cr_endpoints_release(e2);
    cr_endpoints_release(e1);
}

/* A join takes a new slot at the end while the gone slot is younger than
 * CR_ENDPOINTS_REUSE_S, the gone slot once it is that old; the id that
 * left takes its own slot back at once. */
static void test_join_after_quarantine(void)
{
    cr_endpoints_change chg;
    cr_endpoints *e1 = apply_ok(NULL, ABC, 3, 0, &chg);
    const cr_endpoint_spec ac[] = {ABC[0], ABC[2]};
    cr_endpoints *e2 = apply_ok(e1, ac, 2, 5, &chg);
    const cr_endpoint_spec acd[] = {
        ABC[0], ABC[2], {.id = "d", .address = "10.0.0.4:8000", .weight = 3}};

    cr_endpoints *young = apply_ok(e2, acd, 3, 5 + CR_ENDPOINTS_REUSE_S - 0.5, &chg);
    CU_ASSERT(change_is(&chg, 1, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(young->n_slots, 4);
    CU_ASSERT_EQUAL(cr_endpoints_find(young, "d"), 3);
    CU_ASSERT_EQUAL(young->slot[1].state, CR_ENDPOINT_GONE);
    CU_ASSERT_STRING_EQUAL(young->slot[1].id, "b");
    CU_ASSERT_EQUAL(young->n_state[CR_ENDPOINT_ACTIVE], 3);

    cr_endpoints *old = apply_ok(e2, acd, 3, 5 + CR_ENDPOINTS_REUSE_S, &chg);
    CU_ASSERT(change_is(&chg, 1, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(old->n_slots, 3);
    CU_ASSERT_EQUAL(cr_endpoints_find(old, "d"), 1);
    CU_ASSERT_EQUAL(old->slot[1].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(old->slot[1].since_s, 5 + CR_ENDPOINTS_REUSE_S);
    CU_ASSERT_STRING_EQUAL(old->slot[1].address, "10.0.0.4:8000");
    CU_ASSERT_EQUAL(old->slot[1].weight, 3);
    CU_ASSERT_EQUAL(old->n_state[CR_ENDPOINT_GONE], 0);

    /* the removed id itself takes its own gone slot back, quarantine or
     * not (R3-5: one id removed and re-added filled every slot) */
    cr_endpoints *back = apply_ok(e2, ABC, 3, 6, &chg);
    CU_ASSERT(change_is(&chg, 1, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(back->n_slots, 3);
    CU_ASSERT_EQUAL(cr_endpoints_find(back, "b"), 1);
    CU_ASSERT_EQUAL(back->slot[1].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(back->slot[1].since_s, 6);

    /* from the set where d took slot 3, a fifth id past the quarantine
     * takes the gone slot 1 (the lowest free one), not a new slot */
    const cr_endpoint_spec acde[] = {
        ABC[0], ABC[2], acd[2], {.id = "e", .address = "10.0.0.5:8000", .weight = 1}};
    cr_endpoints *later = apply_ok(young, acde, 4, 100, &chg);
    CU_ASSERT_EQUAL(later->n_slots, 4);
    CU_ASSERT_EQUAL(cr_endpoints_find(later, "d"), 3);
    CU_ASSERT_EQUAL(cr_endpoints_find(later, "e"), 1);
    cr_endpoints_release(later);
    cr_endpoints_release(back);
    cr_endpoints_release(old);
    cr_endpoints_release(young);
    cr_endpoints_release(e2);
    cr_endpoints_release(e1);
}

/* A listed endpoint keeps DRAINING / DOWN (and its retry time) across a
 * new set; its address and weight follow the new set. */
static void test_new_set_keeps_states(void)
{
    cr_endpoints_change chg;
    cr_endpoints *e1 = apply_ok(NULL, ABC, 3, 0, &chg);
    cr_endpoints *e2 = with_ok(e1, 0, CR_ENDPOINT_DRAINING, 1, 0, &chg);
    cr_endpoints *e3 = with_ok(e2, 2, CR_ENDPOINT_DOWN, 2, 40, &chg);
    CU_ASSERT_EQUAL(e3->next_retry_s, 40);
    const cr_endpoint_spec moved[] = {
        {.id = "a", .address = "10.9.9.9:9000", .weight = 4}, ABC[1], ABC[2]};
    cr_endpoints *e4 = apply_ok(e3, moved, 3, 3, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(e4->version, 4);
    CU_ASSERT_EQUAL(e4->slot[0].state, CR_ENDPOINT_DRAINING);
    CU_ASSERT_EQUAL(e4->slot[0].since_s, 1);
    CU_ASSERT_STRING_EQUAL(e4->slot[0].address, "10.9.9.9:9000");
    CU_ASSERT_EQUAL(e4->slot[0].weight, 4);
    CU_ASSERT_EQUAL(e4->slot[2].state, CR_ENDPOINT_DOWN);
    CU_ASSERT_EQUAL(e4->slot[2].down_until_s, 40);
    CU_ASSERT_EQUAL(e4->next_retry_s, 40);
    CU_ASSERT_EQUAL(e4->n_state[CR_ENDPOINT_ACTIVE], 1);
    CU_ASSERT_EQUAL(e4->n_state[CR_ENDPOINT_DRAINING], 1);
    CU_ASSERT_EQUAL(e4->n_state[CR_ENDPOINT_DOWN], 1);
    /* removing the down one ends its retry */
    const cr_endpoint_spec ab[] = {ABC[0], ABC[1]};
    cr_endpoints *e5 = apply_ok(e4, ab, 2, 4, &chg);
    CU_ASSERT(change_is(&chg, 0, 1, 0, 0, 0, 0));
    CU_ASSERT(isinf(e5->next_retry_s));
    CU_ASSERT_EQUAL(e5->slot[0].state, CR_ENDPOINT_DRAINING);
    cr_endpoints_release(e5);
    cr_endpoints_release(e4);
    cr_endpoints_release(e3);
    cr_endpoints_release(e2);
    cr_endpoints_release(e1);
}

static void test_with_state(void)
{
    cr_endpoints_change chg;
    cr_error err;
    cr_endpoints *e1 = apply_ok(NULL, ABC, 3, 0, &chg), *bad = (cr_endpoints *)1;
    cr_endpoints *e2 = with_ok(e1, 1, CR_ENDPOINT_DRAINING, 10, 0, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 1, 0, 0, 0));
    CU_ASSERT_EQUAL(e2->version, 2);
    CU_ASSERT_EQUAL(e2->slot[1].since_s, 10);
    CU_ASSERT_EQUAL(e1->slot[1].state, CR_ENDPOINT_ACTIVE);
    /* the same state again: counted nowhere, since_s kept */
    cr_endpoints *e3 = with_ok(e2, 1, CR_ENDPOINT_DRAINING, 11, 0, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(e3->slot[1].since_s, 10);
    cr_endpoints *e4 = with_ok(e3, 1, CR_ENDPOINT_ACTIVE, 12, 0, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 1, 0, 0));
    cr_endpoints *e5 = with_ok(e4, 2, CR_ENDPOINT_DOWN, 13, 43, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 1, 0));
    CU_ASSERT_EQUAL(e5->slot[2].down_until_s, 43);
    CU_ASSERT_EQUAL(e5->next_retry_s, 43);
    /* DOWN again: since kept, the new retry time taken */
    cr_endpoints *e6 = with_ok(e5, 2, CR_ENDPOINT_DOWN, 14, 50, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(e6->slot[2].since_s, 13);
    CU_ASSERT_EQUAL(e6->slot[2].down_until_s, 50);
    CU_ASSERT_EQUAL(e6->next_retry_s, 50);
    cr_endpoints *e7 = with_ok(e6, 2, CR_ENDPOINT_ACTIVE, 50, 0, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 1));
    CU_ASSERT_EQUAL(e7->slot[2].down_until_s, 0);
    CU_ASSERT(isinf(e7->next_retry_s));
    /* refused: a missing slot, a gone one, GONE as a state, no set */
    CU_ASSERT_EQUAL(cr_endpoints_with_state(e7, 3, CR_ENDPOINT_DRAINING, 0, 0, &bad, &chg, &err),
                    CR_EINVAL);
    CU_ASSERT_PTR_NULL(bad);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoint slot 3 is not in the set");
    const cr_endpoint_spec ac[] = {ABC[0], ABC[2]};
    cr_endpoints *gone = apply_ok(e7, ac, 2, 60, &chg);
    CU_ASSERT_EQUAL(cr_endpoints_with_state(gone, 1, CR_ENDPOINT_ACTIVE, 0, 0, &bad, &chg, &err),
                    CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoint slot 1 is not in the set");
    CU_ASSERT_EQUAL(cr_endpoints_with_state(gone, 0, CR_ENDPOINT_GONE, 0, 0, &bad, &chg, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(cr_endpoints_with_state(NULL, 0, CR_ENDPOINT_ACTIVE, 0, 0, &bad, &chg, &err),
                    CR_EINVAL);
    cr_endpoints *sets[] = {gone, e7, e6, e5, e4, e3, e2, e1};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        cr_endpoints_release(sets[i]);
}

static void expect_usable(const cr_endpoints *e, const char *want)
{
    uint8_t u[8];
    char got[9] = "";
    CU_ASSERT_FATAL(e->n_slots <= 8);
    memset(u, 7, sizeof u);
    cr_endpoints_usable(e, u);
    for (uint32_t s = 0; s < e->n_slots; s++)
        got[s] = u[s] == 1 ? '1' : u[s] == 0 ? '0' : '?';
    got[e->n_slots] = 0;
    CU_ASSERT_STRING_EQUAL(got, want);
}

/* Active only; no active: the draining ones; neither: the down ones; a
 * gone slot never. */
static void test_usable_falls_back(void)
{
    cr_endpoints_change chg;
    const cr_endpoint_spec abcd[] = {
        ABC[0], ABC[1], ABC[2], {.id = "d", .address = "10.0.0.4:8000", .weight = 1}};
    cr_endpoints *e[8];
    int k = 0;
    e[k] = apply_ok(NULL, abcd, 4, 0, &chg);
    expect_usable(e[k], "1111");
    const cr_endpoint_spec abc[] = {abcd[0], abcd[1], abcd[2]};
    e[k + 1] = apply_ok(e[k], abc, 3, 1, &chg), k++; /* d gone */
    expect_usable(e[k], "1110");
    e[k + 1] = with_ok(e[k], 0, CR_ENDPOINT_DRAINING, 2, 0, &chg), k++;
    expect_usable(e[k], "0110");
    e[k + 1] = with_ok(e[k], 1, CR_ENDPOINT_DOWN, 3, 100, &chg), k++;
    expect_usable(e[k], "0010");
    e[k + 1] = with_ok(e[k], 2, CR_ENDPOINT_DRAINING, 4, 0, &chg), k++;
    expect_usable(e[k], "1010"); /* no active: the draining ones */
    e[k + 1] = with_ok(e[k], 0, CR_ENDPOINT_DOWN, 5, 100, &chg), k++;
    expect_usable(e[k], "0010");
    e[k + 1] = with_ok(e[k], 2, CR_ENDPOINT_DOWN, 6, 100, &chg), k++;
    expect_usable(e[k], "1110"); /* all down: the down ones, never the gone one */
    e[k + 1] = with_ok(e[k], 1, CR_ENDPOINT_ACTIVE, 7, 0, &chg), k++;
    expect_usable(e[k], "0100");
    for (int i = 0; i <= k; i++)
        cr_endpoints_release(e[i]);
}

/* Specs id0..id(n-1), their ids in ids (n * 16 bytes). */
static cr_endpoint_spec *many(size_t n, char *ids)
{
    cr_endpoint_spec *v = calloc(n, sizeof *v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    for (size_t i = 0; i < n; i++) {
        snprintf(ids + 16 * i, 16, "e%zu", i);
        v[i] = (cr_endpoint_spec){.id = ids + 16 * i, .address = "h:1", .weight = 1};
    }
    return v;
}

/* 1024 slots at most: when none is free, a join takes the gone slot
 * that has been gone longest, in quarantine or not, a slot this very
 * change frees included, so a set of at most 1024 always applies. */
static void test_slot_bound(void)
{
    enum { N = CR_ENDPOINTS_MAX };
    char *ids = malloc(16 * (N + 2));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
    cr_endpoint_spec *v = many(N + 2, ids);
    cr_endpoints_change chg;
    cr_error err;
    cr_endpoints *full = apply_ok(NULL, v, N, 0, &chg), *e = (cr_endpoints *)1;
    CU_ASSERT_EQUAL(full->n_slots, N);
    /* e0 out, e1024 in at once: e0's slot, freed by this change */
    cr_endpoints *swapped = apply_ok(full, v + 1, N, 1, &chg);
    CU_ASSERT(change_is(&chg, 1, 1, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(swapped->n_slots, N);
    CU_ASSERT_EQUAL(cr_endpoints_find(swapped, "e1024"), 0);
    CU_ASSERT_EQUAL(swapped->slot[0].state, CR_ENDPOINT_ACTIVE);
    /* e1 gone at 2, e2 at 3: a join at 4 takes e1's slot (gone longest),
     * the next one e2's */
    cr_endpoints *less = apply_ok(swapped, v + 2, N - 1, 2, &chg); /* e1 out */
    v[2] = v[1024];                                                  /* e2 out */
    cr_endpoints *fewer = apply_ok(less, v + 2, N - 2, 3, &chg);
    CU_ASSERT_EQUAL(fewer->slot[1].state, CR_ENDPOINT_GONE);
    CU_ASSERT_EQUAL(fewer->slot[2].state, CR_ENDPOINT_GONE);
    v[1024] = v[1025];
    cr_endpoints *one = apply_ok(fewer, v + 2, N - 1, 4, &chg); /* e1025 in */
    CU_ASSERT(change_is(&chg, 1, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(cr_endpoints_find(one, "e1025"), 1);
    CU_ASSERT_STRING_EQUAL(one->slot[2].id, "e2"); /* still gone, named */
    /* 1025 in one set: the check's message */
    CU_ASSERT_EQUAL(cr_endpoints_apply(NULL, v, N + 1, 0, &e, &chg, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoints has 1025 entries, at most 1024");
    cr_endpoints *sets[] = {one, fewer, less, swapped, full};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        cr_endpoints_release(sets[i]);
    free(v);
    free(ids);
}

/* R3-5: a set renaming 600 of 600 endpoints at once needed 1200 slots and
 * was refused for ever; now the removals free slots for the joins. */
static void test_rename_all(void)
{
    enum { N = 600 };
    char *ids = malloc(16 * 2 * N);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
    cr_endpoint_spec *v = many(2 * N, ids);
    cr_endpoints_change chg;
    cr_endpoints *before = apply_ok(NULL, v, N, 0, &chg);
    cr_endpoints *after = apply_ok(before, v + N, N, 1, &chg);
    CU_ASSERT(change_is(&chg, N, N, 0, 0, 0, 0));
    CU_ASSERT(after->n_slots <= CR_ENDPOINTS_MAX);
    CU_ASSERT_EQUAL(after->n_state[CR_ENDPOINT_ACTIVE], N);
    for (size_t i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(cr_endpoints_find(after, v[i].id), UINT32_MAX);
        CU_ASSERT_NOT_EQUAL(cr_endpoints_find(after, v[N + i].id), UINT32_MAX);
    }
    cr_endpoints_release(after);
    cr_endpoints_release(before);
    free(v);
    free(ids);
}

/* R3-5: one id removed and added again 2,000 times, then 2,000 new ids
 * each replacing the last, in one second: no join is ever refused, and the
 * returning id never takes more than its own slot. */
static void test_churn_never_fills_the_slots(void)
{
    char id[16];
    cr_endpoint_spec v[2] = {{.id = "a", .address = "h:1", .weight = 1},
                             {.id = id, .address = "h:2", .weight = 1}};
    cr_endpoints_change chg;
    snprintf(id, sizeof id, "x");
    cr_endpoints *e = apply_ok(NULL, v, 2, 0, &chg), *next;
    for (int i = 0; i < 2000; i++) {
        next = apply_ok(e, v, 1 + (i % 2), 0.0005 * i, &chg);
        cr_endpoints_release(e);
        e = next;
    }
    CU_ASSERT_EQUAL(e->n_slots, 2);
    for (int i = 0; i < 2000; i++) {
        snprintf(id, sizeof id, "n%d", i);
        next = apply_ok(e, v, 2, 1 + 0.0005 * i, &chg);
        CU_ASSERT(change_is(&chg, 1, 1, 0, 0, 0, 0));
        cr_endpoints_release(e);
        e = next;
    }
    CU_ASSERT(e->n_slots <= CR_ENDPOINTS_MAX);
    CU_ASSERT_EQUAL(e->n_state[CR_ENDPOINT_ACTIVE], 2);
    cr_endpoints_release(e);
}

static void expect_check(const cr_endpoint_spec *v, size_t n, const char *msg)
{
    cr_error err;
    cr_endpoints *e = (cr_endpoints *)1;
    cr_endpoints_change chg;
    CU_ASSERT_EQUAL(cr_endpoints_check(v, n, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
    /* apply checks the same way, making nothing */
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(cr_endpoints_apply(NULL, v, n, 0, &e, &chg, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
}

static void test_check_messages(void)
{
    cr_error err;
    CU_ASSERT_EQUAL(cr_endpoints_check(ABC, 3, &err), CR_OK);
    expect_check(ABC, 0, "endpoints must not be empty");
    char long_id[CR_ENDPOINT_ID_MAX + 2], long_addr[CR_ENDPOINT_ADDRESS_MAX + 2];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0; /* 129 bytes */
    memset(long_addr, 'y', sizeof long_addr - 1);
    long_addr[sizeof long_addr - 1] = 0; /* 257 bytes */
    cr_endpoint_spec v[4] = {ABC[0], ABC[1], {.id = "", .address = "h:1", .weight = 1}, ABC[2]};
    expect_check(v, 4, "endpoints[2].id must be 1..128 bytes of printable ASCII, got \"\"");
    v[2].id = NULL;
    expect_check(v, 4, "endpoints[2].id must be 1..128 bytes of printable ASCII, got \"\"");
    v[2].id = long_id;
    expect_check(v, 4, "endpoints[2].id must be 1..128 bytes of printable ASCII, got "
                       "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\"");
    long_id[CR_ENDPOINT_ID_MAX] = 0; /* 128: fine */
    CU_ASSERT_EQUAL(cr_endpoints_check(v, 4, &err), CR_OK);
    v[2].id = "bad\nid\"";
    expect_check(v, 4, "endpoints[2].id must be 1..128 bytes of printable ASCII, got "
                       "\"bad?id?\"");
    v[2] = (cr_endpoint_spec){.id = "d", .address = "", .weight = 1};
    expect_check(v, 4, "endpoints[2].address must be 1..256 bytes of printable ASCII, got \"\"");
    v[2].address = long_addr;
    expect_check(v, 4, "endpoints[2].address must be 1..256 bytes of printable ASCII, got "
                       "\"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy...\"");
    long_addr[CR_ENDPOINT_ADDRESS_MAX] = 0;
    CU_ASSERT_EQUAL(cr_endpoints_check(v, 4, &err), CR_OK);
    v[2].address = "h:1";
    v[0].weight = -1;
    expect_check(v, 4, "endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got -1");
    v[0].weight = 1000.5;
    expect_check(v, 4, "endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got 1000.5");
    v[0].weight = NAN;
    expect_check(v, 4, "endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got nan");
    v[0].weight = INFINITY;
    expect_check(v, 4, "endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got inf");
    /* a weight divides costs: the smallest double would make them inf */
    v[0].weight = 5e-324;
    expect_check(v, 4, "endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got "
                       "4.94066e-324");
    v[0].weight = 0.000999;
    expect_check(v, 4, "endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got "
                       "0.000999");
    v[0].weight = CR_ENDPOINT_WEIGHT_MIN;
    CU_ASSERT_EQUAL(cr_endpoints_check(v, 4, &err), CR_OK);
    v[0].weight = CR_ENDPOINT_WEIGHT_MAX;
    CU_ASSERT_EQUAL(cr_endpoints_check(v, 4, &err), CR_OK);
    v[3].id = "a"; /* v[0]'s */
    expect_check(v, 4, "endpoints[3].id \"a\" is given twice (endpoints[0])");
    v[3].id = "d"; /* v[2]'s */
    expect_check(v, 4, "endpoints[3].id \"d\" is given twice (endpoints[2])");
    /* the first bad entry is named, field by field */
    v[1].address = "";
    expect_check(v, 4, "endpoints[1].address must be 1..256 bytes of printable ASCII, got \"\"");
}

/* ---- the endpoints file ----------------------------------------------------------- */

static const char JSON_FILE[] = "{\"endpoints\": [\n"
                                "  {\"id\": \"vllm-0\", \"address\": \"10.0.0.5:8000\", "
                                "\"weight\": 1},\n"
                                "  {\"id\": \"vllm-1\", \"address\": \"http://10.0.0.6:8000\"},\n"
                                "  {\"weight\": 2.5, \"address\": \"10.0.0.7:8000\", \"id\": "
                                "\"vllm-2\"}\n"
                                "]}\n";

static const char YAML_FILE[] = "# the fleet\n"
                                "endpoints:\n"
                                "  - id: vllm-0\n"
                                "    address: 10.0.0.5:8000\n"
                                "    weight: 1\n"
                                "  - id: \"vllm-1\"\n"
                                "    address: http://10.0.0.6:8000\n"
                                "  - weight: 2.5\n"
                                "    address: '10.0.0.7:8000'\n"
                                "    id: vllm-2\n";

static cr_status parse(const char *text, cr_endpoint_spec **v, size_t *n, cr_error *err)
{
    return cr_endpoints_parse(text, strlen(text), "fleet.yaml", v, n, err);
}

/* A source's stated states ("stated" in endpoints.h): DRAINING and DOWN
 * enter, ACTIVE ends only what the source stated; a drain is the set's
 * own and outlives the source's ACTIVE. */
static void test_stated_states(void)
{
    cr_endpoints_change chg;
    cr_endpoint_spec v[3] = {ABC[0], ABC[1], ABC[2]};
    for (int i = 0; i < 3; i++)
        v[i].stated = 1;
    v[2].state = CR_ENDPOINT_DOWN; /* joins not ready */
    cr_endpoints *e1 = apply_ok(NULL, v, 3, 0, &chg);
    CU_ASSERT(change_is(&chg, 3, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(e1->slot[2].state, CR_ENDPOINT_DOWN);
    CU_ASSERT(isinf(e1->slot[2].down_until_s));
    CU_ASSERT(isinf(e1->next_retry_s)); /* no retry: the source says when */
    v[2].state = CR_ENDPOINT_ACTIVE;    /* ready */
    v[1].state = CR_ENDPOINT_DRAINING;  /* terminating */
    cr_endpoints *e2 = apply_ok(e1, v, 3, 1, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 1, 0, 0, 1));
    CU_ASSERT_EQUAL(e2->slot[2].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(e2->slot[1].state, CR_ENDPOINT_DRAINING);
    CU_ASSERT_EQUAL(e2->slot[1].since_s, 1);
    CU_ASSERT_EQUAL(e2->slot[1].by_source, 1);
    /* an operator's drain of a: the source's ACTIVE does not end it */
    cr_endpoints *e3 = with_ok(e2, 0, CR_ENDPOINT_DRAINING, 2, 0, &chg);
    cr_endpoints *e4 = apply_ok(e3, v, 3, 3, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(e4->slot[0].state, CR_ENDPOINT_DRAINING);
    CU_ASSERT_EQUAL(e4->slot[0].since_s, 2);
    /* unstated specs (a file) keep every state, the source's too */
    cr_endpoints *e5 = apply_ok(e4, ABC, 3, 4, &chg);
    CU_ASSERT(change_is(&chg, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(e5->slot[1].state, CR_ENDPOINT_DRAINING);
    /* a bad stated state is refused, naming it */
    v[1].state = CR_ENDPOINT_GONE;
    cr_endpoints *bad = NULL;
    cr_error err;
    CU_ASSERT_EQUAL(cr_endpoints_apply(e5, v, 3, 5, &bad, &chg, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(bad);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoints[1].state must be active, draining or down, got 3");
    cr_endpoints *sets[] = {e5, e4, e3, e2, e1};
    for (int i = 0; i < 5; i++)
        cr_endpoints_release(sets[i]);
}

/* An endpoint's KV-event address: read from the file, kept in its slot,
 * checked as an address is (empty allowed). */
static void test_kv_events_address(void)
{
    static const char text[] =
        "endpoints:\n"
        "  - {id: a, address: '10.0.0.1:8000', kv_events: 'tcp://10.0.0.1:5557'}\n"
        "  - {id: b, address: '10.0.0.2:8000'}\n";
    cr_endpoint_spec *v;
    size_t n;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_endpoints_parse(text, strlen(text), "f.yaml", &v, &n, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(v[0].kv_events, "tcp://10.0.0.1:5557");
    CU_ASSERT_STRING_EQUAL(v[1].kv_events, ""); /* parsed specs are copies */
    cr_endpoint_spec *copy = cr_endpoint_specs_copy(v, n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
    CU_ASSERT_STRING_EQUAL(copy[0].kv_events, "tcp://10.0.0.1:5557");
    CU_ASSERT_STRING_EQUAL(copy[1].kv_events, "");
    cr_endpoints_change chg;
    cr_endpoints *e = apply_ok(NULL, copy, n, 0, &chg);
    CU_ASSERT_STRING_EQUAL(e->slot[0].kv_events, "tcp://10.0.0.1:5557");
    CU_ASSERT_STRING_EQUAL(e->slot[1].kv_events, "");
    copy[1].kv_events = "tcp://\x01";
    cr_endpoints *bad = NULL;
    CU_ASSERT_EQUAL(cr_endpoints_apply(e, copy, n, 1, &bad, &chg, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoints[1].kv_events must be 0..256 bytes of printable "
                                    "ASCII, got \"tcp://?\"");
    cr_endpoints_release(e);
    free(copy);
    free(v);
}

static void test_json_and_yaml_alike(void)
{
    cr_endpoint_spec *j, *y;
    size_t nj, ny;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(parse(JSON_FILE, &j, &nj, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(parse(YAML_FILE, &y, &ny, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(nj, 3);
    CU_ASSERT_EQUAL_FATAL(ny, 3);
    static const char *const id[] = {"vllm-0", "vllm-1", "vllm-2"};
    static const char *const addr[] = {"10.0.0.5:8000", "http://10.0.0.6:8000", "10.0.0.7:8000"};
    static const double w[] = {1, 0, 2.5}; /* vllm-1's left out: 0, the default */
    for (size_t i = 0; i < 3; i++) {
        CU_ASSERT_STRING_EQUAL(j[i].id, id[i]);
        CU_ASSERT_STRING_EQUAL(y[i].id, id[i]);
        CU_ASSERT_STRING_EQUAL(j[i].address, addr[i]);
        CU_ASSERT_STRING_EQUAL(y[i].address, addr[i]);
        CU_ASSERT_EQUAL(j[i].weight, w[i]);
        CU_ASSERT_EQUAL(y[i].weight, w[i]);
    }
    /* the specs make a set: the default weight is 1 */
    cr_endpoints_change chg;
    cr_endpoints *e = apply_ok(NULL, y, ny, 0, &chg);
    CU_ASSERT_EQUAL(e->slot[1].weight, 1);
    CU_ASSERT_EQUAL(e->slot[2].weight, 2.5);
    cr_endpoints_release(e);
    free(j);
    free(y);
}

static void expect_parse(const char *text, const char *msg)
{
    cr_endpoint_spec *v = (cr_endpoint_spec *)1;
    size_t n = 7;
    cr_error err;
    CU_ASSERT_EQUAL(parse(text, &v, &n, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
}

/* Each error names the file and the line of the node it is about. */
static void test_file_errors_name_lines(void)
{
    expect_parse(
        "endpoints:\n"
        "  - id: a\n"
        "    address: h:1\n"
        "    port: 8000\n",
        "fleet.yaml:4: endpoints[0]: unknown key (id, address, weight and kv_events are allowed)");
    expect_parse(
        "{\"endpoints\": [\n"
        "  {\"id\": \"a\", \"address\": \"h:1\"},\n"
        "  {\"id\": \"b\", \"address\": \"h:2\",\n"
        "   \"host\": \"x\"}]}\n",
        "fleet.yaml:4: endpoints[1]: unknown key (id, address, weight and kv_events are allowed)");
    /* a duplicate id: the line of the later entry */
    expect_parse("endpoints:\n"
                  "  - id: a\n"
                  "    address: h:1\n"
                  "  - id: b\n"
                  "    address: h:2\n"
                  "  - id: a\n"
                  "    address: h:3\n",
                  "fleet.yaml:6: endpoints[2].id \"a\" is given twice (endpoints[0])");
    expect_parse("endpoints:\n"
                  "  - id: a\n"
                  "    address: h:1\n"
                  "  - id: b\n"
                  "    weight: 2\n",
                  "fleet.yaml:4: endpoints[1] has no address");
    expect_parse("endpoints:\n"
                  "  - address: h:1\n",
                  "fleet.yaml:2: endpoints[0] has no id");
    expect_parse("\n\nendpoints: vllm-0\n", "fleet.yaml:3: \"endpoints\" must be a list");
    expect_parse("endpoints:\n  id: a\n", "fleet.yaml:2: \"endpoints\" must be a list");
    expect_parse("- id: a\n", "fleet.yaml:1: the top level must be a mapping with the key "
                              "\"endpoints\"");
    expect_parse("endpoints: []\nfleet: x\n",
                  "fleet.yaml:2: unknown top-level key (\"endpoints\" is the only one)");
    expect_parse("{}\n", "fleet.yaml:1: no \"endpoints\" key");
    expect_parse("", "fleet.yaml:1: empty file: want {\"endpoints\": [...]}");
    expect_parse("endpoints:\n"
                  "  - id: a\n"
                  "    address: h:1\n"
                  "    id: b\n",
                  "fleet.yaml:4: endpoints[0]: a key given twice");
    expect_parse("endpoints:\n"
                  "  - id: a\n"
                  "    address: h:1\n"
                  "    weight: 1\n"
                  "    weight: 2\n",
                  "fleet.yaml:5: endpoints[0]: a key given twice");
    /* the weight: the rule SetEndpoints follows (cr_endpoints_check) */
    expect_parse("endpoints:\n  - id: a\n    address: h:1\n    weight: -1\n",
                  "fleet.yaml:4: endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), "
                  "got -1");
    expect_parse("endpoints:\n  - id: a\n    address: h:1\n    weight: 1e-320\n",
                  "fleet.yaml:4: endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), "
                  "got \"1e-320\"");
    expect_parse("endpoints:\n  - id: a\n    address: h:1\n    weight: heavy\n",
                  "fleet.yaml:4: endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), "
                  "got \"heavy\"");
    expect_parse("endpoints:\n  - id: a\n    address: [h, 1]\n",
                  "fleet.yaml:3: endpoints[0].address must be a string");
    expect_parse(
        "endpoints:\n  - vllm-0\n",
        "fleet.yaml:2: endpoints[0] must be a mapping of id, address, weight and kv_events");
    expect_parse("{\"endpoints\": [\n\n]}\n", "fleet.yaml:1: endpoints must not be empty");
    expect_parse("endpoints:\n  - id: a\n    address: \"\"\n",
                  "fleet.yaml:2: endpoints[0].address must be 1..256 bytes of printable ASCII, "
                  "got \"\"");
    /* malformed JSON: a comma missing at the end of line 2 */
    cr_endpoint_spec *v;
    size_t n;
    cr_error err;
    CU_ASSERT_EQUAL(parse("{\"endpoints\": [\n"
                          "  {\"id\": \"a\", \"address\": \"h:1\"}\n"
                          "  {\"id\": \"b\", \"address\": \"h:2\"}\n"
                          "]}\n",
                          &v, &n, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(strncmp(err.msg, "fleet.yaml:3: ", 14), 0);
    /* malformed YAML: a tab-less indentation error on line 4 */
    CU_ASSERT_EQUAL(parse("endpoints:\n"
                          "  - id: a\n"
                          "    address: h:1\n"
                          "   bad: [\n",
                          &v, &n, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(strncmp(err.msg, "fleet.yaml:4: ", 14), 0);
    /* too large: refused before parsing */
    CU_ASSERT_EQUAL(cr_endpoints_parse(YAML_FILE, CR_ENDPOINTS_FILE_MAX + 1, "big.json", &v, &n,
                                       &err),
                    CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "big.json: 1048577 bytes, at most 1048576");
    /* no name: "endpoints" */
    CU_ASSERT_EQUAL(cr_endpoints_parse("{}", 2, NULL, &v, &n, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoints:1: no \"endpoints\" key");
}

/* A top-level key given twice is refused, as an entry's is: a file with
 * two "endpoints" lists (a merge, a templating slip) must not route to
 * the second alone without a word. */
static void test_top_level_key_twice(void)
{
    cr_endpoint_spec *v = NULL;
    size_t n = 0;
    cr_error err = {0};
    CU_ASSERT_EQUAL(parse("endpoints:\n"
                          "  - id: a\n"
                          "    address: h:1\n"
                          "endpoints:\n"
                          "  - id: b\n"
                          "    address: h:2\n",
                          &v, &n, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(strncmp(err.msg, "fleet.yaml:4: ", 14), 0);
    free(v);
}

/* One rule for a weight, file or SetEndpoints: 0 is the default (1) in
 * both, the smallest weight CR_ENDPOINT_WEIGHT_MIN in both. */
static void test_weight_rule_is_the_check(void)
{
    cr_endpoint_spec *v = NULL;
    size_t n = 0;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(parse("endpoints:\n  - {id: a, address: h, weight: 0}\n"
                                "  - {id: b, address: h, weight: 0.001}\n",
                                &v, &n, &err),
                          CR_OK);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    /* the file keeps what it read; the set makes 0 the default */
    CU_ASSERT(v[0].weight == 0 && v[1].weight == CR_ENDPOINT_WEIGHT_MIN);
    cr_endpoints_change chg;
    cr_endpoints *e = apply_ok(NULL, v, n, 0, &chg);
    CU_ASSERT(e->slot[0].weight == 1 && e->slot[1].weight == CR_ENDPOINT_WEIGHT_MIN);
    cr_endpoints_release(e);
    free(v);
}

/* R3-7: an id, an address or a key holding a NUL byte (YAML's "\0") is
 * refused naming the entry, as SetEndpoints refuses one; it was cut at
 * the NUL, so "a\0b" and "a\0c" were both "a". */
static void test_nul_refused(void)
{
    static const char ids[] = "endpoints:\n"
                              "  - id: \"a\\0b\"\n"
                              "    address: h:1\n"
                              "  - id: \"a\\0c\"\n"
                              "    address: h:2\n";
    expect_parse(ids, "fleet.yaml:2: endpoints[0].id must not contain a NUL byte, found at "
                      "byte 1 of 3");
    expect_parse("endpoints:\n  - {id: a, address: \"h:1\\0\"}\n",
                 "fleet.yaml:2: endpoints[0].address must not contain a NUL byte, found at "
                 "byte 3 of 4");
    expect_parse("endpoints:\n  - {id: a, address: h, weight: \"1\\0x\"}\n",
                 "fleet.yaml:2: endpoints[0].weight must not contain a NUL byte, found at "
                 "byte 1 of 3");
    expect_parse(
        "endpoints:\n  - {\"id\\0x\": a, address: h}\n",
        "fleet.yaml:2: endpoints[0]: unknown key (id, address, weight and kv_events are allowed)");
    expect_parse("\"endpoints\\0\": []\n",
                 "fleet.yaml:1: unknown top-level key (\"endpoints\" is the only one)");
}

/* Text deep as n flow sequences around a scalar, in buf (2n + 2 bytes). */
static const char *nested(char *buf, size_t n)
{
    memset(buf, '[', n);
    buf[n] = '1';
    memset(buf + n + 1, ']', n);
    buf[2 * n + 1] = '\0';
    return buf;
}

/* R3-8: nesting past CR_ENDPOINTS_FILE_DEPTH, or more than
 * CR_ENDPOINTS_FILE_NODES nodes, is refused on the parser's events, before
 * libyaml's loader builds anything (a 1 MiB file nested 100,000 deep took
 * 25 s to refuse); the message names the bound and the line. */
static void test_depth_and_nodes_bounded(void)
{
    char *buf = malloc(CR_ENDPOINTS_FILE_MAX + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    expect_parse(nested(buf, 1000), "fleet.yaml:1: nested deeper than 16 (an endpoints file "
                                    "needs 3)");
    expect_parse(nested(buf, CR_ENDPOINTS_FILE_MAX / 2 - 1),
                 "fleet.yaml:1: nested deeper than 16 (an endpoints file needs 3)");
    /* 16 deep is parsed (and refused for what it holds) */
    expect_parse(nested(buf, 16), "fleet.yaml:1: the top level must be a mapping with the key "
                                  "\"endpoints\"");
    snprintf(buf, 64, "endpoints:\n  - id: a\n    address: %s", "");
    nested(buf + strlen(buf), 20);
    expect_parse(buf, "fleet.yaml:3: nested deeper than 16 (an endpoints file needs 3)");
    /* a flat list of 1 MiB: the node bound */
    size_t at = (size_t)snprintf(buf, 32, "endpoints: [");
    while (at + 4 < CR_ENDPOINTS_FILE_MAX)
        at += (size_t)snprintf(buf + at, 8, "%s", "1, ");
    snprintf(buf + at, 4, "1]");
    char want[128];
    snprintf(want, sizeof want,
             "fleet.yaml:1: more than %d YAML nodes (1024 endpoints need "
             "at most 9219)",
             CR_ENDPOINTS_FILE_NODES);
    expect_parse(buf, want);
    free(buf);
}

/* A second YAML document was ignored without a word: it is refused,
 * naming its line. */
static void test_one_document(void)
{
    expect_parse("endpoints:\n"
                 "  - {id: a, address: h}\n"
                 "---\n"
                 "endpoints:\n"
                 "  - {id: b, address: h}\n",
                 "fleet.yaml:3: a second YAML document: an endpoints file holds one");
    expect_parse("{\"endpoints\": [{\"id\": \"a\", \"address\": \"h\"}]}\n...\n--- x\n",
                 "fleet.yaml:3: a second YAML document: an endpoints file holds one");
    /* one document, marked: fine */
    cr_endpoint_spec *v = NULL;
    size_t n = 0;
    cr_error err;
    CU_ASSERT_EQUAL(parse("---\nendpoints:\n  - {id: a, address: h}\n...\n", &v, &n, &err),
                    CR_OK);
    CU_ASSERT_EQUAL(n, 1);
    free(v);
}

/* R3-6: a FIFO (or anything but a regular file) is refused at once, naming
 * it: opening one for reading blocked until a writer came, for ever. */
static void test_read_refuses_a_fifo(void)
{
    char dir[] = "/tmp/cr_endpoints_XXXXXX", path[64];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
    cr_endpoint_spec *v = (cr_endpoint_spec *)1;
    size_t n = 7;
    cr_error err;
    char want[128];
    CU_ASSERT_EQUAL(cr_endpoints_read_file(path, &v, &n, &err), CR_EINVAL);
    snprintf(want, sizeof want, "%s: cannot read: it must be a regular file, not a FIFO", path);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_EQUAL(n, 0);
    unlink(path);
    CU_ASSERT_EQUAL(cr_endpoints_read_file(dir, &v, &n, &err), CR_EINVAL);
    snprintf(want, sizeof want, "%s: cannot read: it must be a regular file, not a directory",
             dir);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    rmdir(dir);
}

/* A file on disk; a missing one names its path and the reason; one over
 * CR_ENDPOINTS_FILE_MAX is refused. */
static void test_read_file(void)
{
    char path[] = "/tmp/cr_endpoints_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(write(fd, YAML_FILE, strlen(YAML_FILE)), (ssize_t)strlen(YAML_FILE));
    close(fd);
    cr_endpoint_spec *v;
    size_t n;
    cr_error err;
    CU_ASSERT_EQUAL(cr_endpoints_read_file(path, &v, &n, &err), CR_OK);
    CU_ASSERT_EQUAL(n, 3);
    if (n == 3) {
        CU_ASSERT_STRING_EQUAL(v[2].id, "vllm-2");
        CU_ASSERT_EQUAL(v[2].weight, 2.5);
    }
    free(v);
    /* an error names the path as the file's name */
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("endpoints:\n  - id: a\n", f);
    fclose(f);
    char want[128];
    snprintf(want, sizeof want, "%s:2: endpoints[0] has no address", path);
    CU_ASSERT_EQUAL(cr_endpoints_read_file(path, &v, &n, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    /* over the bound: a comment that long */
    f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(YAML_FILE, f);
    for (size_t i = strlen(YAML_FILE); i < CR_ENDPOINTS_FILE_MAX + 10; i += 10)
        fputs("#########\n", f);
    fclose(f);
    struct stat st;
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    snprintf(want, sizeof want, "%s: %lld bytes, at most 1048576", path, (long long)st.st_size);
    CU_ASSERT_EQUAL(cr_endpoints_read_file(path, &v, &n, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    unlink(path);
    CU_ASSERT_EQUAL(cr_endpoints_read_file(path, &v, &n, &err), CR_EINVAL);
    snprintf(want, sizeof want, "%s: cannot read: No such file or directory", path);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_EQUAL(n, 0);
}

/* ---- the core -------------------------------------------------------------------- */

/* Equal weights: with every queue empty a fresh owner goes home. */
static const cr_endpoint_spec EQ[] = {{.id = "a", .address = "10.0.0.1:8000", .weight = 1},
                                      {.id = "b", .address = "10.0.0.2:8000", .weight = 1},
                                      {.id = "c", .address = "10.0.0.3:8000", .weight = 1}};

#define MAX_EVENTS 64
#define BLOCKS 4 /* a Route prompt's */

typedef struct seen {
    char by[16], id[CR_ENDPOINT_ID_MAX + 1];
    int has_id;
    uint64_t version, sessions_to_move;
    uint32_t n_slots;
    cr_endpoints_change change;
} seen;

/* A core on the virtual clock kv.t routing by ttft (blocks of 16 tokens),
 * on 8 configured shards until a set is given; the members hook's events
 * kept. Errors: 3 within 10 s make an endpoint down for 30 s. */
typedef struct fixture {
    cr_test_kv_core kv;
    seen ev[MAX_EVENTS];
    int n_ev;
    int64_t next_owner; /* fresh owners from here */
} fixture;

static void on_members(void *ctx, const cr_core_members_event *ev)
{
    fixture *f = ctx;
    if (f->n_ev >= MAX_EVENTS)
        return;
    seen *s = &f->ev[f->n_ev++];
    snprintf(s->by, sizeof s->by, "%s", ev->by ? ev->by : "(null)");
    s->has_id = ev->id != NULL;
    snprintf(s->id, sizeof s->id, "%s", ev->id ? ev->id : "");
    s->version = ev->version;
    s->n_slots = ev->n_slots;
    s->change = ev->change;
    s->sessions_to_move = ev->sessions_to_move;
}

static void open_fixture(fixture *f, uint32_t fail_errors)
{
    memset(f, 0, sizeof *f);
    cr_core_config cfg;
    cr_test_core_config(&cfg, 8);
    cfg.route.by = CR_ROUTE_TTFT;
    cfg.route.block_tokens = 16;
    cfg.route.index_blocks = 256;
    cfg.endpoints.fail_errors = fail_errors;
    cfg.endpoints.fail_window_s = 10;
    cfg.endpoints.down_s = 30;
    cr_core_hooks hooks = {.members = on_members, .ctx = f};
    cr_clock_source clock = {cr_test_kv_core_now, &f->kv};
    cr_error err;
    f->kv.block_tokens = 16;
    f->kv.core = cr_core_new(&cfg, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->kv.core);
    f->next_owner = 1000;
}

static void close_fixture(fixture *f) { cr_core_free(f->kv.core); }

static cr_core_members_event set_ok(fixture *f, const cr_endpoint_spec *v, size_t n)
{
    cr_core_members_event ev;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_set_endpoints(f->kv.core, v, n, &ev, &err), CR_OK);
    return ev;
}

static cr_core_members_event drain_ok(fixture *f, const char *id, int drain)
{
    cr_core_members_event ev;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_drain_endpoint(f->kv.core, id, drain, &ev, &err), CR_OK);
    return ev;
}

/* One arrival of owner with tokens as its prompt, 100 s after the last
 * call (every queue drained): its shard. */
static uint32_t arrive(fixture *f, int64_t owner, double tokens)
{
    cr_route_answer r;
    cr_error err;
    f->kv.t += 100;
    CU_ASSERT_EQUAL_FATAL(cr_core_record(f->kv.core, &owner, 1, &tokens, 1, &r, NULL, &err),
                          CR_OK);
    return r.shard;
}

/* n fresh owners (into owner[]) arrive once each with 200 tokens; their
 * shards into last[] (NULL: not kept). Returns how many went to slot. */
static uint64_t sessions(fixture *f, int n, int64_t *owner, uint32_t *last, uint32_t slot)
{
    uint64_t on = 0;
    for (int i = 0; i < n; i++) {
        owner[i] = f->next_owner++;
        uint32_t s = arrive(f, owner[i], 200);
        if (last)
            last[i] = s;
        on += s == slot;
    }
    return on;
}

/* n fresh owners' first arrivals: each must go to its home over `shards`
 * unless that is unusable (usable[home] 0: then anywhere but there, on a
 * usable shard). counts[s] += the routes to shard s. */
static void fresh_owners(fixture *f, int n, uint32_t shards, const uint8_t *usable,
                         int *counts)
{
    for (int i = 0; i < n; i++) {
        int64_t o = f->next_owner++;
        uint32_t home = cr_core_home_shard(f->kv.core, o, shards);
        uint32_t s = arrive(f, o, 100);
        CU_ASSERT_FATAL(s < shards);
        CU_ASSERT(usable[s]);
        if (usable[home])
            CU_ASSERT_EQUAL(s, home);
        counts[s]++;
    }
}

static const cr_endpoints *endpoints_now(fixture *f)
{
    const cr_endpoints *e = cr_core_endpoints(f->kv.core);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    return e;
}

static cr_endpoint_state state_of(fixture *f, uint32_t slot)
{
    const cr_endpoints *e = endpoints_now(f);
    cr_endpoint_state s = slot < e->n_slots ? e->slot[slot].state : CR_ENDPOINT_GONE;
    cr_endpoints_release(e);
    return s;
}

static uint64_t moved(fixture *f, int left)
{
    cr_route_stats st;
    cr_core_route_stats_read(f->kv.core, &st, NULL, 0);
    return st.moved[left];
}

/* The n owners arrive again: those whose last shard was gone move (to
 * another of the 3 slots), the others stay; moved[1] counts exactly
 * forced of them and moved[0] none. last[] takes the new shards. */
static void arrive_again(fixture *f, const int64_t *owner, uint32_t *last, int n, uint32_t gone,
                         uint64_t forced)
{
    uint64_t m1 = moved(f, 1), m0 = moved(f, 0);
    for (int i = 0; i < n; i++) {
        uint32_t s = arrive(f, owner[i], 200);
        CU_ASSERT(s < 3);
        if (last[i] == gone) {
            CU_ASSERT_NOT_EQUAL(s, gone);
        } else {
            CU_ASSERT_EQUAL(s, last[i]);
        }
        last[i] = s;
    }
    CU_ASSERT_EQUAL(moved(f, 1) - m1, forced);
    CU_ASSERT_EQUAL(moved(f, 0) - m0, 0);
}

/* Before a set routes go over the 8 configured shards; after one of 3,
 * only to its slots, every slot taking its owners; the set's event counts
 * the sessions left on shards 3..7. */
static void test_core_routes_over_the_set(void)
{
    fixture f;
    open_fixture(&f, 3);
    CU_ASSERT_PTR_NULL(cr_core_endpoints(f.kv.core));
    int64_t before[40];
    uint32_t last[40];
    uint64_t beyond = 0;
    for (int i = 0; i < 40; i++) {
        before[i] = f.next_owner++;
        last[i] = arrive(&f, before[i], 100);
        CU_ASSERT(last[i] < 8);
        beyond += last[i] >= 3;
    }
    CU_ASSERT_FATAL(beyond > 0); /* else this case shows nothing */
    cr_core_members_event ev = set_ok(&f, EQ, 3);
    CU_ASSERT_STRING_EQUAL(ev.by, "set");
    CU_ASSERT_PTR_NULL(ev.id);
    CU_ASSERT_EQUAL(ev.version, 1);
    CU_ASSERT_EQUAL(ev.n_slots, 3);
    CU_ASSERT(change_is(&ev.change, 3, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(ev.sessions_to_move, beyond);
    CU_ASSERT_EQUAL_FATAL(f.n_ev, 1);
    CU_ASSERT_STRING_EQUAL(f.ev[0].by, "set");
    CU_ASSERT_FALSE(f.ev[0].has_id);
    CU_ASSERT_EQUAL(f.ev[0].sessions_to_move, beyond);
    const cr_endpoints *e = endpoints_now(&f);
    CU_ASSERT_EQUAL(e->version, 1);
    CU_ASSERT_EQUAL(e->n_slots, 3);
    cr_endpoints_release(e);
    int counts[3] = {0};
    const uint8_t all[3] = {1, 1, 1};
    fresh_owners(&f, 60, 3, all, counts);
    CU_ASSERT(counts[0] > 0 && counts[1] > 0 && counts[2] > 0);
    /* the owners from before: those past shard 2 move (left service),
     * the others stay with their session */
    uint64_t m1 = moved(&f, 1), m0 = moved(&f, 0);
    for (int i = 0; i < 40; i++) {
        uint32_t s = arrive(&f, before[i], 100);
        CU_ASSERT(s < 3);
        if (last[i] < 3)
            CU_ASSERT_EQUAL(s, last[i]);
    }
    CU_ASSERT_EQUAL(moved(&f, 1) - m1, beyond);
    CU_ASSERT_EQUAL(moved(&f, 0) - m0, 0);
    close_fixture(&f);
}

/* Drained b (slot 1) takes nothing new; its sessions move when they next
 * arrive (moved[1]), the others stay; the event counts them beforehand.
 * Undrained, it is a candidate again. */
static void test_core_drain_and_undrain(void)
{
    fixture f;
    open_fixture(&f, 3);
    set_ok(&f, EQ, 3);
    enum { OWNERS = 45 };
    int64_t owner[OWNERS];
    uint32_t last[OWNERS];
    uint64_t on_b = sessions(&f, OWNERS, owner, last, 1);
    CU_ASSERT_FATAL(on_b > 0 && on_b < OWNERS);
    int n_ev = f.n_ev;
    cr_core_members_event ev = drain_ok(&f, "b", 1);
    CU_ASSERT_STRING_EQUAL(ev.by, "drain");
    CU_ASSERT_STRING_EQUAL(ev.id, "b");
    CU_ASSERT_EQUAL(ev.version, 2);
    CU_ASSERT_EQUAL(ev.n_slots, 3);
    CU_ASSERT(change_is(&ev.change, 0, 0, 1, 0, 0, 0));
    CU_ASSERT_EQUAL(ev.sessions_to_move, on_b);
    CU_ASSERT_EQUAL_FATAL(f.n_ev, n_ev + 1);
    CU_ASSERT_STRING_EQUAL(f.ev[n_ev].by, "drain");
    CU_ASSERT_STRING_EQUAL(f.ev[n_ev].id, "b");
    CU_ASSERT_EQUAL(f.ev[n_ev].sessions_to_move, on_b);
    CU_ASSERT_EQUAL(state_of(&f, 1), CR_ENDPOINT_DRAINING);
    /* draining again: no error, nothing changes, nothing reported */
    ev = drain_ok(&f, "b", 1);
    CU_ASSERT_EQUAL(ev.version, 2);
    CU_ASSERT(change_is(&ev.change, 0, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(f.n_ev, n_ev + 1);
    /* each owner again: b's move, the others stay */
    arrive_again(&f, owner, last, OWNERS, 1, on_b);
    int counts[3] = {0};
    const uint8_t drained[3] = {1, 0, 1}, all[3] = {1, 1, 1};
    fresh_owners(&f, 40, 3, drained, counts);
    CU_ASSERT_EQUAL(counts[1], 0);
    /* undrained: new owners whose home is b go there again */
    ev = drain_ok(&f, "b", 0);
    CU_ASSERT_STRING_EQUAL(ev.by, "undrain");
    CU_ASSERT_STRING_EQUAL(ev.id, "b");
    CU_ASSERT_EQUAL(ev.version, 3);
    CU_ASSERT(change_is(&ev.change, 0, 0, 0, 1, 0, 0));
    CU_ASSERT_EQUAL(ev.sessions_to_move, 0);
    CU_ASSERT_EQUAL(state_of(&f, 1), CR_ENDPOINT_ACTIVE);
    memset(counts, 0, sizeof counts);
    fresh_owners(&f, 40, 3, all, counts);
    CU_ASSERT(counts[1] > 0);
    /* and the owners that left b stay where they went */
    for (int i = 0; i < OWNERS; i++)
        CU_ASSERT_EQUAL(arrive(&f, owner[i], 200), last[i]);
    close_fixture(&f);
}

/* Removing the last endpoint, or any bad set, is refused; nothing
 * changes and nothing is reported. */
static void test_core_refuses_empty_set(void)
{
    fixture f;
    open_fixture(&f, 3);
    cr_error err;
    cr_core_members_event ev;
    CU_ASSERT_EQUAL(cr_core_set_endpoints(f.kv.core, EQ, 0, &ev, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoints must not be empty");
    CU_ASSERT_PTR_NULL(cr_core_endpoints(f.kv.core));
    set_ok(&f, EQ, 1);
    CU_ASSERT_EQUAL(cr_core_set_endpoints(f.kv.core, EQ, 0, &ev, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoints must not be empty");
    const cr_endpoint_spec dup[] = {EQ[0], EQ[1], EQ[0]};
    CU_ASSERT_EQUAL(cr_core_set_endpoints(f.kv.core, dup, 3, &ev, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoints[2].id \"a\" is given twice (endpoints[0])");
    CU_ASSERT_EQUAL(f.n_ev, 1);
    const cr_endpoints *e = endpoints_now(&f);
    CU_ASSERT_EQUAL(e->version, 1);
    CU_ASSERT_EQUAL(e->n_slots, 1);
    CU_ASSERT_STRING_EQUAL(e->slot[0].id, "a");
    cr_endpoints_release(e);
    /* every route still goes to a's shard */
    for (int i = 0; i < 10; i++)
        CU_ASSERT_EQUAL(arrive(&f, f.next_owner++, 100), 0);
    close_fixture(&f);
}

static void test_core_drain_unknown(void)
{
    fixture f;
    open_fixture(&f, 3);
    cr_error err;
    cr_core_members_event ev;
    CU_ASSERT_EQUAL(cr_core_drain_endpoint(f.kv.core, "a", 1, &ev, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "no endpoints are set (--endpoints-file, SetEndpoints)");
    set_ok(&f, EQ, 3);
    CU_ASSERT_EQUAL(cr_core_drain_endpoint(f.kv.core, "zz", 1, &ev, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoint \"zz\" is not in the set");
    CU_ASSERT_EQUAL(cr_core_drain_endpoint(f.kv.core, "zz", 0, &ev, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoint \"zz\" is not in the set");
    /* a removed one is not in the set either */
    const cr_endpoint_spec ac[] = {EQ[0], EQ[2]};
    set_ok(&f, ac, 2);
    CU_ASSERT_EQUAL(cr_core_drain_endpoint(f.kv.core, "b", 1, &ev, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "endpoint \"b\" is not in the set");
    CU_ASSERT_EQUAL(f.n_ev, 2);
    const cr_endpoints *e = endpoints_now(&f);
    CU_ASSERT_EQUAL(e->version, 2);
    CU_ASSERT_EQUAL(e->n_state[CR_ENDPOINT_ACTIVE], 2);
    cr_endpoints_release(e);
    close_fixture(&f);
}

/* Removing b: its sessions counted and moved; its slot takes nothing; a
 * join takes a new slot and new sessions. */
static void test_core_remove_and_join(void)
{
    fixture f;
    open_fixture(&f, 3);
    set_ok(&f, EQ, 3);
    enum { OWNERS = 45 };
    int64_t owner[OWNERS];
    uint32_t last[OWNERS];
    uint64_t on_b = sessions(&f, OWNERS, owner, last, 1);
    CU_ASSERT_FATAL(on_b > 0);
    const cr_endpoint_spec ac[] = {EQ[0], EQ[2]};
    cr_core_members_event ev = set_ok(&f, ac, 2);
    CU_ASSERT_STRING_EQUAL(ev.by, "set");
    CU_ASSERT_EQUAL(ev.version, 2);
    CU_ASSERT_EQUAL(ev.n_slots, 3);
    CU_ASSERT(change_is(&ev.change, 0, 1, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(ev.sessions_to_move, on_b);
    arrive_again(&f, owner, last, OWNERS, 1, on_b); /* onto a or c: b's slot is gone */
    int counts[4] = {0};
    const uint8_t gone[3] = {1, 0, 1};
    fresh_owners(&f, 30, 3, gone, counts);
    CU_ASSERT_EQUAL(counts[1], 0);
    /* d joins long after the removal (the clock moved 100 s a route):
     * b's slot, out of its quarantine, is reused */
    const cr_endpoint_spec acd[] = {
        EQ[0], EQ[2], {.id = "d", .address = "10.0.0.4:8000", .weight = 1}};
    ev = set_ok(&f, acd, 3);
    CU_ASSERT(change_is(&ev.change, 1, 0, 0, 0, 0, 0));
    CU_ASSERT_EQUAL(ev.version, 3);
    const cr_endpoints *e = endpoints_now(&f);
    uint32_t d = cr_endpoints_find(e, "d");
    CU_ASSERT_EQUAL(d, 1); /* more than CR_ENDPOINTS_REUSE_S later: b's slot */
    CU_ASSERT_EQUAL(e->n_slots, 3);
    cr_endpoints_release(e);
    memset(counts, 0, sizeof counts);
    const uint8_t all[3] = {1, 1, 1};
    fresh_owners(&f, 40, 3, all, counts);
    CU_ASSERT(counts[1] > 0);
    /* e joins at once: a new slot at the end, which takes new owners */
    const cr_endpoint_spec acde[] = {
        acd[0], acd[1], acd[2], {.id = "e", .address = "10.0.0.5:8000", .weight = 1}};
    ev = set_ok(&f, acde, 4);
    CU_ASSERT_EQUAL(ev.n_slots, 4);
    CU_ASSERT(change_is(&ev.change, 1, 0, 0, 0, 0, 0));
    memset(counts, 0, sizeof counts);
    const uint8_t four[4] = {1, 1, 1, 1};
    fresh_owners(&f, 60, 4, four, counts);
    CU_ASSERT(counts[3] > 0);
    close_fixture(&f);
}

/* One outcome reporting an error on shard at the fixture's now. */
static void report_error(fixture *f, uint32_t shard)
{
    cr_outcome o = {.has = CR_OUT_ERROR | CR_OUT_SHARD, .shard = shard,
                    .error = "connection refused"};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_report(f->kv.core, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.accepted, 1);
    CU_ASSERT_EQUAL(counts.rejected, 0);
}

/* fail_errors (3) errors within the window mark c DOWN for down_s (30 s);
 * fewer, or spread wider, do not; it takes nothing while down and is
 * ACTIVE again once cr_core_endpoints finds its retry time passed. */
static void test_core_errors_down_then_retry(void)
{
    fixture f;
    open_fixture(&f, 3);
    set_ok(&f, EQ, 3);
    enum { OWNERS = 45 };
    int64_t owner[OWNERS];
    uint64_t on_c = sessions(&f, OWNERS, owner, NULL, 2);
    CU_ASSERT_FATAL(on_c > 0);
    double t0 = f.kv.t += 1;
    report_error(&f, 2);
    f.kv.t = t0 + 1;
    report_error(&f, 2);
    CU_ASSERT_EQUAL(state_of(&f, 2), CR_ENDPOINT_ACTIVE);
    f.kv.t = t0 + 11; /* past the window: counting starts again */
    report_error(&f, 2);
    f.kv.t = t0 + 12;
    report_error(&f, 2);
    CU_ASSERT_EQUAL(state_of(&f, 2), CR_ENDPOINT_ACTIVE);
    int n_ev = f.n_ev;
    f.kv.t = t0 + 13;
    report_error(&f, 2); /* the third within 10 s */
    const cr_endpoints *e = endpoints_now(&f);
    CU_ASSERT_EQUAL(e->slot[2].state, CR_ENDPOINT_DOWN);
    CU_ASSERT_EQUAL(e->slot[2].down_until_s, t0 + 43);
    CU_ASSERT_EQUAL(e->next_retry_s, t0 + 43);
    CU_ASSERT_EQUAL(e->version, 2);
    cr_endpoints_release(e);
    CU_ASSERT_EQUAL_FATAL(f.n_ev, n_ev + 1);
    CU_ASSERT_STRING_EQUAL(f.ev[n_ev].by, "errors");
    CU_ASSERT_STRING_EQUAL(f.ev[n_ev].id, "c");
    CU_ASSERT(change_is(&f.ev[n_ev].change, 0, 0, 0, 0, 1, 0));
    CU_ASSERT_EQUAL(f.ev[n_ev].sessions_to_move, on_c);
    /* more errors on a down endpoint: accepted, nothing changes */
    report_error(&f, 2);
    CU_ASSERT_EQUAL(f.n_ev, n_ev + 1);
    /* down: takes nothing (the clock stays inside down_s) */
    for (int i = 0; i < 20; i++) {
        f.kv.t += 1;
        int64_t o = f.next_owner++;
        double w = 100;
        cr_route_answer r;
        cr_error err;
        CU_ASSERT_EQUAL(cr_core_record(f.kv.core, &o, 1, &w, 1, &r, NULL, &err), CR_OK);
        CU_ASSERT(r.shard == 0 || r.shard == 1);
    }
    f.kv.t = t0 + 43 - 0.5;
    CU_ASSERT_EQUAL(state_of(&f, 2), CR_ENDPOINT_DOWN);
    CU_ASSERT_EQUAL(f.n_ev, n_ev + 1);
    f.kv.t = t0 + 43;
    e = endpoints_now(&f); /* the retry */
    CU_ASSERT_EQUAL(e->slot[2].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(e->slot[2].since_s, t0 + 43);
    CU_ASSERT(isinf(e->next_retry_s));
    CU_ASSERT_EQUAL(e->version, 3);
    cr_endpoints_release(e);
    CU_ASSERT_EQUAL_FATAL(f.n_ev, n_ev + 2);
    CU_ASSERT_STRING_EQUAL(f.ev[n_ev + 1].by, "retry");
    CU_ASSERT_STRING_EQUAL(f.ev[n_ev + 1].id, "c");
    CU_ASSERT(change_is(&f.ev[n_ev + 1].change, 0, 0, 0, 0, 0, 1));
    CU_ASSERT_EQUAL(f.ev[n_ev + 1].version, 3);
    /* a candidate again */
    int counts[3] = {0};
    const uint8_t all[3] = {1, 1, 1};
    fresh_owners(&f, 40, 3, all, counts);
    CU_ASSERT(counts[2] > 0);
    /* a new life counts anew: two errors do not take it down again */
    report_error(&f, 2);
    report_error(&f, 2);
    CU_ASSERT_EQUAL(state_of(&f, 2), CR_ENDPOINT_ACTIVE);
    /* a draining endpoint's errors do not count */
    drain_ok(&f, "a", 1);
    for (int i = 0; i < 5; i++)
        report_error(&f, 0);
    CU_ASSERT_EQUAL(state_of(&f, 0), CR_ENDPOINT_DRAINING);
    close_fixture(&f);
}

/* Every endpoint down: routes still answer (on the down ones, the last
 * resort); at the retry time each comes back, one change and one report
 * each. */
static void test_core_all_down(void)
{
    fixture f;
    open_fixture(&f, 3);
    set_ok(&f, EQ, 3);
    f.kv.t = 500;
    for (uint32_t s = 0; s < 3; s++)
        for (int i = 0; i < 3; i++)
            report_error(&f, s);
    const cr_endpoints *e = endpoints_now(&f);
    CU_ASSERT_EQUAL(e->n_state[CR_ENDPOINT_DOWN], 3);
    CU_ASSERT_EQUAL(e->version, 4);
    CU_ASSERT_EQUAL(e->next_retry_s, 530);
    cr_endpoints_release(e);
    CU_ASSERT_EQUAL(f.n_ev, 4);
    int counts[3] = {0};
    for (int i = 0; i < 30; i++) {
        f.kv.t += 0.5;
        int64_t o = f.next_owner++;
        double w = 100;
        cr_route_answer r;
        cr_error err;
        CU_ASSERT_EQUAL_FATAL(cr_core_record(f.kv.core, &o, 1, &w, 1, &r, NULL, &err), CR_OK);
        CU_ASSERT_FATAL(r.shard < 3);
        counts[r.shard]++;
    }
    CU_ASSERT(counts[0] + counts[1] + counts[2] == 30);
    f.kv.t = 530;
    e = endpoints_now(&f);
    CU_ASSERT_EQUAL(e->n_state[CR_ENDPOINT_ACTIVE], 3);
    CU_ASSERT_EQUAL(e->version, 7);
    CU_ASSERT(isinf(e->next_retry_s));
    cr_endpoints_release(e);
    CU_ASSERT_EQUAL_FATAL(f.n_ev, 7);
    for (int i = 4; i < 7; i++) {
        CU_ASSERT_STRING_EQUAL(f.ev[i].by, "retry");
        CU_ASSERT_STRING_EQUAL(f.ev[i].id, EQ[i - 4].id);
        CU_ASSERT_EQUAL(f.ev[i].version, (uint64_t)i + 1);
    }
    close_fixture(&f);
}

/* --endpoint-fail-errors 0: never down. */
static void test_core_errors_off(void)
{
    fixture f;
    open_fixture(&f, 0);
    set_ok(&f, EQ, 3);
    for (int i = 0; i < 10; i++)
        report_error(&f, 1);
    CU_ASSERT_EQUAL(state_of(&f, 1), CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(f.n_ev, 1);
    close_fixture(&f);
}

/* A DOWN endpoint's prefix index is dropped: the same prompt, routed
 * after it returns, is predicted uncached there; a drain keeps it. */
static void test_core_down_drops_prefix_index(void)
{
    fixture f;
    open_fixture(&f, 3);
    set_ok(&f, EQ, 3);
    cr_route_answer a;
    CU_ASSERT_EQUAL_FATAL(cr_test_kv_core_route(&f.kv, 1, BLOCKS, NULL, &a), CR_OK);
    uint32_t s = a.shard;
    CU_ASSERT_FATAL(s < 3);
    CU_ASSERT_EQUAL(a.cached_tokens, 0);
    CU_ASSERT_EQUAL_FATAL(cr_test_kv_core_route(&f.kv, 1, BLOCKS, NULL, &a), CR_OK);
    CU_ASSERT_EQUAL(a.shard, s);
    CU_ASSERT_EQUAL(a.cached_tokens, BLOCKS * 16);
    /* a drain and its undo keep the index */
    drain_ok(&f, EQ[s].id, 1);
    drain_ok(&f, EQ[s].id, 0);
    CU_ASSERT_EQUAL_FATAL(cr_test_kv_core_route(&f.kv, 1, BLOCKS, NULL, &a), CR_OK);
    CU_ASSERT_EQUAL(a.shard, s);
    CU_ASSERT_EQUAL(a.cached_tokens, BLOCKS * 16);
    /* down: forgotten; the next route (100 s later) finds it back, empty */
    for (int i = 0; i < 3; i++)
        report_error(&f, s);
    CU_ASSERT_EQUAL(state_of(&f, s), CR_ENDPOINT_DOWN);
    int n_ev = f.n_ev;
    CU_ASSERT_EQUAL_FATAL(cr_test_kv_core_route(&f.kv, 1, BLOCKS, NULL, &a), CR_OK);
    CU_ASSERT_EQUAL(a.shard, s);
    CU_ASSERT_EQUAL(a.cached_tokens, 0);
    CU_ASSERT_EQUAL_FATAL(f.n_ev, n_ev + 1);
    CU_ASSERT_STRING_EQUAL(f.ev[n_ev].by, "retry");
    CU_ASSERT_EQUAL(state_of(&f, s), CR_ENDPOINT_ACTIVE);
    close_fixture(&f);
}

/* The capacity weight reaches the router: with every queue empty b
 * (weight 2.5) is the cheapest shard for every fresh owner; drained,
 * each goes home again. */
static void test_core_weight_is_speed(void)
{
    fixture f;
    open_fixture(&f, 3);
    set_ok(&f, ABC, 3);
    int counts[3] = {0};
    for (int i = 0; i < 30; i++) {
        uint32_t s = arrive(&f, f.next_owner++, 100);
        CU_ASSERT_FATAL(s < 3);
        counts[s]++;
    }
    CU_ASSERT_EQUAL(counts[1], 30);
    drain_ok(&f, "b", 1);
    memset(counts, 0, sizeof counts);
    const uint8_t drained[3] = {1, 0, 1};
    fresh_owners(&f, 30, 3, drained, counts);
    CU_ASSERT(counts[0] > 0 && counts[2] > 0);
    close_fixture(&f);
}

/* ---- the router alone (cr_router_members) ------------------------------------------ */

static cr_router *ttft_router(void)
{
    cr_route_config cfg = {.by = CR_ROUTE_TTFT, .load_bound = 1.25, .inflight_ttl_s = 60,
                           .inflight_max = 1000, .block_tokens = 16, .index_blocks = 64,
                           .max_hashes = 8, .miss_weight = 2};
    cr_router *r = cr_router_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    return r;
}

static cr_route_answer place_prompt(cr_router *r, uint32_t n, uint64_t p, double now)
{
    uint64_t h[4];
    for (uint32_t j = 0; j < 4; j++)
        h[j] = cr_mix64(p * 4 + j + 1);
    cr_route_request q = {.prompt_tokens = 64, .hashes = h, .n_hashes = 4};
    cr_route_answer a;
    cr_router_place(r, NULL, n, &q, &a, 1, now); /* 1 ms a token */
    return a;
}

/* forget[s] clears shard s's prefix blocks, and only s's. */
static void test_router_forget(void)
{
    cr_router *r = ttft_router();
    cr_route_answer a = place_prompt(r, 3, 1, 0);
    uint32_t s = a.shard;
    CU_ASSERT_FATAL(s < 3);
    uint64_t blocks, bytes;
    cr_router_index_stats(r, &blocks, &bytes);
    CU_ASSERT_EQUAL(blocks, 4);
    a = place_prompt(r, 3, 1, 100);
    CU_ASSERT_EQUAL(a.shard, s);
    CU_ASSERT_EQUAL(a.cached_tokens, 64);
    uint8_t forget[3] = {1, 1, 1};
    forget[s] = 0; /* every other shard */
    CU_ASSERT_EQUAL(cr_router_members(r, 3, NULL, NULL, forget), 0);
    a = place_prompt(r, 3, 1, 200);
    CU_ASSERT_EQUAL(a.shard, s);
    CU_ASSERT_EQUAL(a.cached_tokens, 64);
    memset(forget, 0, sizeof forget);
    forget[s] = 1;
    CU_ASSERT_EQUAL(cr_router_members(r, 3, NULL, NULL, forget), 0);
    cr_router_index_stats(r, &blocks, &bytes);
    CU_ASSERT_EQUAL(blocks, 0);
    a = place_prompt(r, 3, 1, 300);
    CU_ASSERT_EQUAL(a.cached_tokens, 0);
    cr_router_free(r);
}

/* n requests at one instant over 2 shards of speeds sp (NULL: equal):
 * the routes to each. */
static void spread(const double *sp, int n, int *counts)
{
    cr_router *r = ttft_router();
    const uint8_t usable[2] = {1, 1};
    CU_ASSERT_EQUAL(cr_router_members(r, 2, usable, sp, NULL), 0);
    counts[0] = counts[1] = 0;
    for (int i = 0; i < n; i++) {
        cr_route_request q = {.prompt_tokens = 100};
        cr_route_answer a;
        cr_router_place(r, NULL, 2, &q, &a, 1, 1);
        CU_ASSERT_FATAL(a.shard < 2);
        counts[a.shard]++;
    }
    cr_router_free(r);
}

/* A weight-2 shard's cost is halved: it takes about twice as many of
 * equal requests (k1 < 2 k0 + g each time), where equal weights split
 * them evenly. */
static void test_router_speed_divides_cost(void)
{
    int even[2], fast[2];
    spread(NULL, 30, even);
    CU_ASSERT(abs(even[0] - even[1]) <= 1);
    const double sp[2] = {1, 2};
    spread(sp, 30, fast);
    CU_ASSERT(fast[1] >= 2 * fast[0]);
    CU_ASSERT(fast[1] <= 2 * fast[0] + 3);
    CU_ASSERT_EQUAL(fast[0] + fast[1], 30);
}

/* ---- threads ------------------------------------------------------------------- */

typedef struct racer {
    fixture *f;
    int64_t first;
    int failures; /* counted here, asserted by the main thread */
    int routes;
} racer;

static void *race_routes(void *arg)
{
    racer *x = arg;
    for (int i = 0; i < 3000; i++) {
        int64_t o = x->first + i % 200;
        double w = 100;
        cr_route_answer r;
        cr_error err;
        if (cr_core_record(x->f->kv.core, &o, 1, &w, 1, &r, NULL, &err) != CR_OK ||
            r.shard >= 4)
            x->failures++;
        x->routes++;
    }
    return NULL;
}

/* Routes from four threads while the main thread drains and undrains a
 * and re-sets the list (weights and addresses changing): every route
 * lands on one of the 4 slots, and the final set is the last one made. */
static void test_threads_route_while_the_set_changes(void)
{
    fixture f;
    open_fixture(&f, 3);
    f.kv.t = 1000; /* the clock stays put while threads read it */
    cr_endpoint_spec abcd[] = {
        ABC[0], ABC[1], ABC[2], {.id = "d", .address = "10.0.0.4:8000", .weight = 1}};
    set_ok(&f, abcd, 4);
    pthread_t th[4];
    racer x[4];
    for (int i = 0; i < 4; i++) {
        x[i] = (racer){&f, 100000 * (i + 1), 0, 0};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, race_routes, &x[i]), 0);
    }
    for (int k = 0; k < 100; k++) {
        cr_error err;
        cr_core_members_event ev;
        CU_ASSERT_EQUAL(cr_core_drain_endpoint(f.kv.core, "a", k % 2 == 0, &ev, &err), CR_OK);
        abcd[1].weight = 1 + k % 3;
        abcd[3].address = k % 2 ? "10.0.0.4:8000" : "10.0.0.4:8001";
        CU_ASSERT_EQUAL(cr_core_set_endpoints(f.kv.core, abcd, 4, &ev, &err), CR_OK);
        const cr_endpoints *e = cr_core_endpoints(f.kv.core);
        CU_ASSERT(e && e->n_slots == 4);
        cr_endpoints_release(e);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(x[i].failures, 0);
        CU_ASSERT_EQUAL(x[i].routes, 3000);
    }
    const cr_endpoints *e = endpoints_now(&f);
    CU_ASSERT_EQUAL(e->version, 201); /* 1, then a drain or undrain and a set each time */
    CU_ASSERT_EQUAL(e->n_slots, 4);
    CU_ASSERT_EQUAL(e->slot[0].state, CR_ENDPOINT_ACTIVE); /* k = 99: undrained */
    CU_ASSERT_EQUAL(e->slot[1].weight, 1 + 99 % 3);
    CU_ASSERT_STRING_EQUAL(e->slot[3].address, "10.0.0.4:8000");
    cr_endpoints_release(e);
    close_fixture(&f);
}

static const cr_test_case set_tests[] = {
    {"first set: slots in order, version 1", test_first_set_in_order},
    {"state names", test_state_names},
    {"removal leaves a gone slot", test_removal_leaves_gone_slot},
    {"join: a new slot, the gone one after its quarantine", test_join_after_quarantine},
    {"a new set keeps draining and down", test_new_set_keeps_states},
    {"with_state: changes counted, refusals", test_with_state},
    {"stated states: the source's, never an operator's", test_stated_states},
    {"kv_events: read, kept, checked", test_kv_events_address},
    {"usable: active, else draining, else down", test_usable_falls_back},
    {"the 1024-slot bound: the oldest gone slot reused", test_slot_bound},
    {"renaming 600 of 600 at once", test_rename_all},
    {"churn never fills the slots", test_churn_never_fills_the_slots},
    {"check messages", test_check_messages},
    {NULL, NULL},
};

static const cr_test_case file_tests[] = {
    {"json and yaml give the same specs", test_json_and_yaml_alike},
    {"errors name the file and line", test_file_errors_name_lines},
    {"read_file", test_read_file},
    {"a top-level key given twice", test_top_level_key_twice},
    {"a weight: the set's own rule", test_weight_rule_is_the_check},
    {"a NUL byte is refused", test_nul_refused},
    {"depth and nodes bounded before loading", test_depth_and_nodes_bounded},
    {"one YAML document", test_one_document},
    {"a FIFO is refused at once", test_read_refuses_a_fifo},
    {NULL, NULL},
};

static const cr_test_case core_tests[] = {
    {"routes only over the set", test_core_routes_over_the_set},
    {"drain and undrain", test_core_drain_and_undrain},
    {"an empty set is refused", test_core_refuses_empty_set},
    {"draining an unknown id", test_core_drain_unknown},
    {"remove and join", test_core_remove_and_join},
    {"errors: down, then retry", test_core_errors_down_then_retry},
    {"errors: fail_errors 0 never downs", test_core_errors_off},
    {"errors: every endpoint down", test_core_all_down},
    {"down drops the prefix index", test_core_down_drops_prefix_index},
    {"a capacity weight is speed", test_core_weight_is_speed},
    {"threads route while the set changes", test_threads_route_while_the_set_changes},
    {NULL, NULL},
};

/* Under --route-by plan a shard that stops serving hands its owners to
 * the next serving shard of each owner's ring: spread over the others,
 * not piled on its neighbour; every other owner keeps its shard. */
static void test_router_plan_spreads_a_drained_shard(void)
{
    cr_route_config cfg = {.by = CR_ROUTE_PLAN, .load_bound = 1.25, .inflight_ttl_s = 60,
                           .inflight_max = 1000, .block_tokens = 16, .index_blocks = 64,
                           .max_hashes = 8, .miss_weight = 2};
    cr_router *r = cr_router_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    enum { OWNERS = 800, SHARDS = 5 };
    uint32_t before[OWNERS], to[SHARDS] = {0};
    int admitted;
    for (int64_t o = 0; o < OWNERS; o++)
        before[o] = cr_router_shard(r, NULL, SHARDS, o, &admitted);
    const uint8_t usable[SHARDS] = {1, 1, 0, 1, 1};
    CU_ASSERT_EQUAL(cr_router_members(r, SHARDS, usable, NULL, NULL), 0);
    for (int64_t o = 0; o < OWNERS; o++) {
        uint32_t now = cr_router_shard(r, NULL, SHARDS, o, &admitted);
        CU_ASSERT(now != 2);
        if (before[o] != 2) {
            CU_ASSERT_EQUAL(now, before[o]);
        } else {
            to[now]++;
        }
    }
    int takers = 0;
    for (int s = 0; s < SHARDS; s++)
        takers += to[s] > 0;
    CU_ASSERT(takers >= 3); /* of the four left: a linear probe would give 1 */
    cr_router_free(r);
}

static const cr_test_case router_tests[] = {
    {"forget clears a shard's prefix blocks", test_router_forget},
    {"plan spreads a drained shard's owners", test_router_plan_spreads_a_drained_shard},
    {"speed divides the ttft cost", test_router_speed_divides_cost},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"endpoints: sets", set_tests},
                                       {"endpoints: file", file_tests},
                                       {"endpoints: core", core_tests},
                                       {"endpoints: router", router_tests}};
CR_TEST_MAIN(suites)
