/* The planner's and the replan's option rows: each setting's flag,
 * default, bounds and help, once. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "planner.h"

#define PLANNER(field) offsetof(cr_planner_config, field)

static const cr_option planner_rows[] = {
    {.name = "n-shards", .key = "n_shards", .type = CR_OPT_U32, .offset = PLANNER(n_shards),
     .def = 8, .min = 1, .max = CR_MAX_SHARDS, .help = "KV-pool shards R"},
    {.name = "qcap", .key = "qcap", .type = CR_OPT_DOUBLE, .offset = PLANNER(qcap), .def = 50,
     .min = 0, .max = INFINITY, .flags = CR_OPT_MIN_OPEN,
     .help = "requests per second one shard serves"},
    {.name = "warm-slots-per-shard", .key = "warm_slots_per_shard", .type = CR_OPT_DOUBLE,
     .offset = PLANNER(warm_slots_per_shard), .def = 200, .min = 0, .max = INFINITY,
     .flags = CR_OPT_MIN_OPEN, .help = "warm slots per shard W; the budget is R * W slots"},
};

static cr_status check_planner(const void *cfg, cr_error *err)
{
    return cr_planner_config_check(cfg, err);
}

const cr_option_table cr_planner_options =
    CR_OPTION_TABLE_HOOKED("planner", planner_rows, NULL, check_planner);

void cr_planner_config_default(cr_planner_config *cfg)
{
    cr_options_defaults(&cr_planner_options, cfg);
}

#define REPLAN(field) offsetof(cr_replan_config, field)

static const char *const MODES[] = {"stable", "fresh", NULL}; /* cr_replan_mode's order */

static const cr_option replan_rows[] = {
    {.name = "replan", .key = "mode", .type = CR_OPT_CHOICE, .offset = REPLAN(mode),
     .def_text = "stable", .choices = MODES,
     .help = "the replanner's plans: fresh (from scratch, the seed's) or stable (keep the "
             "installed table's placements, move only what must move); Plan calls always "
             "plan fresh"},
    {.name = "max-imbalance", .key = "max_imbalance", .type = CR_OPT_DOUBLE,
     .offset = REPLAN(max_imbalance), .def = 1.25, .min = 1, .max = INFINITY,
     .help = "stable replans: the expected load a shard may carry, times the mean, before "
             "sessions are moved off it"},
    {.name = "admit-hysteresis", .key = "admit_hysteresis", .type = CR_OPT_DOUBLE,
     .offset = REPLAN(admit_hysteresis), .def = 0.1, .min = 0, .max = INFINITY,
     .help = "stable replans: a session displaces an admitted one only when its rate exceeds "
             "the other's by more than this fraction"},
};

static cr_status check_replan(const void *cfg, cr_error *err)
{
    return cr_replan_config_check(cfg, err);
}

const cr_option_table cr_replan_options =
    CR_OPTION_TABLE_HOOKED("replan", replan_rows, NULL, check_replan);

void cr_replan_config_default(cr_replan_config *cfg)
{
    cr_options_defaults(&cr_replan_options, cfg);
}
