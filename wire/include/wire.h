/* cacheroute wire: every routine that knows protobuf's wire format or the
 * gRPC byte buffer, for the sidecar and the CLI alike:
 *   grpc.c          status names; messages to and from grpc_byte_buffer
 *   scan.c          the raw-bytes scanner that sizes and checks a request
 *                   before protobuf-c unpacks it (counts, last varints,
 *                   strings)
 *   pairs.c         repeated {int64, double} and int64 fields decoded
 *                   straight from the wire
 *   route_request.c RouteRequest decoded straight from the wire into
 *                   request.h's cr_route_request
 *
 * The answers written straight from the core's types are answer.h's: this
 * library knows no router, planner or endpoint (the CLI links it).
 *
 * Every function is thread-safe (no state). Buffers and messages made here
 * belong to the caller, who frees them with the function each one names. */
#ifndef CR_WIRE_H
#define CR_WIRE_H

#include <grpc/byte_buffer.h>
#include <grpc/compression.h>
#include <grpc/slice.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "common.h"
#include "request.h"

/* The gRPC status codes are 0 (OK) to 16 (UNAUTHENTICATED): CR_WIRE_N_STATUS
 * of them, e.g. for a table of counters indexed by code. */
#define CR_WIRE_N_STATUS 17

/* The code's canonical name, as the gRPC docs and other languages spell it
 * ("OK", "INVALID_ARGUMENT", "UNAVAILABLE", ...): a static string, never NULL;
 * "UNKNOWN" for a number outside 0..CR_WIRE_N_STATUS-1. */
const char *cr_wire_status_name(grpc_status_code code);

/* Serializes msg into a new malloc'd buffer: *body (the caller's, freed with
 * free()) holds *len bytes. Returns 0, or -1 with *body NULL when the message
 * would be larger than max bytes or memory runs out; *len holds the packed
 * size in every case, so *len > max tells the two apart. An empty message
 * gives *len 0 and a non-NULL *body. max SIZE_MAX: no limit. */
int cr_wire_encode(const ProtobufCMessage *msg, size_t max, uint8_t **body, size_t *len);

/* A new byte buffer holding len bytes at body, which it takes over: body must
 * come from malloc (cr_wire_encode's does) and is freed by gRPC, with free(),
 * once the buffer and every copy of it are gone; the caller must not touch it
 * again. body NULL (len ignored) gives an empty buffer. The caller owns the
 * result (grpc_byte_buffer_destroy, or hand it to a GRPC_OP_SEND_MESSAGE and
 * destroy it after the batch completes). */
grpc_byte_buffer *cr_wire_buffer(uint8_t *body, size_t len);

/* cr_wire_encode then cr_wire_buffer: msg as a new byte buffer in *out (the
 * caller's; grpc_byte_buffer_destroy). Returns 0, or -1 with *out NULL on the
 * same conditions as cr_wire_encode; *len holds the packed size either way. */
int cr_wire_pack(const ProtobufCMessage *msg, size_t max, grpc_byte_buffer **out, size_t *len);

/* The whole of bb (which stays the caller's) in one slice *out, uncompressed;
 * the caller unrefs it (grpc_slice_unref). A bb of one slice is shared, not
 * copied (a 20 MB request copied is 20 MB of fresh pages faulted in).
 * Returns 0, or -1 (*out untouched) when bb is NULL or cannot be read (a
 * compressed message that does not decompress). */
int cr_wire_read(grpc_byte_buffer *bb, grpc_slice *out);

/* The algorithm bb arrived compressed with (GRPC_COMPRESS_NONE: none),
 * when gRPC core's own decompression is off. */
grpc_compression_algorithm cr_wire_compression(const grpc_byte_buffer *bb);

/* A compressed bb (gzip or deflate) inflated into one new slice *out (the
 * caller unrefs it), stopping as soon as more than max bytes would come
 * out: 0, or -1 with err (CR_ENOMEM past max or out of memory, CR_EINVAL
 * for another algorithm or bytes that do not inflate). Memory: at most max
 * bytes and zlib's 44 KiB. (inflate.c) */
int cr_wire_inflate(const grpc_byte_buffer *bb, size_t max, grpc_slice *out, cr_error *err);

/* Parses the whole of bb (which stays the caller's) as a message of type.
 * Returns the new message (the caller's: protobuf_c_message_free_unpacked(m,
 * NULL)), or NULL when bb is NULL or unreadable (see cr_wire_read), its bytes
 * are not a valid type message, or memory runs out. */
