/* The raw-bytes scanner of wire/scan.c: entry counts and the string
 * check, on hand-made wire bytes of the real request types. */
#include <string.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cunit_main.h"
#include "wire.h"

typedef struct buf {
    uint8_t b[4096];
    size_t n;
} buf;

static void put_varint(buf *w, uint64_t v)
{
    do {
        w->b[w->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void put_bytes(buf *w, uint32_t field, const void *p, size_t len)
{
    put_varint(w, (uint64_t)field << 3 | 2);
    put_varint(w, len);
    memcpy(w->b + w->n, p, len);
    w->n += len;
}

static void put_int(buf *w, uint32_t field, uint64_t v)
{
    put_varint(w, (uint64_t)field << 3);
    put_varint(w, v);
}

static const ProtobufCMessageDescriptor *const RATES =
    &cacheroute__v1__get_rates_request__descriptor;
static const ProtobufCMessageDescriptor *const SELECT =
    &cacheroute__v1__select_injection_request__descriptor;

static void test_count_packed_and_unpacked(void)
{
    buf w = {.n = 0};
    uint8_t packed[] = {0x01, 0xff, 0x01, 0x80, 0x80, 0x01, 0x7f}; /* 1, 255, 16384, 127 */
    put_bytes(&w, 1, packed, sizeof packed);
    put_int(&w, 1, 5);
    put_int(&w, 1, (uint64_t)-1); /* a 10-byte varint */
    CU_ASSERT_EQUAL(cr_wire_count(RATES, w.b, w.n, "owners"), 6);
    CU_ASSERT_EQUAL(cr_wire_count(RATES, w.b, w.n, "no_such_field"), 0);
    /* Entries of a message field count one per occurrence, empty or not. */
    buf s = {.n = 0};
    for (int i = 0; i < 65; i++)
        put_bytes(&s, 4, "", 0);
    put_int(&s, 2, 100);
    CU_ASSERT_EQUAL(cr_wire_count(SELECT, s.b, s.n, "sources"), 65);
    /* Packed doubles: 8 bytes each. */
    buf d = {.n = 0};
    uint8_t eight[24] = {0};
    put_bytes(&d, 3, eight, sizeof eight);
    CU_ASSERT_EQUAL(cr_wire_count(&cacheroute__v1__record_arrival_request__descriptor, d.b, d.n,
                                  "weights"),
                    3);
}

static void test_count_stops_at_malformed(void)
{
    buf w = {.n = 0};
    put_int(&w, 1, 1);
    put_int(&w, 1, 2);
    w.b[w.n++] = 0x0a; /* owners, length-delimited ... */
    w.b[w.n++] = 0x7f; /* ... 127 bytes that are not there */
    CU_ASSERT_EQUAL(cr_wire_count(RATES, w.b, w.n, "owners"), 2);
    uint8_t group[] = {0x0b, 0x08, 0x01}; /* a group: protobuf-c refuses it */
    CU_ASSERT_EQUAL(cr_wire_count(RATES, group, sizeof group, "owners"), 0);
    uint8_t cut[] = {0x08, 0x80}; /* a varint cut short */
    CU_ASSERT_EQUAL(cr_wire_count(RATES, cut, sizeof cut, "owners"), 0);
}

static void test_last_varint(void)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__record_arrival_request__descriptor;
    buf w = {.n = 0};
    CU_ASSERT_EQUAL(cr_wire_last_varint(d, w.b, w.n, "omit_routes", 7), 7);
    put_int(&w, 2, 1);
    put_int(&w, 1, 300);
    put_int(&w, 2, 0); /* the last one wins */
    CU_ASSERT_EQUAL(cr_wire_last_varint(d, w.b, w.n, "omit_routes", 7), 0);
    put_int(&w, 2, 5);
    CU_ASSERT_EQUAL(cr_wire_last_varint(d, w.b, w.n, "omit_routes", 7), 5);
    CU_ASSERT_EQUAL(cr_wire_last_varint(d, w.b, w.n, "owners", 7), 300);
    CU_ASSERT_EQUAL(cr_wire_last_varint(d, w.b, w.n, "nothing", 7), 7);
}

static void test_utf8(void)
{
    static const struct {
        const char *s;
        size_t len, bad;
    } cases[] = {
        {"plain", 5, 5},
        {"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", 9, 9}, /* é, 中, 😀 */
        {"\xef\xbf\xbf\xf4\x8f\xbf\xbf", 7, 7},         /* U+FFFF, U+10FFFF */
        {"a\x80", 2, 1},                                /* a lone continuation */
        {"\xc0\xaf", 2, 0},                             /* overlong '/' */
        {"\xe0\x80\xaf", 3, 0},                         /* overlong, 3 bytes */
        {"\xed\xa0\x80", 3, 0},                         /* a surrogate */
        {"\xf4\x90\x80\x80", 4, 0},                     /* past U+10FFFF */
        {"ok\xe2\x82", 4, 2},                           /* cut short */
        {"\xc3(", 2, 0},                                /* a bad continuation */
        {"\xff", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CU_ASSERT_EQUAL(cr_wire_utf8_error((const uint8_t *)cases[i].s, cases[i].len),
                        cases[i].bad);
}

static void test_strings_named_by_path(void)
{
    cr_error err;
    buf src = {.n = 0}, w = {.n = 0};
    put_bytes(&w, 1, "r-1", 3);
    put_bytes(&src, 1, "ok", 2);
    put_bytes(&w, 4, src.b, src.n);
    CU_ASSERT_EQUAL(cr_wire_check_strings(SELECT, w.b, w.n, &err), 0);
    src.n = 0;
    put_bytes(&src, 1, "a\0b", 3);
    put_bytes(&w, 4, src.b, src.n);
    CU_ASSERT_EQUAL(cr_wire_check_strings(SELECT, w.b, w.n, &err), -1);
    CU_ASSERT_STRING_EQUAL(err.msg,
                           "sources[1].name must not contain a NUL byte, found at byte 1 of 3");
    /* Nested in a proto3-optional (or proto2-copied) message: the same. */
    buf o = {.n = 0}, r = {.n = 0};
    put_bytes(&o, 11, "s\xc3", 2);
    put_bytes(&r, 1, "", 0);
    put_bytes(&r, 1, o.b, o.n);
    CU_ASSERT_EQUAL(
        cr_wire_check_strings(&cacheroute__v1__report_outcome_request__descriptor, r.b, r.n, &err),
        -1);
    CU_ASSERT_STRING_EQUAL(err.msg, "outcomes[1].source must be valid UTF-8, not at byte 1 of 2");
    /* Bytes of a field with another type, or unknown fields, are not strings. */
    buf u = {.n = 0};
    put_bytes(&u, 99, "\xff", 1);
    put_int(&u, 2, 7);
    CU_ASSERT_EQUAL(cr_wire_check_strings(SELECT, u.b, u.n, &err), 0);
    /* Malformed: left to unpack. */
    uint8_t cut[] = {0x0a, 0x05, 'a'};
    CU_ASSERT_EQUAL(cr_wire_check_strings(SELECT, cut, sizeof cut, &err), 0);
}

/* protobuf-c 1.4 unpacks a field numbered 0 written as a two-byte key
 * (0x82 0x00: number 0, length-delimited); no other reader would. */
static void test_field_zero_refused(void)
{
    cr_error err;
    buf src = {.n = 0}, w = {.n = 0};
    const uint8_t zero[] = {0x82, 0x00, 0x01, 'x'};
    memcpy(w.b, zero, sizeof zero);
    w.n = sizeof zero;
    ProtobufCMessage *m = protobuf_c_message_unpack(SELECT, NULL, w.n, w.b);
    CU_ASSERT_PTR_NOT_NULL(m);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    CU_ASSERT_EQUAL(cr_wire_check_strings(SELECT, w.b, w.n, &err), -1);
    CU_ASSERT_STRING_EQUAL(err.msg, "malformed cacheroute.v1.SelectInjectionRequest message: "
                                    "a field numbered 0, which protobuf does not allow");
    memcpy(src.b, zero, sizeof zero);
    src.n = sizeof zero;
    w.n = 0;
    put_bytes(&w, 4, src.b, src.n);
    CU_ASSERT_EQUAL(cr_wire_check_strings(SELECT, w.b, w.n, &err), -1);
    CU_ASSERT_STRING_EQUAL(err.msg, "malformed cacheroute.v1.SelectInjectionRequest message: "
                                    "sources[0] has a field numbered 0, which protobuf does "
                                    "not allow");
}

static const cr_test_case wire_tests[] = {
    {"count packed and unpacked", test_count_packed_and_unpacked},
    {"count stops at malformed", test_count_stops_at_malformed},
    {"last varint", test_last_varint},
    {"utf-8", test_utf8},
    {"strings named by path", test_strings_named_by_path},
    {"field zero refused", test_field_zero_refused},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"wire", wire_tests}};
CR_TEST_MAIN(suites)
