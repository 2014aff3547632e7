/* The reasons' and the door's wire names (request.h). */
#include "request.h"

static const char *const WHY[CR_ROUTE_N_WHY] = {"prefix", "session", "planned", "spill",
                                                "least_loaded", "rule"};

const char *cr_route_reason_name(cr_route_reason r)
{
    return (unsigned)r < CR_ROUTE_N_WHY ? WHY[r] : "unknown";
}

const char *cr_route_door_name(int door)
{
    switch (door) {
    case CR_ROUTE_DOOR_ROUTED: return "";
    case CR_ROUTE_DOOR_QUEUED: return "queued";
    case CR_ROUTE_DOOR_SHED: return "shed";
    default: return "unknown";
    }
}
