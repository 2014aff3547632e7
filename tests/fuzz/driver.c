/* The checks every fuzzed answer gets (fuzz.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

void cr_fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: fuzz invariant failed: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

int cr_fuzz_one_of(const char *s, const char *const *names, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (!strcmp(s, names[i]))
            return 1;
    return 0;
}

static void check_error(const cr_reply *r, const ProtobufCMessageDescriptor *request,
                        const uint8_t *data, size_t len)
{
    CR_FUZZ_CHECK(r->message[0] != '\0', "status %d without a message", (int)r->status);
    CR_FUZZ_CHECK(!r->body && r->len == 0, "status %d with a %zu-byte body", (int)r->status,
                  r->len);
    ProtobufCMessage *req = protobuf_c_message_unpack(request, NULL, len, data);
    if (req) {
        protobuf_c_message_free_unpacked(req, NULL);
        return;
    }
    CR_FUZZ_CHECK(r->status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r->message, "malformed"),
                  "undecodable %s answered %d '%s'", request->name, (int)r->status, r->message);
}

/* ---- what a strict proto3 reader refuses ---- */

/* Whether the n bytes at s are UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF), as proto3 requires of a string. */
static int utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k; /* continuation bytes */
        uint32_t cp, least;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f, least = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f, least = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07, least = 0x10000;
        } else {
            return 0;
        }
        if (k >= n - i)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
            return 0;
        i += k + 1;
    }
    return 1;
}

static const char *strict_error(const ProtobufCMessage *m, char *buf, size_t len);

/* One present field f of m: its strings are UTF-8, its messages strict. */
static const char *strict_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                                char *buf, size_t len)
{
    const char *at = (const char *)m + f->offset;
    size_t n = 1;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        n = *(const size_t *)((const char *)m + f->quantifier_offset);
        at = *(const char *const *)at;
    } else if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
               *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id) {
        return NULL; /* another member of the oneof is set */
    }
    for (size_t i = 0; i < n; i++) {
        const void *v = ((const void *const *)at)[i];
        if (f->type == PROTOBUF_C_TYPE_STRING && v && !utf8(v, strlen(v))) {
            snprintf(buf, len, "%s.%s is not UTF-8", m->descriptor->name, f->name);
            return buf;
        }
        if (f->type == PROTOBUF_C_TYPE_MESSAGE && v)
            if (strict_error(v, buf, len))
                return buf;
    }
    return NULL;
}

/* What a strict proto3 reader refuses in a message protobuf-c takes: a
 * string that is not UTF-8, or an unknown field numbered 0 (protobuf-c
 * 1.4 takes one whose tag is a long varint, and packs it back short, which
 * no reader takes, itself included). NULL when none; else why, in buf. */
static const char *strict_error(const ProtobufCMessage *m, char *buf, size_t len)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (size_t i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0) {
            snprintf(buf, len, "%s holds an unknown field numbered 0", d->name);
            return buf;
        }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if ((f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE) &&
            strict_field(m, f, buf, len))
            return buf;
    }
    return NULL;
}

/* CR_FUZZ_VERBOSE=1 prints each answer: to see what a seed exercises. */
static void trace_reply(const cr_reply *r, const ProtobufCMessageDescriptor *request)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("CR_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "%s: status %d, %zu bytes%s%s\n", request->name, (int)r->status, r->len,
                r->status ? ": " : "", r->status ? r->message : "");
}

ProtobufCMessage *cr_fuzz_check_reply(const cr_reply *r, unsigned codes,
                                      const ProtobufCMessageDescriptor *request,
                                      const ProtobufCMessageDescriptor *response,
                                      const uint8_t *data, size_t len, size_t max)
{
    trace_reply(r, request);
    CR_FUZZ_CHECK((unsigned)r->status < 32 && (codes & CR_CODE(r->status)),
                  "%s answered status %d, which it never should ('%s')", request->name,
                  (int)r->status, r->message);
    if (r->status != GRPC_STATUS_OK) {
        check_error(r, request, data, len);
        return NULL;
    }
    CR_FUZZ_CHECK(r->len <= max, "a %zu-byte %s, over the %zu-byte limit", r->len,
                  response->name, max);
    ProtobufCMessage *m = protobuf_c_message_unpack(response, NULL, r->len, r->body);
    CR_FUZZ_CHECK(m, "the OK body (%zu bytes) does not decode as %s", r->len, response->name);
    char why[256];
    CR_FUZZ_CHECK(!strict_error(m, why, sizeof why), "the OK body: %s", why);
    size_t again = protobuf_c_message_get_packed_size(m);
    uint8_t *bytes = malloc(again ? again : 1);
    CR_FUZZ_CHECK(bytes, "out of memory");
    protobuf_c_message_pack(m, bytes);
    CR_FUZZ_CHECK(again == r->len && !memcmp(bytes, r->body, again),
                  "%s does not pack back to its %zu bytes", response->name, r->len);
    free(bytes);
    return m;
}

/* ---- the core's observable state ---- */

/* Shards whose served figures the state compares (GetStats has them all;
 * its 65,536-entry answer buffer would cost more than the call fuzzed). */
#define STATE_SHARDS 64

