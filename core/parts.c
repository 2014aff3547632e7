/* The components the core is made of, once: their option tables, in
 * --help order, with where each one's struct lies in cr_core_config. The
 * defaults, the checks, the sidecar's and the replay's flags all come from
 * this list. */
#include <stddef.h>

#include "internal.h"

const cr_option_part cr_core_parts[] = {
    {&cr_core_options, 0},
    {&cr_route_options, offsetof(cr_core_config, route)},
    {&cr_endpoints_options, offsetof(cr_core_config, endpoints)},
    {&cr_core_state_options, 0},
    {&cr_planner_options, offsetof(cr_core_config, planner)},
    {&cr_replan_options, offsetof(cr_core_config, replan)},
    {&cr_estimator_options, offsetof(cr_core_config, estimator)},
    {&cr_inject_options, offsetof(cr_core_config, inject)},
    {&cr_probe_options, offsetof(cr_core_config, probe)},
};
_Static_assert(sizeof cr_core_parts / sizeof cr_core_parts[0] == CR_CORE_N_PARTS,
               "CR_CORE_N_PARTS counts the parts listed above");

void cr_core_config_default(cr_core_config *cfg)
{
    cr_options_parts_defaults(cr_core_parts, CR_CORE_N_PARTS, cfg);
}

cr_status cr_core_config_check(const cr_core_config *cfg, cr_error *err)
{
    return cr_options_parts_check(cr_core_parts, CR_CORE_N_PARTS, cfg, err);
}

void cr_core_quiet_probe(cr_probe_config *p)
{
    cr_probe_config_default(p);
    p->sysfs_root = "/nonexistent/cacheroute-quiet-sysfs";
    p->cuda_library = "libcuda-not-loaded-by-cacheroute.so";
    p->interval_s = 0;
    p->nic_sample_s = 0;
    p->measure_h2d = 0;
}
