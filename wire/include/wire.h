/* cacheroute wire: every routine that knows protobuf's wire format or the
 * gRPC byte buffer, for the sidecar and the CLI alike:
 *   grpc.c          status names; messages to and from grpc_byte_buffer
 *   scan.c          the raw-bytes scanner that sizes and checks a request
 *                   before protobuf-c unpacks it (counts, last varints,
 *                   strings)
 *   pairs.c         repeated {int64, double} and int64 fields decoded
 *                   straight from the wire
 *   plan_answer.c   PlanResponse written straight from a cr_table
 *   record_answer.c RecordArrivalResponse written straight from cr_routes
 *   route_request.c RouteRequest decoded straight from the wire
 *   route_answer.c  RouteResponse written straight from cr_route_answers
 *   bounds.c        the most bytes an answer's parts take, for refusing a
 *                   call before its work is done
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
#include "endpoints.h"
#include "planner.h"
#include "route.h"

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

/* One RouteItem as cr_wire_route_request decodes it: what protobuf-c's
 * Cacheroute__V1__RouteItem holds, as the core's cr_core_route_item takes
 * it (wire.h stays free of core.h: the CLI links this library). */
typedef struct cr_wire_route_item {
    int has_owner, has_prompt_tokens;
    int64_t owner;
    uint32_t prompt_tokens;
    const uint64_t *hashes; /* n_hashes of them, in the caller's hashes */
    size_t n_hashes;
    const char *space;      /* NULL when absent, else space_len bytes in the
                             * request's own bytes (no NUL after them) */
    size_t space_len;
    const char *request_id; /* NULL when absent, else a NUL-terminated copy
                             * in the caller's text */
} cr_wire_route_item;

/* Where cr_wire_route_request writes: the caller's arrays (an arena's, say),
 * each with its capacity; n_items and n_hashes say, on return, how many it
 * wrote, text_used how many bytes of text. */
typedef struct cr_wire_route_out {
    cr_wire_route_item *items;
    size_t max_items; /* cr_wire_count's count of "requests" */
    uint64_t *hashes;
    size_t max_hashes; /* cr_wire_route_hashes_bound's */
    char *text;
    size_t text_cap; /* the request's length: request ids' copies, and scratch */
    size_t n_items, n_hashes, text_used;
} cr_wire_route_out;

/* The most block hashes the len bytes at data can hold, however they are
 * framed: the bytes that end a varint (high bit clear). At most len. */
size_t cr_wire_route_hashes_bound(const uint8_t *data, size_t len);

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

/* ---- answers written by hand (plan_answer.c, record_answer.c) ---------- */

/* PlanResponse (plan_answer.c): a plan's answer, encoded straight from
 * its cr_table: the same bytes protobuf-c packs (field order, proto3's omitted zeros), without a
 * Placement message per admitted session. protobuf-c would need 56 bytes
 * of message and a pointer per placement, and walks a nested repeated field
 * three times (sizing the whole, then each entry again as it packs it);
 * here one pass over the placements writes them, sizing each as it goes,
 * with no branch on an owner's width (a hash: 9 or 10 bytes at random).
 *
 * The buffer is sized from a sample of the placements (a quarter over,
 * plus 4 KiB), at most the caller's max_first bytes at first (the message
 * limit: the core refuses a plan whose answer could pass it before it is
 * placed), and grown by half whenever short; the answer finished holds at
 * most twice its size and 4 KiB. */
typedef struct cr_plan_answer {
    const cr_table *table;
    uint8_t *buf;      /* malloc'd: the answer as written so far, or NULL */
    size_t cap;        /* bytes of buf */
    size_t head;       /* where the placements start: room left for the table's key and length */
    size_t placements; /* bytes of the placements field, every entry framed */
    /* The rest, for the caller to fill in (generation, churn) before sizing
     * and before finishing: the table's other fields are set here. */
    Cacheroute__V1__RoutingTable rest; /* every field but placements */
    Cacheroute__V1__PlanChurn churn;
} cr_plan_answer;

/* Points a at t (which must outlive it), writes t's placements into a new
 * buffer and fills rest from t; churn and generation are 0. The buffer's
 * first size is estimated from a sample of the placements, at most
 * max_first bytes past the table's key and length (a test passes a small
 * one to make it grow). O(placements). Returns 0, or -1 out of memory (a
 * then holds nothing). */
int cr_plan_answer_init(cr_plan_answer *a, const cr_table *t, size_t max_first);

/* The PlanResponse's packed size with a's rest and churn as they are now. */
size_t cr_plan_answer_size(const cr_plan_answer *a);

/* The whole PlanResponse, with a's rest and churn as they are now, in a
 * malloc'd buffer for the caller to free, *len bytes; NULL when out of
 * memory. Either way a holds nothing after (as cr_plan_answer_free). */
uint8_t *cr_plan_answer_finish(cr_plan_answer *a, size_t *len);

/* Frees what a holds (an unfinished answer); a may be freed again. */
void cr_plan_answer_free(cr_plan_answer *a);

/* RecordArrivalResponse (record_answer.c): RecordArrival's answer,
 * written straight from the core's cr_route array: the bytes protobuf-c packs from the same message (fields
 * in number order, proto3's zeros left out, as protobuf-c 1.4 leaves them:
 * a rate of -0.0 too), without a Route message and pointer per entry. One
 * pass writes it into a buffer of an upper bound, each Route's one-byte
 * length filled in after its fields: protobuf-c sizes every Route twice
 * (for the total, then again for its length prefix) and walks descriptors
 * to write it. Used by the unary call and each RecordArrivals message. */