ProtobufCMessage *cr_wire_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *type);

/* ---- the raw-bytes scanner (scan.c): requests sized and checked
 * before protobuf-c unpacks them ---------------------------------------- */

/* One field of a message's wire encoding, as cr_wire_next reads it. */
typedef struct cr_wire_field {
    uint32_t number;
    unsigned type;        /* the wire type, 0..5 */
    const uint8_t *value; /* wire type 2: the payload (len bytes) */
    size_t len;
    uint64_t varint;      /* wire type 0: the value */
} cr_wire_field;

/* Reads the field at *p, before end, into *f and moves *p past it. Returns
 * 1 for a field, 0 at end (*p == end), or -1 for bytes protobuf-c's unpack
 * refuses: a truncated key, varint or value, a length past end, a group, a
 * number past 2^32-1 (*p and *f then unspecified). Number 0 comes back as
 * it is (unpack may take it; cr_wire_check_strings refuses it). For a walk
 * that must fail closed (authz) as well as one that stops. O(1) but for
 * the varints' bytes; no allocation. */
int cr_wire_next(const uint8_t **p, const uint8_t *end, cr_wire_field *f);

/* How many elements of the repeated field named field (d's field name) the
 * len bytes at data, a d message, hold: one per occurrence, or for a packed
 * scalar occurrence the elements in it. Stops at the first malformed field
 * (what is counted up to there is returned; unpack then refuses the
 * message); 0 for a field d does not have. O(len), no allocation. */
size_t cr_wire_count(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                     const char *field);

/* The value of the last occurrence of the varint field named field (a
 * bool, an enum, an integer: protobuf's last one wins), or absent when it
 * does not occur before the end or the first malformed field. O(len). */
uint64_t cr_wire_last_varint(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                             size_t len, const char *field, uint64_t absent);

/* Every string field of the d message at data, at any depth (sub-messages
 * followed through their descriptors), must be UTF-8 (RFC 3629: no
 * overlong forms, surrogates or code points past U+10FFFF) without a NUL
 * byte, which the C side would silently cut at. Returns 0, or -1 with
 * err naming the field path as the request's fields spell it and the
 * problem: "sources[1].name must be valid UTF-8, not at byte 3 of 7",
 * "request_id must not contain a NUL byte, found at byte 2 of 5" (our
 * messages nest 3 deep, so the text fits err->msg). A field numbered 0
 * is refused too, at any depth, as "malformed <message> message: ...":
 * protobuf-c 1.4 accepts one written as a multi-byte key, and an answer
 * that echoes it (reflection's original_request) no reader could parse.
 * Malformed bytes are not its business: the walk stops
 * there and returns 0 (unpack refuses them). O(len). */
int cr_wire_check_strings(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                          cr_error *err);

/* The offset of the first byte of s (len bytes) at which it stops being
 * UTF-8 as above, or len when all of it is. */
size_t cr_wire_utf8_error(const uint8_t *s, size_t len);

/* ---- repeated {int64 1; double 2} or int64 fields decoded straight
 * (pairs.c)
 * -------------------------------------------------------------------- */

/* Where cr_wire_split_pairs writes: max elements of stride bytes from base,
 * each with the int64 at key_at and the double at value_at (offsetof of the
 * caller's struct); n, on return, how many it wrote. */
typedef struct cr_wire_pairs {
    void *base;
    size_t max, stride, key_at, value_at;
    size_t n;
} cr_wire_pairs;

/* Splits the len bytes at data, a message, into the occurrences of its
 * repeated message field numbered field, each a {int64 = 1; double = 2}
 * message (PlanRequest.rates), decoded into out in wire order, and every
 * other field, copied as it is and in order into rest (the caller's, len
 * bytes; *rest_len of them used), for protobuf-c to unpack. As protobuf-c
 * 1.4.1 decodes: the last of a field in an element wins, unknown fields are
 * skipped, an element's absent field is 0.
 *
 * Returns 0, or -1 (out and rest then hold garbage) when anything is not
 * as protobuf-c would take it (a truncated or over-long varint, key or
 * length, a length past the end, a group, field 1 or 2 of an element with
 * another wire type), when an element has a field numbered 0 (which
 * cr_wire_check_strings refuses), or when there are over out->max
 * elements: the caller then hands the whole message to protobuf-c, whose
 * answer (and cr_wire_check_strings's) decides. So -1 never means more
 * than "do it the slow way". The field's occurrences with another wire
 * type go to rest, where protobuf-c refuses them. O(len); no allocation;
 * thread-safe. */
