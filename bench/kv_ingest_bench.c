/* KV-event ingest: vLLM payloads decoded (cr_kv_decode) and applied to a
 * core's prefix index (cr_core_kv_events) on one thread, as the
 * subscriber does, into --index-blocks B per shard over S shards.
 *
 * Each batch holds E events; a stored event is H fresh blocks of T tokens
 * (token ids below 128,000, as a vocabulary's), the next piece of a chain
 * of 4 events (its parent the last block of the one before), on shard
 * (event mod S). First the index fills: batches of stored events until it
 * holds S x B blocks. Then --steady N batches at the bound, half stored
 * events and half removals of the oldest blocks still held, as an engine
 * evicting LRU sends them. Payloads are packed (msgpack-c) outside the
 * timed part, in vLLM's current map-like encoding with 32-byte hashes, or
 * with --array the older array-like one with int64 hashes.
 *
 * Reported: block events (blocks stored plus blocks removed) per second
 * of thread CPU time, decode and apply apart in ns a block, the index's
 * blocks, the process's RSS growth from before the core per indexed
 * block after the fill (VmRSS; peak VmHWM too), and its growth over the
 * steady phase (a flood of fresh blocks at the bound: 0 when flat).
 *
 * usage: kv_ingest_bench [--shards S=4] [--blocks B=1048576] [--hashes H=16]
 *        [--block-tokens T=16] [--events E=32] [--steady N] [--array]
 * One JSON line. */
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>

#include "bench_util.h"
#include "kvevents.h"

#define CHAIN 4 /* stored events a prompt's chain */

typedef struct params {
    uint32_t shards, blocks, hashes, block_tokens, events;
    int array;
} params;

typedef struct totals {
    uint64_t blocks; /* block events: stored and removed */
    uint64_t bytes;  /* payloads' */
    double decode_s, apply_s;
} totals;

/* The shard of stored event e and of its removal: a chain's on one. */
static uint32_t shard_of(const params *p, uint64_t e) { return (uint32_t)(e / CHAIN % p->shards); }

/* ---- packing ------------------------------------------------------------- */

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* A field's name, in the map-like encoding only. */
static void key(const params *p, msgpack_packer *pk, const char *name)
{
    if (!p->array)
        str(pk, name);
}

/* Block g's engine hash: 32 bytes (as vLLM's sha256) or an int64. */
static void hash(const params *p, msgpack_packer *pk, uint64_t g)
{
    uint64_t h[4] = {cr_mix64(g), cr_mix64(g + 1), cr_mix64(g + 2), cr_mix64(g + 3)};
    if (p->array)
        msgpack_pack_int64(pk, (int64_t)h[0]);
    else
        msgpack_pack_bin_with_body(pk, h, sizeof h);
}

static void hashes(const params *p, msgpack_packer *pk, uint64_t first)
{
    msgpack_pack_array(pk, p->hashes);
    for (uint32_t i = 0; i < p->hashes; i++)
        hash(p, pk, first + i);
}

/* An event's tag and n fields after it. */
static void event(const params *p, msgpack_packer *pk, const char *type, uint32_t n)
{
    if (p->array) {
        msgpack_pack_array(pk, n + 1);
    } else {
        msgpack_pack_map(pk, n + 1);
        str(pk, "type");
    }
    str(pk, type);
}

/* Stored event e: blocks [e H, e H + H). */
static void stored(const params *p, msgpack_packer *pk, uint64_t e)
{
    uint64_t first = e * p->hashes;
    event(p, pk, "BlockStored", 7);
    key(p, pk, "block_hashes");
    hashes(p, pk, first);
    key(p, pk, "parent_block_hash");
    if (e % CHAIN)
        hash(p, pk, first - 1);
    else
        msgpack_pack_nil(pk);
    key(p, pk, "token_ids");
    msgpack_pack_array(pk, p->hashes * p->block_tokens);
    for (uint64_t t = 0; t < (uint64_t)p->hashes * p->block_tokens; t++)
        msgpack_pack_uint32(pk, (uint32_t)(cr_mix64(first * p->block_tokens + t) % 128000));
    key(p, pk, "block_size");
    msgpack_pack_uint32(pk, p->block_tokens);
    key(p, pk, "lora_id");
    msgpack_pack_nil(pk);
    key(p, pk, "medium");
    str(pk, "GPU");
    key(p, pk, "lora_name");
    msgpack_pack_nil(pk);
}

