/* ReportKvEvents: what engines say they cache, checked as a whole batch,
 * then applied to the router's prefix index (route.h, "KV events"). The
 * KV-event subscriber (kvevents/) calls the same. */

#include "internal.h"

static cr_status check_event(const cr_core *c, const cr_kv_event *e, size_t i, uint32_t shards,
                             cr_error *err)
{
    if (e->kind < CR_KV_STORED || e->kind > CR_KV_CLEARED)
        return cr_fail(err, CR_EINVAL, "events[%zu] must be one of block_stored, block_removed, "
                       "all_blocks_cleared, got none", i);
    if (e->shard >= shards)
        return cr_fail(err, CR_EINVAL, "events[%zu].shard must be below the %u shards, got %u", i,
                       shards, e->shard);
    if (e->n > c->route.max_hashes)
        return cr_fail(err, CR_EINVAL,
                       "events[%zu].block_hashes has %zu hashes, at most %u (--max-route-hashes)",
                       i, e->n, c->route.max_hashes);
    if (e->tier != CR_KV_GPU && e->tier != CR_KV_CPU)
        return cr_fail(err, CR_EINVAL, "events[%zu].medium must be GPU or CPU, got tier %d", i,
                       (int)e->tier);
    if (e->space_len > CR_CORE_NAMESPACE_MAX)
        return cr_fail(err, CR_EINVAL, "events[%zu].namespace must be at most %d bytes, got %zu",
                       i, CR_CORE_NAMESPACE_MAX, e->space_len);
    if (e->kind != CR_KV_STORED)
        return CR_OK;
    if (e->block_size < 1 || e->block_size > CR_CORE_MAX_BLOCK_TOKENS)
        return cr_fail(err, CR_EINVAL, "events[%zu].block_size must be in 1..%u, got %u", i,
                       CR_CORE_MAX_BLOCK_TOKENS, e->block_size);
    if (e->n_tokens != (uint64_t)e->n * e->block_size)
        return cr_fail(err, CR_EINVAL,
                       "events[%zu].token_ids has %zu tokens, %zu blocks of %u need %llu", i,
                       e->n_tokens, e->n, e->block_size,
                       (unsigned long long)e->n * e->block_size);
    return CR_OK;
}

cr_status cr_core_kv_events(cr_core *c, const cr_kv_event *ev, size_t n, cr_kv_applied *out,
                            cr_error *err)
{
    *out = (cr_kv_applied){0};
    if (n > CR_CORE_MAX_KV_EVENTS)
        return cr_fail(err, CR_EINVAL, "events must be at most %d, got %zu", CR_CORE_MAX_KV_EVENTS,
                       n);
    cr_installed *t = cr_core_acquire(c, NULL);
    uint32_t shards = cr_core_shards(c, t);
    cr_installed_release(t);
    for (size_t i = 0; i < n; i++)
        if (check_event(c, &ev[i], i, shards, err) != CR_OK)
            return CR_EINVAL;
    if (cr_router_kv_apply(c->router, ev, n, out) != 0)
        return cr_fail(err, CR_ENOMEM, "out of memory indexing the engines' blocks (some left "
                       "out)");
    return CR_OK;
}