typedef struct state {
    uint8_t *rates;
    size_t rates_len;
    cr_core_loop_stats loop; /* what GetStats answers from */
    cr_core_shard_stats shards[STATE_SHARDS];
    uint64_t generation;
    cr_core_route_stats routes;
    cr_inject_response probe; /* a fixed dry run: what reservations do to a decision */
} state;

/* One read-only handler's OK body, taken over. */
static uint8_t *read_body(const cr_fuzz_env *env, cr_handler_fn fn, size_t *len)
{
    cr_reply r = {.status = GRPC_STATUS_OK};
    fn((void *)&env->handlers, (const uint8_t *)"", 0, &r); /* an empty request */
    CR_FUZZ_CHECK(r.status == GRPC_STATUS_OK, "the core's state cannot be read: %d '%s'",
                  (int)r.status, r.message);
    *len = r.len;
    return r.body;
}

static void probe_decision(const cr_fuzz_env *env, cr_inject_response *out)
{
    cr_kv_source source = {"kvstore-a", 6000};
    cr_inject_request ir = {.prompt_tokens = 2000, .knowledge_tokens = 8000, .sources = &source,
                            .n_sources = 1, .dry_run = 1};
    cr_error err;
    memset(out, 0, sizeof *out);
    CR_FUZZ_CHECK(cr_core_select(env->core, NULL, &ir, out, &err) == CR_OK,
                  "the probe decision failed: %s", err.msg);
}

static void state_read(const cr_fuzz_env *env, state *s)
{
    memset(s, 0, sizeof *s);
    s->rates = read_body(env, cr_handle_get_rates, &s->rates_len);
    cr_core_loop_stats_read(env->core, &s->loop, s->shards, STATE_SHARDS, NULL, 0);
    cr_core_plan_result cur;
    cr_core_current(env->core, &cur);
    s->generation = cur.generation;
    cr_core_plan_result_free(&cur);
    cr_core_route_stats_read(env->core, &s->routes, NULL, 0);
    probe_decision(env, &s->probe);
}

static void state_free(state *s) { free(s->rates); }

static int same_bytes(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na));
}

static int same_breakdown(const cr_cost_breakdown *a, const cr_cost_breakdown *b)
{
    return a->queue_wait_ms == b->queue_wait_ms && a->link_wait_ms == b->link_wait_ms &&
           a->total_ms == b->total_ms;
}

/* What differs between a and b, or NULL. */
static const char *state_change(const state *a, const state *b)
{
    const cr_core_route_stats *x = &a->routes, *y = &b->routes;
    if (!same_bytes(a->rates, a->rates_len, b->rates, b->rates_len))
        return "the rates";
    /* memcmp: both were zeroed before the read, and NaN equals itself */
    if (memcmp(&a->loop, &b->loop, sizeof a->loop) || memcmp(a->shards, b->shards, sizeof a->shards))
        return "GetStats";
    if (a->generation != b->generation)
        return "the installed table";
    if (x->outstanding != y->outstanding || x->queued != y->queued ||
        x->released != y->released || x->evicted != y->evicted || x->diverted != y->diverted)
        return "the routes in flight";
    if (!same_breakdown(&a->probe.text, &b->probe.text) ||
        !same_breakdown(&a->probe.kv, &b->probe.kv))
        return "the reservations (a fixed dry run decides otherwise)";
    return NULL;
}

/* The seeded env, kept from one input to the next while the inputs leave
 * it as it was (which every error and read-only answer must, and is
 * checked), and opened afresh after one that changed it: every input meets
 * the same state, so a crash replays from its input alone, and the many
 * inputs that change nothing skip the env's set-up. */
static struct {
    int open;
    cr_fuzz_env env;
    state pristine;
} kept;

static cr_fuzz_env *env_for(cr_route_by route_by)
{
    if (!kept.open) {
        cr_fuzz_env_open(&kept.env, route_by);
        state_read(&kept.env, &kept.pristine);
        kept.open = 1;
    }
    return &kept.env;
}

static void env_drop(void)
{
    state_free(&kept.pristine);
    cr_fuzz_env_close(&kept.env);
    kept.open = 0;
}

int cr_fuzz_unary(const cr_fuzz_method *m, const uint8_t *data, size_t len)
{
    cr_fuzz_env *env = env_for(m->route_by);
    cr_reply r = {.status = GRPC_STATUS_OK};
    m->handle(&env->handlers, data, len, &r);
    ProtobufCMessage *resp =
        cr_fuzz_check_reply(&r, m->codes, m->request, m->response, data, len, CR_FUZZ_MAX_MESSAGE);
    state after;
    state_read(env, &after);
    const char *changed = state_change(&kept.pristine, &after);
    CR_FUZZ_CHECK(!changed || (resp && !m->read_only), "%s answered %d ('%s') and changed %s",
                  m->request->name, (int)r.status, r.message, changed);
    if (resp && m->check_ok) {
        ProtobufCMessage *req = protobuf_c_message_unpack(m->request, NULL, len, data);
        CR_FUZZ_CHECK(req, "%s answered OK to bytes that do not decode", m->request->name);
        m->check_ok(env, req, resp);
        protobuf_c_message_free_unpacked(req, NULL);
    }
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    free(r.body);
    state_free(&after);
    if (changed) { /* the core moved on: it still answers GetStats, then is dropped */
        size_t n;
        free(read_body(env, cr_handle_get_stats, &n));
        env_drop();
    }
    return 0;
}
