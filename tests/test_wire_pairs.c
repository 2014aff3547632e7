/* cr_wire_split_pairs and cr_wire_split_varints (wire/pairs.c), and
 * cr_wire_route_request (wire/route_request.c), against protobuf-c itself:
 * on hand-made and seeded random PlanRequest, RecordArrivalRequest and
 * RouteRequest encodings, well-formed and mangled, whatever they accept
 * protobuf-c must accept with the same rates, owners or items, and the
 * rest a split leaves must unpack (and string-check) as the whole; what
 * the route decoder accepts must pass the string check too. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cunit_main.h"
#include "wire.h"

typedef Cacheroute__V1__PlanRequest PlanRequest;
typedef struct pair {
    int64_t owner;
    double rate;
} pair;

static const ProtobufCMessageDescriptor *const PLAN = &cacheroute__v1__plan_request__descriptor;

typedef struct enc {
    uint8_t b[1 << 12];
    size_t n;
} enc;

static void byte(enc *e, unsigned v)
{
    if (e->n < sizeof e->b)
        e->b[e->n++] = (uint8_t)v;
}

/* v as a varint of at least pad bytes (non-canonical zeros past its end). */
static void varint(enc *e, uint64_t v, unsigned pad)
{
    unsigned i = 0;
    while (v > 0x7f || i + 1 < pad) {
        byte(e, (unsigned)(v & 0x7f) | 0x80);
        v >>= 7;
        i++;
    }
    byte(e, (unsigned)v);
}

static void key(enc *e, uint32_t number, unsigned type)
{
    varint(e, (uint64_t)number << 3 | type, 1);
}

static void fixed64(enc *e, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        byte(e, (unsigned)(v >> (8 * i)) & 0xff);
}

static void nested(enc *e, uint32_t number, const enc *sub)
{
    key(e, number, 2);
    varint(e, sub->n, 1);
    for (size_t i = 0; i < sub->n; i++)
        byte(e, sub->b[i]);
}

/* The end of a comparison: frees what it made (r and whole may be NULL);
 * split's answer, 0 only when protobuf-c takes the rest it left too. */
static int compared(int rc, ProtobufCMessage *r, ProtobufCMessage *whole, void *rest, void *got)
{
    if (r)
        protobuf_c_message_free_unpacked(r, NULL);
    if (whole)
        protobuf_c_message_free_unpacked(whole, NULL);
    free(rest);
    free(got);
    return rc == 0 && r ? 0 : -1;
}

/* The comparison. Returns split's answer, 0 only when protobuf-c takes
 * the rest it left too. */
static int compare(const uint8_t *b, size_t n)
{
    size_t max = cr_wire_count(PLAN, b, n, "rates");
    pair *got = calloc(max + 1, sizeof *got);
    uint8_t *rest = malloc(n + 1);
    size_t rest_len = 0;
    cr_wire_pairs out = {.base = got, .max = max, .stride = sizeof *got,
                         .key_at = offsetof(pair, owner), .value_at = offsetof(pair, rate)};
    int rc = cr_wire_split_pairs(b, n, 2, &out, rest, &rest_len);
    PlanRequest *whole = (PlanRequest *)protobuf_c_message_unpack(PLAN, NULL, n, b);
    /* The rest refused (a field split left there is bad): the whole is too. */
    PlanRequest *r = rc == 0 ? (PlanRequest *)protobuf_c_message_unpack(PLAN, NULL, rest_len, rest)
                             : NULL;
    if (rc == 0)
        CU_ASSERT_EQUAL(!r, !whole);
    if (whole) /* the count the handler refuses by, and sizes out by */
        CU_ASSERT_EQUAL(max, whole->n_rates);
    if (r && whole) {
        CU_ASSERT_EQUAL(out.n, whole->n_rates);
        for (size_t i = 0; i < out.n && i < whole->n_rates; i++) {
            CU_ASSERT_EQUAL(got[i].owner, whole->rates[i]->owner);
            CU_ASSERT(memcmp(&got[i].rate, &whole->rates[i]->rate, sizeof(double)) == 0);
        }
        CU_ASSERT_EQUAL(r->n_rates, 0);
        CU_ASSERT_EQUAL(r->from_estimator, whole->from_estimator);
        CU_ASSERT_EQUAL(r->install, whole->install);
        CU_ASSERT_EQUAL(!r->config, !whole->config);
        if (r->config && whole->config) {
            size_t a = protobuf_c_message_get_packed_size(&r->config->base);
            size_t w = protobuf_c_message_get_packed_size(&whole->config->base);
            uint8_t pa[64], pw[64];
            CU_ASSERT_FATAL(a == w && a <= sizeof pa);
            protobuf_c_message_pack(&r->config->base, pa);
            protobuf_c_message_pack(&whole->config->base, pw);
            CU_ASSERT(memcmp(pa, pw, a) == 0);
        }
        cr_error ew = {""}, er = {""};
        CU_ASSERT_EQUAL(cr_wire_check_strings(PLAN, b, n, &ew),
                        cr_wire_check_strings(PLAN, rest, rest_len, &er));
        CU_ASSERT_STRING_EQUAL(ew.msg, er.msg);
    }
    return compared(rc, (ProtobufCMessage *)r, (ProtobufCMessage *)whole, rest, got);
}

