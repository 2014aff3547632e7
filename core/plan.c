/* Plan: validate -> plan -> (fits) -> (install) -> report, the one path for
 * Plan calls and the replanner, and the replanner's two drivers (a ticker
 * thread in real time, cr_core_tick in virtual time). The reported duration
 * covers the same span for both: from the start of validation to the table
 * being current (or refused). */
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

/* Plans from a snapshot of the estimator taken now. */
static cr_status plan_estimator(cr_core *c, const cr_planner_config *cfg, cr_table **out,
                                cr_error *err)
{
    size_t n;
    cr_session_rate *rates = cr_estimator_rates(c->estimator, cr_core_now(c), &n);
    if (!rates) {
        *out = NULL;
        return cr_fail(err, CR_ENOMEM, "out of memory taking the estimator snapshot");
    }
    cr_status st = cr_planner_plan(cfg, rates, n, out, err);
    free(rates);
    return st;
}

static void report(cr_core *c, const char *by, double t0, const cr_table *t, uint64_t generation,
                   const char *error)
{
    if (!c->hooks.planned)
        return;
    cr_core_plan_event ev = {
        .by = by,
        .seconds = cr_core_now(c) - t0,
        .installed = generation != 0,
        .generation = generation,
        .admitted = t ? cr_table_n_placements(t) : 0,
        .imbalance = t ? cr_table_imbalance(t) : 1.0,
        .error = error,
    };
    c->hooks.planned(c->hooks.ctx, &ev);
}

/* Every plan that was made is reported, installed or not. A plan that
 * could not be made is reported only for the replanner: an RPC answers with
 * the error instead (and Plan metrics count plans made). */
static cr_status plan_and_install(cr_core *c, const cr_core_plan_request *req, const char *by,
                                  cr_core_plan_result *out, cr_error *err)
{
    int is_rpc = strcmp(by, "rpc") == 0;
    double t0 = cr_core_now(c);
    cr_planner_config cfg = merged_config(c, req);
    cr_table *t = NULL;
    cr_status st = check_source(req, err);
    if (st == CR_OK)
        st = req->from_estimator ? plan_estimator(c, &cfg, &t, err)
                                 : cr_planner_plan(&cfg, req->rates, req->n_rates, &t, err);
    if (st != CR_OK) {
        if (!is_rpc)
            report(c, by, t0, NULL, 0, err->msg);
        return st;
    }
    if (req->fits && req->fits(req->fits_ctx, t, req->install, err) != 0) {
        report(c, by, t0, t, 0, NULL);
        cr_table_free(t);
        return CR_ENOMEM;
    }
    cr_installed *held = cr_installed_new(t);
    if (!held) {
        cr_fail(err, CR_ENOMEM, "out of memory installing the plan");
        report(c, by, t0, NULL, 0, is_rpc ? NULL : err->msg);
        return CR_ENOMEM;
    }
    out->hold = &held->ref;
    out->table = held->table;
    if (req->install)
        out->generation = cr_core_install(c, held);
    report(c, by, t0, out->table, out->generation, NULL);
    return CR_OK;
}

cr_status cr_core_plan(cr_core *c, const cr_core_plan_request *req, cr_core_plan_result *out,
                       cr_error *err)
{
    *out = (cr_core_plan_result){0};
    return plan_and_install(c, req, "rpc", out, err);
}

void cr_core_current(cr_core *c, cr_core_plan_result *out)
{
    cr_installed *t = cr_core_acquire(c, &out->generation);
    out->hold = t ? &t->ref : NULL;
    out->table = t ? t->table : NULL;
}

void cr_core_plan_result_free(cr_core_plan_result *r)
{
    cr_ref_release(r->hold);
    *r = (cr_core_plan_result){0};
}

/* Plans from the estimator and installs; failures go to hooks->planned
 * with an error. */
static void replan(cr_core *c)
{
    cr_core_plan_request req = {.from_estimator = 1, .install = 1};
    cr_core_plan_result res = {0};
    cr_error err;
    plan_and_install(c, &req, "replanner", &res, &err); /* reports failures itself */
    cr_core_plan_result_free(&res);
}

static void replan_tick(void *ctx, cr_ticker *ticker)
{
    (void)ticker;
    replan(ctx);
}

cr_status cr_core_start(cr_core *c, cr_error *err)
{
    if (c->replan_interval_s <= 0)
        return CR_OK;
    c->replanner = cr_ticker_start(c->replan_interval_s, replan_tick, c, err);
    return c->replanner ? CR_OK : CR_ENOMEM;
}

void cr_core_stop(cr_core *c)
{
    cr_ticker_stop(c->replanner);
    c->replanner = NULL;
}

int cr_core_tick(cr_core *c)
{
    if (c->replan_interval_s <= 0)
        return 0;
    double now = cr_core_now(c);
    pthread_mutex_lock(&c->tick_lock);
    int due = now - c->last_replan >= c->replan_interval_s;
    if (due)
        c->last_replan = now;
    pthread_mutex_unlock(&c->tick_lock);
    if (due)
        replan(c);
    return due;
}
