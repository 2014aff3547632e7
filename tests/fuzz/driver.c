/* The checks every fuzzed answer gets (fuzz.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

void cr_fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: fuzz invariant failed: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

int cr_fuzz_one_of(const char *s, const char *const *names, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (!strcmp(s, names[i]))
            return 1;
    return 0;
}

static void check_error(const cr_reply *r, const ProtobufCMessageDescriptor *request,
                        const uint8_t *data, size_t len)
{
    CR_FUZZ_CHECK(r->message[0] != '\0', "status %d without a message", (int)r->status);
    CR_FUZZ_CHECK(!r->body && r->len == 0, "status %d with a %zu-byte body", (int)r->status,
                  r->len);
    ProtobufCMessage *req = protobuf_c_message_unpack(request, NULL, len, data);
    if (req) {
        protobuf_c_message_free_unpacked(req, NULL);
        return;
    }
    /* Undecodable: "malformed", unless a count on the raw bytes refused it
     * first (handlers count repeated entries before decoding). */
    int counted = strstr(r->message, " entries, at most ") != NULL;
    CR_FUZZ_CHECK((r->status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r->message, "malformed")) ||
                      (counted && (r->status == GRPC_STATUS_INVALID_ARGUMENT ||
                                   r->status == GRPC_STATUS_RESOURCE_EXHAUSTED)),
                  "undecodable %s answered %d '%s'", request->name, (int)r->status, r->message);
}

/* CR_FUZZ_VERBOSE=1 prints each answer: to see what a seed exercises. */
static void trace_reply(const cr_reply *r, const ProtobufCMessageDescriptor *request)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("CR_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "%s: status %d, %zu bytes%s%s\n", request->name, (int)r->status, r->len,
                r->status ? ": " : "", r->status ? r->message : "");
}

ProtobufCMessage *cr_fuzz_check_reply(const cr_reply *r, unsigned codes,
                                      const ProtobufCMessageDescriptor *request,
                                      const ProtobufCMessageDescriptor *response,
                                      const uint8_t *data, size_t len, size_t max)
{
    trace_reply(r, request);
    CR_FUZZ_CHECK((unsigned)r->status < 32 && (codes & CR_CODE(r->status)),
                  "%s answered status %d, which it never should ('%s')", request->name,
                  (int)r->status, r->message);
    if (r->status != GRPC_STATUS_OK) {
        check_error(r, request, data, len);
        return NULL;
    }
    CR_FUZZ_CHECK(r->len <= max, "a %zu-byte %s, over the %zu-byte limit", r->len,
                  response->name, max);
    ProtobufCMessage *m = protobuf_c_message_unpack(response, NULL, r->len, r->body);
    CR_FUZZ_CHECK(m, "the OK body (%zu bytes) does not decode as %s", r->len, response->name);
    char why[256];
    CR_FUZZ_CHECK(!cr_fuzz_strict_error(m, why, sizeof why), "the OK body: %s", why);
    size_t again = protobuf_c_message_get_packed_size(m);
    uint8_t *bytes = malloc(again ? again : 1);
    CR_FUZZ_CHECK(bytes, "out of memory");
    protobuf_c_message_pack(m, bytes);
    CR_FUZZ_CHECK(again == r->len && !memcmp(bytes, r->body, again),
                  "%s does not pack back to its %zu bytes", response->name, r->len);
    free(bytes);
    return m;
}
