/* WatchDecisions: the request check a new watch gets before it is listed
 * (cr_watch_request_error), on the hub the sidecar builds. */
#include <string.h>

#include "fuzz.h"
#include "watch_decisions.h"
#include "wire.h"

static cr_watch_hub *hub(void)
{
    static cr_watch_hub *h;
    if (!h) {
        const ProtobufCFieldDescriptor *lost = protobuf_c_message_descriptor_get_field_by_name(
            &cacheroute__v1__decision_receipt__descriptor, "lost");
        h = cr_watch_hub_new(&(cr_watch_config){
            .request = &cacheroute__v1__watch_decisions_request__descriptor,
            .lost_field = lost->id,
            .max_watchers = CR_WATCH_MAX_WATCHERS,
            .queue_len = CR_WATCH_QUEUE_LEN});
        CR_FUZZ_CHECK(h, "out of memory");
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_error e;
    const char *bad = cr_watch_request_error(hub(), data, size, &e);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(&cacheroute__v1__watch_decisions_request__descriptor, NULL, size,
                                  data);
    cr_error why;
    int clean = m && cr_wire_check_strings(&cacheroute__v1__watch_decisions_request__descriptor,
                                           data, size, &why) == 0;
    CR_FUZZ_CHECK((bad == NULL) == clean, "decodes %d, clean %d, refused '%s'", m != NULL, clean,
                  bad ? bad : "");
    CR_FUZZ_CHECK(!bad || (strstr(bad, "malformed") && strstr(bad, "WatchDecisionsRequest")),
                  "refused with '%s'", bad);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
