/* What replicas put in Redis for the endpoint set: the leader's published
 * set and the requests followers forward to it, little-endian through
 * bytes.h, each refused whole when anything in it is wrong. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Bytes a slot takes past its strings: state, weight, age, retry, and the
 * two strings' lengths. */
#define SLOT_FIXED (1 + 8 + 8 + 8 + 4 + 4)
/* A forwarded spec's least bytes: two lengths, one byte each, the weight. */
#define SPEC_LEAST (4 + 1 + 4 + 1 + 8)

static void put_str(cr_buf *b, const char *s)
{
    size_t n = strlen(s);
    cr_buf_u32(b, (uint32_t)n);
    cr_buf_put(b, s, n);
}

/* The next string into dst (max bytes and a NUL): CR_EINVAL naming what
 * when it is short, empty, longer than max or holds a NUL. */
static cr_status get_str(cr_cursor *c, char *dst, size_t max, const char *what, uint64_t i,
                         cr_error *err)
{
    uint32_t n = cr_get_u32(c);
    const uint8_t *p = c->failed || n > max ? NULL : cr_get_bytes(c, n);
    if (c->failed)
        return cr_fail(err, CR_EINVAL, "%s[%llu] is cut short", what, (unsigned long long)i);
    if (!p || n == 0 || memchr(p, 0, n))
        return cr_fail(err, CR_EINVAL, "%s[%llu] must be 1..%zu bytes without a NUL, got %u",
                       what, (unsigned long long)i, max, n);
    memcpy(dst, p, n);
    dst[n] = 0;
    return CR_OK;
}

cr_status cr_replica_members_encode(const cr_endpoints *e, double now, uint8_t **out,
                                    size_t *len, cr_error *err)
{
    cr_buf b = CR_BUF_INIT;
    cr_buf_u32(&b, CR_REPLICA_MEMBERS_VERSION);
    cr_buf_u64(&b, e->version);
    cr_buf_u32(&b, e->n_slots);
    for (uint32_t s = 0; s < e->n_slots; s++) {
        const cr_endpoint *x = &e->slot[s];
        cr_buf_u8(&b, (uint8_t)x->state);
        cr_buf_f64(&b, x->weight);
        cr_buf_f64(&b, fmax(0, now - x->since_s)); /* durations: clocks need not agree */
        cr_buf_f64(&b, x->state == CR_ENDPOINT_DOWN ? fmax(0, x->down_until_s - now) : 0);
        put_str(&b, x->id);
        put_str(&b, x->address);
    }
    if (b.failed) {
        cr_buf_free(&b);
        return cr_fail(err, CR_ENOMEM, "out of memory encoding %u endpoint slots", e->n_slots);
    }
    *out = b.p;
    *len = b.len;
    return CR_OK;
}

/* Slot i's fixed fields and strings; times onto now. */
static cr_status get_slot(cr_cursor *c, uint64_t i, double now, cr_endpoint *x, cr_error *err)
{
    memset(x, 0, sizeof *x);
    uint8_t state = cr_get_u8(c);
    x->weight = cr_get_f64(c);
    double age = cr_get_f64(c), retry = cr_get_f64(c);
    if (!c->failed && (state > CR_ENDPOINT_GONE || !(isfinite(age) && age >= 0) ||
                       !(isfinite(retry) && retry >= 0)))
        return cr_fail(err, CR_EINVAL,
                       "the endpoint set's slot[%llu] has state %u, age %g, retry in %g: "
                       "want a state 0..%d and finite durations >= 0",
                       (unsigned long long)i, state, age, retry, CR_ENDPOINT_GONE);
    x->state = (cr_endpoint_state)state;
    x->since_s = now - age;
    x->down_until_s = x->state == CR_ENDPOINT_DOWN ? now + retry : 0;
    cr_status st = get_str(c, x->id, CR_ENDPOINT_ID_MAX, "the endpoint set's id", i, err);
    return st != CR_OK ? st
                       : get_str(c, x->address, CR_ENDPOINT_ADDRESS_MAX,
                                 "the endpoint set's address", i, err);
}

cr_status cr_replica_members_decode(const void *p, size_t len, double now, cr_endpoint **out,
                                    uint32_t *n, uint64_t *version, cr_error *err)
{
    cr_cursor c = cr_cursor_of(p, len);
    uint32_t format = cr_get_u32(&c);
    *version = cr_get_u64(&c);
    uint32_t k = cr_get_u32(&c);
    *out = NULL;
    *n = 0;
    if (cr_replica_check_version(&c, format, CR_REPLICA_MEMBERS_VERSION,
                                 "the published endpoint set", "a short blob ", err) != CR_OK)
        return CR_EINVAL;
    if (k == 0 || k > CR_ENDPOINTS_MAX || !cr_cursor_holds(&c, k, SLOT_FIXED + 2))
        return cr_fail(err, CR_EINVAL,
                       "the published endpoint set must have 1..%d slots in its %zu bytes, "
                       "got %u",
                       CR_ENDPOINTS_MAX, len, k);
    cr_endpoint *v = malloc((size_t)k * sizeof *v);
    if (!v)
        return cr_fail(err, CR_ENOMEM, "out of memory decoding %u endpoint slots", k);
    for (uint32_t i = 0; i < k; i++)
        if (get_slot(&c, i, now, &v[i], err) != CR_OK) {
            free(v);
            return CR_EINVAL;
        }
    if (c.left) {
        free(v);
        return cr_fail(err, CR_EINVAL, "the published endpoint set has %zu bytes past its end",
                       c.left);
    }
    *out = v;
    *n = k;
    return CR_OK;
}

