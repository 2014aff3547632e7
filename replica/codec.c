/* What replicas put in Redis: each owner's pushed state and the published
 * table blob, little-endian through bytes.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "replica.h"

/* An 8-byte little-endian word, as bytes.h writes one. */
static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void cr_replica_encode(const cr_estimator_entry *e, uint8_t field[CR_REPLICA_FIELD_BYTES],
                       uint8_t value[CR_REPLICA_VALUE_BYTES])
{
    uint64_t count, t;
    memcpy(&count, &e->count, 8);
    memcpy(&t, &e->t_last, 8);
    put_le64(field, (uint64_t)e->owner);
    put_le64(value, count);
    put_le64(value + 8, t);
}

cr_status cr_replica_decode(const void *field, size_t field_len, const void *value,
                            size_t value_len, cr_estimator_entry *out, cr_error *err)
{
    if (field_len != CR_REPLICA_FIELD_BYTES || value_len != CR_REPLICA_VALUE_BYTES)
        return cr_fail(err, CR_EINVAL,
                       "a pushed owner must be a %d-byte field and a %d-byte value, got %zu "
                       "and %zu",
                       CR_REPLICA_FIELD_BYTES, CR_REPLICA_VALUE_BYTES, field_len, value_len);
    cr_cursor f = cr_cursor_of(field, field_len), v = cr_cursor_of(value, value_len);
    out->owner = (int64_t)cr_get_u64(&f);
    out->count = cr_get_f64(&v);
    out->t_last = cr_get_f64(&v);
    if (!(isfinite(out->count) && out->count > 0))
        return cr_fail(err, CR_EINVAL, "owner %lld's count must be finite and > 0, got %g",
                       (long long)out->owner, out->count);
    if (!isfinite(out->t_last))
        return cr_fail(err, CR_EINVAL, "owner %lld's time must be finite, got %g",
                       (long long)out->owner, out->t_last);
    return CR_OK;
}

cr_status cr_replica_table_encode(const cr_table *t, uint8_t **out, size_t *len, cr_error *err)
{
    cr_buf b = CR_BUF_INIT;
    cr_buf_u32(&b, CR_REPLICA_TABLE_VERSION);
    cr_table_save(t, &b);
    if (b.failed) {
        cr_buf_free(&b);
        return cr_fail(err, CR_ENOMEM, "out of memory encoding the table");
    }
    *out = b.p;
    *len = b.len;
    return CR_OK;
}

cr_status cr_replica_table_decode(const void *p, size_t len, cr_table **out, cr_error *err)
{
    cr_cursor c = cr_cursor_of(p, len);
    uint32_t version = cr_get_u32(&c);
    *out = NULL;
    if (c.failed || version != CR_REPLICA_TABLE_VERSION)
        return cr_fail(err, CR_EINVAL, "the published table must be version %d, got %s%u",
                       CR_REPLICA_TABLE_VERSION, c.failed ? "a short blob " : "", version);
    cr_status st = cr_table_load(&c, out, err);
    if (st == CR_OK && c.left) {
        cr_table_free(*out);
        *out = NULL;
        return cr_fail(err, CR_EINVAL, "the published table has %zu bytes past its end", c.left);
    }
    return st;
}
