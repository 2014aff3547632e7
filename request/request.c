/* The reasons' and the admissions' wire names (request.h). */
#include "request.h"

static const char *const WHY[CR_ROUTE_N_WHY] = {"prefix", "session", "planned", "spill",
                                                "least_loaded", "rule"};

const char *cr_route_reason_name(cr_route_reason r)
{
    return (unsigned)r < CR_ROUTE_N_WHY ? WHY[r] : "unknown";
}

static const char *const ADMISSION[CR_ADMISSION_N] = {"", "admitted", "queued", "shed"};

const char *cr_route_admission_name(cr_route_admission a)
{
    return (unsigned)a < CR_ADMISSION_N ? ADMISSION[a] : "unknown";
}