/* Whether protobuf-c takes e as a d message. */
static int unpacks(const ProtobufCMessageDescriptor *d, const enc *e)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, e->n, e->b);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return m != NULL;
}

static int whole_ok(const enc *e) { return unpacks(PLAN, e); }

/* ---- hand-made ---- */

static void rate_entry(enc *e, const enc *sub)
{
    nested(e, 2, sub);
}

static void test_last_wins_unknown_skipped(void)
{
    enc s = {.n = 0}, e = {.n = 0};
    key(&s, 1, 0);
    varint(&s, 5, 1);
    key(&s, 9, 5); /* unknown, 32-bit */
    fixed64(&s, 0); /* 8 bytes: a 32-bit value and the next key's 4 */
    s.n -= 4;
    key(&s, 1, 0);
    varint(&s, (uint64_t)-7, 1); /* negative: 10 bytes */
    key(&s, 2, 1);
    fixed64(&s, 0x3ff0000000000000u); /* 1.0 */
    key(&s, 2, 1);
    fixed64(&s, 0x4000000000000000u); /* 2.0 wins */
    key(&s, 7, 2);
    varint(&s, 0, 1);
    rate_entry(&e, &s);
    enc empty = {.n = 0};
    rate_entry(&e, &empty); /* owner 0, rate 0 */
    key(&e, 3, 0);
    varint(&e, 1, 3); /* from_estimator, non-canonical */
    CU_ASSERT_EQUAL(compare(e.b, e.n), 0);
    pair p[2];
    uint8_t rest[sizeof e.b];
    size_t rl;
    cr_wire_pairs out = {p, 2, sizeof *p, offsetof(pair, owner), offsetof(pair, rate), 0};
    CU_ASSERT_EQUAL_FATAL(cr_wire_split_pairs(e.b, e.n, 2, &out, rest, &rl), 0);
    CU_ASSERT_EQUAL(out.n, 2);
    CU_ASSERT_EQUAL(p[0].owner, -7);
    CU_ASSERT_EQUAL(p[0].rate, 2.0);
    CU_ASSERT_EQUAL(p[1].owner, 0);
    CU_ASSERT_EQUAL(rl, 4);
}

/* An encoding split must be unsure of, and why. */
typedef struct unsure_case {
    const char *why;
    uint8_t b[16];
    size_t n;
} unsure_case;

static void check_unsure(const unsure_case *cases, size_t n, int (*cmp)(const uint8_t *, size_t))
{
    for (size_t i = 0; i < n; i++) {
        int rc = cmp(cases[i].b, cases[i].n);
        if (rc == 0)
            fprintf(stderr, "split took \"%s\"\n", cases[i].why);
        CU_ASSERT_EQUAL(rc, -1);
    }
}

/* Each of these protobuf-c refuses, or cr_wire_check_strings does: split
 * must be unsure of it. */
static void test_unsure(void)
{
    static const unsure_case cases[] = {
        {"owner as 64-bit", {0x12, 0x09, 0x09, 1, 2, 3, 4, 5, 6, 7, 8}, 11},
        {"rate as varint", {0x12, 0x02, 0x10, 0x01}, 4},
        {"owner packed", {0x12, 0x03, 0x0a, 0x01, 0x01}, 5},
        {"truncated rate", {0x12, 0x05, 0x11, 0, 0, 0, 0}, 7},
        {"entry past the end", {0x12, 0x05, 0x08, 0x01}, 4},
        {"11-byte owner", {0x12, 0x0c, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                           0xff, 0xff, 0x01}, 14},
        {"field 0, one byte", {0x12, 0x02, 0x00, 0x01}, 4},
        {"field 0, two bytes", {0x12, 0x03, 0x80, 0x00, 0x01}, 5},
        {"group in an entry", {0x12, 0x02, 0x1b, 0x1c}, 4},
        {"6-byte key", {0x12, 0x07, 0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01}, 9},
        {"6-byte length", {0x12, 0x86, 0x80, 0x80, 0x80, 0x80, 0x00}, 7},
        {"truncated top key", {0x80}, 1},
        {"wire type 7", {0x0f}, 1},
    };
    check_unsure(cases, sizeof cases / sizeof cases[0], compare);
    /* rates with another wire type: the rest has it, and protobuf-c refuses
     * the rest as it does the whole. */
    uint8_t varint_rates[] = {0x10, 0x01};
    enc e = {.n = 0};
    memcpy(e.b, varint_rates, sizeof varint_rates);
    e.n = sizeof varint_rates;
    CU_ASSERT_FALSE(whole_ok(&e));
    CU_ASSERT_EQUAL(compare(e.b, e.n), -1);
}

static void test_over_max_unsure(void)
{
    uint8_t b[] = {0x12, 0x00, 0x12, 0x00};
    pair p[1];
    uint8_t rest[4];
    size_t rl;
    cr_wire_pairs out = {p, 1, sizeof *p, offsetof(pair, owner), offsetof(pair, rate), 0};
    CU_ASSERT_EQUAL(cr_wire_split_pairs(b, sizeof b, 2, &out, rest, &rl), -1);
}

