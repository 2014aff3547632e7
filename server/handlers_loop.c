/* The closed loop: ReportOutcome, GetDecision and GetStats (decode, one
 * cr_core_* call, encode), and receipts as DecisionReceipt messages for
 * GetDecision and the WatchDecisions feed. Every check is the core's. */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__Outcome Outcome;
typedef Cacheroute__V1__ReportOutcomeRequest ReportRequest;
typedef Cacheroute__V1__GetDecisionRequest DecisionRequest;
typedef Cacheroute__V1__TermError TermError;

/* ---- ReportOutcome ---- */

/* The message's fields, each with its has bit when present; the strings
 * point into m (NULL when absent). */
static void outcome_of(const Outcome *m, cr_outcome *o)
{
    memset(o, 0, sizeof *o);
    o->request_id = m->request_id;
    o->mode = (cr_inject_mode)m->mode; /* absent = 0; the core checks the range */
    o->source = m->source;
#define TAKE(field, bit)                                                                       \
    do {                                                                                       \
        if (m->has_##field) {                                                                  \
            o->has |= (bit);                                                                   \
            o->field = m->field;                                                               \
        }                                                                                      \
    } while (0)
    TAKE(owner, CR_OUT_OWNER);
    TAKE(shard, CR_OUT_SHARD);
    TAKE(prompt_tokens, CR_OUT_PROMPT_TOKENS);
    TAKE(cached_tokens, CR_OUT_CACHED_TOKENS);
    TAKE(queue_wait_ms, CR_OUT_QUEUE_WAIT);
    TAKE(prefill_ms, CR_OUT_PREFILL);
    TAKE(prefilled_from, CR_OUT_PREFILLED_FROM);
    TAKE(prefilled_to, CR_OUT_PREFILLED_TO);
    TAKE(transfer_ms, CR_OUT_TRANSFER_MS);
    TAKE(transfer_bytes, CR_OUT_TRANSFER_BYTES);
    TAKE(load_ms, CR_OUT_LOAD);
    TAKE(ttft_ms, CR_OUT_TTFT);
    TAKE(gpu, CR_OUT_GPU);
#undef TAKE
}

static void report_outcome(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ReportRequest *req = message;
    size_t n = req->n_outcomes;
    cr_outcome *o = malloc((n ? n : 1) * sizeof *o);
    if (!o) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu outcomes", n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        outcome_of(req->outcomes[i], &o[i]);
    cr_outcome_counts counts;
    cr_error err;
    cr_status st = cr_core_report(h->core, o, n, &counts, &err);
    if (st != CR_OK) {
        cr_reply_core_error(out, st, &err);
    } else {
        Cacheroute__V1__ReportOutcomeResponse resp = CACHEROUTE__V1__REPORT_OUTCOME_RESPONSE__INIT;
        resp.accepted = counts.accepted;
        resp.matched = counts.matched;
        resp.rejected = counts.rejected;
        resp.first_rejection = counts.first_rejection;
        cr_reply_message(out, &resp.base, h->max_message, NULL);
    }
    free(o);
}

void cr_handle_report_outcome(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    /* Counted before decoding, so an oversized batch costs no allocation. */
    size_t n = cr_wire_count(&cacheroute__v1__report_outcome_request__descriptor, data, len,
                             "outcomes");
    if (n > CR_LOOP_MAX_OUTCOMES) {
        cr_reply_error(out, GRPC_STATUS_INVALID_ARGUMENT,
                       "outcomes must hold at most %d entries, got %zu", CR_LOOP_MAX_OUTCOMES, n);
        return;
    }
    cr_run_decoded(ctx, &cacheroute__v1__report_outcome_request__descriptor, data, len, out,
                   report_outcome);
}

/* ---- receipts ---- */

typedef struct receipt_msg {
    Cacheroute__V1__DecisionReceipt r;
    Cacheroute__V1__DecidedRequest req;
    Cacheroute__V1__CostModel model;
    Cacheroute__V1__CostBreakdown text, kv;
    TermError errors[CR_N_TERMS];
    TermError *ptrs[CR_N_TERMS];
} receipt_msg;

