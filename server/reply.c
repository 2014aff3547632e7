#include "reply.h"

void cr_run_decoded(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                    size_t len, cr_reply *out, cr_decoded_fn fn)
{
    /* Bytes protobuf-c refuses are malformed whatever their strings hold;
     * what it takes may still cut a string at a NUL, echo one that is not
     * UTF-8, or keep a field numbered 0, which the check refuses. */
    char why[sizeof out->message];
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, data);
    if (!m) {
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s message (%zu bytes)",
                       d->name, len);
        return;
    }
    if (cr_wire_check_strings(d, data, len, why, sizeof why) != 0)
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT, "%s", why);
    else
        fn(ctx, m, out);
    protobuf_c_message_free_unpacked(m, NULL);
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
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%s would be %zu bytes, over the %zu-byte message limit "
                       "(--max-message-bytes)%s%s",
                       msg->descriptor->name, len, max, hint ? "; " : "", hint ? hint : "");
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
