/* Request checks, in wire-field order; the first failure is reported with
 * the field's wire name and the offending value. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static cr_status check_sources(const cr_inject_request *req, cr_error *err)
{
    if (req->n_sources > CR_INJECT_MAX_SOURCES) {
        snprintf(err->msg, sizeof err->msg, "sources has %zu entries, at most %d allowed",
                 req->n_sources, CR_INJECT_MAX_SOURCES);
        return CR_EINVAL;
    }
    if (req->n_sources && !req->sources) {
        snprintf(err->msg, sizeof err->msg, "sources is NULL with %zu entries", req->n_sources);
        return CR_EINVAL;
    }
    for (size_t i = 0; i < req->n_sources; i++) {
        const cr_kv_source *s = &req->sources[i];
        size_t len = s->name ? strlen(s->name) : 0;
        if (len < 1 || len > CR_INJECT_NAME_MAX) {
            snprintf(err->msg, sizeof err->msg, "sources[%zu].name must be 1..%d bytes, got %zu", i,
                     CR_INJECT_NAME_MAX, len);
            return CR_EINVAL;
        }
        if (s->cached_tokens > req->knowledge_tokens) {
            snprintf(err->msg, sizeof err->msg,
                     "sources[%zu].cached_tokens %u exceeds knowledge_tokens %u", i,
                     s->cached_tokens, req->knowledge_tokens);
            return CR_EINVAL;
        }
    }
    return CR_OK;
}

cr_status cr_inject_request_check(const cr_inject_request *req, const cr_node_snapshot *snap,
                                  double now_ms, cr_error *err)
{
    uint64_t tokens = (uint64_t)req->prompt_tokens + req->knowledge_tokens;
    if (tokens > CR_INJECT_MAX_TOKENS) {
        snprintf(err->msg, sizeof err->msg,
                 "prompt_tokens + knowledge_tokens must be <= %d, got %llu", CR_INJECT_MAX_TOKENS,
                 (unsigned long long)tokens);
        return CR_EINVAL;
    }
    if (check_sources(req, err) != CR_OK)
        return CR_EINVAL;
    if (req->has_queue_wait && !(isfinite(req->queue_wait_ms) && req->queue_wait_ms >= 0)) {
        snprintf(err->msg, sizeof err->msg, "queue_wait_ms must be finite and >= 0, got %g",
                 req->queue_wait_ms);
        return CR_EINVAL;
    }
    if (cr_inject_check_gpu(snap, req->gpu, err) != CR_OK)
        return CR_EINVAL;
    if (!isfinite(now_ms)) {
        snprintf(err->msg, sizeof err->msg, "now_ms must be finite, got %g", now_ms);
        return CR_EINVAL;
    }
    return CR_OK;
}
