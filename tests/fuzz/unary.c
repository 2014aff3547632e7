/* A cacheroute.v1 unary method against the seeded core, and the state
 * it must leave alone (fuzz.h). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* Shards whose served figures the state compares (GetStats has them all;
 * its 65,536-entry answer buffer would cost more than the call fuzzed). */
#define STATE_SHARDS 64

typedef struct state {
    uint8_t *rates;
    size_t rates_len;
    cr_loop_stats loop; /* what GetStats answers from */
    cr_loop_shard_stats shards[STATE_SHARDS];
    uint64_t generation;
    cr_route_stats routes;
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
    const cr_route_stats *x = &a->routes, *y = &b->routes;
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
    cr_handlers h = env->handlers;
    h.max_message = m->max_message ? m->max_message : CR_FUZZ_MAX_MESSAGE;
    cr_reply r = {.status = GRPC_STATUS_OK};
    m->handle(&h, data, len, &r);
    ProtobufCMessage *resp =
        cr_fuzz_check_reply(&r, m->codes, m->request, m->response, data, len, h.max_message);
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

ProtobufCMessage *cr_fuzz_split_agrees(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                                       size_t len, const uint8_t *rest, size_t left)
{
    ProtobufCMessage *w = protobuf_c_message_unpack(d, NULL, len, data);
    ProtobufCMessage *r = protobuf_c_message_unpack(d, NULL, left, rest);
    CR_FUZZ_CHECK(!w == !r, "split's rest %s, the whole %s", r ? "decodes" : "does not",
                  w ? "does" : "does not");
    if (r)
        protobuf_c_message_free_unpacked(r, NULL);
    return w;
}
