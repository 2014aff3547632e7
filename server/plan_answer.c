#include "plan_answer.h"

#include "pb_write.h"

/* Bytes of p's shard ids as packed varints. */
static size_t shards_len(const cr_table *t, const cr_placement *p)
{
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

int cr_plan_answer_init(cr_plan_answer *a, const cr_table *t, cr_arena *scratch)
{
    size_t n = cr_table_n_placements(t);
    a->table = t;
    a->shards = cr_arena_alloc(scratch, n * sizeof *a->shards);
    if (!a->shards)
        return -1;
    a->placements = 0;
    for (size_t i = 0; i < n; i++) {
        const cr_placement *p = cr_table_placement(t, i);
        size_t shards = shards_len(t, p);
        size_t len = placement_len(p, shards);
        a->shards[i] = (uint32_t)shards; /* < 65536 shards of 3 bytes each */
        a->placements += 1 + varint_len(len) + len;
    }
    cacheroute__v1__routing_table__init(&a->rest);
    cacheroute__v1__plan_churn__init(&a->churn);
    a->rest.n_expected_load = cr_table_n_shards(t);
    a->rest.expected_load = (double *)cr_table_expected_load(t);
    a->rest.n_shards = cr_table_n_shards(t);
    a->rest.admitted_rate_total = cr_table_admitted_rate_total(t);
    a->rest.unadmitted_rate_total = cr_table_unadmitted_rate_total(t);
    a->rest.imbalance = cr_table_imbalance(t);
    return 0;
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

static uint8_t *put_placement(uint8_t *p, const cr_table *t, const cr_placement *pl,
                              size_t shards)
{
    *p++ = KEY_LEN(1);
    p = put_varint(p, placement_len(pl, shards));
    if (pl->owner) {
        *p++ = KEY_VARINT(1);
        p = put_varint(p, (uint64_t)pl->owner);
    }
    if (pl->kb) {
        const uint32_t *s = cr_table_shards(t, pl);
        *p++ = KEY_LEN(2);
        p = put_varint(p, shards);
        for (uint32_t i = 0; i < pl->kb; i++)
            p = put_varint(p, s[i]);
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
    for (size_t i = 0; i < n; i++)
        p = put_placement(p, a->table, cr_table_placement(a->table, i), a->shards[i]);
    p += protobuf_c_message_pack(&a->rest.base, p);
    *p++ = KEY_LEN(2);
    p = put_varint(p, protobuf_c_message_get_packed_size(&a->churn.base));
    p += protobuf_c_message_pack(&a->churn.base, p);
    return (size_t)(p - buf);
}
