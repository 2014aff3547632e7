/* KV events: the memory one frame makes the decoder hold at its peak.
 *
 * Packs one payload of about --bytes N (msgpack-c, outside the measure) in
 * the shape that costs the decoder the most a byte, then decodes it
 * (cr_kv_decode) once and reports the peak RSS (VmHWM) over the RSS just
 * before, per payload byte. Shapes:
 *   removed  BlockRemoved events of 65,536 one-byte int hashes each: a
 *            24 B msgpack-c object and an 8 B hash a byte (the worst)
 *   stored   the red team's: BlockStored events of 2^24 one-byte tokens
 *            and 65,536 hashes of blocks of 256 tokens (R3-4)
 * A payload the decoder refuses costs what it built before refusing.
 *
 * usage: kv_frame_memory --bytes N | --limit L  [--stored]
 * N: the payload's bytes at most (one event at least); --limit L: N is
 * the frame bound a memory limit of L bytes derives (cr_kv_frame_bound,
 * --kv-events-max-frame-bytes' default under that cgroup limit).
 * One JSON line. */
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>

#include "bench_util.h"
#include "kvevents.h"

#define HASHES 65536u
#define TOKENS (1u << 24)

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* n one-byte ints (positive fixints). */
static void small_ints(msgpack_packer *pk, uint32_t n)
{
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n; i++)
        msgpack_pack_uint8(pk, (uint8_t)(i & 0x7f)); /* one byte: a fixint */
}

/* ["BlockRemoved", [65,536 hashes], nil]: 65,550 bytes. */
static void removed(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 3);
    str(pk, "BlockRemoved");
    small_ints(pk, HASHES);
    msgpack_pack_nil(pk);
}

/* ["BlockStored", [65,536 hashes], nil, [2^24 tokens], 256, nil, nil, nil]. */
static void stored(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 8);
    str(pk, "BlockStored");
    small_ints(pk, HASHES);
    msgpack_pack_nil(pk);
    small_ints(pk, TOKENS);
    msgpack_pack_uint32(pk, TOKENS / HASHES);
    for (int i = 0; i < 3; i++)
        msgpack_pack_nil(pk);
}

int main(int argc, char **argv)
{
    uint64_t limit = bench_flag(argc, argv, "--limit", 0);
    uint64_t want = limit ? cr_kv_frame_bound(limit) : bench_flag(argc, argv, "--bytes", 0);
    int is_stored = bench_has(argc, argv, "--stored");
    if (!want) {
        fprintf(stderr, "usage: kv_frame_memory --bytes N | --limit L  [--stored]\n");
        return 2;
    }
    size_t per_event = is_stored ? HASHES + TOKENS + 64 : HASHES + 14;
    uint32_t events = want / per_event ? (uint32_t)(want / per_event) : 1; /* at most N bytes */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, 1.0);
    msgpack_pack_array(&pk, events);
    for (uint32_t e = 0; e < events; e++)
        (is_stored ? stored : removed)(&pk);
    msgpack_pack_nil(&pk);
    /* the payload alone in memory, as the subscriber holds a frame */
    uint8_t *payload = malloc(sb.size);
    size_t len = sb.size;
    if (!payload)
        return 1;
    memcpy(payload, sb.data, len);
    msgpack_sbuffer_destroy(&sb);
    bench_reset_peak();
    long before = bench_status_bytes("VmRSS");
    cr_kv_batch b;
    cr_error err = {0};
    double t0 = bench_now();
    cr_status st = cr_kv_decode(payload, len, &b, &err);
    double t1 = bench_now();
    long peak = bench_status_bytes("VmHWM");
    if (st == CR_OK)
        cr_kv_batch_free(&b);
    free(payload);
    printf("{\"shape\":\"%s\",\"limit\":%" PRIu64 ",\"payload_bytes\":%zu,\"events\":%" PRIu32 ",\"decoded\":%s,"
           "\"error\":\"%s\",\"rss_before_bytes\":%ld,\"peak_rss_bytes\":%ld,"
           "\"peak_growth_bytes\":%ld,\"growth_per_payload_byte\":%.2f,\"decode_s\":%.3f}\n",
           is_stored ? "stored" : "removed", limit, len, events, st == CR_OK ? "true" : "false",
           st == CR_OK ? "" : err.msg, before, peak, peak - before,
           (double)(peak - before) / (double)len, t1 - t0);
    return 0;
}
