/* The endpoint set's commands: endpoints (ListEndpoints), drain and
 * undrain (DrainEndpoint), all admin calls. */
#include <string.h>

#include "cacheroute/v1/cacheroute.pb-c.h"
#include "cli.h"

int cr_cli_endpoints(cr_client *c, const char *cmd, const char *id)
{
    const ProtobufCMessageDescriptor *resp = &cacheroute__v1__endpoints_response__descriptor;
    if (!strcmp(cmd, "endpoints")) {
        Cacheroute__V1__ListEndpointsRequest req = CACHEROUTE__V1__LIST_ENDPOINTS_REQUEST__INIT;
        return cr_cli_call_and_print(c, SERVICE "ListEndpoints", &req.base, resp, NULL);
    }
    Cacheroute__V1__DrainEndpointRequest req = CACHEROUTE__V1__DRAIN_ENDPOINT_REQUEST__INIT;
    req.id = (char *)id;
    req.undrain = !strcmp(cmd, "undrain");
    return cr_cli_call_and_print(c, SERVICE "DrainEndpoint", &req.base, resp, NULL);
}
