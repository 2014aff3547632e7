/* RecordArrival's RecordArrivalResponse, written straight from the core's
 * cr_route array: the bytes protobuf-c packs from the same message (fields
 * in number order, proto3's zeros left out, as protobuf-c 1.4 leaves them:
 * a rate of -0.0 too), without a Route message and pointer per entry. One
 * pass writes it into a buffer of an upper bound, each Route's one-byte
 * length filled in after its fields: protobuf-c sizes every Route twice
 * (for the total, then again for its length prefix) and walks descriptors
 * to write it. Used by the unary call and each RecordArrivals message. */
#ifndef CR_RECORD_ANSWER_H
#define CR_RECORD_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

/* The most bytes cr_record_answer_pack writes for n routes: 30 per route
 * (key and length 2, owner 11, rate 9, admitted 2, shard 6) and 17 for
 * recorded and table_generation. n must be below SIZE_MAX / 30 (the
 * caller's request was bounded by the message limit long before). */
size_t cr_record_answer_bound(size_t n);

/* Writes RecordArrivalResponse {routes: routes[0..n) (n 0 for none, as with
 * omit_routes: routes may then be NULL), recorded, table_generation:
 * generation} into buf, which holds at least cr_record_answer_bound(n)
 * bytes. Returns the bytes written: protobuf-c's packed size of that
 * message. Any double is written as protobuf-c writes it (NaN and
 * infinities included), any admitted not 0 as true. Thread-safe; no
 * allocation. */
size_t cr_record_answer_pack(const cr_route *routes, size_t n, uint32_t recorded,
                             uint64_t generation, uint8_t *buf);

#endif
