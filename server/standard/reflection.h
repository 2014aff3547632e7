/* grpc.reflection.v1 and v1alpha ServerReflection over the descriptor set
 * generated at build time: list services, file by filename, file containing
 * symbol (each with its transitive dependencies). */
#ifndef CR_REFLECTION_H
#define CR_REFLECTION_H

#include <stddef.h>
#include <stdint.h>

#include "rpc.h"

typedef struct cr_reflection cr_reflection;

/* Indexes a serialized FileDescriptorSet. Returns NULL when it does not
 * parse or memory runs out. Immutable afterwards: safe from any thread. */
cr_reflection *cr_reflection_new(const uint8_t *set, size_t len);
void cr_reflection_free(cr_reflection *r);

/* Handler for one ServerReflectionRequest; ctx is the cr_reflection. The
 * v1alpha messages are wire-identical to v1, so one handler serves both. */
void cr_reflection_handle(void *ctx, const uint8_t *req, size_t len, cr_reply *out);

#endif