/* The most bytes cr_record_answer_pack writes for n routes of any shard:
 * cr_wire_route_bytes(2^32) per route and CR_WIRE_RECORD_TAIL_BYTES for
 * recorded and table_generation. n must be below SIZE_MAX / 30 (the
 * caller's request was bounded by the message limit long before). */
size_t cr_record_answer_bound(size_t n, const cr_endpoints *named);

/* Writes RecordArrivalResponse {routes: routes[0..n) (n 0 for none, as with
 * omit_routes: routes may then be NULL), recorded, table_generation:
 * generation} into buf, which holds at least cr_record_answer_bound(n)
 * bytes. Returns the bytes written: protobuf-c's packed size of that
 * message. Any double is written as protobuf-c writes it (NaN and
 * infinities included), any admitted not 0 as true. Thread-safe; no
 * allocation. */
size_t cr_record_answer_pack(const cr_route *routes, size_t n, uint32_t recorded,
                             uint64_t generation, const cr_endpoints *named, uint8_t *buf);

/* RouteResponse (route_answer.c): Route's answer, written straight from
 * the core's cr_route_answer array: the bytes protobuf-c packs from the
 * same message (RouteDecision's fields in number order, proto3's zeros
 * left out as protobuf-c 1.4 leaves them: a -0.0 too; reason as
 * cr_route_reason_name names it), without a RouteDecision message and
 * pointer per decision, in one pass (each decision's one-byte length
 * filled in after its fields). Used by Route and each Routes message. */

/* The most bytes cr_route_answer_pack writes for n decisions:
 * cr_wire_decision_bytes() each and 11 for table_generation. n must be
 * below SIZE_MAX / 64 (its request was bounded long before). */
size_t cr_route_answer_bound(size_t n, const cr_endpoints *named);

/* Writes RouteResponse {routes: a[0..n) (a may be NULL when n is 0),
 * table_generation: generation} into buf, which holds at least
 * cr_route_answer_bound(n) bytes. Returns the bytes written: protobuf-c's
 * packed size of that message. Any double is written as protobuf-c
 * writes it (NaN and infinities included), any admitted not 0 as true.
 * Thread-safe; no allocation. */
size_t cr_route_answer_pack(const cr_route_answer *a, size_t n, uint64_t generation,
                            const cr_endpoints *named, uint8_t *buf);

/* Endpoint names (both answers): with named (an endpoint set) each entry
 * whose shard is one of its slots also carries the slot's endpoint id and
 * address (Route's endpoint_id and endpoint_address, RouteDecision's
 * likewise), and the bounds above add cr_wire_named_bytes(named) per
 * entry; without (NULL), the bytes are as before. */

/* ---- bounds (bounds.c): the most bytes an answer's parts take ---------- */

/* Fields the handlers decode straight (pairs.c), by number: PlanRequest's
 * rates and RecordArrivalRequest's owners (test_wire_pairs checks the
 * descriptors agree). */
#define CR_WIRE_PLAN_RATES_FIELD 2
#define CR_WIRE_RECORD_OWNERS_FIELD 1

/* What an answer holds besides its repeated entries (its framing, counts
 * and generation), at most. */
#define CR_WIRE_ANSWER_SLACK 32
/* RecordArrivalResponse's recorded and table_generation, at most. */
#define CR_WIRE_RECORD_TAIL_BYTES 17

/* The most bytes one Route entry of a RecordArrivalResponse takes when its
 * preferred shard is below shards (1..2^32): its key and length 2, owner
 * 11, rate 9, admitted 2, and the shard's key and varint. 28 for
 * CR_MAX_SHARDS, 30 for any uint32. Pure. */
size_t cr_wire_route_bytes(uint64_t shards);

/* The most bytes an entry's endpoint id and address add with set e (its
 * longest of each as two string fields, and one more byte of length): 0
 * for NULL. */
size_t cr_wire_named_bytes(const cr_endpoints *e);

/* A Route or RouteDecision entry of field number: the key, the length,
 * fields[0..n) (its other fields, written, at most 127 bytes), then x's
 * id and address as fields id_field and id_field + 1: at most 2 + n +
 * cr_wire_named_bytes of x's set. */
uint8_t *cr_wire_put_named(uint8_t *p, unsigned number, const uint8_t *fields, size_t n,
                           const cr_endpoint *x, unsigned id_field);

/* The most bytes one RouteDecision entry of a RouteResponse takes: its key
 * and length 2, shard 6, admitted 2, cached_tokens 6, queue_wait_ms 9,
 * prefill_ms 9, and reason 14 (the longest name, "least_loaded"). Pure. */
size_t cr_wire_decision_bytes(void);

/* The most bytes one SessionRate entry of a GetRatesResponse takes: its
 * key and length 2, owner 11, rate 9. */
size_t cr_wire_rate_bytes(void);

/* An upper bound of the PlanResponse of a plan of s's size: per placement
 * its key and length (6), owner (11), the shards' key and length (6) and
 * the preferred shard (4), and the varint bytes of a shard id below
 * s->n_shards per shard slot; per shard an expected load (8); and 256 for
 * the rest (the table's and churn's framing, totals, generation, churn
 * counts). Pure. */
uint64_t cr_wire_plan_bound(const cr_plan_size *s);

#endif
