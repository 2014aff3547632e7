#include "reply.h"

/* Decodes into the thread's arena (or, nested in another decoded call, one
 * of its own), then runs fn or fn_in, then gives the arena back. */
static void run_decoded(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                        size_t len, cr_reply *out, cr_split_fn split, cr_decoded_fn fn,
                        cr_decoded_in_fn fn_in)
{
    /* Bytes protobuf-c refuses are malformed whatever their strings hold;
     * what it takes may still cut a string at a NUL, echo one that is not
     * UTF-8, or keep a field numbered 0, which the check refuses. */
    cr_error why;
    cr_arena own, *a = cr_arena_take();
    if (!a) {
        cr_arena_init(&own);
        a = &own;
    }
    const uint8_t *bytes = data;
    size_t n = len;
    ProtobufCMessage *m = NULL;
    if (split && split(ctx, data, len, a, &bytes, &n) == 0) /* bytes: what split left */
        m = protobuf_c_message_unpack(d, &a->pc, n, bytes);
    if (!m) { /* no split, or one that was unsure: protobuf-c decides */
        bytes = data;
        n = len;
        m = protobuf_c_message_unpack(d, &a->pc, len, data);
    }
    if (!m)
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s message (%zu bytes)",
                       d->name, len);
    else if (cr_wire_check_strings(d, bytes, n, &why) != 0)
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT, "%s", why.msg);
    else if (out->gate && (out->gated = 1) && out->gate->admin_if(m))
        cr_reply_needs_admin(out, out->gate, 1);
    else if (fn)
        fn(ctx, m, out);
    else
        fn_in(ctx, m, a, out);
    if (a->refused && out->status != GRPC_STATUS_OK) /* the budget is why it failed */
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "decoding this %zu-byte %s with the calls in flight would take over "
                       "--max-decode-bytes (%zu bytes): retry, or send smaller requests",
                       len, d->name, cr_arena_budget());
    if (a == &own)
        cr_arena_destroy(&own);
    else
        cr_arena_put(a);
}

void cr_run_decoded(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                    size_t len, cr_reply *out, cr_decoded_fn fn)
{
    run_decoded(ctx, d, data, len, out, NULL, fn, NULL);
}

void cr_run_decoded_in(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                       size_t len, cr_reply *out, cr_decoded_in_fn fn)
{
    run_decoded(ctx, d, data, len, out, NULL, NULL, fn);
}

void cr_run_split_in(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                     size_t len, cr_reply *out, cr_split_fn split, cr_decoded_in_fn fn)
{
    run_decoded(ctx, d, data, len, out, split, NULL, fn);
}

void cr_reply_too_big(cr_reply *out, const ProtobufCMessageDescriptor *d, size_t len,
                      size_t max, const char *hint)
{
    cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                   "%s would be %zu bytes, over the %zu-byte message limit "
                   "(--max-message-bytes)%s%s",
                   d->name, len, max, hint ? "; " : "", hint ? hint : "");
}

void cr_reply_message(cr_reply *out, const ProtobufCMessage *msg, size_t max, const char *hint)
{
    uint8_t *body;
    size_t len;
    if (cr_wire_encode(msg, max, &body, &len) == 0) {
        out->status = GRPC_STATUS_OK;
        out->body = body;
        out->len = len;
    } else if (len > max) {
        cr_reply_too_big(out, msg->descriptor, len, max, hint);
    } else {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory packing %s",
                       msg->descriptor->name);
    }
}

int cr_refuse_entries(cr_reply *out, const char *field, size_t n, size_t limit,
                      grpc_status_code code, const char *why)
{
    if (n <= limit)
        return 0;
    cr_reply_error(out, code, "%s has %zu entries, at most %zu allowed%s%s", field, n, limit,
                   why ? ": " : "", why ? why : "");
    return -1;
}

/* A switch with no default, so a new cr_status fails the build here. */
static grpc_status_code core_code(cr_status st)
{
    switch (st) {
    case CR_EINVAL:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case CR_ESTATE:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case CR_OK: /* not an error: a caller's bug, answered as the server's */
        return GRPC_STATUS_INTERNAL;
    case CR_ENOMEM:
        break;
    }
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
}

void cr_reply_core_error(cr_reply *out, cr_status st, const cr_error *err)
{
    cr_reply_error(out, core_code(st), "%s", err->msg);
}
