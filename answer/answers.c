/* RecordArrivalResponse and RouteResponse, one writer for both (answer.h):
 * each is a repeated entry message of field 1 written from a
 * cr_route_answer, then its tail of varints, written as protobuf-c packs
 * them: fields in number order, proto3's zeros left out.
 *
 * RecordArrivalResponse { repeated Route routes = 1; uint32 recorded = 2;
 * uint64 table_generation = 3 } and Route { int64 owner = 1; double rate
 * = 2; bool admitted = 3; uint32 preferred_shard = 4; string endpoint_id
 * = 5; string endpoint_address = 6 } (test_record_answer checks the
 * descriptors agree).
 *
 * RouteResponse { repeated RouteDecision routes = 1; uint64
 * table_generation = 2 } and RouteDecision { uint32 shard = 1; bool
 * admitted = 2; uint32 cached_tokens = 3; double queue_wait_ms = 4; double
 * prefill_ms = 5; string reason = 6; string endpoint_id = 7; string
 * endpoint_address = 8; string door = 9 } (test_route_wire checks them). */
#include "answer.h"

#include <string.h>

#include "internal.h"

/* An entry's fields, by what of the answer each writes. */
typedef enum part {
    OWNER,
    RATE,
    ADMITTED,
    SHARD,
    CACHED,
    QUEUE_WAIT,
    PREFILL,
    REASON,
    DOOR
} part;

/* One entry message: its fields in number order (field i is number i + 1),
 * then the endpoint's id and address as fields n + 1 and n + 2, then its
 * later fields (after[i] is number n + 3 + i). */
typedef struct form {
    part fields[6];
    unsigned n;
    part after[1];
    unsigned n_after;
} form;

static const form ROUTE = {{OWNER, RATE, ADMITTED, SHARD}, 4, {OWNER}, 0};
static const form DECISION = {{SHARD, ADMITTED, CACHED, QUEUE_WAIT, PREFILL, REASON}, 6, {DOOR}, 1};

size_t cr_record_answer_bound(size_t n, const cr_endpoints *named)
{
    return n * (cr_wire_route_bytes((uint64_t)1 << 32) + cr_wire_named_bytes(named)) +
           CR_WIRE_RECORD_TAIL_BYTES;
}

size_t cr_route_answer_bound(size_t n, const cr_endpoints *named)
{
    /* generation: key, varint */
    return n * (cr_wire_decision_bytes() + cr_wire_named_bytes(named)) + 1 + 10;
}

/* A varint field, left out when 0 as proto3 leaves it. */
static uint8_t *put_uint_field(uint8_t *p, unsigned number, uint64_t v)
{
    if (!v)
        return p;
    *p++ = KEY_VARINT(number);
    return put_varint(p, v);
}

/* A double field, left out when it compares equal to 0 (-0.0 too) as
 * protobuf-c 1.4 leaves it; a NaN is written. */
static uint8_t *put_double_field(uint8_t *p, unsigned number, double d)
{
    if (d == 0)
        return p;
    *p++ = KEY_FIXED64(number);
    return put_double(p, d);
}

/* A name (a reason's, an admission's: under 128 bytes) as a string field,
 * left out when empty. */
static uint8_t *put_name_field(uint8_t *p, unsigned number, const char *name)
{
    size_t n = strlen(name);
    if (!n)
        return p;
    *p++ = KEY_LEN(number);
    *p++ = (uint8_t)n;
    memcpy(p, name, n);
    return p + n;
}

/* One field of an answer. */
static uint8_t *put_part(uint8_t *p, part what, unsigned number, const cr_route_answer *a)
{
    switch (what) {
    case OWNER:
        p = put_uint_field(p, number, (uint64_t)a->owner);
        break;
    case RATE:
        p = put_double_field(p, number, a->rate);
        break;
    case ADMITTED:
        p = put_uint_field(p, number, a->admitted != 0);
        break;
    case SHARD:
        p = put_uint_field(p, number, a->shard);
        break;
    case CACHED:
        p = put_uint_field(p, number, a->cached_tokens);
        break;
    case QUEUE_WAIT:
        p = put_double_field(p, number, a->queue_wait_ms);
        break;
    case PREFILL:
        p = put_double_field(p, number, a->prefill_ms);
        break;
    case REASON:
        p = put_name_field(p, number, cr_route_reason_name(a->reason));
        break;
    case DOOR:
        p = put_name_field(p, number, cr_route_door_name(a->door));
        break;
    }
    return p;
}

/* An entry's fields before its names: at most 28 bytes a Route, 44 a
 * RouteDecision. */
static uint8_t *put_fields(uint8_t *p, const form *f, const cr_route_answer *a)
{
    for (unsigned i = 0; i < f->n; i++)
        p = put_part(p, f->fields[i], i + 1, a);
    return p;
}

/* An entry's fields after its names: none a Route, at most 9 bytes a
 * RouteDecision. */
static uint8_t *put_after(uint8_t *p, const form *f, const cr_route_answer *a)
{
    for (unsigned i = 0; i < f->n_after; i++)
        p = put_part(p, f->after[i], f->n + 3 + i, a);
    return p;
}

/* An entry: without a name its length is one byte, written once its
 * fields are; with one (named has the shard) they go first to the stack. */
static uint8_t *put_entry(uint8_t *p, const form *f, const cr_route_answer *a,
                          const cr_endpoints *named)
{
    if (named && a->shard < named->n_slots) {
        uint8_t fields[64], after[16];
        size_t n = (size_t)(put_fields(fields, f, a) - fields);
        size_t n_after = (size_t)(put_after(after, f, a) - after);
        return cr_wire_put_named(p, 1, fields, n, &named->slot[a->shard], f->n + 1, after,
                                 n_after);
    }
    *p++ = KEY_LEN(1);
    uint8_t *len = p++;
    p = put_after(put_fields(p, f, a), f, a);
    *len = (uint8_t)(p - len - 1);
    return p;
}

/* The entries of form f, then tail[0..n_tail) as the varint fields
 * numbered 2, 3, ... after them. */
static size_t pack(const form *f, const cr_route_answer *a, size_t n, const uint64_t *tail,
                   unsigned n_tail, const cr_endpoints *named, uint8_t *buf)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
        p = put_entry(p, f, &a[i], named);
    for (unsigned i = 0; i < n_tail; i++)
        p = put_uint_field(p, i + 2, tail[i]);
    return (size_t)(p - buf);
}

size_t cr_record_answer_pack(const cr_route_answer *routes, size_t n, uint32_t recorded,
                             uint64_t generation, const cr_endpoints *named, uint8_t *buf)
{
    uint64_t tail[2] = {recorded, generation};
    return pack(&ROUTE, routes, n, tail, 2, named, buf);
}

size_t cr_route_answer_pack(const cr_route_answer *a, size_t n, uint64_t generation,
                            const cr_endpoints *named, uint8_t *buf)
{
    return pack(&DECISION, a, n, &generation, 1, named, buf);
}
