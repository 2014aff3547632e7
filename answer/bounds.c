/* The most bytes an answer's parts take on the wire (cacheroute.proto),
 * for refusing a call whose answer could not be sent before its work is
 * done. Each is a sum of the parts' keys and widest values, checked
 * against protobuf-c's packing by test_record_answer and test_plan_answer. */
#include <string.h>

#include "answer.h"
#include "internal.h"

size_t cr_wire_route_bytes(uint64_t shards)
{
    /* key and length 2, owner 1 + 10, rate 1 + 8, admitted 1 + 1, shard key 1 */
    return 2 + 11 + 9 + 2 + 1 + varint_len(shards > 1 ? shards - 1 : 0);
}

size_t cr_wire_decision_bytes(void)
{
    size_t reason = 0;
    for (int r = 0; r < CR_ROUTE_N_WHY; r++) {
        size_t n = strlen(cr_route_reason_name((cr_route_reason)r));
        reason = n > reason ? n : reason;
    }
    size_t door = strlen(cr_route_door_name(-1)); /* "unknown", the longest */
    /* key and length, shard 1 + 5, admitted, cached 1 + 5, two doubles 1 + 8, reason, door */
    return 2 + 6 + 2 + 6 + 9 + 9 + 2 + reason + 2 + door;
}

size_t cr_wire_rate_bytes(void)
{
    return 2 + 11 + 9; /* key and length, owner, rate */
}

/* Bytes per shard id as a varint, for ids below r. */
static uint64_t id_bytes(uint32_t r)
{
    return varint_len(r > 1 ? r - 1 : 0);
}

uint64_t cr_wire_plan_bound(const cr_plan_size *s)
{
    return (uint64_t)s->sessions * 27 + s->slots * id_bytes(s->n_shards) +
           (uint64_t)s->n_shards * 8 + 256;
}

size_t cr_wire_named_bytes(const cr_endpoints *e)
{
    if (!e)
        return 0;
    return 1 + varint_len(e->longest_id) + e->longest_id + 1 + varint_len(e->longest_address) +
           e->longest_address + 1;
}

uint8_t *cr_wire_put_named(uint8_t *p, unsigned number, const uint8_t *fields, size_t n,
                           const cr_endpoint *x, unsigned id_field, const uint8_t *after,
                           size_t n_after)
{
    size_t a = strlen(x->id), b = strlen(x->address);
    size_t body = n + 1 + varint_len(a) + a + 1 + varint_len(b) + b + n_after;
    *p++ = KEY_LEN(number);
    p = put_varint(p, body);
    memcpy(p, fields, n);
    p += n;
    *p++ = KEY_LEN(id_field);
    p = put_varint(p, a);
    memcpy(p, x->id, a);
    p += a;
    *p++ = KEY_LEN(id_field + 1);
    p = put_varint(p, b);
    memcpy(p, x->address, b);
    p += b;
    if (n_after)
        memcpy(p, after, n_after);
    return p + n_after;
}
