/* The serialized google.protobuf.FileDescriptorSet of every .proto the sidecar
 * serves (its own, health, reflection v1 and v1alpha), with dependencies,
 * generated at build time. */
#ifndef CR_DESCRIPTOR_SET_H
#define CR_DESCRIPTOR_SET_H

#include <stddef.h>

extern const unsigned char cr_descriptor_set[];
extern const size_t cr_descriptor_set_len;

#endif
