/* What replicas put in Redis for the endpoint set: the leader's published
 * set and the requests followers forward to it, little-endian through
 * bytes.h, each refused whole when anything in it is wrong. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Bytes a slot takes past its strings: state, weight, age, retry, and the
 * two strings' lengths; version 2 adds by_source and kv_events' length. */
#define SLOT_FIXED_V1 (1 + 8 + 8 + 8 + 4 + 4)
#define SLOT_FIXED (SLOT_FIXED_V1 + 1 + 4)
/* A forwarded spec's least bytes: two lengths, one byte each, the weight
 * (version 1); version 2 adds kv_events' length, stated and state. */
#define SPEC_LEAST_V1 (4 + 1 + 4 + 1 + 8)
#define SPEC_LEAST (SPEC_LEAST_V1 + 4 + 1 + 1)

static void put_str(cr_buf *b, const char *s)
{
    size_t n = strlen(s);
    cr_buf_u32(b, (uint32_t)n);
    cr_buf_put(b, s, n);
}

/* The next string into dst (max bytes and a NUL), at least least bytes:
 * CR_EINVAL naming what when it is short, shorter than least, longer than
 * max or holds a NUL. */
static cr_status get_text(cr_cursor *c, char *dst, size_t least, size_t max, const char *what,
                          uint64_t i, cr_error *err)
{
    uint32_t n = cr_get_u32(c);
    const uint8_t *p = c->failed || n > max ? NULL : cr_get_bytes(c, n);
    if (c->failed)
        return cr_fail(err, CR_EINVAL, "%s[%llu] is cut short", what, (unsigned long long)i);
    if ((!p && n) || n < least || (n && memchr(p, 0, n)))
        return cr_fail(err, CR_EINVAL, "%s[%llu] must be %zu..%zu bytes without a NUL, got %u",
                       what, (unsigned long long)i, least, max, n);
    if (n)
        memcpy(dst, p, n);
    dst[n] = 0;
    return CR_OK;
}

/* A string that may not be empty. */
static cr_status get_str(cr_cursor *c, char *dst, size_t max, const char *what, uint64_t i,
                         cr_error *err)
{
    return get_text(c, dst, 1, max, what, i, err);
}

/* The blob's format: CR_OK for 1 or the current one. */
static cr_status check_format(const cr_cursor *c, uint32_t format, uint32_t want,
                              const char *what, cr_error *err)
{
    return format == 1 && !c->failed
               ? CR_OK
               : cr_replica_check_version(c, format, want, what, "a short blob ", err);
}

/* 1 when a slot of e has what only format 2 carries: a set without
 * either is written as format 1, which replicas of before it read too. */
static int members_need_v2(const cr_endpoints *e)
{
    for (uint32_t s = 0; s < e->n_slots; s++)
        if (e->slot[s].kv_events[0] || e->slot[s].by_source)
            return 1;
    return 0;
}

cr_status cr_replica_members_encode(const cr_endpoints *e, double now, uint8_t **out,
                                    size_t *len, cr_error *err)
{
    cr_buf b = CR_BUF_INIT;
    uint32_t format = members_need_v2(e) ? CR_REPLICA_MEMBERS_VERSION : 1;
    cr_buf_u32(&b, format);
    cr_buf_u64(&b, e->version);
    cr_buf_u32(&b, e->n_slots);
    for (uint32_t s = 0; s < e->n_slots; s++) {
        const cr_endpoint *x = &e->slot[s];
        cr_buf_u8(&b, (uint8_t)x->state);
        if (format != 1)
            cr_buf_u8(&b, x->by_source);
        cr_buf_f64(&b, x->weight);
        cr_buf_f64(&b, fmax(0, now - x->since_s)); /* durations: clocks need not agree */
        /* a stated DOWN is retried never: INFINITY, which travels as such */
        cr_buf_f64(&b, x->state == CR_ENDPOINT_DOWN ? fmax(0, x->down_until_s - now) : 0);
        put_str(&b, x->id);
        put_str(&b, x->address);
        if (format != 1)
            put_str(&b, x->kv_events);
    }
    if (b.failed) {
        cr_buf_free(&b);
        return cr_fail(err, CR_ENOMEM, "out of memory encoding %u endpoint slots", e->n_slots);
    }
    *out = b.p;
    *len = b.len;
    return CR_OK;
}

