/* The route rule's option rows: each setting's flag, default, bounds and
 * help, once. */
#include <stddef.h>

#include "route.h"

#define AT(field) offsetof(cr_route_config, field)

static const char *const ROUTE_BY[] = {"plan", "bounded", "live", NULL}; /* cr_route_by's order */

static const cr_option ROWS[] = {
    {.name = "route-by", .key = "route_by", .type = CR_OPT_CHOICE, .offset = AT(by),
     .def_text = "plan", .choices = ROUTE_BY,
     .help = "RecordArrival's route: plan (the preferred shard, else owner mod R), bounded "
             "(affinity unless the shard's outstanding work exceeds --load-bound x the mean, "
             "then the session's next shard, then its ring) or live (least outstanding work)"},
    {.name = "load-bound", .key = "load_bound", .type = CR_OPT_DOUBLE, .offset = AT(load_bound),
     .def = 1.25, .min = 1, .max = 100,
     .help = "--route-by bounded: a shard takes a route while its outstanding work is at "
             "most this times the mean"},
    {.name = "inflight-ttl", .key = "inflight_ttl_s", .type = CR_OPT_DOUBLE,
     .offset = AT(inflight_ttl_s), .def = 60, .min = 0, .max = 86400, .flags = CR_OPT_MIN_OPEN,
     .help = "--route-by bounded or live: seconds after which a route's work counts as done "
             "when no ReportOutcome for its owner and shard came"},
    {.name = "inflight-max", .key = "inflight_max", .type = CR_OPT_U64,
     .offset = AT(inflight_max), .def = 100000, .min = 1, .max = CR_ROUTE_MAX_INFLIGHT,
     .help = "--route-by bounded or live: outstanding routes tracked at most (32 B each, "
             "allocated up front), the oldest counted as done first"},
};

const cr_option_table cr_route_options = CR_OPTION_TABLE("", ROWS);
