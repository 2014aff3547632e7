/* What replicas put in Redis: each owner's pushed state and the published
 * table blob, little-endian through bytes.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

cr_status cr_replica_check_version(const cr_cursor *c, uint32_t got, uint32_t want,
                                   const char *what, const char *short_text, cr_error *err)
{
    if (!c->failed && got == want)
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "%s must be version %u, got %s%u", what, want,
                   c->failed ? short_text : "", got);
}

cr_status cr_replica_chunk_encode(const cr_estimator_entry *v, size_t n, uint8_t **out,
                                  size_t *len, cr_error *err)
{
    if (n > CR_REPLICA_CHUNK_MAX)
        return cr_fail(err, CR_EINVAL, "a chunk holds at most %d owners, got %zu",
                       CR_REPLICA_CHUNK_MAX, n);
    cr_buf b = CR_BUF_INIT;
    cr_buf_reserve(&b, 12 + n * CR_REPLICA_ENTRY_BYTES);
    cr_buf_u32(&b, CR_REPLICA_CHUNK_VERSION);
    cr_buf_u64(&b, n);
    for (size_t i = 0; i < n; i++) {
        cr_buf_u64(&b, (uint64_t)v[i].owner);
        cr_buf_f64(&b, v[i].count);
        cr_buf_f64(&b, v[i].t_last);
    }
    if (b.failed) {
        cr_buf_free(&b);
        return cr_fail(err, CR_ENOMEM, "out of memory encoding %zu owners", n);
    }
    *out = b.p;
    *len = b.len;
    return CR_OK;
}

static cr_status check_entry(const cr_estimator_entry *e, uint64_t i, cr_error *err)
{
    if (!(isfinite(e->count) && e->count > 0))
        return cr_fail(err, CR_EINVAL,
                       "chunk owners[%llu] %lld: count must be finite and > 0, got %g",
                       (unsigned long long)i, (long long)e->owner, e->count);
    if (!isfinite(e->t_last))
        return cr_fail(err, CR_EINVAL, "chunk owners[%llu] %lld: time must be finite, got %g",
                       (unsigned long long)i, (long long)e->owner, e->t_last);
    return CR_OK;
}

cr_status cr_replica_chunk_decode(const void *p, size_t len, cr_estimator_entry **out,
                                  size_t *n, cr_error *err)
{
    cr_cursor c = cr_cursor_of(p, len);
    uint32_t version = cr_get_u32(&c);
    uint64_t k = cr_get_u64(&c);
    *out = NULL;
    *n = 0;
    if (cr_replica_check_version(&c, version, CR_REPLICA_CHUNK_VERSION, "a pushed chunk",
                                 "a short chunk ", err) != CR_OK)
        return CR_EINVAL;
    if (k > CR_REPLICA_CHUNK_MAX || c.left != k * CR_REPLICA_ENTRY_BYTES)
        return cr_fail(err, CR_EINVAL, "a chunk of %llu owners must hold %llu bytes, got %zu",
                       (unsigned long long)k, (unsigned long long)k * CR_REPLICA_ENTRY_BYTES,
                       c.left);
    cr_estimator_entry *v = k ? malloc(k * sizeof *v) : NULL;
    if (k && !v)
        return cr_fail(err, CR_ENOMEM, "out of memory decoding %llu owners",
                       (unsigned long long)k);
    for (uint64_t i = 0; i < k; i++) {
        v[i].owner = (int64_t)cr_get_u64(&c);
        v[i].count = cr_get_f64(&c);
        v[i].t_last = cr_get_f64(&c);
        if (check_entry(&v[i], i, err) != CR_OK) {
            free(v);
            return CR_EINVAL;
        }
    }
    *out = v;
    *n = (size_t)k;
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
    if (cr_replica_check_version(&c, version, CR_REPLICA_TABLE_VERSION, "the published table",
                                 "a short blob ", err) != CR_OK)
        return CR_EINVAL;
    cr_status st = cr_table_load(&c, out, err);
    if (st == CR_OK && c.left) {
        cr_table_free(*out);
        *out = NULL;
        return cr_fail(err, CR_EINVAL, "the published table has %zu bytes past its end", c.left);
    }
    return st;
}
