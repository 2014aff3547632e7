/* protobuf-c <-> reply helpers shared by the handlers. */
#ifndef CR_REPLY_H
#define CR_REPLY_H

#include <protobuf-c/protobuf-c.h>

#include "rpc.h"
#include "wire.h"

/* Decodes data as type d and runs fn(ctx, message, out) on it, then frees
 * the message; malformed bytes get INVALID_ARGUMENT naming the message type,
 * and no call. */
typedef void (*cr_decoded_fn)(void *ctx, const void *message, cr_reply *out);
void cr_run_decoded(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                    size_t len, cr_reply *out, cr_decoded_fn fn);

/* cr_wire_encode (proto/wire.h) by its old name: packs msg into a malloc'd
 * buffer; 0, or -1 when over max bytes (*len holds the size) or out of
 * memory. */
static inline int cr_pack(const ProtobufCMessage *msg, size_t max, uint8_t **body, size_t *len)
{
    return cr_wire_encode(msg, max, body, len);
}

/* Packs msg as the reply body; a message over max bytes becomes
 * RESOURCE_EXHAUSTED naming the size and the limit (hint says what to do). */
void cr_reply_message(cr_reply *out, const ProtobufCMessage *msg, size_t max, const char *hint);

#endif
