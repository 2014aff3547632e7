/* The endpoint set across replicas: the published blob and the forwarded
 * calls round-trip and are refused whole when bad; a follower's core
 * adopts a leader's set slot for slot, never an older version, checks but
 * keeps its own calls while following, and applies its own set onto the
 * cluster's when it takes the lead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "core_config.h"
#include "cunit_main.h"
#include "replica.h"

/* ---- a core on a virtual clock, its members hook recorded ---- */

typedef struct fixture {
    double t;
    cr_core *core;
    char last_by[16];
    int reports;
} fixture;

static double fixture_now(void *ctx) { return ((fixture *)ctx)->t; }

static void members_hook(void *ctx, const cr_core_members_event *ev)
{
    fixture *f = ctx;
    snprintf(f->last_by, sizeof f->last_by, "%s", ev->by);
    f->reports++;
}

static void open_core(fixture *f, double t)
{
    cr_core_config cfg;
    cr_test_core_config(&cfg, 4);
    cr_core_hooks hooks = {.members = members_hook, .ctx = f};
    cr_clock_source clock = {fixture_now, f};
    cr_error err;
    memset(f, 0, sizeof *f);
    f->t = t;
    f->core = cr_core_new(&cfg, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

/* Sets the ids (addresses "ID:80", weight 2) as one SetEndpoints. */
static cr_status set_ids(fixture *f, const char *const *ids, size_t n, cr_core_members_event *ev)
{
    cr_endpoint_spec v[8];
    char addr[8][32];
    for (size_t i = 0; i < n; i++) {
        snprintf(addr[i], sizeof addr[i], "%s:80", ids[i]);
        v[i] = (cr_endpoint_spec){.id = ids[i], .address = addr[i], .weight = 2};
    }
    cr_error err;
    return cr_core_set_endpoints(f->core, v, n, ev, &err);
}

/* The leader's history: a, b, c; b removed; 100 s later d joins (into b's
 * slot, out of quarantine); c drained. Slots: a, d, c (draining). */
static void leader_history(fixture *l)
{
    const char *abc[] = {"a", "b", "c"}, *ac[] = {"a", "c"}, *acd[] = {"a", "c", "d"};
    cr_error err;
    CU_ASSERT_EQUAL(set_ids(l, abc, 3, NULL), CR_OK);
    CU_ASSERT_EQUAL(set_ids(l, ac, 2, NULL), CR_OK);
    l->t += 100;
    CU_ASSERT_EQUAL(set_ids(l, acd, 3, NULL), CR_OK);
    l->t += 5;
    CU_ASSERT_EQUAL(cr_core_drain_endpoint(l->core, "c", 1, NULL, &err), CR_OK);
    l->t += 7;
}

/* The leader's set as published at its now, adopted by the follower at
 * its own now. */
static cr_status hand_over(fixture *l, fixture *f, cr_error *err)
{
    const cr_endpoints *e = cr_core_endpoints(l->core);
    uint8_t *blob;
    size_t len;
    cr_endpoint *slots;
    uint32_t n;
    uint64_t version;
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_encode(e, l->t, &blob, &len, err), CR_OK);
    cr_endpoints_release(e);
    CU_ASSERT_EQUAL_FATAL(
        cr_replica_members_decode(blob, len, f->t, &slots, &n, &version, err), CR_OK);
    free(blob);
    cr_status st = cr_core_adopt_endpoints(f->core, slots, n, version, NULL, err);
    free(slots);
    return st;
}

/* Both cores' sets the same slot for slot, times as ages. */
static void assert_same_sets(fixture *a, fixture *b)
{
    const cr_endpoints *x = cr_core_endpoints(a->core), *y = cr_core_endpoints(b->core);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    CU_ASSERT_EQUAL(x->version, y->version);
    CU_ASSERT_EQUAL_FATAL(x->n_slots, y->n_slots);
    for (uint32_t s = 0; s < x->n_slots; s++) {
        const cr_endpoint *p = &x->slot[s], *q = &y->slot[s];
        CU_ASSERT_STRING_EQUAL(p->id, q->id);
        CU_ASSERT_STRING_EQUAL(p->address, q->address);
        CU_ASSERT_EQUAL(p->weight, q->weight);
        CU_ASSERT_EQUAL(p->state, q->state);
        CU_ASSERT_DOUBLE_EQUAL(a->t - p->since_s, b->t - q->since_s, 1e-9);
        if (p->state == CR_ENDPOINT_DOWN)
            CU_ASSERT_DOUBLE_EQUAL(p->down_until_s - a->t, q->down_until_s - b->t, 1e-9);
    }
    cr_endpoints_release(x);
    cr_endpoints_release(y);
}

/* ---- the blob ---- */

/* A set with every state: a active, b draining, c down (for 30 s more),
 * d gone. */
static cr_endpoints *every_state(double now)
{
    cr_endpoint_spec v[] = {{.id = "a", .address = "10.0.0.1:80", .weight = 1},
                            {.id = "b", .address = "b.svc:80", .weight = 2.5},
                            {.id = "c", .address = "http://c:8000", .weight = 1000},
                            {.id = "d", .address = "d:1", .weight = 0}};
    cr_endpoints *e1, *e2, *e3, *e4;
    cr_endpoints_change chg;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_endpoints_apply(NULL, v, 4, now - 50, &e1, &chg, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_endpoints_apply(e1, v, 3, now - 40, &e2, &chg, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(
        cr_endpoints_with_state(e2, 1, CR_ENDPOINT_DRAINING, now - 30, 0, &e3, &chg, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(
        cr_endpoints_with_state(e3, 2, CR_ENDPOINT_DOWN, now - 20, now + 30, &e4, &chg, &err),
        CR_OK);
    cr_endpoints_release(e1);
    cr_endpoints_release(e2);
    cr_endpoints_release(e3);
    return e4;
}

static void test_members_blob(void)
{
    cr_endpoints *e = every_state(1000);
    uint8_t *blob;
    size_t len;
    cr_endpoint *v;
    uint32_t n;
    uint64_t version;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_encode(e, 1000, &blob, &len, &err), CR_OK);
    /* another clock entirely: ages and retries carry over as durations */
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_decode(blob, len, 7, &v, &n, &version, &err), CR_OK);
    CU_ASSERT_EQUAL(version, e->version);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    for (uint32_t s = 0; s < n; s++) {
        CU_ASSERT_STRING_EQUAL(v[s].id, e->slot[s].id);
        CU_ASSERT_STRING_EQUAL(v[s].address, e->slot[s].address);
        CU_ASSERT_EQUAL(v[s].weight, e->slot[s].weight);
        CU_ASSERT_EQUAL(v[s].state, e->slot[s].state);
        CU_ASSERT_DOUBLE_EQUAL(7 - v[s].since_s, 1000 - e->slot[s].since_s, 1e-9);
    }
    CU_ASSERT_EQUAL(v[3].state, CR_ENDPOINT_GONE);
    CU_ASSERT_DOUBLE_EQUAL(v[2].down_until_s, 37, 1e-9);
    free(v);
    free(blob);
    cr_endpoints_release(e);
}

/* Version 2 carries each slot's KV-event address and a state its source
 * stated (a stated DOWN waits forever: its retry travels as INFINITY);
 * a version-1 blob still reads, with neither. */
static void test_members_stated_and_kv_events(void)
{
    cr_endpoint_spec v[] = {
        {.id = "a", .address = "10.0.0.1:80", .weight = 1, .kv_events = "tcp://10.0.0.1:5557",
         .stated = 1, .state = CR_ENDPOINT_ACTIVE},
        {.id = "b", .address = "10.0.0.2:80", .weight = 1, .stated = 1,
         .state = CR_ENDPOINT_DOWN},
        {.id = "c", .address = "10.0.0.3:80", .weight = 1}};
    cr_endpoints *e;
    cr_endpoints_change chg;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_endpoints_apply(NULL, v, 3, 100, &e, &chg, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(e->slot[1].down_until_s, INFINITY);
    uint8_t *blob;
    size_t len;
    cr_endpoint *got;
    uint32_t n;
    uint64_t version;
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_encode(e, 100, &blob, &len, &err), CR_OK);
    CU_ASSERT_EQUAL(blob[0], 2); /* little-endian: version 2, what carries them */
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_decode(blob, len, 5, &got, &n, &version, &err),
                          CR_OK);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_STRING_EQUAL(got[0].kv_events, "tcp://10.0.0.1:5557");
    CU_ASSERT_STRING_EQUAL(got[1].kv_events, "");
    for (uint32_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(got[i].by_source, e->slot[i].by_source);
    CU_ASSERT_EQUAL(got[1].by_source, 1);
    CU_ASSERT_EQUAL(got[1].state, CR_ENDPOINT_DOWN);
    CU_ASSERT_EQUAL(got[1].down_until_s, INFINITY);
    /* a follower's core adopts them as they are */
    fixture f;
    open_core(&f, 0);
    CU_ASSERT_EQUAL(cr_core_adopt_endpoints(f.core, got, n, version, NULL, &err), CR_OK);
    const cr_endpoints *mine = cr_core_endpoints(f.core);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mine);
    CU_ASSERT_STRING_EQUAL(mine->slot[0].kv_events, "tcp://10.0.0.1:5557");
    CU_ASSERT_EQUAL(mine->slot[1].by_source, 1);
    cr_endpoints_release(mine);
    cr_core_free(f.core);
    free(got);
    free(blob);
    cr_endpoints_release(e);
    /* only a stated DOWN may wait forever */
    cr_buf b = CR_BUF_INIT;
    cr_buf_u32(&b, 2);
    cr_buf_u64(&b, 3);
    cr_buf_u32(&b, 1);
    cr_buf_u8(&b, CR_ENDPOINT_DOWN);
    cr_buf_u8(&b, 0); /* not by_source */
    cr_buf_f64(&b, 1);
    cr_buf_f64(&b, 2);
    cr_buf_f64(&b, INFINITY);
    cr_buf_u32(&b, 1);
    cr_buf_put(&b, "a", 1);
    cr_buf_u32(&b, 3);
    cr_buf_put(&b, "h:1", 3);
    cr_buf_u32(&b, 0);
    CU_ASSERT_EQUAL(cr_replica_members_decode(b.p, b.len, 0, &got, &n, &version, &err),
                    CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "by_source 0"));
    b.p[17] = 1; /* by_source, after the state: now it may */
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_decode(b.p, b.len, 0, &got, &n, &version, &err),
                          CR_OK);
    CU_ASSERT_EQUAL(got[0].down_until_s, INFINITY);
    free(got);
    cr_buf_free(&b);
}