/* The layout split_rates decodes PlanRequest.rates by, at the number wire.h names. */
static void test_descriptor_agrees(void)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(PLAN, "rates");
    CU_ASSERT_FATAL(f && f->id == CR_WIRE_PLAN_RATES_FIELD &&
                    f->type == PROTOBUF_C_TYPE_MESSAGE && f->label == PROTOBUF_C_LABEL_REPEATED);
    const ProtobufCMessageDescriptor *r = f->descriptor;
    CU_ASSERT_EQUAL_FATAL(r->n_fields, 2);
    CU_ASSERT(r->fields[0].id == 1 && r->fields[0].type == PROTOBUF_C_TYPE_INT64);
    CU_ASSERT(r->fields[1].id == 2 && r->fields[1].type == PROTOBUF_C_TYPE_DOUBLE);
}

/* ---- random ---- */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void random_value(enc *e, unsigned type)
{
    switch (type) {
    case 0:
        varint(e, next() >> (next() % 64), 1 + (unsigned)(next() % 3));
        break;
    case 1:
        fixed64(e, next());
        break;
    case 5:
        fixed64(e, next());
        e->n -= 4;
        break;
    default: {
        enc s = {.n = (size_t)(next() % 6)};
        memset(s.b, 'a', s.n);
        varint(e, s.n, 1);
        for (size_t i = 0; i < s.n; i++)
            byte(e, s.b[i]);
    }
    }
}

static void random_entry(enc *e)
{
    static const unsigned types[] = {0, 1, 2, 5};
    enc s = {.n = 0};
    for (int k = (int)(next() % 5); k > 0; k--) {
        unsigned pick = (unsigned)(next() % 8);
        uint32_t number = pick < 3 ? 1 : pick < 6 ? 2 : 3 + (uint32_t)(next() % 2000);
        unsigned type = number == 1 ? 0 : number == 2 ? 1 : types[next() % 4];
        key(&s, number, type);
        random_value(&s, type);
    }
    rate_entry(e, &s);
}

static void random_request(enc *e)
{
    e->n = 0;
    for (int k = (int)(next() % 12); k > 0; k--) {
        unsigned pick = (unsigned)(next() % 10);
        if (pick < 6) {
            random_entry(e);
        } else if (pick == 6) {
            enc c = {.n = 0};
            key(&c, 1, 0);
            varint(&c, next() % 100, 1);
            key(&c, 2, 1);
            fixed64(&c, next());
            nested(e, 1, &c);
        } else if (pick < 9) {
            key(e, 3 + (uint32_t)(next() % 2), 0);
            varint(e, next() % 3, 1);
        } else {
            key(e, 5 + (uint32_t)(next() % 100), 0);
            random_value(e, 0);
        }
    }
}

static void mangle(enc *e)
{
    switch (next() % 4) {
    case 0:
        if (e->n)
            e->b[next() % e->n] ^= (uint8_t)(1u << (next() % 8));
        break;
    case 1:
        if (e->n)
            e->n = (size_t)(next() % e->n);
        break;
    case 2:
        if (e->n)
            e->b[next() % e->n] = (uint8_t)next();
        break;
    default:
        for (int k = (int)(next() % 4); k >= 0; k--)
            byte(e, (unsigned)next() & 0xff);
    }
}

static void test_random_well_formed(void)
{
    enc e;
    for (int i = 0; i < 20000; i++) {
        random_request(&e);
        CU_ASSERT_TRUE_FATAL(whole_ok(&e));
        CU_ASSERT_EQUAL(compare(e.b, e.n), 0); /* no needless trip to protobuf-c */
    }
}

static void test_random_mangled(void)
{
    enc e;
    size_t taken = 0, refused = 0;
    for (int i = 0; i < 50000; i++) {
        random_request(&e);
        for (int k = (int)(next() % 3); k >= 0; k--)
            mangle(&e);
        int ok = whole_ok(&e);
        taken += compare(e.b, e.n) == 0;
        refused += !ok;
    }
    /* Both kinds occur, so both sides of the comparison ran. */
    CU_ASSERT(taken > 1000 && refused > 1000);
}

/* 50,000 random byte strings through cmp, half of them starting with
 * first (the split field's key). */
static void garbage(uint8_t first, int (*cmp)(const uint8_t *, size_t))
{
    uint8_t b[64];
    for (int i = 0; i < 50000; i++) {
        size_t n = (size_t)(next() % sizeof b);
        for (size_t k = 0; k < n; k++)
            b[k] = (uint8_t)next();
        if (n && next() % 2)
            b[0] = first;
        cmp(b, n);
    }
}

static void test_garbage(void) { garbage(0x12, compare); /* a rates entry */ }

/* Requests of entries in the shape every encoder writes (owner, then rate;
 * what cr_wire_split_pairs reads in runs), owners of every width from 1 to
 * 10 bytes, canonical or padded, now and then a config between them. */
