/* GetStats: the closed loop's figures (core.h's cr_core_loop_stats_read)
 * as a GetStatsResponse. */
#include <stdlib.h>

#include "handlers.h"
#include "reply.h"

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
        g->prefill_fixed_ms = c->prefill.fixed_ms;
        g->prefill_ms_per_token = c->prefill.ms_per_token;
        g->prefill_ms_per_token2 = c->prefill.ms_per_token2;
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
