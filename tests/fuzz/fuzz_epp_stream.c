/* The endpoint picker's stream (epp/stream.c) over the ext_proc decoder
 * and the OpenAI body reader: the input is one stream's messages. Its
 * first byte picks the picker (bit 0: BUFFERED as the default body mode,
 * bit 1: a 4 KiB --epp-max-body-bytes, bit 2: the stream ends broken);
 * then each message is a 2-byte little-endian length and that many bytes,
 * a ProcessingRequest fed to the stream in order (a length past the end
 * takes what is left), until the stream says finished or failed; then it
 * is closed. No crash or leak (ASan, LSan); every response decodes as a
 * ProcessingResponse, a streamed chunk at most CR_EPP_CHUNK_BYTES; a
 * failure says why; and after the close no stream is open and no route's
 * work is left outstanding, with at most one outcome for the stream. The
 * core, its four ip:port endpoints and its door (objectives interactive
 * and batch, no queue) are kept from input to input. */
#include <string.h>

#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"
#include "epp.h"
#include "fuzz.h"

#define ENDPOINTS 4

typedef struct env {
    cr_core *core;
    cr_epp *epp[8]; /* by the first byte's low 2 bits */
    double now;
} env;

static double now_of(void *ctx) { return ((env *)ctx)->now; }

static env *env_of(void)
{
    static env e;
    if (e.core)
        return &e;
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.planner = (cr_planner_config){ENDPOINTS, 50, 200};
    cfg.replan_interval_s = 0;
    cfg.route.by = CR_ROUTE_TTFT;
    cfg.route.block_tokens = 4;
    cfg.route.index_blocks = 256;
    cfg.receipts = 64;
    cr_clock_source clock = {now_of, &e};
    cr_error err;
    e.core = cr_core_new(&cfg, NULL, &clock, &err);
    CR_FUZZ_CHECK(e.core != NULL, "core: %s", err.msg);
    cr_endpoint_spec v[ENDPOINTS] = {{.id = "e0", .address = "10.0.0.1:8000", .weight = 1},
                                     {.id = "e1", .address = "10.0.0.2:8000", .weight = 1},
                                     {.id = "e2", .address = "[fd00::3]:8000", .weight = 1},
                                     {.id = "e3", .address = "10.0.0.4:8000", .weight = 1}};
    CR_FUZZ_CHECK(cr_core_set_endpoints(e.core, v, ENDPOINTS, NULL, &err) == CR_OK, "set: %s",
                  err.msg);
    /* a door that sheds what it would hold (the sidecar's): the objective
     * headers' requests meet it */
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n;
    cr_admit_config door;
    cr_admit_config_default(&door);
    door.max_queued = door.max_per_id = 0;
    CR_FUZZ_CHECK(cr_admit_objectives_parse("interactive:0:2000,batch:-1:1", t, &n, &err) ==
                          CR_OK &&
                      cr_core_set_door(e.core, &door, t, n, &err) == CR_OK,
                  "door: %s", err.msg);
    for (int i = 0; i < 4; i++) {
        cr_epp_config c = {.fallbacks = 2, .owner_header = "x-session-id",
                           .max_body_bytes = (i & 2) ? 4096 : CR_EPP_MAX_BODY_LIMIT,
                           .tokens = CR_EPP_TOKENS_ESTIMATE, .tokenize_timeout_s = 0.05,
                           .body_mode = (i & 1) ? CR_EPP_BUFFERED : CR_EPP_FULL_DUPLEX,
                           .block_tokens = 4, .max_hashes = cfg.route.max_hashes,
                           .max_requests = 16, .max_buffered_bytes = 4 * CR_EPP_MAX_BODY_LIMIT};
        e.epp[i] = cr_epp_new(&c, e.core, &err);
        CR_FUZZ_CHECK(e.epp[i] != NULL, "epp: %s", err.msg);
    }
    return &e;
}

static void check_out(cr_epp_out *out)
{
    for (size_t i = 0; i < out->n; i++) {
        Envoy__Service__ExtProc__V3__ProcessingResponse *r =
            envoy__service__ext_proc__v3__processing_response__unpack(NULL, out->msg[i].len,
                                                                      out->msg[i].data);
        CR_FUZZ_CHECK(r != NULL, "response %zu (%zu bytes) does not decode", i, out->msg[i].len);
        int body = r->response_case ==
                       ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY ||
                   r->response_case ==
                       ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY;
        const Envoy__Service__ExtProc__V3__BodyMutation *m =
            body && r->request_body->response ? r->request_body->response->body_mutation : NULL;
        CR_FUZZ_CHECK(!m || !m->streamed_response ||
                          m->streamed_response->body.len <= CR_EPP_CHUNK_BYTES,
                      "a chunk of %zu bytes", m->streamed_response->body.len);
        envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    }
    cr_epp_out_clear(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cr_epp_out out;
    if (size < 1)
        return 0;
    env *e = env_of();
    cr_epp *epp = e->epp[data[0] & 3];
    cr_epp_stats before, after;
    cr_epp_stats_read(epp, &before);
    e->now += 1;
    cr_epp_stream *s = cr_epp_stream_open(epp, data[0] >> 4, e->now);
    CR_FUZZ_CHECK(s != NULL, "open");
    size_t at = 1;
    cr_epp_next next = CR_EPP_MORE;
    while (next == CR_EPP_MORE && at < size) {
        size_t len = data[at];
        len |= at + 1 < size ? (size_t)data[at + 1] << 8 : 0;
        at += 2;
        if (at > size)
            at = size;
        if (len > size - at)
            len = size - at;
        cr_error err;
        err.msg[0] = '\0';
        e->now += 0.001;
        next = cr_epp_stream_step(s, data + at, len, e->now, &out, &err);
        CR_FUZZ_CHECK(next != CR_EPP_FAILED || err.msg[0], "a failure without a reason");
        check_out(&out);
        at += len;
    }
    cr_epp_stream_close(s, (data[0] & 4) ? CR_EPP_END_BROKEN : CR_EPP_END_CLOSED, e->now);
    cr_epp_stats_read(epp, &after);
    cr_route_stats rs;
    cr_core_route_stats_read(e->core, &rs, NULL, 0);
    CR_FUZZ_CHECK(rs.outstanding == 0, "%llu routes outstanding after the close",
                  (unsigned long long)rs.outstanding);
    CR_FUZZ_CHECK(after.streams_open == 0, "%llu streams open",
                  (unsigned long long)after.streams_open);
    CR_FUZZ_CHECK(after.outcomes - before.outcomes <= 1 &&
                      after.outcomes - before.outcomes == after.routed - before.routed,
                  "routed %llu, outcomes %llu",
                  (unsigned long long)(after.routed - before.routed),
                  (unsigned long long)(after.outcomes - before.outcomes));
    return 0;
}