/* The removal of stored event e's blocks. */
static void removed(const params *p, msgpack_packer *pk, uint64_t e)
{
    event(p, pk, "BlockRemoved", 2);
    key(p, pk, "block_hashes");
    hashes(p, pk, e * p->hashes);
    key(p, pk, "medium");
    str(pk, "GPU");
}

/* A batch of the stored events from *next on, and when gone is not NULL
 * as many removals from *gone on, interleaved; shard[i] the shard of its
 * event i. */
static void batch(const params *p, msgpack_sbuffer *sb, uint64_t *next, uint64_t *gone,
                  uint32_t *shard)
{
    msgpack_packer pk;
    msgpack_sbuffer_clear(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    uint32_t n = gone ? p->events / 2 : p->events;
    if (p->array) {
        msgpack_pack_array(&pk, 3);
        msgpack_pack_double(&pk, bench_now());
    } else {
        msgpack_pack_map(&pk, 3);
        str(&pk, "ts");
        msgpack_pack_double(&pk, bench_now());
        str(&pk, "data_parallel_rank");
        msgpack_pack_nil(&pk);
        str(&pk, "events");
    }
    msgpack_pack_array(&pk, gone ? 2 * n : n);
    for (uint32_t i = 0; i < n; i++) {
        *shard++ = shard_of(p, *next);
        stored(p, &pk, (*next)++);
        if (!gone)
            continue;
        *shard++ = shard_of(p, *gone);
        removed(p, &pk, (*gone)++);
    }
    if (p->array)
        msgpack_pack_nil(&pk);
}

/* ---- timing -------------------------------------------------------------- */

/* sb's payload decoded, its events sent to their shards, applied; timed
 * into *t. */
static void ingest(cr_core *core, const msgpack_sbuffer *sb, const uint32_t *shard, totals *t)
{
    cr_kv_batch b;
    cr_kv_applied out;
    cr_error err;
    double t0 = bench_thread_cpu();
    if (cr_kv_decode((const uint8_t *)sb->data, sb->size, &b, &err) != CR_OK) {
        fprintf(stderr, "kv_ingest_bench: decode: %s\n", err.msg);
        exit(1);
    }
    double t1 = bench_thread_cpu();
    for (size_t i = 0; i < b.n; i++) {
        b.events[i].shard = shard[i];
        t->blocks += b.events[i].n;
    }
    if (cr_core_kv_events(core, b.events, b.n, &out, &err) != CR_OK) {
        fprintf(stderr, "kv_ingest_bench: apply: %s\n", err.msg);
        exit(1);
    }
    double t2 = bench_thread_cpu();
    t->bytes += sb->size;
    t->decode_s += t1 - t0;
    t->apply_s += t2 - t1;
    cr_kv_batch_free(&b);
}

static uint64_t index_blocks(cr_core *core)
{
    cr_route_stats st;
    cr_core_route_stats_read(core, &st, NULL, 0);
    return st.index_blocks;
}

static cr_core *core_new(const params *p)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.planner = (cr_planner_config){p->shards, 50, 200};
    cfg.replan_interval_s = 0;
    cfg.route.by = CR_ROUTE_TTFT;
    cfg.route.block_tokens = p->block_tokens;
    cfg.route.index_blocks = p->blocks;
    cfg.route.max_hashes = p->hashes;
    cr_error err;
    cr_core *c = cr_core_new(&cfg, NULL, NULL, &err);
    if (!c) {
        fprintf(stderr, "kv_ingest_bench: %s\n", err.msg);
        exit(1);
    }
    return c;
}