/* Refused whole: CR_EINVAL, nothing returned, err naming want. */
static void assert_refused(const uint8_t *p, size_t len, const char *want)
{
    cr_endpoint *v = (cr_endpoint *)1;
    uint32_t n = 9;
    uint64_t version;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replica_members_decode(p, len, 0, &v, &n, &version, &err), CR_EINVAL);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_EQUAL(n, 0);
    if (want && !strstr(err.msg, want))
        fprintf(stderr, "\nwanted \"%s\" in \"%s\"\n", want, err.msg);
    CU_ASSERT(!want || strstr(err.msg, want));
}

/* A blob of one slot with the given id and state, written by hand. */
static cr_buf one_slot(uint32_t format, uint32_t slots, const char *id, size_t id_len,
                       uint8_t state)
{
    cr_buf b = CR_BUF_INIT;
    cr_buf_u32(&b, format);
    cr_buf_u64(&b, 3);
    cr_buf_u32(&b, slots);
    cr_buf_u8(&b, state);
    cr_buf_f64(&b, 1);
    cr_buf_f64(&b, 2);
    cr_buf_f64(&b, 0);
    cr_buf_u32(&b, (uint32_t)id_len);
    cr_buf_put(&b, id, id_len);
    cr_buf_u32(&b, 3);
    cr_buf_put(&b, "h:1", 3);
    return b;
}