/* Slot i's fixed fields and strings (format 1: no by_source, no
 * kv_events); times onto now. */
static cr_status get_slot(cr_cursor *c, uint32_t format, uint64_t i, double now, cr_endpoint *x,
                          cr_error *err)
{
    memset(x, 0, sizeof *x);
    uint8_t state = cr_get_u8(c);
    uint8_t by_source = format == 1 ? 0 : cr_get_u8(c);
    x->weight = cr_get_f64(c);
    double age = cr_get_f64(c), retry = cr_get_f64(c);
    /* only a stated DOWN waits forever */
    int forever = by_source == 1 && state == CR_ENDPOINT_DOWN && retry == INFINITY;
    if (!c->failed && (state > CR_ENDPOINT_GONE || by_source > 1 ||
                       !(isfinite(age) && age >= 0) ||
                       !((isfinite(retry) && retry >= 0) || forever)))
        return cr_fail(err, CR_EINVAL,
                       "the endpoint set's slot[%llu] has state %u, by_source %u, age %g, retry "
                       "in %g: want a state 0..%d, by_source 0 or 1 and durations >= 0, finite "
                       "but a stated DOWN's retry",
                       (unsigned long long)i, state, by_source, age, retry, CR_ENDPOINT_GONE);
    x->state = (cr_endpoint_state)state;
    x->by_source = by_source;
    x->since_s = now - age;
    x->down_until_s = x->state == CR_ENDPOINT_DOWN ? now + retry : 0;
    cr_status st = get_str(c, x->id, CR_ENDPOINT_ID_MAX, "the endpoint set's id", i, err);
    if (st == CR_OK)
        st = get_str(c, x->address, CR_ENDPOINT_ADDRESS_MAX, "the endpoint set's address", i,
                     err);
    if (st == CR_OK && format != 1)
        st = get_text(c, x->kv_events, 0, CR_ENDPOINT_ADDRESS_MAX,
                      "the endpoint set's kv_events", i, err);
    return st;
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
    if (check_format(&c, format, CR_REPLICA_MEMBERS_VERSION, "the published endpoint set",
                     err) != CR_OK)
        return CR_EINVAL;
    if (k == 0 || k > CR_ENDPOINTS_MAX ||
        !cr_cursor_holds(&c, k, (format == 1 ? SLOT_FIXED_V1 : SLOT_FIXED) + 2))
        return cr_fail(err, CR_EINVAL,
                       "the published endpoint set must have 1..%d slots in its %zu bytes, "
                       "got %u",
                       CR_ENDPOINTS_MAX, len, k);
    cr_endpoint *v = malloc((size_t)k * sizeof *v);
    if (!v)
        return cr_fail(err, CR_ENOMEM, "out of memory decoding %u endpoint slots", k);
    for (uint32_t i = 0; i < k; i++)
        if (get_slot(&c, format, i, now, &v[i], err) != CR_OK) {
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
    uint32_t format = 1; /* as for the set: 2 only for what needs it */
    for (size_t i = 0; f->kind == CR_FORWARD_SET && i < f->n; i++)
        if ((f->specs[i].kv_events && f->specs[i].kv_events[0]) || f->specs[i].stated)
            format = CR_REPLICA_FORWARD_VERSION;
    cr_buf b = CR_BUF_INIT;
    cr_buf_u32(&b, format);
    cr_buf_u8(&b, (uint8_t)f->kind);
    put_str(&b, f->from);
    if (f->kind == CR_FORWARD_SET) {
        cr_buf_u32(&b, (uint32_t)f->n);
        for (size_t i = 0; i < f->n; i++) {
            const cr_endpoint_spec *x = &f->specs[i];
            put_str(&b, x->id);
            put_str(&b, x->address);
            cr_buf_f64(&b, x->weight);
            if (format == 1)
                continue;
            put_str(&b, x->kv_events ? x->kv_events : "");
            cr_buf_u8(&b, x->stated ? 1 : 0);
            cr_buf_u8(&b, (uint8_t)(x->stated ? x->state : CR_ENDPOINT_ACTIVE));
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

/* The next string of a forwarded request into the block's string space,
 * least..max bytes. */
static cr_status take_str(cr_cursor *c, char **space, size_t least, size_t max,
                          const char *what, uint64_t i, const char **dst, cr_error *err)
{
    cr_status st = get_text(c, *space, least, max, what, i, err);
    if (st == CR_OK) {
        *dst = *space;
        *space += strlen(*space) + 1;
    }
    return st;
}

/* Spec i's KV-event address and stated state (format 2). */
static cr_status get_stated(cr_cursor *c, char **space, uint64_t i, cr_endpoint_spec *x,
                            cr_error *err)
{
    cr_status st = take_str(c, space, 0, CR_ENDPOINT_ADDRESS_MAX,
                            "the forwarded endpoints' kv_events", i, &x->kv_events, err);
    uint8_t stated = cr_get_u8(c), state = cr_get_u8(c);
    if (st == CR_OK && !c->failed && (stated > 1 || state > CR_ENDPOINT_DOWN))
        st = cr_fail(err, CR_EINVAL,
                     "the forwarded endpoints' spec[%llu] has stated %u, state %u: want 0 or 1, "
                     "and a state 0..%d",
                     (unsigned long long)i, stated, state, CR_ENDPOINT_DOWN);
    x->stated = stated;
    x->state = (cr_endpoint_state)state;
    return st;
}

/* The request's body past its kind and origin: the set, or the id. */
static cr_status get_body(cr_cursor *c, uint32_t format, cr_forward *f, char **space,
                          cr_error *err)
{
    if (f->kind != CR_FORWARD_SET)
        return take_str(c, space, 1, CR_ENDPOINT_ID_MAX, "the forwarded id", 0, &f->id, err);
    cr_endpoint_spec *v = (cr_endpoint_spec *)f->specs;
    for (size_t i = 0; i < f->n; i++) {
        cr_status st = take_str(c, space, 1, CR_ENDPOINT_ID_MAX, "the forwarded endpoints' id", i,
                                &v[i].id, err);
        if (st == CR_OK)
            st = take_str(c, space, 1, CR_ENDPOINT_ADDRESS_MAX,
                          "the forwarded endpoints' address", i, &v[i].address, err);
        if (st != CR_OK)
            return st;
        v[i].weight = cr_get_f64(c);
        if (format != 1 && (st = get_stated(c, space, i, &v[i], err)) != CR_OK)
            return st;
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
    if (check_format(&c, format, CR_REPLICA_FORWARD_VERSION, "a forwarded request", err) !=
        CR_OK)
        return CR_EINVAL;
    if (kind < CR_FORWARD_SET || kind > CR_FORWARD_UNDRAIN)
        return cr_fail(err, CR_EINVAL, "a forwarded request's kind must be %d..%d, got %u",
                       CR_FORWARD_SET, CR_FORWARD_UNDRAIN, kind);
    /* One block: the request, its specs, then every string with its NUL,
     * which the blob's 4-byte lengths more than pay for. */
    char from[CR_REPLICA_ID_MAX + 1];
    cr_status st = get_str(&c, from, CR_REPLICA_ID_MAX, "a forwarded request's origin", 0, err);
    uint32_t n = kind == CR_FORWARD_SET ? cr_get_u32(&c) : 0;
    if (st == CR_OK && (c.failed || n > CR_ENDPOINTS_MAX ||
                        !cr_cursor_holds(&c, n, format == 1 ? SPEC_LEAST_V1 : SPEC_LEAST)))
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
    st = get_body(&c, format, f, &space, err);
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
