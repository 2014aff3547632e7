#include "wire.h"

#include <string.h>

#include "internal.h"

/* RecordArrivalResponse { repeated Route routes = 1; uint32 recorded = 2;
 * uint64 table_generation = 3 } and Route { int64 owner = 1; double rate
 * = 2; bool admitted = 3; uint32 preferred_shard = 4; string endpoint_id
 * = 5; string endpoint_address = 6 }
 * (test_record_answer checks the descriptors agree). */
size_t cr_record_answer_bound(size_t n, const cr_endpoints *named)
{
    return n * (cr_wire_route_bytes((uint64_t)1 << 32) + cr_wire_named_bytes(named)) +
           CR_WIRE_RECORD_TAIL_BYTES;
}

/* A Route's fields but its names, at most 28 bytes. */
static uint8_t *put_route_fields(uint8_t *p, const cr_route *r)
{
    if (r->owner) {
        *p++ = KEY_VARINT(1);
        p = put_varint(p, (uint64_t)r->owner);
    }
    if (r->rate != 0) { /* protobuf-c's test: -0.0 is left out, NaN written */
        *p++ = KEY_FIXED64(2);
        p = put_double(p, r->rate);
    }
    if (r->admitted) {
        *p++ = KEY_VARINT(3);
        *p++ = 1;
    }
    if (r->preferred_shard) {
        *p++ = KEY_VARINT(4);
        p = put_varint(p, r->preferred_shard);
    }
    return p;
}

/* A Route: without a name its length is one byte, written once its
 * fields are; with one (named has the shard) they go first to the stack. */
static uint8_t *put_route(uint8_t *p, const cr_route *r, const cr_endpoints *named)
{
    if (named && r->preferred_shard < named->n_slots) {
        uint8_t fields[32];
        size_t n = (size_t)(put_route_fields(fields, r) - fields);
        return cr_wire_put_named(p, 1, fields, n, &named->slot[r->preferred_shard], 5);
    }
    *p++ = KEY_LEN(1);
    uint8_t *len = p++;
    p = put_route_fields(p, r);
    *len = (uint8_t)(p - len - 1);
    return p;
}

size_t cr_record_answer_pack(const cr_route *routes, size_t n, uint32_t recorded,
                             uint64_t generation, const cr_endpoints *named, uint8_t *buf)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
        p = put_route(p, &routes[i], named);
    if (recorded) {
        *p++ = KEY_VARINT(2);
        p = put_varint(p, recorded);
    }
    if (generation) {
        *p++ = KEY_VARINT(3);
        p = put_varint(p, generation);
    }
    return (size_t)(p - buf);
}
