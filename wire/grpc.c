#include "wire.h"

#include <grpc/byte_buffer_reader.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const char *cr_wire_status_name(grpc_status_code code)
{
    static const char *const names[CR_WIRE_N_STATUS] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    return (unsigned)code < CR_WIRE_N_STATUS ? names[code] : "UNKNOWN";
}

int cr_wire_encode(const ProtobufCMessage *msg, size_t max, uint8_t **body, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(msg);
    *body = NULL;
    if (*len > max)
        return -1;
    *body = malloc(*len ? *len : 1);
    if (!*body)
        return -1;
    protobuf_c_message_pack(msg, *body);
    return 0;
}

grpc_byte_buffer *cr_wire_buffer(uint8_t *body, size_t len)
{
    grpc_slice s = body ? grpc_slice_new(body, len, free) : grpc_empty_slice();
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

int cr_wire_pack(const ProtobufCMessage *msg, size_t max, grpc_byte_buffer **out, size_t *len)
{
    uint8_t *body;
    *out = NULL;
    if (cr_wire_encode(msg, max, &body, len) != 0)
        return -1;
    *out = cr_wire_buffer(body, *len);
    return 0;
}

#define HUGE_PAGE ((size_t)2 << 20)

static void unmap(void *p, size_t len) { munmap(p, len); }

/* A slice of len bytes to copy a request into. A big one is mapped on its
 * own and marked for transparent huge pages: a 20 MB Plan request then
 * faults in ten pages rather than five thousand (malloc's 4 KiB ones). */
static grpc_slice fresh_slice(size_t len)
{
    if (len < HUGE_PAGE)
        return GRPC_SLICE_MALLOC(len);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return GRPC_SLICE_MALLOC(len);
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages if refused */
#endif
    return grpc_slice_new_with_len(p, len, unmap);
}

/* Copies what reader has not yet given out after first (its first slice,
 * given out already) into one new slice of total bytes. */
static grpc_slice join(grpc_byte_buffer_reader *reader, const grpc_slice *first, size_t total)
{
    grpc_slice out = fresh_slice(total), next;
    uint8_t *at = GRPC_SLICE_START_PTR(out);
    memcpy(at, GRPC_SLICE_START_PTR(*first), GRPC_SLICE_LENGTH(*first));
    at += GRPC_SLICE_LENGTH(*first);
    while (grpc_byte_buffer_reader_next(reader, &next)) {
        memcpy(at, GRPC_SLICE_START_PTR(next), GRPC_SLICE_LENGTH(next));
        at += GRPC_SLICE_LENGTH(next);
        grpc_slice_unref(next);
    }
    return out;
}

int cr_wire_read(grpc_byte_buffer *bb, grpc_slice *out)
{
    grpc_byte_buffer_reader reader;
    grpc_slice *first;
    if (!bb || !grpc_byte_buffer_reader_init(&reader, bb))
        return -1;
    size_t total = grpc_byte_buffer_length(reader.buffer_out);
    if (!grpc_byte_buffer_reader_peek(&reader, &first))
        *out = grpc_empty_slice();
    else if (GRPC_SLICE_LENGTH(*first) == total)
        *out = grpc_slice_ref(*first); /* one slice: shared, not copied */
    else
        *out = join(&reader, first, total);
    grpc_byte_buffer_reader_destroy(&reader);
    return 0;
}

ProtobufCMessage *cr_wire_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *type)
{
    grpc_slice s;
    if (cr_wire_read(bb, &s) != 0)
        return NULL;
    ProtobufCMessage *m =
        protobuf_c_message_unpack(type, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}
