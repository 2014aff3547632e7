/* protobuf-c message <-> JSON, driven by the message descriptors, so every
 * message prints (and parses) the same way. Field names are the .proto
 * names; every field is printed (proto3 defaults included; absent
 * `optional` fields are not); 64-bit integers are JSON strings, as in the
 * proto3 JSON mapping, so no parser loses precision; NaN and infinities are
 * the strings "NaN", "Infinity", "-Infinity". */
#ifndef CR_CLIENT_JSON_H
#define CR_CLIENT_JSON_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "common.h"

/* Returns a new JSON object, or NULL when memory runs out. An `optional`
 * field that is absent is left out. */
json_t *cr_message_to_json(const ProtobufCMessage *m);

/* The other way: a new message of type d from the JSON object j, as the
 * proto3 JSON mapping writes one. Keys are the .proto field names or their
 * lowerCamelCase JSON names ("prompt_tokens" or "promptTokens"); 64-bit
 * integers are numbers or strings; doubles are numbers or the strings
 * "NaN", "Infinity", "-Infinity"; enums are value names or numbers; null is
 * "absent". Returns the message (free with
 * protobuf_c_message_free_unpacked(m, NULL)), or NULL with err naming the
 * key: an unknown key, a value of the wrong type or out of the field's
 * range, or no memory. Ranges beyond the type's are the server's to check. */
ProtobufCMessage *cr_message_from_json(const json_t *j, const ProtobufCMessageDescriptor *d,
                                       cr_error *err);

#endif