int cr_wire_split_pairs(const uint8_t *data, size_t len, uint32_t field, cr_wire_pairs *out,
                        uint8_t *rest, size_t *rest_len);

/* Where cr_wire_split_varints writes: at most max values; n, on return,
 * how many it wrote. */
typedef struct cr_wire_varints {
    int64_t *values;
    size_t max, n;
} cr_wire_varints;

/* cr_wire_split_pairs for a repeated int64 field numbered field
 * (RecordArrivalRequest.owners): its occurrences, packed (wire type 2) or
 * one value each (wire type 0), decoded into out in wire order, every
 * other field copied into rest. -1 (do it the slow way) on the same
 * grounds, and for a value over 10 bytes or a packed payload that ends
 * inside one; occurrences of another wire type go to rest. O(len); no
 * allocation; thread-safe. */
int cr_wire_split_varints(const uint8_t *data, size_t len, uint32_t field, cr_wire_varints *out,
                          uint8_t *rest, size_t *rest_len);

/* ---- RouteRequest decoded straight (route_request.c) ------------------ */

/* Where cr_wire_route_request writes: the caller's arrays (an arena's, say),
 * each with its capacity; n_items and n_hashes say, on return, how many it
 * wrote, text_used how many bytes of text. Each item is request.h's
 * cr_route_request, the one shape the core and the rule read: its hashes
 * point into hashes, its namespace into the request's own bytes (no NUL
 * after it), its request id (NULL when absent) to a NUL-terminated copy in
 * text. */
typedef struct cr_wire_route_out {
    cr_route_request *items;
    size_t max_items; /* cr_wire_route_size's count */
    uint64_t *hashes;
    size_t max_hashes; /* cr_wire_route_size's bound */
    char *text;
    size_t text_cap; /* the request's length: the request ids' copies */
    size_t n_items, n_hashes, text_used;
} cr_wire_route_out;

/* The most block hashes the len bytes at data can hold, however they are
 * framed: the bytes that end a varint (high bit clear). At most len. */
size_t cr_wire_route_hashes_bound(const uint8_t *data, size_t len);

/* A RouteRequest's len bytes at data sized in one walk, before any
 * decoding: returns its items as cr_wire_count counts "requests" (one per
 * occurrence of field 1, up to the first malformed field), and sets
 * *max_hashes to the most block hashes those items can hold
 * (cr_wire_route_hashes_bound of their payloads: at most len). O(len), no
 * allocation. */
size_t cr_wire_route_size(const uint8_t *data, size_t len, size_t *max_hashes);

/* Decodes the len bytes at data, a RouteRequest, into out, as protobuf-c
 * 1.4.1's unpack decodes them: items in wire order; in each, the last
 * owner, prompt_tokens, namespace and request_id win (has_owner,
 * has_prompt_tokens: present at all), block_hashes packed (wire type 2)
 * and one a field (0) concatenated in wire order, unknown fields skipped
 * at both levels. Owner and hashes are the varints' low 64 bits, as
 * protobuf-c reads them, prompt_tokens their low 32.
 *
 * Returns 0, or -1 (out then holds garbage) when anything is not as
 * protobuf-c would take it (a truncated or over-long key, varint or
 * length, a group, a field of its number with another wire type), when
 * cr_wire_check_strings would refuse it (a namespace or request id that
 * is not UTF-8 or holds a NUL, a field numbered 0 at either level), when
 * there are over out->max_items items or out->max_hashes hashes, or when
 * data is 256 MiB or more (where protobuf-c's own limit of fields per
 * message could be reached): the caller then hands the message to
 * protobuf-c, whose answer (and cr_wire_check_strings's, with its
 * messages) decides. So -1 never means more than "do it the slow way",
 * and 0 that both would take the message with these items. O(len); no
 * allocation; thread-safe. */
int cr_wire_route_request(const uint8_t *data, size_t len, cr_wire_route_out *out);

/* Fields the handlers decode straight (pairs.c), by number: PlanRequest's
 * rates and RecordArrivalRequest's owners (test_wire_pairs checks the
 * descriptors agree). */
#define CR_WIRE_PLAN_RATES_FIELD 2
#define CR_WIRE_RECORD_OWNERS_FIELD 1

#endif
