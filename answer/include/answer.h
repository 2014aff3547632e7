/* cacheroute answer: the answers written straight from the core's types,
 * without protobuf-c's message per entry, and the most bytes each part of
 * an answer takes, for refusing a call before its work is done:
 *   plan_answer.c   PlanResponse from a cr_table (planner.h)
 *   answers.c       RecordArrivalResponse and RouteResponse from
 *                   cr_route_answers (request.h), one writer
 *   bounds.c        the most bytes an answer's parts take
 * Each writes the bytes protobuf-c packs from the same message
 * (test_plan_answer, test_record_answer and test_route_wire compare them).
 * The sidecar's only: the CLI links wire/ and not this.
 *
 * Every function is thread-safe (no state). Buffers made here belong to
 * the caller, who frees them with the function each one names. */
#ifndef CR_ANSWER_H
#define CR_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "endpoints.h"
#include "planner.h"
#include "request.h"

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

/* RecordArrivalResponse and RouteResponse (answers.c): the answers of
 * RecordArrival and Route, written by one writer straight from the core's
 * cr_route_answer array (request.h): the bytes protobuf-c packs from the
 * same message (fields in number order, proto3's zeros left out, as
 * protobuf-c 1.4 leaves them: a double of -0.0 too), without a message
 * and pointer per entry. One pass writes it into a buffer of an upper
 * bound, each entry's one-byte length filled in after its fields:
 * protobuf-c sizes every entry twice (for the total, then again for its
 * length prefix) and walks descriptors to write it. Used by the unary
 * calls and each message of their streams. */

/* RecordArrivalResponse: each answer as a Route {owner, rate, admitted,
 * preferred_shard: shard}. */
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
size_t cr_record_answer_pack(const cr_route_answer *routes, size_t n, uint32_t recorded,
                             uint64_t generation, const cr_endpoints *named, uint8_t *buf);

/* RouteResponse: each answer as a RouteDecision {shard, admitted,
 * cached_tokens, queue_wait_ms, prefill_ms, reason as
 * cr_route_reason_name names it, door as cr_route_door_name names it}. */

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
 * id and address as fields id_field and id_field + 1, then after[0..n_after)
 * (its fields numbered past them, written; n + n_after at most 127): at
 * most 2 + n + n_after + cr_wire_named_bytes of x's set. */
uint8_t *cr_wire_put_named(uint8_t *p, unsigned number, const uint8_t *fields, size_t n,
                           const cr_endpoint *x, unsigned id_field, const uint8_t *after,
                           size_t n_after);

/* The most bytes one RouteDecision entry of a RouteResponse takes: its key
 * and length 2, shard 6, admitted 2, cached_tokens 6, queue_wait_ms 9,
 * prefill_ms 9, reason 14 (the longest name, "least_loaded") and door 9
 * (the longest name, "unknown"). Pure. */
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
