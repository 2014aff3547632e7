/* ReportOutcome's checks: one entry, field by field in cr_outcome's order
 * (the wire's), so the first bad field is the one named. Pure. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loop.h"

#define ALL_BITS ((CR_OUT_ERROR << 1) - 1u)

static cr_status check_length(const char *s, size_t max, size_t i, const char *field,
                              cr_error *err)
{
    size_t len = s ? strlen(s) : 0;
    if (len > max)
        return cr_fail(err, CR_EINVAL, "outcomes[%zu].%s must be at most %zu bytes, got %zu", i,
                       field, max, len);
    return CR_OK;
}

/* A time in ms, checked only when its bit is given. */
static cr_status check_ms(const cr_outcome *o, unsigned bit, double v, size_t i,
                          const char *field, cr_error *err)
{
    if (!(o->has & bit) || (isfinite(v) && v >= 0))
        return CR_OK;
    char text[32];
    cr_option_number_text(v, text, sizeof text);
    return cr_fail(err, CR_EINVAL, "outcomes[%zu].%s must be finite and >= 0, got %s", i, field,
                   text);
}

static cr_status check_below(const cr_outcome *o, unsigned bit, uint32_t v, uint32_t n, size_t i,
                             const char *field, cr_error *err)
{
    if (!(o->has & bit) || v < n)
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "outcomes[%zu].%s must be in 0..%u, got %u", i, field, n - 1,
                   v);
}

/* Up to the times: the id, the path, the flags, where it ran, its tokens. */
static cr_status check_head(const cr_outcome *o, size_t i, uint32_t shards, cr_error *err)
{
    if (check_length(o->request_id, CR_LOOP_REQUEST_ID_MAX, i, "request_id", err) != CR_OK)
        return CR_EINVAL;
    if (o->mode != 0 && o->mode != CR_INJECT_TEXT && o->mode != CR_INJECT_KV_CACHE)
        return cr_fail(err, CR_EINVAL,
                       "outcomes[%zu].mode must be 0 (unset), 1 (text) or 2 (kv_cache), got %d", i,
                       (int)o->mode);
    if (check_length(o->source, CR_INJECT_NAME_MAX, i, "source", err) != CR_OK)
        return CR_EINVAL;
    if (o->has & ~ALL_BITS)
        return cr_fail(err, CR_EINVAL, "outcomes[%zu].has has unknown bits 0x%x", i,
                       o->has & ~ALL_BITS);
    if (check_below(o, CR_OUT_SHARD, o->shard, shards, i, "shard", err) != CR_OK)
        return CR_EINVAL;
    if (check_below(o, CR_OUT_PROMPT_TOKENS, o->prompt_tokens, CR_INJECT_MAX_TOKENS + 1, i,
                    "prompt_tokens", err) != CR_OK)
        return CR_EINVAL;
    unsigned both = CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS;
    if ((o->has & both) == both && o->cached_tokens > o->prompt_tokens)
        return cr_fail(err, CR_EINVAL,
                       "outcomes[%zu].cached_tokens must be <= prompt_tokens (%u), got %u", i,
                       o->prompt_tokens, o->cached_tokens);
    return CR_OK;
}

cr_status cr_outcome_check(const cr_outcome *o, size_t i, uint32_t shards, uint32_t gpus,
                           cr_error *err)
{
    unsigned span = CR_OUT_PREFILLED_FROM | CR_OUT_PREFILLED_TO;
    if (check_head(o, i, shards, err) != CR_OK ||
        check_ms(o, CR_OUT_QUEUE_WAIT, o->queue_wait_ms, i, "queue_wait_ms", err) != CR_OK ||
        check_ms(o, CR_OUT_PREFILL, o->prefill_ms, i, "prefill_ms", err) != CR_OK)
        return CR_EINVAL;
    if (check_below(o, CR_OUT_PREFILLED_FROM, o->prefilled_from, CR_INJECT_MAX_TOKENS + 1, i,
                    "prefilled_from", err) != CR_OK)
        return CR_EINVAL;
    if ((o->has & span) == span && o->prefilled_from > o->prefilled_to)
        return cr_fail(err, CR_EINVAL,
                       "outcomes[%zu].prefilled_from must be <= prefilled_to (%u), got %u", i,
                       o->prefilled_to, o->prefilled_from);
    if (check_below(o, CR_OUT_PREFILLED_TO, o->prefilled_to, CR_INJECT_MAX_TOKENS + 1, i,
                    "prefilled_to", err) != CR_OK ||
        check_ms(o, CR_OUT_TRANSFER_MS, o->transfer_ms, i, "transfer_ms", err) != CR_OK ||
        check_ms(o, CR_OUT_LOAD, o->load_ms, i, "load_ms", err) != CR_OK ||
        check_ms(o, CR_OUT_TTFT, o->ttft_ms, i, "ttft_ms", err) != CR_OK ||
        check_below(o, CR_OUT_GPU, o->gpu, gpus, i, "gpu", err) != CR_OK ||
        check_length(o->error, CR_LOOP_ERROR_MAX, i, "error", err) != CR_OK)
        return CR_EINVAL;
    return CR_OK;
}

cr_status cr_outcome_count_check(size_t n, cr_error *err)
{
    if (n <= CR_LOOP_MAX_OUTCOMES)
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "outcomes must hold at most %d entries, got %zu",
                   CR_LOOP_MAX_OUTCOMES, n);
}
