/* Internal to wire/: what the straight decoders share (pairs.c,
 * route_request.c). */
#ifndef CR_WIRE_INTERNAL_H
#define CR_WIRE_INTERNAL_H

#include "wire.h"

/* Appends the varints of the vlen bytes at v (a packed repeated int64's
 * payload, or one varint's bytes) to out, as protobuf-c's scan_varint and
 * its packed parse take them: each at most 10 bytes, the last one ending
 * the payload. 0, or -1 (out then holds garbage) for bytes protobuf-c
 * could read otherwise or more values than out->max. O(vlen). */
int cr_wire_take_packed(cr_wire_varints *out, const uint8_t *v, size_t vlen);

#endif
