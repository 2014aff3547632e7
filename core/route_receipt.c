/* A route's receipt: the endpoint picker's routes are kept like
 * SelectInjection's decisions, so that GetDecision, WatchDecisions and the
 * outcome's measured-minus-predicted errors show them. A route injects no
 * knowledge: its decision is the text path (the engine prefills what its
 * own prefix cache lacks), predicted as the queue wait plus the prefill. */
#include <string.h>

#include "internal.h"

_Static_assert(sizeof((cr_receipt *)0)->objective == CR_ADMIT_NAME_MAX + 1 &&
                   sizeof((cr_receipt *)0)->fairness == CR_ADMIT_NAME_MAX + 1,
               "a receipt holds the door's names");

/* name[0..len) NUL-terminated into to (CR_ADMIT_NAME_MAX + 1 bytes; the
 * core checked len), "" for none. */
static void copy_name(char *to, const char *name, size_t len)
{
    len = name && len <= CR_ADMIT_NAME_MAX ? len : 0;
    memcpy(to, name ? name : "", len);
    to[len] = '\0';
}

/* The door's attainment from an outcome's TTFT: the receipt's objective
 * resolved as the door resolves it (the request's own SLO, else its
 * objective's); nothing without a door, an SLO or a TTFT. */
void cr_core_door_outcome(cr_core *c, const cr_receipt *r, double ttft_ms)
{
    cr_admit *door = cr_core_door(c);
    if (!door || r->door != CR_ROUTE_DOOR_ROUTED)
        return;
    size_t n;
    const cr_admit_objective *t = cr_admit_objectives(door, &n);
    cr_admit_ask ask = {.objective = cr_admit_objective_find(t, n, r->objective,
                                                             strlen(r->objective)),
                        .fairness = r->fairness,
                        .fairness_len = strlen(r->fairness)};
    if (ask.objective != CR_ADMIT_NO_OBJECTIVE) {
        ask.priority = t[ask.objective].priority;
        ask.slo_ms = t[ask.objective].slo_ms;
    }
    if (r->slo_ttft_ms > 0)
        ask.slo_ms = r->slo_ttft_ms;
    ask.has_objective = r->objective[0] || r->slo_ttft_ms > 0;
    if (ask.has_objective && ask.slo_ms > 0)
        cr_admit_outcome(door, &ask, ttft_ms);
}

int cr_core_receipt_route(cr_core *c, const cr_route_request *q, const cr_route_answer *a)
{
    size_t id_len = q->request_id ? strlen(q->request_id) : 0;
    if (!id_len || id_len > CR_LOOP_REQUEST_ID_MAX || !c->receipts ||
        a->shard == CR_ROUTE_NO_SHARD)
        return -1;
    cr_receipt r;
    memset(&r, 0, sizeof r);
    const cr_node_snapshot *snap = cr_probe_acquire(c->probe);
    cr_error err;
    cr_status st = cr_injector_model(c->injector, snap, 0, &r.model, &err);
    cr_node_snapshot_release(snap);
    if (st != CR_OK) /* cannot happen: GPU 0 always resolves */
        return -1;
    memcpy(r.request_id, q->request_id, id_len + 1);
    r.decided_at_s = core_now(c);
    uint64_t hashed = (uint64_t)q->n_hashes * c->route.block_tokens;
    r.prompt_tokens = q->prompt_tokens              ? q->prompt_tokens
                      : hashed < CR_REQUEST_MAX_TOKENS ? (uint32_t)hashed
                                                       : CR_REQUEST_MAX_TOKENS;
    r.has_queue_wait = 1;
    r.queue_wait_ms = a->queue_wait_ms;
    r.cached_tokens = a->cached_tokens;
    r.decision.mode = CR_INJECT_TEXT;
    r.decision.source_index = -1;
    r.decision.reason = CR_REASON_NO_KNOWLEDGE;
    r.decision.text.queue_wait_ms = a->queue_wait_ms;
    r.decision.text.prefill_ms = a->prefill_ms;
    r.decision.text.total_ms = a->queue_wait_ms + a->prefill_ms;
    copy_name(r.objective, q->objective, q->objective_len);
    copy_name(r.fairness, q->fairness, q->fairness_len);
    r.slo_ttft_ms = q->slo_ttft_ms;
    r.door = a->door;
    if (cr_receipts_put(c->receipts, &r) != 0)
        return -1;
    if (c->hooks.receipted)
        c->hooks.receipted(c->hooks.ctx, &r);
    return 0;
}
