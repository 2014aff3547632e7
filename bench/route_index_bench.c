/* The ttft rule's prefix index at its bound, library level, one thread,
 * virtual time: a router under --route-by ttft with --index-blocks B
 * places requests of H fresh chained block hashes (one new owner each)
 * over S shards until every shard's index holds B blocks (S x B in all),
 * then --steady N requests more (default a quarter as many) at the bound,
 * where each new block evicts one. Reported: the index's blocks and bytes
 * (cr_router_index_stats) and bytes per block, the process's RSS and peak
 * RSS (VmRSS, VmHWM; growth from before the router) per block, and thread
 * CPU time per request and per hash while filling and at the bound.
 *
 * --shared P --group K: the first P hashes of each request are a prefix
 * shared by K consecutive requests (a document or system prompt), the
 * rest fresh; the rule spreads a group over K shards (below), so the
 * index holds each prefix block once for up to K shards.
 *
 * The prefill model is a + b L (a = 10 ms, b = 1e-4 ms a token: about the
 * sidecar's default model of an 8B model on one GPU), --miss-weight 2 (the
 * default), and the clock moves a + b L / S per request (no hit), so the
 * shards run at capacity: the request goes to a shard whose queue has
 * drained (its owner's ring home when that one has, else the lowest id),
 * and a prefix's holder, its queue just grown by a prefill, is left for
 * an idle shard. No outcomes: --inflight-ttl is 1 s, --inflight-max the
 * default 100,000.
 *
 * usage: route_index_bench [--shards S=64] [--blocks B=1048576]
 *        [--hashes H=64] [--shared P=0] [--group K=8] [--block-tokens T=16]
 *        [--steady N]
 * One JSON line. 64 x 2^20 blocks take about 2.5 GB. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "route.h"

#define GOLDEN 0x9E3779B97F4A7C15ull

typedef struct params {
    uint32_t shards, blocks, hashes, shared, block_tokens;
    uint64_t group;
    uint64_t *h; /* room for one request's hashes */
} params;

typedef struct phase {
    uint64_t requests;
    double cpu_s;
} phase;

/* Request i's chained hashes: the first p->shared from its group's chain,
 * the rest from its own, each hash chained over the one before. */
static void hashes_of(const params *p, uint64_t i, uint64_t *h)
{
    uint64_t x = cr_mix64(p->shared ? i / p->group : i);
    for (uint32_t j = 0; j < p->hashes; j++) {
        uint64_t block = j < p->shared ? j : (i << 20 | j); /* the block's content */
        h[j] = x = cr_mix64(x ^ (block + 1) * GOLDEN);
    }
}

/* Places requests from *next on until the index holds want blocks (0:
 * count requests); the phase's requests and thread CPU time. */
static phase place(cr_router *r, const params *p, const cr_prefill_model *m, uint64_t *next,
                   uint64_t want, uint64_t count, double *clock)
{
    uint64_t *h = p->h, blocks = 0, bytes, n = 0;
    uint32_t tokens = p->hashes * p->block_tokens;
    double dt = cr_prefill_ms(&m->prefill, 0, tokens) / 1e3 / p->shards;
    double t0 = bench_thread_cpu();
    for (; want ? blocks < want : n < count; n++) {
        uint64_t i = (*next)++;
        hashes_of(p, i, h);
        cr_route_request q = {.has_owner = 1, .owner = (int64_t)cr_mix64(i + 1),
                            .prompt_tokens = tokens, .hashes = h, .n_hashes = p->hashes};
        cr_route_answer a;
        *clock += dt;
        cr_router_place(r, NULL, p->shards, &q, &a, 1, *clock);
        if (want && (n & 63) == 63)
            cr_router_index_stats(r, &blocks, &bytes);
        if (want && n > 4 * want / p->hashes + 1000000) {
            fprintf(stderr, "route_index_bench: %" PRIu64 " of %" PRIu64
                    " blocks after %" PRIu64 " requests; giving up\n", blocks, want, n);
            exit(1);
        }
    }
    return (phase){n, bench_thread_cpu() - t0};
}

