#include "plan_answer.h"

#include <string.h>

/* Wire bytes, as protobuf's encoding defines them: a key is the field
 * number << 3 | the wire type (0 varint, 2 length-delimited). */
#define KEY_VARINT(n) ((uint8_t)((n) << 3))
#define KEY_LEN(n) ((uint8_t)((n) << 3 | 2))
/* Shard ids below this are one varint byte each. */
#define ONE_BYTE 128

static size_t varint_len(uint64_t v)
{
    return (size_t)(70 - __builtin_clzll(v | 1)) / 7; /* 7 bits a byte, at least 1 */
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* put_varint with a fixed count of stores, for values of any width: all
 * 10 possible bytes are written (p must have room), the continuation bit
 * cleared on the last one that counts. */
static uint8_t *put_varint_wide(uint8_t *p, uint64_t v)
{
    size_t n = varint_len(v);
    uint8_t b[10];
    for (int i = 0; i < 10; i++)
        b[i] = (uint8_t)(v >> (7 * i)) | 0x80;
    b[n - 1] &= 0x7f;
    memcpy(p, b, sizeof b);
    return p + n;
}

/* Bytes of p's shard ids as packed varints: kb when every id of the table
 * is below ONE_BYTE. */
static size_t shards_len(const cr_table *t, const cr_placement *p, int one_byte)
{
    if (one_byte)
        return p->kb;
    const uint32_t *s = cr_table_shards(t, p);
    size_t n = 0;
    for (uint32_t i = 0; i < p->kb; i++)
        n += varint_len(s[i]);
    return n;
}

/* A Placement's fields (owner 1, shards 2, preferred_shard 3), each left
 * out when 0 or empty, as proto3 does. */
static size_t placement_len(const cr_placement *p, size_t shards)
{
    return (p->owner ? 1 + varint_len((uint64_t)p->owner) : 0) +
           (p->kb ? 1 + varint_len(shards) + shards : 0) +
           (p->preferred_shard ? 1 + varint_len(p->preferred_shard) : 0);
}

static int one_byte_ids(const cr_table *t) { return cr_table_n_shards(t) <= ONE_BYTE; }

void cr_plan_answer_init(cr_plan_answer *a, const cr_table *t)
{
    size_t n = cr_table_n_placements(t), bytes = 0;
    int one_byte = one_byte_ids(t);
    for (size_t i = 0; i < n; i++) {
        const cr_placement *p = cr_table_placement(t, i);
        size_t len = placement_len(p, shards_len(t, p, one_byte));
        bytes += 1 + varint_len(len) + len;
    }
    a->table = t;
    a->placements = bytes;
    cacheroute__v1__routing_table__init(&a->rest);
    cacheroute__v1__plan_churn__init(&a->churn);
    a->rest.n_expected_load = cr_table_n_shards(t);
    a->rest.expected_load = (double *)cr_table_expected_load(t);
    a->rest.n_shards = cr_table_n_shards(t);
    a->rest.admitted_rate_total = cr_table_admitted_rate_total(t);
    a->rest.unadmitted_rate_total = cr_table_unadmitted_rate_total(t);
    a->rest.imbalance = cr_table_imbalance(t);
}

static size_t table_len(const cr_plan_answer *a)
{
    return a->placements + protobuf_c_message_get_packed_size(&a->rest.base);
}

size_t cr_plan_answer_size(const cr_plan_answer *a)
{
    size_t table = table_len(a), churn = protobuf_c_message_get_packed_size(&a->churn.base);
    return 1 + varint_len(table) + table + 1 + varint_len(churn) + churn;
}

static uint8_t *put_shards(uint8_t *p, const uint32_t *s, uint32_t kb, int one_byte)
{
    for (uint32_t i = 0; one_byte && i < kb; i++)
        *p++ = (uint8_t)s[i];
    for (uint32_t i = 0; !one_byte && i < kb; i++)
        p = put_varint(p, s[i]);
    return p;
}

static uint8_t *put_placement(uint8_t *p, const cr_table *t, const cr_placement *pl,
                              int one_byte)
{
    size_t shards = shards_len(t, pl, one_byte);
    *p++ = KEY_LEN(1);
    p = put_varint(p, placement_len(pl, shards));
    if (pl->owner) {
        *p++ = KEY_VARINT(1);
        p = put_varint_wide(p, (uint64_t)pl->owner);
    }
    if (pl->kb) {
        *p++ = KEY_LEN(2);
        p = put_varint(p, shards);
        p = put_shards(p, cr_table_shards(t, pl), pl->kb, one_byte);
    }
    if (pl->preferred_shard) {
        *p++ = KEY_VARINT(3);
        p = put_varint(p, pl->preferred_shard);
    }
    return p;
}

/* PlanResponse { table = 1; churn = 2 }, and in the table placements
 * (field 1) first, where protobuf-c puts them too. */
size_t cr_plan_answer_pack(const cr_plan_answer *a, uint8_t *buf)
{
    uint8_t *p = buf;
    *p++ = KEY_LEN(1);
    p = put_varint(p, table_len(a));
    size_t n = cr_table_n_placements(a->table);
    int one_byte = one_byte_ids(a->table);
    for (size_t i = 0; i < n; i++)
        p = put_placement(p, a->table, cr_table_placement(a->table, i), one_byte);
    p += protobuf_c_message_pack(&a->rest.base, p);
    *p++ = KEY_LEN(2);
    p = put_varint(p, protobuf_c_message_get_packed_size(&a->churn.base));
    p += protobuf_c_message_pack(&a->churn.base, p);
    return (size_t)(p - buf);
}
