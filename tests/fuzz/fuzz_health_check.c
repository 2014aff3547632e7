/* grpc.health.v1.Health/Check: HealthCheckRequest decode and the service
 * lookup, serving and then not. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "grpc/health/v1/health.pb-c.h"
#include "health.h"
#include "wire.h"

typedef Grpc__Health__V1__HealthCheckResponse Response;

/* The names docs/operating.md says health answers for: the server, the
 * main service, the endpoint picker's, and kubelet's probe names. */
static const char *const SERVICES[] = {"", "cacheroute.v1.CacheRoute",
                                       "envoy.service.ext_proc.v3.ExternalProcessor",
                                       "liveness", "readiness"};

static void check_once(cr_health *h, int serving, const uint8_t *data, size_t size)
{
    cr_reply r = {.status = GRPC_STATUS_OK};
    cr_health_set_serving(h, serving);
    cr_health_check(h, data, size, &r);
    ProtobufCMessage *m = cr_fuzz_check_reply(
        &r,
        CR_CODE(GRPC_STATUS_OK) | CR_CODE(GRPC_STATUS_NOT_FOUND) |
            CR_CODE(GRPC_STATUS_INVALID_ARGUMENT),
        &grpc__health__v1__health_check_request__descriptor,
        &grpc__health__v1__health_check_response__descriptor, data, size, SIZE_MAX);
    Grpc__Health__V1__HealthCheckRequest *req =
        grpc__health__v1__health_check_request__unpack(NULL, size, data);
    cr_error why; /* a request protobuf-c takes may still be refused on the wire */
    int clean = cr_wire_check_strings(&grpc__health__v1__health_check_request__descriptor, data,
                                      size, &why) == 0;
    int known = 0;
    for (size_t i = 0; req && clean && i < sizeof SERVICES / sizeof *SERVICES; i++)
        known |= !strcmp(req->service, SERVICES[i]);
    CR_FUZZ_CHECK(known == (r.status == GRPC_STATUS_OK), "service known %d, status %d", known,
                  (int)r.status);
    if (m) {
        int want = serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                           : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        CR_FUZZ_CHECK((int)((Response *)m)->status == want, "serving %d answered %d", serving,
                      (int)((Response *)m)->status);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (req)
        grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    free(r.body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_health *h = cr_health_new();
    CR_FUZZ_CHECK(h, "out of memory");
    check_once(h, 1, data, size);
    check_once(h, 0, data, size);
    cr_health_free(h);
    return 0;
}
