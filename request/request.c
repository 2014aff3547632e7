/* The reasons' wire names (request.h). */
#include "request.h"

static const char *const WHY[CR_ROUTE_N_WHY] = {"prefix", "session", "planned", "spill",
                                                "least_loaded", "rule"};

const char *cr_route_reason_name(cr_route_reason r)
{
    return (unsigned)r < CR_ROUTE_N_WHY ? WHY[r] : "unknown";
}