static void test_members_bad_blobs(void)
{
    cr_endpoints *e = every_state(1000);
    uint8_t *blob;
    size_t len;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_encode(e, 1000, &blob, &len, &err), CR_OK);
    for (size_t k = 0; k < len; k++) /* every truncation */
        assert_refused(blob, k, NULL);
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, blob, len);
    longer[len] = 0;
    assert_refused(longer, len + 1, "bytes past its end");
    free(longer);
    free(blob);
    cr_endpoints_release(e);

    char id[CR_ENDPOINT_ID_MAX + 2];
    memset(id, 'x', sizeof id);
    struct {
        uint32_t format, slots;
        size_t id_len;
        uint8_t state;
        const char *want;
    } bad[] = {
        {3, 1, 1, 0, "must be version 2, got 3"},
        {1, 0, 1, 0, "1..1024 slots"},
        {1, CR_ENDPOINTS_MAX + 1, 1, 0, "got 1025"},
        {1, 2, 1, 0, "got 2"}, /* says two slots, holds one */
        {1, 1, CR_ENDPOINT_ID_MAX + 1, 0, "must be 1..128 bytes"},
        {1, 1, 0, 0, "must be 1..128 bytes"},
        {1, 1, 1, 4, "state 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_buf b = one_slot(bad[i].format, bad[i].slots, id, bad[i].id_len, bad[i].state);
        assert_refused(b.p, b.len, bad[i].want);
        cr_buf_free(&b);
    }
    /* over the bound with the bytes to hold it: still refused by count */
    cr_buf b = one_slot(1, CR_ENDPOINTS_MAX + 1, id, 1, 0);
    uint8_t slot[64]; /* a copy: the buffer moves as it grows */
    size_t slot_len = b.len - 16;
    memcpy(slot, b.p + 16, slot_len);
    for (int i = 0; i < CR_ENDPOINTS_MAX; i++)
        cr_buf_put(&b, slot, slot_len);
    assert_refused(b.p, b.len, "got 1025");
    cr_buf_free(&b);
    /* a set with neither is written as version 1, which older replicas read */
    cr_endpoints *plain = every_state(1000);
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_encode(plain, 1000, &blob, &len, &err), CR_OK);
    CU_ASSERT(blob[0] == 1 && blob[1] == 0 && blob[2] == 0 && blob[3] == 0);
    free(blob);
    cr_endpoints_release(plain);
    /* a version-1 blob reads: no KV-event address, nothing stated */
    b = one_slot(1, 1, "a", 1, 0);
    cr_endpoint *old;
    uint32_t n_old;
    uint64_t v_old;
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_decode(b.p, b.len, 0, &old, &n_old, &v_old, &err),
                          CR_OK);
    CU_ASSERT(n_old == 1 && old[0].kv_events[0] == 0 && old[0].by_source == 0);
    free(old);
    cr_buf_free(&b);
    /* decodable, but a slot the set refuses: adopting it changes nothing */
    b = one_slot(1, 1, "bad\tid", 6, 0);
    cr_endpoint *v;
    uint32_t n;
    uint64_t version;
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_decode(b.p, b.len, 0, &v, &n, &version, &err), CR_OK);
    fixture f;
    open_core(&f, 0);
    CU_ASSERT_EQUAL(cr_core_adopt_endpoints(f.core, v, n, version, NULL, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "slot[0].id must be 1..128 bytes of printable"));
    CU_ASSERT_PTR_NULL(cr_core_endpoints(f.core));
    free(v);
    cr_buf_free(&b);
    cr_core_free(f.core);
}