static void usual_request(enc *e)
{
    e->n = 0;
    for (int k = (int)(next() % 9); k > 0; k--) {
        enc s = {.n = 0};
        key(&s, 1, 0);
        varint(&s, next() >> (next() % 64), 1 + (unsigned)(next() % 10));
        key(&s, 2, 1);
        fixed64(&s, next());
        rate_entry(e, &s);
        if (next() % 8 == 0) {
            key(e, 3, 0);
            varint(e, next() % 2, 1);
        }
    }
}

static void test_usual_shape(void)
{
    enc e;
    size_t taken = 0, refused = 0;
    for (int i = 0; i < 20000; i++) {
        usual_request(&e);
        CU_ASSERT_TRUE_FATAL(whole_ok(&e));
        CU_ASSERT_EQUAL(compare(e.b, e.n), 0);
    }
    /* One flipped or replaced byte: a continuation bit, the width, the
     * length, a key; protobuf-c's answer must still be split's. */
    for (int i = 0; i < 50000; i++) {
        usual_request(&e);
        mangle(&e);
        taken += compare(e.b, e.n) == 0;
        refused += !whole_ok(&e);
    }
    CU_ASSERT(taken > 1000 && refused > 1000);
}

/* ---- RecordArrivalRequest.owners: cr_wire_split_varints ---- */

typedef Cacheroute__V1__RecordArrivalRequest RecordArrivalRequest;
static const ProtobufCMessageDescriptor *const RECORD =
    &cacheroute__v1__record_arrival_request__descriptor;

/* As compare, for the owners. */
static int compare_varints(const uint8_t *b, size_t n)
{
    size_t max = cr_wire_count(RECORD, b, n, "owners");
    int64_t *got = calloc(max + 1, sizeof *got);
    uint8_t *rest = malloc(n + 1);
    size_t rest_len = 0;
    cr_wire_varints out = {got, max, 0};
    int rc = cr_wire_split_varints(b, n, 1, &out, rest, &rest_len);
    RecordArrivalRequest *whole =
        (RecordArrivalRequest *)protobuf_c_message_unpack(RECORD, NULL, n, b);
    RecordArrivalRequest *r =
        rc == 0 ? (RecordArrivalRequest *)protobuf_c_message_unpack(RECORD, NULL, rest_len, rest)
                : NULL;
    if (rc == 0)
        CU_ASSERT_EQUAL(!r, !whole);
    if (whole)
        CU_ASSERT_EQUAL(max, whole->n_owners);
    if (r && whole) {
        CU_ASSERT_EQUAL(out.n, whole->n_owners);
        CU_ASSERT(out.n != whole->n_owners || out.n == 0 ||
                  memcmp(got, whole->owners, out.n * sizeof *got) == 0);
        CU_ASSERT_EQUAL(r->n_owners, 0);
        CU_ASSERT_EQUAL(r->omit_routes, whole->omit_routes);
        CU_ASSERT_EQUAL_FATAL(r->n_weights, whole->n_weights);
        CU_ASSERT(r->n_weights == 0 ||
                  memcmp(r->weights, whole->weights, r->n_weights * sizeof(double)) == 0);
    }
    return compared(rc, (ProtobufCMessage *)r, (ProtobufCMessage *)whole, rest, got);
}

static int record_ok(const enc *e) { return unpacks(RECORD, e); }

static void test_varints_forms(void)
{
    enc e = {.n = 0}, packed = {.n = 0};
    varint(&packed, 5, 1);
    varint(&packed, (uint64_t)-7, 1); /* 10 bytes */
    varint(&packed, 3, 4);            /* non-canonical */
    nested(&e, 1, &packed);
    key(&e, 1, 0); /* one unpacked */
    varint(&e, 9, 1);
    key(&e, 2, 0); /* omit_routes */
    varint(&e, 1, 1);
    enc none = {.n = 0};
    nested(&e, 1, &none); /* an empty packed run */
    CU_ASSERT_EQUAL(compare_varints(e.b, e.n), 0);
    int64_t v[4];
    uint8_t rest[sizeof e.b];
    size_t rl;
    cr_wire_varints out = {v, 4, 0};
    CU_ASSERT_EQUAL_FATAL(cr_wire_split_varints(e.b, e.n, 1, &out, rest, &rl), 0);
    CU_ASSERT_EQUAL_FATAL(out.n, 4);
    CU_ASSERT(v[0] == 5 && v[1] == -7 && v[2] == 3 && v[3] == 9);
    CU_ASSERT_EQUAL(rl, 2);
    out = (cr_wire_varints){v, 3, 0};
    CU_ASSERT_EQUAL(cr_wire_split_varints(e.b, e.n, 1, &out, rest, &rl), -1); /* over max */
}

static void test_varints_unsure(void)
{
    static const unsure_case cases[] = {
        {"packed ends inside a varint", {0x0a, 0x02, 0x01, 0x81}, 4},
        {"11-byte packed value", {0x0a, 0x0b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0x01}, 13},
        {"11-byte unpacked value", {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                    0xff, 0x01}, 12},
        {"packed past the end", {0x0a, 0x05, 0x01}, 3},
        {"owners as 64-bit", {0x09, 1, 2, 3, 4, 5, 6, 7, 8}, 9},
        {"owners as 32-bit", {0x0d, 1, 2, 3, 4}, 5},
        {"truncated key", {0x80}, 1},
        {"group", {0x0b, 0x0c}, 2},
    };
    check_unsure(cases, sizeof cases / sizeof cases[0], compare_varints);
}