static void print_phase(const char *name, const totals *t)
{
    double n = (double)t->blocks;
    printf(", \"%s_block_events\": %" PRIu64 ", \"%s_block_events_per_s\": %.0f, "
           "\"%s_decode_ns_per_block\": %.1f, \"%s_apply_ns_per_block\": %.1f, "
           "\"%s_payload_bytes_per_block\": %.1f",
           name, t->blocks, name, n / (t->decode_s + t->apply_s), name, t->decode_s / n * 1e9,
           name, t->apply_s / n * 1e9, name, (double)t->bytes / n);
}

int main(int argc, char **argv)
{
    params p = {
        .shards = (uint32_t)bench_flag(argc, argv, "--shards", 4),
        .blocks = (uint32_t)bench_flag(argc, argv, "--blocks", 1u << 20),
        .hashes = (uint32_t)bench_flag(argc, argv, "--hashes", 16),
        .block_tokens = (uint32_t)bench_flag(argc, argv, "--block-tokens", 16),
        .events = (uint32_t)bench_flag(argc, argv, "--events", 32),
        .array = bench_has(argc, argv, "--array"),
    };
    if (p.shards < 1 || p.shards > CR_ROUTE_INDEX_MAX_SHARDS || p.blocks < 1 ||
        p.blocks > CR_ROUTE_MAX_INDEX_BLOCKS || p.hashes < 1 || p.hashes > CR_KV_MAX_HASHES ||
        p.block_tokens < 1 || (uint64_t)p.hashes * p.block_tokens > CR_KV_MAX_TOKENS ||
        p.events < 2 || p.events > CR_KV_MAX_EVENTS) {
        fprintf(stderr, "usage: kv_ingest_bench [--shards 1..64] [--blocks 1..2^25] "
                        "[--hashes H] [--block-tokens T] (H x T <= 2^24) [--events 2..10000] "
                        "[--steady N] [--array]\n");
        return 2;
    }
    bench_reset_peak();
    long rss0 = bench_status_bytes("VmRSS");
    cr_core *core = core_new(&p);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint32_t *shard = malloc(p.events * sizeof *shard);
    uint64_t next = 0, gone = 0, want = (uint64_t)p.shards * p.blocks;
    totals fill = {0}, steady = {0};
    while (index_blocks(core) < want) {
        if (!shard || next * p.hashes > 4 * want) {
            fprintf(stderr, "kv_ingest_bench: out of memory, or the index does not fill\n");
            return 1;
        }
        batch(&p, &sb, &next, NULL, shard);
        ingest(core, &sb, shard, &fill);
    }
    uint64_t blocks = index_blocks(core);
    long rss = bench_status_bytes("VmRSS") - rss0, hwm = bench_status_bytes("VmHWM") - rss0;
    uint64_t steady_n = bench_flag(argc, argv, "--steady", next / p.events);
    for (uint64_t i = 0; i < steady_n; i++) {
        batch(&p, &sb, &next, &gone, shard);
        ingest(core, &sb, shard, &steady);
    }
    printf("{\"encoding\": \"%s\", \"shards\": %u, \"blocks_per_shard\": %u, \"hashes\": %u, "
           "\"block_tokens\": %u, \"events_per_batch\": %u, \"blocks\": %" PRIu64
           ", \"rss_per_block\": %.2f, \"peak_rss_per_block\": %.2f",
           p.array ? "array-like, int64 hashes" : "map-like, 32-byte hashes", p.shards,
           p.blocks, p.hashes, p.block_tokens, p.events, blocks, (double)rss / (double)blocks,
           (double)hwm / (double)blocks);
    print_phase("fill", &fill);
    print_phase("steady", &steady);
    /* The steady phase stores as many fresh blocks as the fill did: memory
     * that still grew would show here. */
    long rss_steady = bench_status_bytes("VmRSS") - rss0;
    printf(", \"steady_index_blocks\": %" PRIu64 ", \"rss_growth_in_steady_bytes\": %ld}\n",
           index_blocks(core), rss_steady - rss);
    msgpack_sbuffer_destroy(&sb);
    free(shard);
    cr_core_free(core);
    return 0;
}
