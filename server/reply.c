#include "reply.h"

#include <stdlib.h>

void cr_run_decoded(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                    size_t len, cr_reply *out, cr_decoded_fn fn)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, data);
    if (!m) {
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s message (%zu bytes)",
                       d->name, len);
        return;
    }
    fn(ctx, m, out);
    protobuf_c_message_free_unpacked(m, NULL);
}

int cr_pack(const ProtobufCMessage *msg, size_t max, uint8_t **body, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(msg);
    *body = NULL;
    if (*len > max)
        return -1;
    *body = malloc(*len ? *len : 1);
    if (!*body)
        return -1;
    protobuf_c_message_pack(msg, *body);
    return 0;
}

void cr_reply_message(cr_reply *out, const ProtobufCMessage *msg, size_t max, const char *hint)
{
    uint8_t *body;
    size_t len;
    if (cr_pack(msg, max, &body, &len) == 0) {
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
