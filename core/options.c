/* The core's own option rows (--replan-interval, --receipts) and the composed default:
 * every component's defaults come from that component's rows. */
#include <stddef.h>

#include "core.h"

static const cr_option ROWS[] = {
    {.name = "replan-interval", .key = "replan_interval_s", .type = CR_OPT_DOUBLE,
     .offset = offsetof(cr_core_config, replan_interval_s), .def = 10, .min = 0, .max = 1e9,
     .help = "seconds between plans from the estimator, installed as the current table; 0 = off"},
    {.name = "receipts", .key = "receipts", .type = CR_OPT_U64,
     .offset = offsetof(cr_core_config, receipts), .def = 100000, .min = 0,
     .max = CR_CORE_MAX_RECEIPTS,
     .help = "decision receipts kept for ReportOutcome and GetDecision, the oldest evicted "
             "first (about 0.8 KB each); 0 = off"},
};

const cr_option_table cr_core_options = CR_OPTION_TABLE("", ROWS);

void cr_core_config_default(cr_core_config *cfg)
{
    cr_planner_config_default(&cfg->planner);
    cr_estimator_config_default(&cfg->estimator);
    cr_inject_config_default(&cfg->inject);
    cr_probe_config_default(&cfg->probe);
    cr_options_defaults(&cr_core_options, cfg);
}
