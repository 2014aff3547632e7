/* The core config the virtual-clock route suites start from: the
 * defaults, a probe that finds nothing (the same on any machine), `shards`
 * shards with qcap 50 and W 200, and no replanner. */
#ifndef CR_TEST_CORE_CONFIG_H
#define CR_TEST_CORE_CONFIG_H

#include "core.h"

static inline void cr_test_core_config(cr_core_config *cfg, uint32_t shards)
{
    cr_core_config_default(cfg);
    cr_core_quiet_probe(&cfg->probe);
    cfg->planner = (cr_planner_config){shards, 50, 200};
    cfg->replan_interval_s = 0;
}

#endif
