/* ReportKvEvents: the events as the core's, one cr_core_kv_events (every
 * check is the core's but the count, taken on the wire before decoding). */
#include <string.h>

#include "handlers.h"
#include "reply.h"
#include "wire.h"

typedef Cacheroute__V1__KvEvent KvEvent;
typedef Cacheroute__V1__ReportKvEventsRequest ReportKvEventsRequest;

/* A medium as a tier: unset, "" and "GPU" the GPU, "CPU" host memory;
 * -1 for anything else. */
static int tier_of(const char *medium)
{
    if (!medium || !*medium || strcmp(medium, "GPU") == 0)
        return CR_KV_GPU;
    return strcmp(medium, "CPU") == 0 ? CR_KV_CPU : -1;
}

/* e's fields; pointers into the message. An event with no case set is
 * kind 0, which the core names. A medium no tier is: -1, with the field's
 * name in *bad. */
static int event_of(const KvEvent *m, cr_kv_event *e, const char **bad)
{
    int tier = CR_KV_GPU;
    memset(e, 0, sizeof *e);
    e->shard = m->shard;
    switch (m->event_case) {
    case CACHEROUTE__V1__KV_EVENT__EVENT_BLOCK_STORED: {
        const Cacheroute__V1__KvBlockStored *s = m->block_stored;
        e->kind = CR_KV_STORED;
        e->engine = s->block_hashes;
        e->n = s->n_block_hashes;
        e->has_parent = s->has_parent_block_hash;
        e->parent = s->parent_block_hash;
        e->tokens = s->token_ids;
        e->n_tokens = s->n_token_ids;
        e->block_size = s->has_block_size ? s->block_size : 0;
        e->space = s->lora_name;
        e->space_len = s->lora_name ? strlen(s->lora_name) : 0;
        tier = tier_of(*bad = s->medium);
        break;
    }
    case CACHEROUTE__V1__KV_EVENT__EVENT_BLOCK_REMOVED:
        e->kind = CR_KV_REMOVED;
        e->engine = m->block_removed->block_hashes;
        e->n = m->block_removed->n_block_hashes;
        tier = tier_of(*bad = m->block_removed->medium);
        break;
    case CACHEROUTE__V1__KV_EVENT__EVENT_ALL_BLOCKS_CLEARED:
        e->kind = CR_KV_CLEARED;
        break;
    default:
        break;
    }
    e->tier = tier < 0 ? CR_KV_GPU : (cr_kv_tier)tier;
    return tier;
}

static void report_kv_events(void *ctx, const void *message, cr_arena *scratch, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ReportKvEventsRequest *req = message;
    size_t n = req->n_events;
    cr_kv_event *ev = cr_arena_alloc(scratch, (n ? n : 1) * sizeof *ev);
    if (!ev) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu events", n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const char *medium = NULL;
        if (event_of(req->events[i], &ev[i], &medium) < 0) { /* the wire's word, named here */
            cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT,
                           "events[%zu].%s.medium must be GPU or CPU, got \"%.64s\"", i,
                           ev[i].kind == CR_KV_STORED ? "block_stored" : "block_removed",
                           medium);
            return;
        }
    }
    cr_kv_applied applied;
    cr_error err;
    cr_status st = cr_core_kv_events(h->core, ev, n, &applied, &err);
    if (st != CR_OK) {
        cr_reply_core_error(out, st, &err);
        return;
    }
    Cacheroute__V1__ReportKvEventsResponse resp = CACHEROUTE__V1__REPORT_KV_EVENTS_RESPONSE__INIT;
    resp.stored = applied.stored;
    resp.removed = applied.removed;
    resp.orphans = applied.orphans;
    resp.unknown = applied.unknown;
    cr_reply_message(out, &resp.base, h->max_message, NULL);
}

void cr_handle_report_kv_events(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__report_kv_events_request__descriptor;
    if (cr_refuse_entries(out, "events", cr_wire_count(d, data, len, "events"),
                          CR_CORE_MAX_KV_EVENTS, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "send them in several calls") != 0)
        return;
    cr_run_decoded_in(ctx, d, data, len, out, report_kv_events);
}
