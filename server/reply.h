/* protobuf-c <-> reply helpers shared by the handlers. */
#ifndef CR_REPLY_H
#define CR_REPLY_H

#include <protobuf-c/protobuf-c.h>

#include "rpc.h"

/* Unpacks a message; on malformed bytes sets INVALID_ARGUMENT naming the
 * message type and returns NULL. Free with protobuf_c_message_free_unpacked. */
void *cr_decode(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                cr_reply *out);
#define CR_DECODE(prefix, data, len, out) cr_decode(&prefix##__descriptor, data, len, out)

/* Packs msg into a malloc'd buffer. Returns 0, or -1 when it would be larger
 * than max bytes (*len then holds the size) or memory runs out. */
int cr_pack(const ProtobufCMessage *msg, size_t max, uint8_t **body, size_t *len);

/* Packs msg as the reply body; a message over max bytes becomes
 * RESOURCE_EXHAUSTED naming the size and the limit (hint says what to do). */
void cr_reply_message(cr_reply *out, const ProtobufCMessage *msg, size_t max, const char *hint);

#endif