/* Points m at r's fields (r must outlive m). */
static void receipt_msg_init(receipt_msg *m, const cr_receipt *r)
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
    receipt_msg m;
    receipt_msg_init(&m, r);
    return cr_pack(&m.r.base, SIZE_MAX, body, len);
}

/* ---- GetDecision ---- */

static void get_decision(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const DecisionRequest *req = message;
    cr_receipt r;
    if (!cr_core_decision(h->core, req->request_id, &r)) {
        size_t n = strlen(req->request_id);
        cr_reply_error(out, GRPC_STATUS_NOT_FOUND,
                       "no receipt for request_id '%.*s%s': never decided (or a dry run), or "
                       "evicted (--receipts) or replaced since",
                       n > CR_LOOP_REQUEST_ID_MAX ? CR_LOOP_REQUEST_ID_MAX : (int)n,
                       req->request_id, n > CR_LOOP_REQUEST_ID_MAX ? "..." : "");
        return;
    }
    receipt_msg m;
    receipt_msg_init(&m, &r);
    cr_reply_message(out, &m.r.base, h->max_message, NULL);
}

void cr_handle_get_decision(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__get_decision_request__descriptor, data, len, out,
                   get_decision);
}

/* ---- GetStats ---- */

typedef struct stats_msg {
    Cacheroute__V1__GetStatsResponse resp;
    Cacheroute__V1__ServedStats served;
    Cacheroute__V1__HitStats hits[3]; /* all, admitted, not admitted */
    Cacheroute__V1__ShardHits shards[CR_MAX_SHARDS];
    Cacheroute__V1__ShardHits *shard_ptrs[CR_MAX_SHARDS];
    Cacheroute__V1__PredictionError errors[CR_N_PATHS * CR_N_TERMS];
    Cacheroute__V1__PredictionError *error_ptrs[CR_N_PATHS * CR_N_TERMS];
    Cacheroute__V1__Regret regret[CR_N_PATHS];
    Cacheroute__V1__Regret *regret_ptrs[CR_N_PATHS];
    Cacheroute__V1__GpuCalibration gpus[CR_PROBE_MAX_GPUS];
    Cacheroute__V1__GpuCalibration *gpu_ptrs[CR_PROBE_MAX_GPUS];
    Cacheroute__V1__ReceiptStats receipts;
    Cacheroute__V1__OutcomeStats outcomes;
    /* what the core reads into */
    cr_loop_stats st;
    cr_loop_shard_stats shard_st[CR_MAX_SHARDS];
    cr_inject_calibration cal[CR_PROBE_MAX_GPUS];
} stats_msg;

static Cacheroute__V1__HitStats *hit_msg(Cacheroute__V1__HitStats *m, uint64_t hit, uint64_t miss,
                                         double rolling)
{
    cacheroute__v1__hit_stats__init(m);
    m->hit_tokens = hit;
    m->miss_tokens = miss;
    m->total_ratio = hit + miss ? (double)hit / (double)(hit + miss) : 0;
    m->rolling_ratio = rolling;
    return m;
}

static void served_msg(stats_msg *m)
{
    const cr_loop_stats *st = &m->st;
    const uint64_t(*t)[2] = st->served_tokens; /* [admitted][miss, hit] */
    cacheroute__v1__served_stats__init(&m->served);
    m->served.all = hit_msg(&m->hits[0], t[0][1] + t[1][1], t[0][0] + t[1][0], st->hit_ratio);
    m->served.admitted = hit_msg(&m->hits[1], t[1][1], t[1][0], st->hit_ratio_admitted[1]);
    m->served.not_admitted = hit_msg(&m->hits[2], t[0][1], t[0][0], st->hit_ratio_admitted[0]);
    size_t n = st->n_shards < CR_MAX_SHARDS ? st->n_shards : CR_MAX_SHARDS;
    for (size_t i = 0; i < n; i++) {
        Cacheroute__V1__ShardHits *s = &m->shards[i];
        cacheroute__v1__shard_hits__init(s);
        s->shard = (uint32_t)i;
        s->outcomes = m->shard_st[i].outcomes;
        s->prompt_tokens = m->shard_st[i].prompt_tokens;
        s->cached_tokens = m->shard_st[i].cached_tokens;
        s->rolling_ratio = m->shard_st[i].hit_ratio;
        m->shard_ptrs[i] = s;
    }
    m->served.n_shards = n;
    m->served.shards = m->shard_ptrs;
    m->resp.served = &m->served;
}

