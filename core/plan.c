/* Plan: validate -> plan -> (fits) -> (install) -> churn -> report, the one
 * path for Plan calls (always fresh) and the replanner (replan.c: --replan
 * stable from the installed table, or fresh). The reported duration covers
 * the same span for both: from the start of validation to the table being
 * current (or refused); the churn count comes after. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The configured planner with each given field of req in its place. */
static cr_planner_config merged_config(const cr_core *c, const cr_core_plan_request *req)
{
    cr_planner_config cfg = c->planner;
    if (req->has_n_shards)
        cfg.n_shards = req->n_shards;
    if (req->has_qcap)
        cfg.qcap = req->qcap;
    if (req->has_warm_slots_per_shard)
        cfg.warm_slots_per_shard = req->warm_slots_per_shard;
    return cfg;
}

static cr_status check_source(const cr_core_plan_request *req, cr_error *err)
{
    if (req->n_rates && req->from_estimator)
        return cr_fail(err, CR_EINVAL,
                       "rates and from_estimator are mutually exclusive, got %zu rates and "
                       "from_estimator true",
                       req->n_rates);
    if (!req->n_rates && !req->from_estimator)
        return cr_fail(err, CR_EINVAL,
                       "one of rates (non-empty) or from_estimator is required, got neither");
    return CR_OK;
}

/* Where an owner the installed table does not admit has been sent (its
 * home under --route-by), so a stable replan admitting it keeps it there
 * when the load bound allows (rule S6) and its cached prefix stays. */
static uint32_t unadmitted_home(void *ctx, int64_t owner, uint32_t n_shards)
{
    return cr_core_home_shard(ctx, owner, n_shards);
}

static int answer_fits(void *ctx, const cr_plan_size *s, cr_error *err)
{
    const cr_core_plan_request *req = ctx;
    if (!req->max_answer_bytes || !req->answer_bound)
        return 0;
    uint64_t bound = req->answer_bound(s);
    if (bound <= req->max_answer_bytes)
        return 0;
    cr_fail(err, CR_ENOMEM,
            "the plan admits %zu sessions holding %llu shard slots over %u shards; its answer "
            "could need %llu bytes, over the %zu-byte message limit (--max-message-bytes): "
            "plan fewer sessions or shards, or a larger qcap",
            s->sessions, (unsigned long long)s->slots, s->n_shards, (unsigned long long)bound,
            req->max_answer_bytes);
    return -1;
}

/* A fresh plan of rates, refused before placement when its answer could
 * not fit req's limit. */
static cr_status plan_fresh(const cr_core_plan_request *req, const cr_planner_config *cfg,
                            const cr_session_rate *rates, size_t n, cr_table **out,
                            cr_error *err)
{
    return cr_planner_plan_checked(cfg, rates, n, answer_fits, (void *)req, out, err);
}

/* Plans from a snapshot of the estimator taken now: with rc, by
 * cr_planner_replan from prev; without, fresh. */
static cr_status plan_estimator(cr_core *c, const cr_core_plan_request *req,
                                const cr_planner_config *cfg, const cr_replan_config *rc,
                                const cr_installed *prev, cr_table **out, cr_error *err)
{
    size_t n;
    cr_session_rate *rates = cr_estimator_rates(c->estimator, core_now(c), &n);
    if (!rates) {
        *out = NULL;
        return cr_fail(err, CR_ENOMEM, "out of memory taking the estimator snapshot");
    }
    cr_replan_prev from = {prev ? prev->table : NULL, unadmitted_home, c};
    cr_status st = rc ? cr_planner_replan(cfg, rc, &from, rates, n, out, err)
                      : plan_fresh(req, cfg, rates, n, out, err);
    free(rates);
    return st;
}

void cr_core_report_plan(cr_core *c, const char *by, double seconds,
                         const cr_core_plan_result *r, const char *error)
{
    if (!c->hooks.planned)
        return;
    cr_core_plan_event ev = {
        .by = by,
        .seconds = seconds,
        .installed = r && r->generation != 0,
        .generation = r ? r->generation : 0,
        .admitted = r ? cr_table_n_placements(r->table) : 0,
        .imbalance = r ? cr_table_imbalance(r->table) : 1.0,
        .error = error,
        .churn = r ? r->churn : (cr_churn){0, 0, 0, 0},
        .churn_generation = r ? r->churn_generation : 0,
    };
    c->hooks.planned(c->hooks.ctx, &ev);
}

/* Every plan that was made is reported, installed or not. A plan that
 * could not be made is reported only for the replanner: an RPC answers with
 * the error instead (and Plan metrics count plans made). rc: plan with
 * cr_planner_replan from the installed table (the replanner), or NULL:
 * fresh. */
cr_status cr_core_plan_and_install(cr_core *c, const cr_core_plan_request *req, const char *by,
                                   const cr_replan_config *rc, cr_core_plan_result *out,
                                   cr_error *err)
{
    int is_rpc = strcmp(by, "rpc") == 0;
    if (req->install && atomic_load(&c->tables_external))
        return cr_fail(err, CR_ESTATE,
                       "install=true with --state-backend: every replica routes by the "
                       "leader's published table (plan with install=false)");
    double t0 = core_now(c);
    cr_planner_config cfg = merged_config(c, req);
    cr_table *t = NULL;
    cr_installed *prev = rc ? cr_core_acquire(c, NULL) : NULL;
    cr_status st = check_source(req, err);
    if (st == CR_OK)
        st = req->from_estimator ? plan_estimator(c, req, &cfg, rc, prev, &t, err)
                                 : plan_fresh(req, &cfg, req->rates, req->n_rates, &t, err);
    cr_installed_release(prev);
    if (st != CR_OK) {
        if (!is_rpc)
            cr_core_report_plan(c, by, core_now(c) - t0, NULL, err->msg);
        return st;
    }
    if (req->fits && req->fits(req->fits_ctx, t, req->install, err) != 0) {
        cr_core_report_plan(c, by, core_now(c) - t0, &(cr_core_plan_result){.table = t},
                            NULL);
        cr_table_free(t);
        return CR_ENOMEM;
    }
    cr_installed *held = cr_installed_new(t);
    if (!held) {
        cr_fail(err, CR_ENOMEM, "out of memory installing the plan");
        cr_core_report_plan(c, by, core_now(c) - t0, NULL, is_rpc ? NULL : err->msg);
        return CR_ENOMEM;
    }
    out->hold = &held->ref;
    out->table = held->table;
    double done = cr_core_publish(c, held, req->install, 0, out);
    cr_core_report_plan(c, by, done - t0, out, NULL);
    return CR_OK;
}

cr_status cr_core_plan(cr_core *c, const cr_core_plan_request *req, cr_core_plan_result *out,
                       cr_error *err)
{
    *out = (cr_core_plan_result){0};
    return cr_core_plan_and_install(c, req, "rpc", NULL, out, err);
}

void cr_core_plan_result_free(cr_core_plan_result *r)
{
    cr_ref_release(r->hold);
    *r = (cr_core_plan_result){0};
}
