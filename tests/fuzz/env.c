/* The fuzzed handlers' core (fuzz.h), seeded the same way every time so
 * that a crash replays from its input alone. */
#include <stdio.h>

#include "fuzz.h"

#define OWNERS 16
#define DECISIONS 4

static double env_now(void *ctx) { return *(const double *)ctx; }

static void seed_rates(cr_fuzz_env *env)
{
    cr_error err;
    for (int64_t owner = 1; owner <= OWNERS; owner++) {
        for (int64_t k = 0; k < owner; k++) { /* owner i arrives i times */
            env->now += 0.01;
            CR_FUZZ_CHECK(cr_core_record(env->core, &owner, 1, NULL, 0, NULL, NULL, &err) == CR_OK,
                          "seeding the rates: %s", err.msg);
        }
    }
    cr_core_plan_request pr = {.from_estimator = 1, .install = 1};
    cr_core_plan_result res;
    CR_FUZZ_CHECK(cr_core_plan(env->core, &pr, &res, &err) == CR_OK, "seeding the plan: %s",
                  err.msg);
    cr_core_plan_result_free(&res);
}

/* Decisions "r0" .. "r3", not dry runs, so they hold receipts (GetDecision,
 * ReportOutcome) and reservations (later SelectInjection). */
static void seed_decisions(cr_fuzz_env *env)
{
    cr_kv_source source = {"kvstore-a", 6000};
    for (int i = 0; i < DECISIONS; i++) {
        char id[8];
        snprintf(id, sizeof id, "r%d", i);
        cr_inject_request ir = {.prompt_tokens = 2000, .knowledge_tokens = 8000,
                                .sources = &source, .n_sources = 1};
        cr_inject_response out;
        cr_error err;
        env->now += 0.05;
        CR_FUZZ_CHECK(cr_core_select(env->core, id, &ir, &out, &err) == CR_OK,
                      "seeding decision %s: %s", id, err.msg);
    }
}

void cr_fuzz_env_open(cr_fuzz_env *env, cr_route_by route_by)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cfg.receipts = 64;
    cfg.estimator.max_owners = 4096;
    cfg.route.inflight_max = 1024;
    cfg.route.index_blocks = 64; /* Route's inputs evict */
    cfg.route.by = route_by;
    env->now = 1000;
    env->handlers.max_message = CR_FUZZ_MAX_MESSAGE;
    env->handlers.max_arrivals = 4096; /* below what a fuzzed message holds: both paths run */
    cr_clock_source clock = {env_now, &env->now};
    cr_error err;
    env->core = env->handlers.core = cr_core_new(&cfg, NULL, &clock, &err);
    CR_FUZZ_CHECK(env->core, "cr_core_new: %s", err.msg);
    seed_rates(env);
    seed_decisions(env);
    env->now += 1;
}

void cr_fuzz_env_close(cr_fuzz_env *env)
{
    cr_core_free(env->core);
    env->core = env->handlers.core = NULL;
}