int main(int argc, char **argv)
{
    params p = {
        .shards = (uint32_t)bench_flag(argc, argv, "--shards", 64),
        .blocks = (uint32_t)bench_flag(argc, argv, "--blocks", 1u << 20),
        .hashes = (uint32_t)bench_flag(argc, argv, "--hashes", 64),
        .shared = (uint32_t)bench_flag(argc, argv, "--shared", 0),
        .group = bench_flag(argc, argv, "--group", 8),
        .block_tokens = (uint32_t)bench_flag(argc, argv, "--block-tokens", 16),
    };
    uint64_t steady_n = bench_flag(argc, argv, "--steady", 0);
    if (p.shards < 1 || p.shards > CR_ROUTE_INDEX_MAX_SHARDS || p.blocks < 1 ||
        p.blocks > CR_ROUTE_MAX_INDEX_BLOCKS || p.hashes < 1 || p.hashes > CR_ROUTE_MAX_HASHES ||
        p.shared > p.hashes || p.group < 1 || p.block_tokens < 1 ||
        (uint64_t)p.hashes * p.block_tokens > 10000000) {
        fprintf(stderr, "usage: route_index_bench [--shards 1..64] [--blocks 1..2^25] "
                        "[--hashes 1..65536] [--shared P <= hashes] [--group K >= 1] "
                        "[--block-tokens T]\n");
        return 2;
    }
    cr_route_config cfg = {.by = CR_ROUTE_TTFT, .load_bound = 1.25, .inflight_ttl_s = 1,
                           .inflight_max = 100000, .block_tokens = p.block_tokens,
                           .index_blocks = p.blocks, .max_hashes = p.hashes,
                           .miss_weight = 2};
    cr_prefill_model m = {.prefill = {10, 1e-4, 0}};
    bench_reset_peak();
    long rss0 = bench_status_bytes("VmRSS");
    cr_router *r = cr_router_new(&cfg);
    p.h = malloc(p.hashes * sizeof *p.h);
    if (!r || !p.h) {
        fprintf(stderr, "route_index_bench: out of memory\n");
        return 1;
    }
    cr_router_set_model(r, &m);
    uint64_t want = (uint64_t)p.shards * p.blocks, next = 0, blocks, bytes;
    double clock = 0;
    phase fill = place(r, &p, &m, &next, want, 0, &clock);
    cr_router_index_stats(r, &blocks, &bytes);
    long rss = bench_status_bytes("VmRSS") - rss0, hwm = bench_status_bytes("VmHWM") - rss0;
    phase steady = place(r, &p, &m, &next, 0, steady_n ? steady_n : fill.requests / 4 + 1, &clock);
    uint64_t blocks_after, bytes_after;
    cr_router_index_stats(r, &blocks_after, &bytes_after);
    long hwm_after = bench_status_bytes("VmHWM") - rss0;
    printf("{\"shards\": %u, \"blocks_per_shard\": %u, \"hashes\": %u, \"shared\": %u, "
           "\"group\": %" PRIu64 ", \"blocks\": %" PRIu64 ", \"index_bytes\": %" PRIu64
           ", \"bytes_per_block\": %.2f, \"rss_per_block\": %.2f, \"peak_rss_per_block\": %.2f, "
           "\"fill_requests\": %" PRIu64 ", \"fill_us_per_request\": %.3f, "
           "\"fill_ns_per_hash\": %.1f, \"steady_requests\": %" PRIu64
           ", \"steady_us_per_request\": %.3f, \"steady_ns_per_hash\": %.1f, "
           "\"steady_blocks\": %" PRIu64 ", \"steady_bytes_per_block\": %.2f, "
           "\"steady_peak_rss_per_block\": %.2f}\n",
           p.shards, p.blocks, p.hashes, p.shared, p.shared ? p.group : 0, blocks, bytes,
           (double)bytes / (double)blocks, (double)rss / (double)blocks,
           (double)hwm / (double)blocks, fill.requests, fill.cpu_s / (double)fill.requests * 1e6,
           fill.cpu_s / (double)(fill.requests * p.hashes) * 1e9, steady.requests,
           steady.cpu_s / (double)steady.requests * 1e6,
           steady.cpu_s / (double)(steady.requests * p.hashes) * 1e9, blocks_after,
           (double)bytes_after / (double)blocks_after, (double)hwm_after / (double)blocks_after);
    cr_router_free(r);
    free(p.h);
    return 0;
}