cr_status cr_replica_forward_encode(const cr_forward *f, uint8_t **out, size_t *len,
                                    cr_error *err)
{
    cr_buf b = CR_BUF_INIT;
    cr_buf_u32(&b, CR_REPLICA_FORWARD_VERSION);
    cr_buf_u8(&b, (uint8_t)f->kind);
    put_str(&b, f->from);
    if (f->kind == CR_FORWARD_SET) {
        cr_buf_u32(&b, (uint32_t)f->n);
        for (size_t i = 0; i < f->n; i++) {
            put_str(&b, f->specs[i].id);
            put_str(&b, f->specs[i].address);
            cr_buf_f64(&b, f->specs[i].weight);
        }
    } else {
        put_str(&b, f->id);
    }
    if (b.failed) {
        cr_buf_free(&b);
        return cr_fail(err, CR_ENOMEM, "out of memory encoding a forwarded request");
    }
    *out = b.p;
    *len = b.len;
    return CR_OK;
}

/* The next string of a forwarded request into the block's string space. */
static cr_status take_str(cr_cursor *c, char **space, size_t max, const char *what, uint64_t i,
                          const char **dst, cr_error *err)
{
    cr_status st = get_str(c, *space, max, what, i, err);
    if (st == CR_OK) {
        *dst = *space;
        *space += strlen(*space) + 1;
    }
    return st;
}

/* The request's body past its kind and origin: the set, or the id. */
static cr_status get_body(cr_cursor *c, cr_forward *f, char **space, cr_error *err)
{
    if (f->kind != CR_FORWARD_SET)
        return take_str(c, space, CR_ENDPOINT_ID_MAX, "the forwarded id", 0, &f->id, err);
    cr_endpoint_spec *v = (cr_endpoint_spec *)f->specs;
    for (size_t i = 0; i < f->n; i++) {
        cr_status st =
            take_str(c, space, CR_ENDPOINT_ID_MAX, "the forwarded endpoints' id", i, &v[i].id, err);
        if (st == CR_OK)
            st = take_str(c, space, CR_ENDPOINT_ADDRESS_MAX, "the forwarded endpoints' address",
                          i, &v[i].address, err);
        if (st != CR_OK)
            return st;
        v[i].weight = cr_get_f64(c);
    }
    return CR_OK;
}

cr_status cr_replica_forward_decode(const void *p, size_t len, cr_forward **out,
                                    cr_error *err)
{
    cr_cursor c = cr_cursor_of(p, len);
    uint32_t format = cr_get_u32(&c);
    uint8_t kind = cr_get_u8(&c);
    *out = NULL;
    if (cr_replica_check_version(&c, format, CR_REPLICA_FORWARD_VERSION, "a forwarded request",
                                 "a short blob ", err) != CR_OK)
        return CR_EINVAL;
    if (kind < CR_FORWARD_SET || kind > CR_FORWARD_UNDRAIN)
        return cr_fail(err, CR_EINVAL, "a forwarded request's kind must be %d..%d, got %u",
                       CR_FORWARD_SET, CR_FORWARD_UNDRAIN, kind);
    /* One block: the request, its specs, then every string with its NUL,
     * which the blob's 4-byte lengths more than pay for. */
    char from[CR_REPLICA_ID_MAX + 1];
    cr_status st = get_str(&c, from, CR_REPLICA_ID_MAX, "a forwarded request's origin", 0, err);
    uint32_t n = kind == CR_FORWARD_SET ? cr_get_u32(&c) : 0;
    if (st == CR_OK && (c.failed || n > CR_ENDPOINTS_MAX || !cr_cursor_holds(&c, n, SPEC_LEAST)))
        st = cr_fail(err, CR_EINVAL,
                     "a forwarded SetEndpoints must have at most %d endpoints in its %zu bytes, "
                     "got %u",
                     CR_ENDPOINTS_MAX, len, n);
    cr_forward *f =
        st == CR_OK ? calloc(1, sizeof *f + n * sizeof(cr_endpoint_spec) + len + sizeof from)
                    : NULL;
    if (st == CR_OK && !f)
        st = cr_fail(err, CR_ENOMEM, "out of memory decoding a forwarded request");
    if (st != CR_OK)
        return st;
    char *space = (char *)((cr_endpoint_spec *)(f + 1) + n);
    f->kind = kind;
    f->specs = (cr_endpoint_spec *)(f + 1);
    f->n = n;
    f->from = strcpy(space, from);
    space += strlen(from) + 1;
    st = get_body(&c, f, &space, err);
    if (st == CR_OK && (c.failed || c.left))
        st = cr_fail(err, CR_EINVAL, "a forwarded request is %s",
                     c.failed ? "cut short" : "longer than its contents");
    if (st != CR_OK) {
        free(f);
        return st;
    }
    *out = f;
    return CR_OK;
}
