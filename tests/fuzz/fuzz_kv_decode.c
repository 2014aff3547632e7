/* The KV-event decoder (kvevents/decode.c): the bytes as one vLLM
 * payload. No crash or leak (ASan, LSan); a refusal leaves the batch empty
 * and says why; a decoded batch is within kvevents.h's bounds, its events
 * pointing into its own arrays in order, each stored one n x block_size
 * tokens; and what the decoder takes, a core whose --max-route-hashes is
 * the decoder's bound takes too, spread over its shards, every stored
 * block counted once (stored or orphan). The core is small
 * (64 blocks a shard, so inputs evict) and kept from input to input. */
#include <string.h>

#include "fuzz.h"
#include "kvevents.h"

#define SHARDS 4

static cr_core *core_of(void)
{
    static cr_core *core;
    if (core)
        return core;
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.planner = (cr_planner_config){SHARDS, 50, 200};
    cfg.replan_interval_s = 0;
    cfg.route.by = CR_ROUTE_TTFT;
    cfg.route.index_blocks = 64;
    cfg.route.max_hashes = CR_KV_MAX_HASHES;
    cr_error err;
    core = cr_core_new(&cfg, NULL, NULL, &err);
    CR_FUZZ_CHECK(core, "core: %s", err.msg);
    return core;
}

/* The blocks b's stored and removed events carry, after checking each
 * event. */
static void check_batch(const cr_kv_batch *b, uint64_t *stored, uint64_t *removed)
{
    size_t hashes = 0, tokens = 0, names = 0;
    *stored = *removed = 0;
    CR_FUZZ_CHECK(b->n + b->skipped <= CR_KV_MAX_EVENTS, "%zu events and %llu skipped", b->n,
                  (unsigned long long)b->skipped);
    for (size_t i = 0; i < b->n; i++) {
        const cr_kv_event *e = &b->events[i];
        CR_FUZZ_CHECK(e->kind >= CR_KV_STORED && e->kind <= CR_KV_CLEARED && e->shard == 0,
                      "event %zu: kind %d, shard %u", i, (int)e->kind, e->shard);
        CR_FUZZ_CHECK(e->n <= CR_KV_MAX_HASHES && (!e->n || e->engine == b->hashes + hashes),
                      "event %zu: %zu hashes at %td", i, e->n, e->engine - b->hashes);
        hashes += e->n;
        *(e->kind == CR_KV_STORED ? stored : removed) += e->kind == CR_KV_CLEARED ? 0 : e->n;
        if (e->kind != CR_KV_STORED)
            continue;
        CR_FUZZ_CHECK(e->block_size >= 1 && e->block_size <= CR_CORE_MAX_BLOCK_TOKENS &&
                          e->n_tokens <= CR_KV_MAX_TOKENS &&
                          e->n_tokens == e->n * e->block_size,
                      "event %zu: %zu tokens, %zu blocks of %u", i, e->n_tokens, e->n,
                      e->block_size);
        CR_FUZZ_CHECK(e->space_len <= CR_CORE_NAMESPACE_MAX &&
                          (!e->space_len || e->space == b->names + names) &&
                          (!e->n_tokens || e->tokens == b->tokens + tokens),
                      "event %zu: namespace of %zu bytes, or arrays out of order", i,
                      e->space_len);
        tokens += e->n_tokens;
        names += e->space_len;
    }
}

/* b applied to the core, its events spread over the shards. */
static void apply(cr_kv_batch *b, uint64_t stored, uint64_t removed)
{
    for (size_t i = 0; i < b->n; i++)
        b->events[i].shard = (uint32_t)(i % SHARDS);
    cr_kv_applied out;
    cr_error err;
    cr_status st = cr_core_kv_events(core_of(), b->events, b->n, &out, &err);
    CR_FUZZ_CHECK(st == CR_OK, "a decoded batch refused by the core (%d): %s", (int)st,
                  err.msg);
    /* a removal whose block the index already aged out counts in neither */
    CR_FUZZ_CHECK(out.stored + out.orphans == stored && out.removed + out.unknown <= removed,
                  "%llu stored and %llu orphans of %llu; %llu removed and %llu unknown of %llu",
                  (unsigned long long)out.stored, (unsigned long long)out.orphans,
                  (unsigned long long)stored, (unsigned long long)out.removed,
                  (unsigned long long)out.unknown, (unsigned long long)removed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_kv_batch b;
    cr_error err;
    err.msg[0] = '\0';
    cr_status st = cr_kv_decode(data, size, &b, &err);
    if (st != CR_OK) {
        CR_FUZZ_CHECK(st == CR_EINVAL && err.msg[0] && !b.events && !b.n && !b.hashes &&
                          !b.tokens && !b.names,
                      "refused (%d) with '%s', leaving %zu events", (int)st, err.msg, b.n);
        return 0;
    }
    uint64_t stored, removed;
    check_batch(&b, &stored, &removed);
    apply(&b, stored, removed);
    cr_kv_batch_free(&b);
    return 0;
}
