/* Compressed requests, inflated here rather than by gRPC core: core would
 * inflate a message whole before any limit applies (61 KB of gzip became
 * 60 MiB), so the server turns core's decompression off and inflates with
 * a bound on what comes out. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "wire.h"

grpc_compression_algorithm cr_wire_compression(const grpc_byte_buffer *bb)
{
    return bb && bb->type == GRPC_BB_RAW ? bb->data.raw.compression : GRPC_COMPRESS_NONE;
}

/* Room for at least more bytes past used in *buf (of *cap), growing by
 * half but never past max; -1 at max or out of memory. */
static int grow(uint8_t **buf, size_t *cap, size_t used, size_t max)
{
    if (used < *cap)
        return 0;
    if (*cap >= max)
        return -1;
    size_t want = *cap + *cap / 2 + 4096;
    want = want > max ? max : want;
    uint8_t *p = realloc(*buf, want);
    if (!p)
        return -1;
    *buf = p;
    *cap = want;
    return 0;
}

int cr_wire_inflate(const grpc_byte_buffer *bb, size_t max, grpc_slice *out, cr_error *err)
{
    grpc_compression_algorithm alg = cr_wire_compression(bb);
    const char *name = "?";
    grpc_compression_algorithm_name(alg, &name);
    if (alg != GRPC_COMPRESS_DEFLATE && alg != GRPC_COMPRESS_GZIP) {
        cr_fail(err, CR_EINVAL, "grpc-encoding %s: only gzip and deflate are inflated", name);
        return -1;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    /* gRPC's deflate is zlib-wrapped; gzip has its own header (+16). */
    if (inflateInit2(&z, alg == GRPC_COMPRESS_GZIP ? 15 + 16 : 15) != Z_OK) {
        cr_fail(err, CR_ENOMEM, "out of memory inflating a %s request", name);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t cap = 0, used = 0;
    int rc = Z_OK, over = 0;
    const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
    for (size_t i = 0; i < sb->count && rc == Z_OK; i++) {
        z.next_in = GRPC_SLICE_START_PTR(sb->slices[i]);
        z.avail_in = (uInt)GRPC_SLICE_LENGTH(sb->slices[i]);
        while (rc == Z_OK && (z.avail_in || used == cap)) {
            if (grow(&buf, &cap, used, max) != 0) {
                over = cap >= max;
                rc = Z_MEM_ERROR;
                break;
            }
            z.next_out = buf + used;
            z.avail_out = (uInt)(cap - used);
            rc = inflate(&z, Z_NO_FLUSH);
            used = cap - z.avail_out;
            if (rc == Z_BUF_ERROR && z.avail_in == 0)
                rc = Z_OK; /* wants the next slice */
        }
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(buf);
        if (over)
            cr_fail(err, CR_ENOMEM, "the %s request inflates past %zu bytes (--max-message-bytes)",
                    name, max);
        else
            cr_fail(err, CR_EINVAL, "the %s request does not inflate: %s", name,
                    z.msg ? z.msg : "truncated");
        return -1;
    }
    *out = used ? grpc_slice_new(buf, used, free) : grpc_empty_slice();
    if (!used)
        free(buf);
    return 0;
}
