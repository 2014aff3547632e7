/* RouteResponse { repeated RouteDecision routes = 1; uint64
 * table_generation = 2 } and RouteDecision { uint32 shard = 1; bool
 * admitted = 2; uint32 cached_tokens = 3; double queue_wait_ms = 4; double
 * prefill_ms = 5; string reason = 6 } (test_route_wire checks the
 * descriptors agree), written as protobuf-c packs them: fields in number
 * order, proto3's zeros left out. */
#include "wire.h"

#include <string.h>

#include "internal.h"

size_t cr_route_answer_bound(size_t n)
{
    return n * cr_wire_decision_bytes() + 1 + 10; /* generation: key, varint */
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

/* A decision's fields are at most 46 bytes (cr_wire_decision_bytes), so
 * its length is one byte, written once they are. */
static uint8_t *put_decision(uint8_t *p, const cr_route_answer *a)
{
    const char *reason = cr_route_reason_name(a->reason);
    size_t n = strlen(reason);
    *p++ = KEY_LEN(1);
    uint8_t *len = p++;
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
    *len = (uint8_t)(p - len - 1);
    return p;
}

size_t cr_route_answer_pack(const cr_route_answer *a, size_t n, uint64_t generation,
                            uint8_t *buf)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
        p = put_decision(p, &a[i]);
    p = put_uint_field(p, 2, generation);
    return (size_t)(p - buf);
}
