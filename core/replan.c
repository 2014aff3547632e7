/* The replanner: a plan from the estimator, installed, every
 * --replan-interval seconds, by a ticker thread in real time or by
 * cr_core_tick in virtual time. Plans with the configured --replan mode
 * from the installed table (plan.c does the planning and the install). */
#include "internal.h"

/* Whether the replanner plans now: configured, and tables not external
 * (that refusal is no replan failure to report every interval). */
static int replans(cr_core *c)
{
    return c->replan_interval_s > 0 && !atomic_load(&c->tables_external);
}

/* Plans from the estimator and installs; failures go to hooks->planned
 * with an error. */
static void replan(cr_core *c)
{
    cr_core_plan_request req = {.from_estimator = 1, .install = 1};
    cr_core_plan_result res = {0};
    cr_error err;
    cr_core_plan_and_install(c, &req, "replanner", &c->replan, &res, &err); /* reports failures itself */
    cr_core_plan_result_free(&res);
}

static void replan_tick(void *ctx, cr_ticker *ticker)
{
    (void)ticker;
    if (replans(ctx))
        replan(ctx);
}

cr_status cr_replanner_start(cr_core *c, cr_error *err)
{
    if (c->replan_interval_s <= 0)
        return CR_OK;
    c->replanner = cr_ticker_start(c->replan_interval_s, replan_tick, c, err);
    return c->replanner ? CR_OK : CR_ENOMEM;
}

void cr_replanner_stop(cr_core *c)
{
    cr_ticker_stop(c->replanner);
    c->replanner = NULL;
}

int cr_replan_if_due(cr_core *c)
{
    if (!replans(c))
        return 0;
    double now = core_now(c);
    pthread_mutex_lock(&c->tick_lock);
    int due = now - c->last_replan >= c->replan_interval_s;
    if (due)
        c->last_replan = now;
    pthread_mutex_unlock(&c->tick_lock);
    if (due)
        replan(c);
    return due;
}
