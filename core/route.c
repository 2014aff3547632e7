/* Route: the checks in field order, the owners' arrivals, then the route
 * rule (route.h) placing the requests, as the decoder gave them
 * (request.h), with the calibrated prefill model, converted for the router
 * once each time it changes. */
#include <string.h>

#include "internal.h"

_Static_assert(CR_REQUEST_MAX_TOKENS == CR_INJECT_MAX_TOKENS,
               "a request's prompt tokens are the injector's");

/* Gives the router GPU 0's calibrated model, converted. */
static void set_route_model(cr_core *c)
{
    cr_inject_model m;
    cr_error err;
    const cr_node_snapshot *snap = cr_probe_acquire(c->probe);
    cr_status st = cr_injector_coefficients(c->injector, snap, 0, &m, &err);
    cr_node_snapshot_release(snap);
    if (st != CR_OK) /* cannot happen: GPU 0 always resolves */
        return;
    /* a CPU-tier block loads as a KV transfer's host-to-GPU leg does */
    cr_prefill_model routes = {m.prefill, m.load, m.kv_bytes_per_token};
    cr_router_set_model(c->router, &routes);
}

void cr_core_route_model_changed(cr_core *c, uint32_t gpu)
{
    if (gpu == 0)
        atomic_store_explicit(&c->model_stale, 1, memory_order_release);
}

void cr_core_route_model_update(cr_core *c)
{
    if (!atomic_load_explicit(&c->model_stale, memory_order_acquire))
        return;
    pthread_mutex_lock(&c->model_lock); /* one at a time: a later change is set last */
    if (atomic_exchange_explicit(&c->model_stale, 0, memory_order_acq_rel))
        set_route_model(c);
    pthread_mutex_unlock(&c->model_lock);
}

_Static_assert(CR_REQUEST_OBJECTIVE_MAX == CR_ADMIT_NAME_MAX &&
                   CR_REQUEST_FAIRNESS_MAX == CR_ADMIT_NAME_MAX,
               "a request's names are the door's");
_Static_assert((long)CR_REQUEST_SLO_MAX_MS == (long)CR_ADMIT_MAX_SLO_MS,
               "a request's SLO is the door's");

/* What a request asks of the door, each field in its range (request.h);
 * the names themselves are the door's to look up. */
static cr_status check_objective(const cr_route_request *q, size_t i, cr_error *err)
{
    if (q->objective_len > CR_REQUEST_OBJECTIVE_MAX)
        return cr_fail(err, CR_EINVAL, "requests[%zu].objective must be at most %d bytes, got %zu",
                       i, CR_REQUEST_OBJECTIVE_MAX, q->objective_len);
    if (q->has_priority &&
        (q->priority < -CR_REQUEST_PRIORITY_MAX || q->priority > CR_REQUEST_PRIORITY_MAX))
        return cr_fail(err, CR_EINVAL, "requests[%zu].priority must be in [%d, %d], got %d", i,
                       -CR_REQUEST_PRIORITY_MAX, CR_REQUEST_PRIORITY_MAX, (int)q->priority);
    /* written so that a NaN fails too */
    if (!(q->slo_ttft_ms >= 0 && q->slo_ttft_ms <= CR_REQUEST_SLO_MAX_MS))
        return cr_fail(err, CR_EINVAL, "requests[%zu].ttft_slo_ms must be in [0, %.0f], got %g",
                       i, CR_REQUEST_SLO_MAX_MS, q->slo_ttft_ms);
    if (q->fairness_len > CR_REQUEST_FAIRNESS_MAX)
        return cr_fail(err, CR_EINVAL,
                       "requests[%zu].fairness_id must be at most %d bytes, got %zu", i,
                       CR_REQUEST_FAIRNESS_MAX, q->fairness_len);
    return CR_OK;
}

static cr_status check_item(const cr_core *c, const cr_route_request *q, size_t i, cr_error *err)
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
    return check_objective(q, i, err);
}

/* The owners among the requests as arrivals, weighing 1 each, in
 * batches; how many there were. */
static size_t record_owners(cr_core *c, const cr_route_request *q, size_t n, double now)
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

/* 1 when a request names an objective, a priority or an SLO. */
static int any_objective(const cr_route_request *q, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (q[i].objective_len || q[i].has_priority || q[i].slo_ttft_ms > 0)
            return 1;
    return 0;
}

cr_status cr_core_route(cr_core *c, const cr_route_request *items, size_t n,
                        cr_route_answer *out, uint64_t *generation, cr_error *err)
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
    cr_core_route_model_update(c);
    size_t arrivals = record_owners(c, items, n, now);
    uint32_t shards = cr_core_shards(c, t);
    int door = c->door && any_objective(items, n);
    if (!door)
        cr_router_place(c->router, t ? t->table : NULL, shards, items, out, n, now);
    for (size_t i = 0; i < n; i++) {
        cr_route_request q = items[i]; /* with a door, the SLO it is placed to meet */
        if (door)
            cr_core_door_meet(c, &q);
        if (door && cr_core_door_before(c, t ? t->table : NULL, shards, &q, &out[i], now))
            continue;
        if (door) /* one at a time, as the rule places a batch: each sees the door's before */
            cr_router_place(c->router, t ? t->table : NULL, shards, &q, &out[i], 1, now);
        out[i].door = CR_ROUTE_DOOR_ROUTED;
        out[i].held = 0;
        if (door)
            cr_core_door_after(c, shards, &items[i], &out[i], now);
    }
    cr_installed_release(t);
    if (generation)
        *generation = gen;
    if (c->hooks.recorded && arrivals)
        c->hooks.recorded(c->hooks.ctx, arrivals);
    return CR_OK;
}
