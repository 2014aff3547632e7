#include "answer.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Shard ids below this are one varint byte each. */
#define ONE_BYTE 128
/* The most one placement of kb shards takes: key 1, length 5, owner 11,
 * the shards' key and length 6 and 5 a shard, the preferred one 6 (room
 * for put_varint_wide's 10 bytes, too). */
#define PLACEMENT_MAX(kb) (29 + 5 * (size_t)(kb))
/* Placements sampled to size the buffer, and bytes it holds over the
 * estimate (and may over the answer). */
#define SAMPLE 1024
#define SPARE 4096

/* The low 56 bits of v spread 7 to a byte, the inverse of a varint
 * decoder's gather: in three shifts by masks rather than a byte loop. */
static uint64_t spread7(uint64_t v)
{
    uint64_t x = v & 0x00ffffffffffffffu;
    x = (x & 0x000000000fffffffu) | (x & 0x00fffffff0000000u) << 4;
    x = (x & 0x00003fff00003fffu) | (x & 0x0fffc0000fffc000u) << 2;
    return (x & 0x007f007f007f007fu) | (x & 0x3f803f803f803f80u) << 1;
}

/* Continuation bits for a varint of n bytes: on each byte but the last;
 * bytes 0-7, then 8-9. */
static const uint64_t CONT8[11] = {0, 0, 0x80, 0x8080, 0x808080, 0x80808080,
                                   0x8080808080u, 0x808080808080u, 0x80808080808080u,
                                   0x8080808080808080u, 0x8080808080808080u};
static const uint16_t CONT2[11] = {[10] = 0x80};

/* put_varint with a fixed count of stores, for values of any width (an
 * owner, a hash: 9 or 10 bytes at random): all 10 possible bytes are
 * written (p must have room), built in registers, so neither a branch per
 * byte nor a byte patched in memory before a wide load. */
static uint8_t *put_varint_wide(uint8_t *p, uint64_t v)
{
    size_t n = varint_len(v);
    uint64_t lo = spread7(v) | CONT8[n];
    unsigned hi = ((unsigned)(v >> 56 & 0x7f) | (unsigned)(v >> 63) << 8) | CONT2[n];
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(lo >> 8 * i); /* one little-endian store, whatever the host */
    p[8] = (uint8_t)hi;
    p[9] = (uint8_t)(hi >> 8);
    return p + n;
}

/* Bytes of p's shard ids as packed varints: kb when every id of the table
 * is below ONE_BYTE (ids are below the table's shard count). */
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

/* p framed as an entry of placements: key, length, fields. */
static size_t framed_len(const cr_table *t, const cr_placement *p, int one_byte)
{
    size_t len = placement_len(p, shards_len(t, p, one_byte));
    return 1 + varint_len(len) + len;
}

/* The placements' bytes as SAMPLE of them spread over the table tell (its
 * first are the hottest, and widest), and a quarter more, and SPARE: short
 * now and then (the buffer grows), seldom far over (a table whose first
 * few hold thousands of shards each; finish gives the excess back). */
static size_t estimate(const cr_table *t, size_t n, int one_byte)
{
    size_t step = n / SAMPLE + 1, seen = 0, bytes = 0;
    for (size_t i = 0; i < n; i += step, seen++)
        bytes += framed_len(t, cr_table_placement(t, i), one_byte);
    size_t all = seen ? bytes * n / seen : 0;
    return all + all / 4 + SPARE;
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

/* a's buffer with room for need bytes at *p (moved with it): grown by a
 * half when short. 0, or -1 out of memory (a's buffer as it was). */
static int reserve(cr_plan_answer *a, uint8_t **p, size_t need)
{
    size_t used = (size_t)(*p - a->buf), cap = used + need + (used + need) / 2;
    if (a->cap - used >= need)
        return 0;
    uint8_t *b = realloc(a->buf, cap);
    if (!b)
        return -1;
    a->buf = b;
    a->cap = cap;
    *p = b + used;
    return 0;
}

static int put_placements(cr_plan_answer *a)
{
    const cr_table *t = a->table;
    size_t n = cr_table_n_placements(t);
    int one_byte = one_byte_ids(t);
    uint8_t *p = a->buf + a->head;
    for (size_t i = 0; i < n; i++) {
        const cr_placement *pl = cr_table_placement(t, i);
        if (reserve(a, &p, PLACEMENT_MAX(pl->kb)) != 0)
            return -1;
        p = put_placement(p, t, pl, one_byte);
    }
    a->placements = (size_t)(p - a->buf) - a->head;
    return 0;
}

int cr_plan_answer_init(cr_plan_answer *a, const cr_table *t, size_t max_first)
{
    *a = (cr_plan_answer){.table = t};
    cacheroute__v1__routing_table__init(&a->rest);
    cacheroute__v1__plan_churn__init(&a->churn);
    a->rest.n_expected_load = cr_table_n_shards(t);
    a->rest.expected_load = (double *)cr_table_expected_load(t);
    a->rest.n_shards = cr_table_n_shards(t);
    a->rest.admitted_rate_total = cr_table_admitted_rate_total(t);
    a->rest.unadmitted_rate_total = cr_table_unadmitted_rate_total(t);
    a->rest.imbalance = cr_table_imbalance(t);
    size_t est = estimate(t, cr_table_n_placements(t), one_byte_ids(t));
    /* The table's key and length as wide as the estimate's: finish moves
     * the placements when the real one is not (a table near 16 KiB or 2 MiB). */
    a->head = 1 + varint_len(est + protobuf_c_message_get_packed_size(&a->rest.base));
    a->cap = a->head + (est < max_first ? est : max_first);
    if (!(a->buf = malloc(a->cap)) || put_placements(a) != 0) {
        cr_plan_answer_free(a);
        return -1;
    }
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

/* PlanResponse { table = 1; churn = 2 }, and in the table placements
 * (field 1) first, where protobuf-c puts them too. */
uint8_t *cr_plan_answer_finish(cr_plan_answer *a, size_t *len)
{
    size_t table = table_len(a), churn = protobuf_c_message_get_packed_size(&a->churn.base);
    size_t head = 1 + varint_len(table);
    size_t used = a->head + a->placements;
    uint8_t *p = a->buf + used, *b;
    *len = cr_plan_answer_size(a);
    if (*len > a->cap && reserve(a, &p, *len - used) != 0) {
        cr_plan_answer_free(a);
        return NULL;
    }
    b = a->buf;
    if (head != a->head)
        memmove(b + head, b + a->head, a->placements);
    p = b;
    *p++ = KEY_LEN(1);
    p = put_varint(p, table) + a->placements;
    p += protobuf_c_message_pack(&a->rest.base, p);
    *p++ = KEY_LEN(2);
    p = put_varint(p, churn);
    protobuf_c_message_pack(&a->churn.base, p);
    /* An estimate far over is not kept; one a little over is: shrunk, the
     * buffer would lower glibc's mmap threshold below the next one's size,
     * which would then be a fresh mapping to fault in (7.7 -> 15 ms). */
    if (a->cap - *len > *len + SPARE) {
        uint8_t *fit = realloc(b, *len);
        b = fit ? fit : b;
    }
    a->buf = NULL;
    a->cap = 0;
    return b;
}

void cr_plan_answer_free(cr_plan_answer *a)
{
    free(a->buf);
    a->buf = NULL;
    a->cap = 0;
}