static void errors_msg(stats_msg *m)
{
    size_t n = 0;
    for (int p = 0; p < CR_N_PATHS; p++) {
        for (int t = 0; t < CR_N_TERMS; t++, n++) {
            const cr_loop_error_stats *e = &m->st.errors[p][t];
            Cacheroute__V1__PredictionError *pe = &m->errors[n];
            cacheroute__v1__prediction_error__init(pe);
            pe->path = (char *)cr_loop_path_name((cr_loop_path)p);
            pe->term = (char *)cr_loop_term_name((cr_loop_term)t);
            pe->samples = e->samples;
            pe->ape = e->ape;
            pe->bias_ms = e->bias_ms;
            m->error_ptrs[n] = pe;
        }
        Cacheroute__V1__Regret *r = &m->regret[p];
        cacheroute__v1__regret__init(r);
        r->path = (char *)cr_loop_path_name((cr_loop_path)p);
        r->count = m->st.regrets[p];
        r->ms = m->st.regret_ms[p];
        m->regret_ptrs[p] = r;
    }
    m->resp.n_errors = n;
    m->resp.errors = m->error_ptrs;
    m->resp.n_regret = CR_N_PATHS;
    m->resp.regret = m->regret_ptrs;
}

static void calibration_msg(stats_msg *m)
{
    size_t n = m->st.n_gpus < CR_PROBE_MAX_GPUS ? m->st.n_gpus : CR_PROBE_MAX_GPUS;
    for (size_t i = 0; i < n; i++) {
        const cr_inject_calibration *c = &m->cal[i];
        Cacheroute__V1__GpuCalibration *g = &m->gpus[i];
        cacheroute__v1__gpu_calibration__init(g);
        g->gpu = (uint32_t)i;
        g->samples = c->samples;
        g->adopted = c->adopted;
        g->prefill_fixed_ms = c->a;
        g->prefill_ms_per_token = c->b;
        g->prefill_ms_per_token2 = c->c;
        g->mape_fit = c->mape_fit;
        g->mape_prior = c->mape_prior;
        m->gpu_ptrs[i] = g;
    }
    m->resp.n_calibration = n;
    m->resp.calibration = m->gpu_ptrs;
}

static void counts_msg(stats_msg *m)
{
    const cr_loop_stats *st = &m->st;
    cacheroute__v1__receipt_stats__init(&m->receipts);
    m->receipts.kept = st->receipts;
    m->receipts.capacity = st->receipts_capacity;
    m->receipts.made = st->receipts_made;
    m->receipts.evicted = st->receipts_evicted;
    m->receipts.replaced = st->receipts_replaced;
    m->receipts.bytes = st->receipt_bytes;
    m->resp.receipts = &m->receipts;
    cacheroute__v1__outcome_stats__init(&m->outcomes);
    m->outcomes.accepted = st->outcomes_accepted;
    m->outcomes.matched = st->outcomes_matched;
    m->outcomes.rejected = st->outcomes_rejected;
    m->outcomes.observations = st->observations;
    m->resp.outcomes = &m->outcomes;
}

static void get_stats(void *ctx, const void *message, cr_reply *out)
{
    (void)message; /* GetStatsRequest has no fields */
    const cr_handlers *h = ctx;
    stats_msg *m = malloc(sizeof *m);
    if (!m) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    cr_core_loop_stats_read(h->core, &m->st, m->shard_st, CR_MAX_SHARDS, m->cal,
                            CR_PROBE_MAX_GPUS);
    cacheroute__v1__get_stats_response__init(&m->resp);
    served_msg(m);
    errors_msg(m);
    calibration_msg(m);
    counts_msg(m);
    cr_reply_message(out, &m->resp.base, h->max_message, NULL);
    free(m);
}

void cr_handle_get_stats(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &cacheroute__v1__get_stats_request__descriptor, data, len, out, get_stats);
}
