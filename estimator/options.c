/* The estimator's option rows: each setting's flag, default, bounds and
 * help, once. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "estimator.h"
#include "options.h"

#define ESTIMATOR(field) offsetof(cr_estimator_config, field)

static const char *const CLOCKS[] = {"seconds", "calls", NULL}; /* cr_clock's order */

static const cr_option estimator_rows[] = {
    {.name = "half-life", .key = "half_life", .type = CR_OPT_DOUBLE,
     .offset = ESTIMATOR(half_life), .def = 20, .min = 0, .max = INFINITY,
     .flags = CR_OPT_MIN_OPEN,
     .help = "estimator half-life: seconds, or the owner's own calls with --estimator-clock "
             "calls"},
    {.name = "window", .key = "window", .type = CR_OPT_U32, .offset = ESTIMATOR(window),
     .def = 256, .min = 1, .max = UINT32_MAX,
     .help = "accepted for seed compatibility; the decayed count keeps no history"},
    {.name = "estimator-clock", .key = "clock", .type = CR_OPT_CHOICE,
     .offset = ESTIMATOR(clock), .def_text = "seconds", .choices = CLOCKS,
     .help = "seconds (rates in arrivals per second) or calls (the seed's per-call decay)"},
    {.name = "max-owners", .key = "max_owners", .type = CR_OPT_U64,
     .offset = ESTIMATOR(max_owners), .def = 1000000, .min = 1, .max = CR_OPT_U64_MAX,
     .help = "owners tracked at most; a new owner then evicts a low-rate one"},
};

static void defaults(void *cfg) { cr_estimator_config_default(cfg); }
static cr_status check(const void *cfg, cr_error *err)
{
    return cr_estimator_config_check(cfg, err);
}

const cr_option_table cr_estimator_options =
    CR_OPTION_TABLE_HOOKED("estimator", estimator_rows, defaults, check);
