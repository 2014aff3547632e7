/* The failure detector's option rows. */
#include <stddef.h>

#include "endpoints.h"

#define AT(field) offsetof(cr_endpoints_config, field)

static const cr_option ROWS[] = {
    {.name = "endpoint-fail-errors", .key = "endpoint_fail_errors", .type = CR_OPT_U32,
     .offset = AT(fail_errors), .def = 5, .min = 0, .max = 1000000,
     .help = "errors reported for one endpoint (ReportOutcome's error) within "
             "--endpoint-fail-window that mark it down; 0 = never"},
    {.name = "endpoint-fail-window", .key = "endpoint_fail_window_s", .type = CR_OPT_DOUBLE,
     .offset = AT(fail_window_s), .def = 10, .min = 0, .max = 86400, .flags = CR_OPT_MIN_OPEN,
     .help = "seconds in which --endpoint-fail-errors errors mark an endpoint down"},
    {.name = "endpoint-down-for", .key = "endpoint_down_s", .type = CR_OPT_DOUBLE,
     .offset = AT(down_s), .def = 30, .min = 0, .max = 86400, .flags = CR_OPT_MIN_OPEN,
     .help = "seconds a down endpoint takes no requests before it is tried again"},
};

const cr_option_table cr_endpoints_options = CR_OPTION_TABLE("", ROWS);