static void test_forward_blob(void)
{
    cr_endpoint_spec v[] = {{.id = "a", .address = "a:1", .weight = 1,
                             .kv_events = "tcp://a:5557"},
                            {.id = "b", .address = "b:2", .weight = 0, .stated = 1,
                             .state = CR_ENDPOINT_DRAINING}};
    cr_forward set = {CR_FORWARD_SET, "r1", NULL, v, 2}, drain = {CR_FORWARD_DRAIN, "r2", "b", NULL, 0};
    uint8_t *blob;
    size_t len;
    cr_forward *got;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replica_forward_encode(&set, &blob, &len, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_replica_forward_decode(blob, len, &got, &err), CR_OK);
    CU_ASSERT(got->kind == CR_FORWARD_SET && got->n == 2 && !strcmp(got->from, "r1"));
    CU_ASSERT(!strcmp(got->specs[1].id, "b") && !strcmp(got->specs[1].address, "b:2") &&
              got->specs[0].weight == 1);
    CU_ASSERT(!strcmp(got->specs[0].kv_events, "tcp://a:5557") && !got->specs[0].stated);
    CU_ASSERT(!strcmp(got->specs[1].kv_events, "") && got->specs[1].stated == 1 &&
              got->specs[1].state == CR_ENDPOINT_DRAINING);
    free(got);
    CU_ASSERT_EQUAL(blob[0], 2);
    blob[len - 1] = 7; /* b's stated state */
    CU_ASSERT_EQUAL(cr_replica_forward_decode(blob, len, &got, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "stated 1, state 7"));
    blob[len - 1] = CR_ENDPOINT_DRAINING;
    for (size_t k = 0; k < len; k++) {
        CU_ASSERT_EQUAL(cr_replica_forward_decode(blob, k, &got, &err), CR_EINVAL);
        CU_ASSERT_PTR_NULL(got);
    }
    blob[4] = 9; /* the kind */
    CU_ASSERT_EQUAL(cr_replica_forward_decode(blob, len, &got, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "kind must be 1..3, got 9"));
    free(blob);
    CU_ASSERT_EQUAL_FATAL(cr_replica_forward_encode(&drain, &blob, &len, &err), CR_OK);
    CU_ASSERT_EQUAL(blob[0], 1); /* nothing of version 2's in it */
    CU_ASSERT_EQUAL_FATAL(cr_replica_forward_decode(blob, len, &got, &err), CR_OK);
    CU_ASSERT(got->kind == CR_FORWARD_DRAIN && !strcmp(got->id, "b") && !strcmp(got->from, "r2"));
    free(got);
    free(blob);
}

