/* RouteResponse { repeated RouteDecision routes = 1; uint64
 * table_generation = 2 } and RouteDecision { uint32 shard = 1; bool
 * admitted = 2; uint32 cached_tokens = 3; double queue_wait_ms = 4; double
 * prefill_ms = 5; string reason = 6; string endpoint_id = 7; string
 * endpoint_address = 8 } (test_route_wire checks the
 * descriptors agree), written as protobuf-c packs them: fields in number
 * order, proto3's zeros left out. */
#include "wire.h"

#include <string.h>

#include "internal.h"

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

/* A decision's fields but its names, at most 44 bytes. */
static uint8_t *put_decision_fields(uint8_t *p, const cr_route_answer *a)
{
    const char *reason = cr_route_reason_name(a->reason);
    size_t n = strlen(reason);
    p = put_uint_field(p, 1, a->shard);
    p = put_uint_field(p, 2, a->admitted != 0);
    p = put_uint_field(p, 3, a->cached_tokens);
    p = put_double_field(p, 4, a->queue_wait_ms);
    p = put_double_field(p, 5, a->prefill_ms);
    if (n) {
        *p++ = KEY_LEN(6);
        *p++ = (uint8_t)n;
        memcpy(p, reason, n);
        p += n;
    }
    return p;
}

/* A decision: without a name its length is one byte, written once its
 * fields are; with one (named has the shard) they go first to the stack. */
static uint8_t *put_decision(uint8_t *p, const cr_route_answer *a, const cr_endpoints *named)
{
    if (named && a->shard < named->n_slots) {
        uint8_t fields[64];
        size_t n = (size_t)(put_decision_fields(fields, a) - fields);
        return cr_wire_put_named(p, 1, fields, n, &named->slot[a->shard], 7);
    }
    *p++ = KEY_LEN(1);
    uint8_t *len = p++;
    p = put_decision_fields(p, a);
    *len = (uint8_t)(p - len - 1);
    return p;
}

size_t cr_route_answer_pack(const cr_route_answer *a, size_t n, uint64_t generation,
                            const cr_endpoints *named, uint8_t *buf)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
        p = put_decision(p, &a[i], named);
    p = put_uint_field(p, 2, generation);
    return (size_t)(p - buf);
}
