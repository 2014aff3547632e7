/* protobuf-c message -> JSON, driven by the message descriptors, so every
 * message prints the same way. Field names are the .proto names; every field
 * is printed (proto3 defaults included); 64-bit integers are JSON strings, as
 * in the proto3 JSON mapping, so no parser loses precision; NaN and
 * infinities are the strings "NaN", "Infinity", "-Infinity". */
#ifndef CR_CLIENT_JSON_H
#define CR_CLIENT_JSON_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

/* Returns a new JSON object, or NULL when memory runs out. */
json_t *cr_message_to_json(const ProtobufCMessage *m);

#endif