/* ---- adoption ---- */

static void test_follower_adopts_same_slots(void)
{
    fixture l, f;
    cr_error err;
    open_core(&l, 5000);
    open_core(&f, 10);
    leader_history(&l);
    /* the follower's own history would number d otherwise: slot 3 */
    const char *abc[] = {"a", "b", "c"}, *acd[] = {"a", "c", "d"};
    CU_ASSERT_EQUAL(set_ids(&f, abc, 3, NULL), CR_OK);
    CU_ASSERT_EQUAL(set_ids(&f, acd, 3, NULL), CR_OK);
    const cr_endpoints *mine = cr_core_endpoints(f.core);
    CU_ASSERT_EQUAL(cr_endpoints_find(mine, "d"), 3);
    cr_endpoints_release(mine);
    cr_error unused;
    CU_ASSERT_EQUAL(cr_core_follow_endpoints(f.core, 1, NULL, &unused), CR_OK);
    f.t += 3;
    CU_ASSERT_EQUAL(hand_over(&l, &f, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(f.last_by, "leader");
    assert_same_sets(&l, &f);
    const cr_endpoints *now = cr_core_endpoints(f.core);
    CU_ASSERT_EQUAL(cr_endpoints_find(now, "d"), 1);
    CU_ASSERT_EQUAL(now->slot[2].state, CR_ENDPOINT_DRAINING);
    cr_endpoints_release(now);
    cr_core_free(l.core);
    cr_core_free(f.core);
}

/* Adopts e (encoded at its now, 1000) into f under version. */
static cr_status adopt_as(fixture *f, const cr_endpoints *e, uint64_t version, cr_error *err)
{
    uint8_t *blob;
    size_t len;
    cr_endpoint *slots;
    uint32_t n;
    uint64_t v;
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_encode(e, 1000, &blob, &len, err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_replica_members_decode(blob, len, f->t, &slots, &n, &v, err), CR_OK);
    free(blob);
    cr_status st = cr_core_adopt_endpoints(f->core, slots, n, version, NULL, err);
    free(slots);
    return st;
}

static void test_older_version_not_installed(void)
{
    fixture f;
    cr_error err;
    open_core(&f, 100);
    cr_endpoints *e = every_state(1000);
    CU_ASSERT_EQUAL(adopt_as(&f, e, 5, &err), CR_OK);
    int reports = f.reports;
    CU_ASSERT_EQUAL(adopt_as(&f, e, 4, &err), CR_ESTATE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "version 4 does not move forward from the adopted 5"));
    CU_ASSERT_EQUAL(adopt_as(&f, e, 5, &err), CR_ESTATE);
    CU_ASSERT_EQUAL(f.reports, reports);
    const cr_endpoints *now = cr_core_endpoints(f.core);
    CU_ASSERT_EQUAL(now->version, 5);
    cr_endpoints_release(now);
    CU_ASSERT_EQUAL(adopt_as(&f, e, 6, &err), CR_OK);
    now = cr_core_endpoints(f.core);
    CU_ASSERT_EQUAL(now->version, 6);
    cr_endpoints_release(now);
    cr_endpoints_release(e);
    cr_core_free(f.core);
}

/* While following: calls are checked as ever, kept, and change nothing;
 * the DOWN endpoint's retry is the leader's; taking the lead applies the
 * follower's own set onto the adopted one, slots kept. */
static void test_follower_keeps_its_own_until_it_leads(void)
{
    fixture f;
    cr_error err;
    cr_core_members_event ev;
    open_core(&f, 100);
    CU_ASSERT_EQUAL(cr_core_follow_endpoints(f.core, 1, NULL, &err), CR_OK);
    cr_endpoints *e = every_state(1000); /* a, b draining, c down for 30 s, d gone */
    CU_ASSERT_EQUAL_FATAL(adopt_as(&f, e, 9, &err), CR_OK);
    cr_endpoints_release(e);
    const char *bad[] = {"a", "a"}, *mine[] = {"c", "a", "x"};
    CU_ASSERT_EQUAL(set_ids(&f, bad, 2, &ev), CR_EINVAL);
    CU_ASSERT_EQUAL(cr_core_drain_endpoint(f.core, "nope", 1, &ev, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "endpoint \"nope\" is not in the set"));
    int reports = f.reports;
    CU_ASSERT_EQUAL(set_ids(&f, mine, 3, &ev), CR_OK);
    CU_ASSERT(ev.followed && ev.version == 9 && ev.change.joined == 0);
    CU_ASSERT_EQUAL(cr_core_drain_endpoint(f.core, "a", 1, &ev, &err), CR_OK);
    CU_ASSERT(ev.followed && ev.version == 9);
    CU_ASSERT_EQUAL(f.reports, reports);
    f.t += 60; /* c's retry is due, but the leader's to make */
    const cr_endpoints *now = cr_core_endpoints(f.core);
    CU_ASSERT_EQUAL(now->version, 9);
    CU_ASSERT_EQUAL(now->slot[0].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(now->slot[2].state, CR_ENDPOINT_DOWN);
    cr_endpoints_release(now);
    /* leading: its own set (c, a, x) onto the adopted one */
    CU_ASSERT_EQUAL(cr_core_follow_endpoints(f.core, 0, &ev, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(f.last_by, "lead");
    now = cr_core_endpoints(f.core); /* and c's retry now runs here */
    CU_ASSERT_EQUAL(now->version, 11);
    CU_ASSERT_STRING_EQUAL(now->slot[0].id, "a");
    CU_ASSERT_EQUAL(now->slot[1].state, CR_ENDPOINT_GONE); /* b: not in its own set */
    CU_ASSERT_STRING_EQUAL(now->slot[2].id, "c");
    CU_ASSERT_EQUAL(now->slot[2].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_EQUAL(cr_endpoints_find(now, "x"), 3); /* d's, out of quarantine */
    cr_endpoints_release(now);
    cr_core_free(f.core);
}

static const cr_test_case tests[] = {
    {"endpoint set blob round-trips", test_members_blob},
    {"stated states and KV-event addresses travel", test_members_stated_and_kv_events},
    {"bad endpoint set blobs are refused whole", test_members_bad_blobs},
    {"forwarded calls round-trip, bad ones refused", test_forward_blob},
    {"a follower adopts the leader's slots and states", test_follower_adopts_same_slots},
    {"an older version is not installed", test_older_version_not_installed},
    {"a follower keeps its own set until it leads", test_follower_keeps_its_own_until_it_leads},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"replica members", tests}};

CR_TEST_MAIN(suites)
