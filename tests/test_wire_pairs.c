/* cr_wire_split_pairs and cr_wire_split_varints (wire/pairs.c)
 * against protobuf-c itself: on hand-made and seeded random PlanRequest and
 * RecordArrivalRequest encodings, well-formed and
 * mangled, whatever it accepts protobuf-c must accept with the same rates,
 * and the rest it leaves must unpack (and string-check) as the whole. */
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
                                        {"wire varints", varint_tests}};
CR_TEST_MAIN(suites)
