/* The engines' own load (route.h, "The engines' own load"): a scrape's
 * figures checked as a whole, then kept by the router; the one report it
 * makes, a block size other than --block-tokens, goes to the hooks. */
#include <math.h>
#include <string.h>

#include "internal.h"

/* A count as the contract has it: NAN (not reported), or finite and >= 0. */
static int count_ok(double x) { return isnan(x) || (isfinite(x) && x >= 0); }

static cr_status check_load(const cr_engine_load *l, cr_error *err)
{
    if (!isfinite(l->at_s))
        return cr_fail(err, CR_EINVAL, "at_s must be finite, got %g", l->at_s);
    if (!count_ok(l->waiting))
        return cr_fail(err, CR_EINVAL,
                       "waiting must be finite and >= 0 (NaN: not reported), got %g", l->waiting);
    if (!count_ok(l->running))
        return cr_fail(err, CR_EINVAL,
                       "running must be finite and >= 0 (NaN: not reported), got %g", l->running);
    if (!isnan(l->kv_usage) && !(l->kv_usage >= 0 && l->kv_usage <= 1))
        return cr_fail(err, CR_EINVAL, "kv_usage must be in 0..1 (NaN: not reported), got %g",
                       l->kv_usage);
    if (l->block_size > CR_CORE_MAX_BLOCK_TOKENS)
        return cr_fail(err, CR_EINVAL, "block_size must be at most %u (0: not reported), got %u",
                       CR_CORE_MAX_BLOCK_TOKENS, l->block_size);
    if (l->n_lora > CR_ENGINE_LORA_MAX)
        return cr_fail(err, CR_EINVAL, "n_lora must be at most %d, got %u", CR_ENGINE_LORA_MAX,
                       l->n_lora);
    for (uint32_t i = 0; i < l->n_lora; i++)
        if (!memchr(l->lora[i], 0, CR_ENGINE_LORA_NAME_MAX))
            return cr_fail(err, CR_EINVAL, "lora[%u] must end with a NUL within %d bytes", i,
                           CR_ENGINE_LORA_NAME_MAX);
    return CR_OK;
}

cr_status cr_core_engine_load(cr_core *c, uint32_t shard, const cr_engine_load *load,
                              cr_error *err)
{
    cr_installed *t = cr_core_acquire(c, NULL);
    uint32_t shards = cr_core_shards(c, t);
    cr_installed_release(t);
    if (shard >= shards)
        return cr_fail(err, CR_EINVAL, "shard must be below the %u shards, got %u", shards,
                       shard);
    if (check_load(load, err) != CR_OK)
        return CR_EINVAL;
    int first = cr_router_engine_load(c->router, shard, load, core_now(c));
    if (first < 0)
        return cr_fail(err, CR_ENOMEM, "out of memory keeping shard %u's engine load", shard);
    if (first && c->hooks.block_size)
        c->hooks.block_size(c->hooks.ctx, shard, load->block_size, c->route.block_tokens);
    return CR_OK;
}
