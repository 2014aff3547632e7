/* Messages built from the core's types that more than one answer holds:
 * a path's cost breakdown and the cost model (SelectInjection,
 * GetNodeProfile, receipts), and a receipt as a DecisionReceipt
 * (GetDecision and the WatchDecisions feed). */
#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__CostBreakdown CostBreakdown;
typedef Cacheroute__V1__TermError TermError;

void cr_breakdown_msg(CostBreakdown *m, const cr_cost_breakdown *c)
{
    cacheroute__v1__cost_breakdown__init(m);
    m->queue_wait_ms = c->queue_wait_ms;
    m->prefill_ms = c->prefill_ms;
    m->link_wait_ms = c->link_wait_ms;
    m->transfer_ms = c->transfer_ms;
    m->load_ms = c->load_ms;
    m->total_ms = c->total_ms;
}

void cr_cost_model_msg(Cacheroute__V1__CostModel *m, const cr_inject_model *model)
{
    cacheroute__v1__cost_model__init(m);
    m->prefill_fixed_ms = model->prefill.fixed_ms; /* the wire's names for cost.h's */
    m->prefill_ms_per_token = model->prefill.ms_per_token;
    m->prefill_ms_per_token2 = model->prefill.ms_per_token2;
    m->kv_bytes_per_token = model->kv_bytes_per_token;
    m->link_gbps = model->link_gbps;
    m->h2d_gbps = model->load.h2d_gbps;
    m->decision_margin_ms = model->decision_margin_ms;
    m->link_queue_penalty = model->link_queue_penalty;
    m->source = (char *)model->source;
}

void cr_receipt_msg_init(cr_receipt_msg *m, const cr_receipt *r)
{
    const cr_inject_response *d = &r->decision;
    cacheroute__v1__decision_receipt__init(&m->r);
    cacheroute__v1__decided_request__init(&m->req);
    m->req.prompt_tokens = r->prompt_tokens;
    m->req.knowledge_tokens = r->knowledge_tokens;
    m->req.gpu = r->gpu;
    m->req.n_sources = r->n_sources;
    if (r->has_queue_wait) {
        m->req.queue_case = CACHEROUTE__V1__DECIDED_REQUEST__QUEUE_QUEUE_WAIT_MS;
        m->req.queue_wait_ms = r->queue_wait_ms;
    }
    cr_cost_model_msg(&m->model, &r->model);
    cr_breakdown_msg(&m->text, &d->text);
    cr_breakdown_msg(&m->kv, &d->kv);
    m->r.request_id = (char *)r->request_id;
    m->r.seq = r->seq;
    m->r.decided_at_s = r->decided_at_s;
    m->r.request = &m->req;
    m->r.cost_model = &m->model;
    m->r.mode = (Cacheroute__V1__InjectionMode)d->mode;
    m->r.reason = (char *)cr_inject_reason_name(d->reason);
    m->r.source = (char *)d->source;
    m->r.cached_tokens = r->cached_tokens;
    m->r.text = &m->text;
    m->r.kv = d->has_kv ? &m->kv : NULL;
    m->r.saving_ms = d->saving_ms;
    m->r.outcomes = r->outcomes;
    m->r.reported_at_s = r->reported_at_s;
    m->r.used = (Cacheroute__V1__InjectionMode)r->used;
    m->r.objective = (char *)r->objective;
    m->r.fairness_id = (char *)r->fairness;
    m->r.ttft_slo_ms = r->slo_ttft_ms;
    m->r.door = (char *)cr_route_door_name(r->door);
    size_t n = 0;
    for (int t = 0; t < CR_N_TERMS; t++) {
        if (!(r->error_has & (1u << t)))
            continue;
        TermError *e = &m->errors[n];
        cacheroute__v1__term_error__init(e);
        e->term = (char *)cr_loop_term_name((cr_loop_term)t);
        e->measured_ms = r->measured_ms[t];
        e->error_ms = r->error_ms[t];
        e->predicted_ms = r->measured_ms[t] - r->error_ms[t];
        m->ptrs[n++] = e;
    }
    m->r.n_errors = n;
    m->r.errors = m->ptrs;
}

int cr_receipt_pack(const cr_receipt *r, uint8_t **body, size_t *len)
{
    cr_receipt_msg m;
    cr_receipt_msg_init(&m, r);
    return cr_pack(&m.r.base, SIZE_MAX, body, len);
}
