/* Route: the checks in field order, the owners' arrivals, then the route
 * rule (route.h) placing each request with the calibrated prefill model. */
#include <string.h>

#include "internal.h"

void cr_core_route_model(cr_core *c, cr_prefill_model *out)
{
    cr_inject_model m;
    cr_error err;
    const cr_node_snapshot *snap = cr_prober_acquire(c->prober);
    cr_status st = cr_injector_coefficients(c->injector, snap, 0, &m, &err);
    cr_node_snapshot_release(snap);
    if (st != CR_OK) /* cannot happen: GPU 0 always resolves */
        memset(&m, 0, sizeof m);
    /* a CPU-tier block loads as a KV transfer's host-to-GPU leg does
     * (inject's select.c): KV bytes a token over the H2D GB/s */
    double per_token = m.h2d_gbps > 0 ? m.kv_bytes_per_token / (m.h2d_gbps * 1e6) : 0;
    *out = (cr_prefill_model){m.prefill_fixed_ms, m.prefill_ms_per_token,
                              m.prefill_ms_per_token2, m.load_fixed_ms, per_token};
}

static cr_status check_item(const cr_core *c, const cr_core_route_item *q, size_t i, cr_error *err)
{
    uint32_t most = c->route.max_hashes;
    if (q->n_hashes > most)
        return cr_fail(err, CR_EINVAL,
                       "requests[%zu].block_hashes has %zu hashes, at most %u "
                       "(--max-route-hashes)",
                       i, q->n_hashes, most);
    if (q->prompt_tokens > CR_INJECT_MAX_TOKENS)
        return cr_fail(err, CR_EINVAL, "requests[%zu].prompt_tokens must be at most %d, got %u",
                       i, CR_INJECT_MAX_TOKENS, q->prompt_tokens);
    if (q->space_len > CR_CORE_NAMESPACE_MAX)
        return cr_fail(err, CR_EINVAL, "requests[%zu].namespace must be at most %d bytes, got %zu",
                       i, CR_CORE_NAMESPACE_MAX, q->space_len);
    size_t id_len = q->request_id ? strlen(q->request_id) : 0;
    if (id_len > CR_LOOP_REQUEST_ID_MAX)
        return cr_fail(err, CR_EINVAL, "requests[%zu].request_id must be at most %d bytes, got %zu",
                       i, CR_LOOP_REQUEST_ID_MAX, id_len);
    return CR_OK;
}

/* The owners among the requests as arrivals, weighing 1 each, in
 * batches; how many there were. */
static size_t record_owners(cr_core *c, const cr_core_route_item *q, size_t n, double now)
{
    int64_t owners[CR_CORE_BATCH];
    size_t k = 0, all = 0;
    cr_touched *touched = atomic_load_explicit(&c->touched, memory_order_acquire);
    for (size_t i = 0; i <= n; i++) {
        if (i < n && q[i].has_owner)
            owners[k++] = q[i].owner;
        if (k && (k == CR_CORE_BATCH || i == n)) {
            cr_estimator_record_batch(c->estimator, owners, NULL, k, now, NULL);
            if (touched)
                cr_touched_add(touched, owners, k);
            all += k;
            k = 0;
        }
    }
    return all;
}

/* Requests placed per cr_router_place call (one lock each). */
#define CHUNK 64

static cr_route_query query_of(const cr_core *c, const cr_core_route_item *x, uint64_t caller)
{
    uint64_t tokens =
        x->prompt_tokens ? x->prompt_tokens : (uint64_t)x->n_hashes * c->route.block_tokens;
    return (cr_route_query){
        .has_owner = x->has_owner,
        .owner = x->owner,
        .prompt_tokens = tokens < CR_INJECT_MAX_TOKENS ? (uint32_t)tokens : CR_INJECT_MAX_TOKENS,
        .hashes = x->hashes,
        .n_hashes = (uint32_t)x->n_hashes,
        .space = cr_route_text_key(x->space, x->space_len),
        .request = x->request_id
                       ? cr_route_request_key(x->request_id, strlen(x->request_id), caller)
                       : 0,
        .caller = caller,
    };
}

cr_status cr_core_route(cr_core *c, const cr_core_route_item *items, size_t n,
                        cr_route_answer *out, uint64_t *generation, cr_error *err)
{
    return cr_core_route_as(c, 0, items, n, out, generation, err);
}

cr_status cr_core_route_as(cr_core *c, uint64_t caller, const cr_core_route_item *items,
                           size_t n, cr_route_answer *out, uint64_t *generation, cr_error *err)
{
    if (n == 0)
        return cr_fail(err, CR_EINVAL, "requests must not be empty");
    if (n > CR_CORE_MAX_ROUTES)
        return cr_fail(err, CR_EINVAL, "requests must be at most %d, got %zu", CR_CORE_MAX_ROUTES,
                       n);
    for (size_t i = 0; i < n; i++)
        if (check_item(c, &items[i], i, err) != CR_OK)
            return CR_EINVAL;
    uint64_t gen;
    cr_installed *t = cr_core_acquire(c, &gen);
    double now = core_now(c);
    cr_prefill_model m;
    cr_core_route_model(c, &m);
    size_t arrivals = record_owners(c, items, n, now);
    cr_route_query q[CHUNK]; /* on the stack: a Route mallocs nothing here */
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        for (size_t i = 0; i < k; i++)
            q[i] = query_of(c, &items[at + i], caller);
        cr_router_place(c->router, t ? t->table : NULL, cr_core_shards(c, t), &m, q, out + at,
                        k, now);
    }
    cr_installed_release(t);
    if (generation)
        *generation = gen;
    if (c->hooks.recorded && arrivals)
        c->hooks.recorded(c->hooks.ctx, arrivals);
    return CR_OK;
}
