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

typedef struct state {
    uint8_t *rates, *stats;
    size_t rates_len, stats_len;
    uint64_t generation;
    cr_core_route_stats routes;
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

static void state_read(const cr_fuzz_env *env, state *s)
{
    memset(s, 0, sizeof *s);
    s->rates = read_body(env, cr_handle_get_rates, &s->rates_len);
    s->stats = read_body(env, cr_handle_get_stats, &s->stats_len);
    cr_core_plan_result cur;
    cr_core_current(env->core, &cur);
    s->generation = cur.generation;
    cr_core_plan_result_free(&cur);
    cr_core_route_stats_read(env->core, &s->routes, NULL, 0);
}

static void state_free(state *s)
{
    free(s->rates);
    free(s->stats);
}

static int same_bytes(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na));
}

static void check_unchanged(const state *a, const state *b, const char *why)
{
    const cr_core_route_stats *x = &a->routes, *y = &b->routes;
    CR_FUZZ_CHECK(same_bytes(a->rates, a->rates_len, b->rates, b->rates_len),
                  "%s changed the rates", why);
    CR_FUZZ_CHECK(same_bytes(a->stats, a->stats_len, b->stats, b->stats_len),
                  "%s changed GetStats", why);
    CR_FUZZ_CHECK(a->generation == b->generation, "%s installed a table (%llu -> %llu)", why,
                  (unsigned long long)a->generation, (unsigned long long)b->generation);
    CR_FUZZ_CHECK(x->outstanding == y->outstanding && x->queued == y->queued &&
                      x->released == y->released && x->evicted == y->evicted &&
                      x->diverted == y->diverted,
                  "%s changed the routes in flight", why);
}

int cr_fuzz_unary(const cr_fuzz_method *m, const uint8_t *data, size_t len)
{
    cr_fuzz_env env;
    cr_fuzz_env_open(&env, m->route_by);
    state before, after;
    state_read(&env, &before);
    cr_reply r = {.status = GRPC_STATUS_OK};
    m->handle(&env.handlers, data, len, &r);
    ProtobufCMessage *resp =
        cr_fuzz_check_reply(&r, m->codes, m->request, m->response, data, len, CR_FUZZ_MAX_MESSAGE);
    state_read(&env, &after); /* GetStats still answers */
    if (!resp)
        check_unchanged(&before, &after, r.message);
    else if (m->read_only)
        check_unchanged(&before, &after, m->request->name);
    if (resp && m->check_ok) {
        ProtobufCMessage *req = protobuf_c_message_unpack(m->request, NULL, len, data);
        CR_FUZZ_CHECK(req, "%s answered OK to bytes that do not decode", m->request->name);
        m->check_ok(&env, req, resp);
        protobuf_c_message_free_unpacked(req, NULL);
    }
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    free(r.body);
    state_free(&before);
    state_free(&after);
    cr_fuzz_env_close(&env);
    return 0;
}