static void test_varints_descriptor_agrees(void)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(RECORD, "owners");
    CU_ASSERT_FATAL(f && f->id == CR_WIRE_RECORD_OWNERS_FIELD &&
                    f->type == PROTOBUF_C_TYPE_INT64 && f->label == PROTOBUF_C_LABEL_REPEATED);
}

static void random_record(enc *e)
{
    e->n = 0;
    for (int k = (int)(next() % 8); k > 0; k--) {
        unsigned pick = (unsigned)(next() % 10);
        if (pick < 4) { /* a packed run of owners */
            enc s = {.n = 0};
            for (int j = (int)(next() % 6); j > 0; j--)
                varint(&s, next() >> (next() % 64), 1 + (unsigned)(next() % 3));
            nested(e, 1, &s);
        } else if (pick < 6) {
            key(e, 1, 0);
            random_value(e, 0);
        } else if (pick == 6) {
            key(e, 2, 0);
            varint(e, next() % 3, 1);
        } else if (pick == 7) { /* weights, packed */
            enc s = {.n = 0};
            for (int j = (int)(next() % 3); j > 0; j--)
                fixed64(&s, next());
            nested(e, 3, &s);
        } else if (pick == 8) {
            key(e, 3, 1);
            fixed64(e, next());
        } else {
            static const unsigned types[] = {0, 1, 2, 5};
            unsigned type = types[next() % 4];
            key(e, 4 + (uint32_t)(next() % 100), type);
            random_value(e, type);
        }
    }
}

static void test_varints_random(void)
{
    enc e;
    size_t taken = 0, refused = 0;
    for (int i = 0; i < 20000; i++) {
        random_record(&e);
        CU_ASSERT_TRUE_FATAL(record_ok(&e));
        CU_ASSERT_EQUAL(compare_varints(e.b, e.n), 0);
    }
    for (int i = 0; i < 50000; i++) {
        random_record(&e);
        for (int k = (int)(next() % 3); k >= 0; k--)
            mangle(&e);
        taken += compare_varints(e.b, e.n) == 0;
        refused += !record_ok(&e);
    }
    CU_ASSERT(taken > 1000 && refused > 1000);
    garbage(0x0a, compare_varints); /* packed owners */
}

/* ---- RouteRequest: cr_wire_route_request ---- */

typedef Cacheroute__V1__RouteRequest RouteRequest;
typedef Cacheroute__V1__RouteItem RouteItem;
static const ProtobufCMessageDescriptor *const ROUTE = &cacheroute__v1__route_request__descriptor;

/* Whether w holds what protobuf-c decoded into m. */
static int same_text(const char *w, size_t len, const char *m)
{
    return !w == !m && (!w || (len == strlen(m) && memcmp(w, m, len) == 0));
}

/* The objective fields, a NaN's bits too. */
static int same_objective(const cr_route_request *w, const RouteItem *m)
{
    return same_text(w->objective, w->objective_len, m->objective) &&
           same_text(w->fairness, w->fairness_len, m->fairness_id) &&
           w->has_priority == m->has_priority && w->priority == m->priority &&
           memcmp(&w->slo_ttft_ms, &m->ttft_slo_ms, sizeof(double)) == 0;
}

static int same_item(const cr_route_request *w, const RouteItem *m)
{
    return w->has_owner == m->has_owner && w->owner == m->owner &&
           w->has_prompt_tokens == m->has_prompt_tokens &&
           w->prompt_tokens == m->prompt_tokens && w->n_hashes == m->n_block_hashes &&
           (!w->n_hashes || memcmp(w->hashes, m->block_hashes, w->n_hashes * 8) == 0) &&
           same_text(w->space, w->space_len, m->namespace_) &&
           same_text(w->request_id, w->request_id ? strlen(w->request_id) : 0, m->request_id) &&
           same_objective(w, m);
}

/* The comparison: the decoder's answer, 0 only when protobuf-c takes the
 * whole with the same items and the string check passes it. */
static int compare_route(const uint8_t *b, size_t n)
{
    size_t max = cr_wire_count(ROUTE, b, n, "requests");
    size_t max_hashes = cr_wire_route_hashes_bound(b, n);
    cr_wire_route_out out = {.items = calloc(max + 1, sizeof *out.items), .max_items = max,
                             .hashes = calloc(max_hashes + 1, sizeof *out.hashes),
                             .max_hashes = max_hashes, .text = malloc(n + 1), .text_cap = n};
    int rc = cr_wire_route_request(b, n, &out);
    RouteRequest *whole = (RouteRequest *)protobuf_c_message_unpack(ROUTE, NULL, n, b);
    size_t hashes = 0;
    for (size_t i = 0; whole && i < whole->n_requests; i++)
        hashes += whole->requests[i]->n_block_hashes;
    size_t sized_hashes, sized = cr_wire_route_size(b, n, &sized_hashes);
    CU_ASSERT(sized == max && sized_hashes <= max_hashes);
    if (whole) /* the counts the handler sizes its arrays by */
        CU_ASSERT(max == whole->n_requests && hashes <= max_hashes && hashes <= sized_hashes);
    if (rc == 0) {
        cr_error err = {""};
        CU_ASSERT_FATAL(whole != NULL);
        CU_ASSERT_EQUAL(cr_wire_check_strings(ROUTE, b, n, &err), 0);
        CU_ASSERT_EQUAL_FATAL(out.n_items, whole->n_requests);
        CU_ASSERT(out.n_hashes == hashes && out.text_used <= n);
        for (size_t i = 0; i < out.n_items; i++)
            CU_ASSERT(same_item(&out.items[i], whole->requests[i]));
    }
    if (whole)
        protobuf_c_message_free_unpacked(&whole->base, NULL);
    free(out.items);
    free(out.hashes);
    free(out.text);
    return rc;
}

