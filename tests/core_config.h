/* The core config the virtual-clock route suites start from: the
 * defaults, a probe that finds nothing (the same on any machine), `shards`
 * shards with qcap 50 and W 200, and no replanner. */
#ifndef CR_TEST_CORE_CONFIG_H
#define CR_TEST_CORE_CONFIG_H

#include <string.h>

#include "core.h"

static inline void cr_test_core_config(cr_core_config *cfg, uint32_t shards)
{
    cr_core_config_default(cfg);
    cr_core_quiet_probe(&cfg->probe);
    cfg->planner = (cr_planner_config){shards, 50, 200};
    cfg->replan_interval_s = 0;
}

/* The prefill model routes predict with fixed at ms_per_token ms a token
 * (no fixed term, no calibration): predictions a suite can reckon by hand. */
static inline void cr_test_core_fixed_model(cr_core_config *cfg, double ms_per_token)
{
    cfg->inject.prefill_coeffs = (cr_prefill_cost){.ms_per_token = ms_per_token};
    cfg->inject.set |= CR_INJECT_SET_PREFILL_COEFFS;
    cfg->inject.calibrate = 0;
}

/* A core on a virtual clock (t, seconds) that the test moves, routing by
 * the ttft rule over a prefix index of index_blocks blocks of
 * block_tokens tokens a shard: what the KV-event suites feed. Their
 * prompts are made of cr_test_kv_token's tokens, so a suite's engine
 * events and its Route calls name the same blocks. */
typedef struct cr_test_kv_core {
    double t;
    cr_core *core;
    uint32_t block_tokens;
} cr_test_kv_core;

#define CR_TEST_KV_MAX_BLOCK_TOKENS 64
#define CR_TEST_KV_MAX_BLOCKS 64 /* a prompt's, in cr_test_kv_core_route */

static inline double cr_test_kv_core_now(void *ctx) { return ((cr_test_kv_core *)ctx)->t; }

/* block_tokens at most CR_TEST_KV_MAX_BLOCK_TOKENS; f->core NULL when the
 * core cannot be made. */
static inline void cr_test_kv_core_open(cr_test_kv_core *f, uint32_t shards,
                                        uint32_t block_tokens, uint32_t index_blocks)
{
    cr_core_config cfg;
    cr_test_core_config(&cfg, shards);
    cfg.route.by = CR_ROUTE_TTFT;
    cfg.route.block_tokens = block_tokens;
    cfg.route.index_blocks = index_blocks;
    cr_clock_source clock = {cr_test_kv_core_now, f};
    cr_error err;
    f->t = 0;
    f->block_tokens = block_tokens;
    f->core = cr_core_new(&cfg, NULL, &clock, &err);
}

/* Token t of block i of prompt p: distinct per (p, i, t) for blocks of
 * at most 100 tokens. */
static inline uint32_t cr_test_kv_token(uint32_t p, uint32_t i, uint32_t t)
{
    return p * 100000 + i * 100 + t;
}

/* Route's answer for prompt p's first n blocks (at most
 * CR_TEST_KV_MAX_BLOCKS) under namespace space (NULL: none), their hashes
 * the router's chain as a Route caller computes it, 100 s after the last
 * call so that every queue drained. */
static inline cr_status cr_test_kv_core_route(cr_test_kv_core *f, uint32_t p, uint32_t n,
                                              const char *space, cr_route_answer *a)
{
    uint64_t h[CR_TEST_KV_MAX_BLOCKS];
    uint32_t tok[CR_TEST_KV_MAX_BLOCK_TOKENS], bt = f->block_tokens;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t t = 0; t < bt; t++)
            tok[t] = cr_test_kv_token(p, i, t);
        h[i] = cr_route_block_hash(i ? h[i - 1] : 0, tok, bt);
    }
    f->t += 100;
    cr_route_request q = {.hashes = h, .n_hashes = n, .space = space,
                            .space_len = space ? strlen(space) : 0};
    cr_error err;
    return cr_core_route(f->core, &q, 1, a, NULL, &err);
}

#endif
