/* protobuf-c <-> reply helpers shared by the handlers, and the one map
 * from the core's errors to gRPC status codes. */
#ifndef CR_REPLY_H
#define CR_REPLY_H

#include <protobuf-c/protobuf-c.h>

#include "arena.h"
#include "common.h"
#include "rpc.h"
#include "wire.h"

/* Decodes data as type d and runs fn(ctx, message, out) on it, then frees
 * the message. A string field anywhere in it that is not UTF-8 or holds a
 * NUL gets INVALID_ARGUMENT naming the field path (cr_wire_check_strings),
 * malformed bytes INVALID_ARGUMENT naming the message type, a message
 * out->gate's admin_if holds for PERMISSION_DENIED (rpc.h); no call then.
 * The message lives in the calling thread's arena (arena.h: no malloc per
 * element) and only until fn returns. Thread-safe; may nest (a nested call
 * decodes into an arena of its own). */
typedef void (*cr_decoded_fn)(void *ctx, const void *message, cr_reply *out);
void cr_run_decoded(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                    size_t len, cr_reply *out, cr_decoded_fn fn);

/* The same, handing fn the arena the message is in, for the handler's own
 * scratch (cr_arena_alloc): freed with the message when fn returns. */
typedef void (*cr_decoded_in_fn)(void *ctx, const void *message, cr_arena *scratch,
                                 cr_reply *out);
void cr_run_decoded_in(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                       size_t len, cr_reply *out, cr_decoded_in_fn fn);

/* cr_run_decoded_in with a fast path for a message's bulk: split, run
 * first in the call's arena a, decodes what it can straight from data (e.g.
 * PlanRequest.rates, with cr_wire_split_pairs) into ctx and leaves the other
 * fields' bytes in *rest (its own, e.g. in a), *rest_len of them; protobuf-c
 * unpacks and the string check checks only those, and fn gets a message
 * without what split took. split returns 0, or -1 when it is not sure of
 * the bytes: then protobuf-c unpacks all of data as cr_run_decoded_in does,
 * and fn must look at the message's own field (split tells it by what it
 * leaves in ctx). So split changes the time a call takes, never its answer,
 * provided it decodes as protobuf-c does. */
typedef int (*cr_split_fn)(void *ctx, const uint8_t *data, size_t len, cr_arena *a,
                           const uint8_t **rest, size_t *rest_len);
void cr_run_split_in(void *ctx, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                     size_t len, cr_reply *out, cr_split_fn split, cr_decoded_in_fn fn);

/* Before decoding, with n a request's entries in field as cr_wire_count
 * counts them on the wire: 0 when n <= limit; else -1 with out set to code
 * and "FIELD has N entries, at most LIMIT allowed: WHY" (why may be NULL).
 * So a request's count bounds its decode and its answer before protobuf-c
 * allocates anything. */
int cr_refuse_entries(cr_reply *out, const char *field, size_t n, size_t limit,
                      grpc_status_code code, const char *why);

/* Decoding may take at most CR_DECODE_RATIO bytes of memory per byte of the
 * message limit: as many as a repeated int64 of 1-byte varints does, so
 * scalar lists always decode and lists of small messages (~24 bytes each
 * per 2 wire bytes) are refused before protobuf-c sees them. */
#define CR_DECODE_RATIO 8
#define CR_DECODE_HINT "decoding more would take over 8 bytes per byte of --max-message-bytes"
static inline size_t cr_decode_limit(size_t max_message, size_t bytes_each)
{
    return max_message / bytes_each * CR_DECODE_RATIO;
}

/* cr_wire_encode (wire/include/wire.h) by its old name: packs msg into a malloc'd
 * buffer; 0, or -1 when over max bytes (*len holds the size) or out of
 * memory. */
static inline int cr_pack(const ProtobufCMessage *msg, size_t max, uint8_t **body, size_t *len)
{
    return cr_wire_encode(msg, max, body, len);
}

/* Packs msg as the reply body; a message over max bytes becomes
 * RESOURCE_EXHAUSTED naming the size and the limit (hint says what to do). */
void cr_reply_message(cr_reply *out, const ProtobufCMessage *msg, size_t max, const char *hint);

/* RESOURCE_EXHAUSTED: "TYPE would be LEN bytes, over the MAX-byte message
 * limit (--max-message-bytes); HINT" (hint may be NULL), as
 * cr_reply_message answers a message over max. */
void cr_reply_too_big(cr_reply *out, const ProtobufCMessageDescriptor *d, size_t len,
                      size_t max, const char *hint);

/* A core error as the reply, with err's text: CR_EINVAL is
 * INVALID_ARGUMENT, CR_ESTATE FAILED_PRECONDITION, CR_ENOMEM
 * RESOURCE_EXHAUSTED. */
void cr_reply_core_error(cr_reply *out, cr_status st, const cr_error *err);

#endif