static int route_ok(const enc *e) { return unpacks(ROUTE, e); }

static void test_route_forms(void)
{
    enc item = {.n = 0}, packed = {.n = 0}, e = {.n = 0};
    key(&item, 1, 0);
    varint(&item, 3, 1);
    key(&item, 1, 0);
    varint(&item, (uint64_t)-5, 1); /* the last owner wins: 10 bytes */
    key(&item, 2, 0);
    varint(&item, (1ull << 32) + 7, 1); /* prompt_tokens: its low 32 bits */
    varint(&packed, 1, 1);
    varint(&packed, UINT64_MAX, 1);
    varint(&packed, 2, 3); /* non-canonical */
    nested(&item, 3, &packed);
    key(&item, 3, 0); /* one unpacked */
    varint(&item, 9, 1);
    const char *ns = "model-\xc3\xa9";
    key(&item, 4, 2);
    varint(&item, 1, 1);
    byte(&item, 'x'); /* replaced by the next namespace */
    key(&item, 4, 2);
    varint(&item, strlen(ns), 5); /* a 5-byte length */
    for (const char *c = ns; *c; c++)
        byte(&item, (uint8_t)*c);
    key(&item, 5, 2); /* request_id "" */
    varint(&item, 0, 1);
    key(&item, 6, 2); /* objective "batch" */
    varint(&item, 5, 1);
    for (const char *c = "batch"; *c; c++)
        byte(&item, (uint8_t)*c);
    key(&item, 7, 0);
    varint(&item, (uint64_t)-1, 1); /* priority -1: ten bytes */
    key(&item, 7, 0);
    varint(&item, (1ull << 32) - 3, 1); /* the last wins, its low 32 bits: -3 */
    key(&item, 8, 1);
    double slo = 2000.5;
    uint64_t slo_bits;
    memcpy(&slo_bits, &slo, sizeof slo);
    fixed64(&item, slo_bits);
    key(&item, 9, 2); /* fairness_id "t1" */
    varint(&item, 2, 1);
    byte(&item, 't');
    byte(&item, '1');
    key(&item, 1u << 28, 5); /* unknown, a 5-byte key */
    fixed64(&item, 0);
    item.n -= 4;
    nested(&e, 1, &item);
    enc empty = {.n = 0};
    nested(&e, 1, &empty);
    key(&e, 7, 2); /* unknown, top level */
    varint(&e, 0, 1);
    CU_ASSERT_EQUAL_FATAL(compare_route(e.b, e.n), 0);
    cr_route_request it[2];
    uint64_t h[64];
    char text[sizeof e.b];
    cr_wire_route_out out = {it, 2, h, 64, text, e.n, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(cr_wire_route_request(e.b, e.n, &out), 0);
    CU_ASSERT_EQUAL_FATAL(out.n_items, 2);
    CU_ASSERT(it[0].has_owner && it[0].owner == -5);
    CU_ASSERT(it[0].has_prompt_tokens && it[0].prompt_tokens == 7);
    CU_ASSERT_EQUAL_FATAL(it[0].n_hashes, 4);
    CU_ASSERT(h[0] == 1 && h[1] == UINT64_MAX && h[2] == 2 && h[3] == 9);
    CU_ASSERT(it[0].space_len == strlen(ns) && memcmp(it[0].space, ns, strlen(ns)) == 0);
    CU_ASSERT(it[0].request_id && !*it[0].request_id);
    CU_ASSERT(it[0].objective_len == 5 && memcmp(it[0].objective, "batch", 5) == 0);
    CU_ASSERT(it[0].has_priority && it[0].priority == -3);
    CU_ASSERT(it[0].slo_ttft_ms == 2000.5);
    CU_ASSERT(it[0].fairness_len == 2 && memcmp(it[0].fairness, "t1", 2) == 0);
    CU_ASSERT(!it[1].has_owner && !it[1].n_hashes && !it[1].space && !it[1].request_id);
    CU_ASSERT(!it[1].objective && !it[1].fairness && !it[1].has_priority &&
              it[1].slo_ttft_ms == 0);
    out.max_items = 1;
    CU_ASSERT_EQUAL(cr_wire_route_request(e.b, e.n, &out), -1); /* over max */
    out = (cr_wire_route_out){it, 2, h, 3, text, e.n, 0, 0, 0};
    CU_ASSERT_EQUAL(cr_wire_route_request(e.b, e.n, &out), -1); /* over max hashes */
}

/* The hashes' bound is the count of bytes that end a varint, at every
 * length and alignment (8 bytes a step, then a tail). */
static void test_route_hashes_bound(void)
{
    uint8_t b[80];
    for (int k = 0; k < 2000; k++) {
        size_t n = (size_t)(next() % 72), at = (size_t)(next() % 8), want = 0;
        for (size_t i = 0; i < n; i++) {
            b[at + i] = (uint8_t)(next() % 4 ? next() | 0x80 : next());
            want += b[at + i] < 0x80;
        }
        CU_ASSERT_EQUAL(cr_wire_route_hashes_bound(b + at, n), want);
    }
}

/* Each of these protobuf-c refuses, or cr_wire_check_strings does: the
 * decoder must be unsure of it. */
static void test_route_unsure(void)
{
    static const unsure_case cases[] = {
        {"requests as varint", {0x08, 0x01}, 2},
        {"owner as 64-bit", {0x0a, 0x09, 0x09, 1, 2, 3, 4, 5, 6, 7, 8}, 11},
        {"prompt_tokens as bytes", {0x0a, 0x02, 0x12, 0x00}, 4},
        {"hashes as 32-bit", {0x0a, 0x05, 0x1d, 1, 2, 3, 4}, 7},
        {"namespace as varint", {0x0a, 0x02, 0x20, 0x01}, 4},
        {"request_id as 64-bit", {0x0a, 0x09, 0x29, 1, 2, 3, 4, 5, 6, 7, 8}, 11},
        {"objective as varint", {0x0a, 0x02, 0x30, 0x01}, 4},
        {"priority as 64-bit", {0x0a, 0x09, 0x39, 1, 2, 3, 4, 5, 6, 7, 8}, 11},
        {"ttft_slo_ms as varint", {0x0a, 0x02, 0x40, 0x01}, 4},
        {"ttft_slo_ms as 32-bit", {0x0a, 0x05, 0x45, 1, 2, 3, 4}, 7},
        {"ttft_slo_ms cut short", {0x0a, 0x05, 0x41, 1, 2, 3, 4}, 7},
        {"bad UTF-8 in fairness_id", {0x0a, 0x03, 0x4a, 0x01, 0xff}, 5},
        {"NUL in objective", {0x0a, 0x03, 0x32, 0x01, 0x00}, 5},
        {"packed ends inside a varint", {0x0a, 0x04, 0x1a, 0x02, 0x01, 0x81}, 6},
        {"11-byte hash", {0x0a, 0x0c, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                          0xff, 0xff, 0x01}, 14},
        {"NUL in namespace", {0x0a, 0x04, 0x22, 0x02, 'a', 0x00}, 6},
        {"bad UTF-8 in request_id", {0x0a, 0x03, 0x2a, 0x01, 0xc0}, 5},
        {"surrogate in namespace", {0x0a, 0x05, 0x22, 0x03, 0xed, 0xa0, 0x80}, 7},
        {"field 0 in an item, two bytes", {0x0a, 0x03, 0x80, 0x00, 0x01}, 5},
        {"field 0 in an item, one byte", {0x0a, 0x02, 0x00, 0x01}, 4},
        {"field 0 at the top, two bytes", {0x80, 0x00, 0x01}, 3},
        {"group in an item", {0x0a, 0x02, 0x2b, 0x2c}, 4},
        {"6-byte key at the top", {0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01}, 7},
        {"6-byte length at the top", {0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 7},
        {"item past the end", {0x0a, 0x05, 0x08, 0x01}, 4},
        {"truncated top key", {0x80}, 1},
        {"wire type 7", {0x0f}, 1},
    };
    check_unsure(cases, sizeof cases / sizeof cases[0], compare_route);
}

/* The layout route_request.c decodes by. */
static void test_route_descriptor_agrees(void)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(ROUTE, "requests");
    CU_ASSERT_FATAL(ROUTE->n_fields == 1 && f && f->id == 1 &&
                    f->type == PROTOBUF_C_TYPE_MESSAGE && f->label == PROTOBUF_C_LABEL_REPEATED);
    static const struct {
        const char *name;
        ProtobufCType type;
        ProtobufCLabel label;
    } want[] = {{"owner", PROTOBUF_C_TYPE_INT64, PROTOBUF_C_LABEL_OPTIONAL},
                {"prompt_tokens", PROTOBUF_C_TYPE_UINT32, PROTOBUF_C_LABEL_OPTIONAL},
                {"block_hashes", PROTOBUF_C_TYPE_UINT64, PROTOBUF_C_LABEL_REPEATED},
                {"namespace", PROTOBUF_C_TYPE_STRING, PROTOBUF_C_LABEL_OPTIONAL},
                {"request_id", PROTOBUF_C_TYPE_STRING, PROTOBUF_C_LABEL_OPTIONAL},
                {"objective", PROTOBUF_C_TYPE_STRING, PROTOBUF_C_LABEL_OPTIONAL},
                {"priority", PROTOBUF_C_TYPE_INT32, PROTOBUF_C_LABEL_OPTIONAL},
                {"ttft_slo_ms", PROTOBUF_C_TYPE_DOUBLE, PROTOBUF_C_LABEL_OPTIONAL},
                {"fairness_id", PROTOBUF_C_TYPE_STRING, PROTOBUF_C_LABEL_OPTIONAL}};
    const ProtobufCMessageDescriptor *item = f->descriptor;
    CU_ASSERT_EQUAL_FATAL(item->n_fields, 9);
    for (unsigned i = 0; i < 9; i++) {
        const ProtobufCFieldDescriptor *g = &item->fields[i];
        CU_ASSERT(g->id == i + 1 && strcmp(g->name, want[i].name) == 0 &&
                  g->type == want[i].type && g->label == want[i].label);
    }
}

/* A valid namespace or request id: ASCII, empty, 2-, 3- and 4-byte UTF-8. */
static void random_text(enc *e, uint32_t number)
{
    static const char *const texts[] = {"", "m", "req-42", "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
                                        "\xf0\x9f\x99\x82 ok"};
    const char *t = texts[next() % (sizeof texts / sizeof texts[0])];
    key(e, number, 2);
    varint(e, strlen(t), 1);
    for (; *t; t++)
        byte(e, (uint8_t)*t);
}

static void random_route_item(enc *e)
{
    static const unsigned types[] = {0, 1, 2, 5};
    enc s = {.n = 0};
    for (int k = (int)(next() % 7); k > 0; k--) {
        unsigned pick = (unsigned)(next() % 14);
        if (pick < 2) { /* owner, prompt_tokens */
            key(&s, 1 + pick, 0);
            random_value(&s, 0);
        } else if (pick >= 10) { /* objective, priority, ttft_slo_ms, fairness_id */
            static const unsigned type_of[] = {2, 0, 1, 2};
            if (pick == 10 || pick == 13) {
                random_text(&s, pick - 4);
            } else {
                key(&s, pick - 4, type_of[pick - 10]);
                random_value(&s, type_of[pick - 10]);
            }
        } else if (pick < 5) { /* a packed run of hashes */
            enc h = {.n = 0};
            for (int j = (int)(next() % 9); j > 0; j--)
                varint(&h, next() >> (next() % 64), 1 + (unsigned)(next() % 3));
            nested(&s, 3, &h);
        } else if (pick == 5) {
            key(&s, 3, 0);
            random_value(&s, 0);
        } else if (pick < 8) {
            random_text(&s, pick == 6 ? 4 : 5);
        } else {
            unsigned type = types[next() % 4];
            key(&s, 10 + (uint32_t)(next() % 2000), type);
            random_value(&s, type);
        }
    }
    nested(e, 1, &s);
}

static void random_route(enc *e)
{
    e->n = 0;
    for (int k = (int)(next() % 6); k > 0; k--) {
        if (next() % 8) {
            random_route_item(e);
        } else {
            key(e, 2 + (uint32_t)(next() % 100), 0);
            random_value(e, 0);
        }
    }
}

static void test_route_random(void)
{
    enc e;
    size_t taken = 0, refused = 0;
    for (int i = 0; i < 20000; i++) {
        random_route(&e);
        CU_ASSERT_TRUE_FATAL(route_ok(&e));
        CU_ASSERT_EQUAL(compare_route(e.b, e.n), 0); /* no needless trip to protobuf-c */
    }
    for (int i = 0; i < 50000; i++) {
        random_route(&e);
        for (int k = (int)(next() % 3); k >= 0; k--)
            mangle(&e);
        taken += compare_route(e.b, e.n) == 0;
        refused += !route_ok(&e);
    }
    CU_ASSERT(taken > 1000 && refused > 1000);
    garbage(0x0a, compare_route); /* a RouteItem */
}

static const cr_test_case route_tests[] = {
    {"packed, unpacked, last wins, unknown skipped", test_route_forms},
    {"unsure of what protobuf-c or the string check refuses", test_route_unsure},
    {"hashes' bound", test_route_hashes_bound},
    {"descriptor agrees", test_route_descriptor_agrees},
    {"random, mangled, garbage", test_route_random},
    {NULL, NULL},
};

static const cr_test_case varint_tests[] = {
    {"packed, unpacked, non-canonical, empty", test_varints_forms},
    {"unsure of what protobuf-c refuses", test_varints_unsure},
    {"descriptor agrees", test_varints_descriptor_agrees},
    {"random, mangled, garbage", test_varints_random},
    {NULL, NULL},
};

static const cr_test_case pair_tests[] = {
    {"last one wins, unknown skipped", test_last_wins_unknown_skipped},
    {"unsure of what protobuf-c refuses", test_unsure},
    {"over max elements unsure", test_over_max_unsure},
    {"descriptor agrees", test_descriptor_agrees},
    {"random well-formed", test_random_well_formed},
    {"random mangled", test_random_mangled},
    {"garbage", test_garbage},
    {"usual shape, every owner width, mangled", test_usual_shape},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"wire pairs", pair_tests},
                                        {"wire varints", varint_tests},
                                        {"wire route request", route_tests}};
CR_TEST_MAIN(suites)
