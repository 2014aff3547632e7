/* The fuzz targets' shared driver. Each target (fuzz_<name>.c) defines
 * LLVMFuzzerTestOneInput and feeds one request's bytes to one decoder and
 * its validator; this checks what every answer must satisfy, so a target
 * adds only its method's own invariants.
 *
 * A failed invariant prints what failed and aborts: libFuzzer (CR_FUZZ) and
 * the plain corpus runner (standalone.c) both report an abort as a crash.
 * Single-threaded, like the fuzzer that calls it. */
#ifndef CR_FUZZ_H
#define CR_FUZZ_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "handlers.h"
#include "rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Not assert(): release builds define NDEBUG, and a fuzz check must hold in
 * every build. */
#define CR_FUZZ_CHECK(cond, ...)                                                               \
    do {                                                                                       \
        if (!(cond))                                                                           \
            cr_fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                              \
    } while (0)

_Noreturn void cr_fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* What a strict proto3 reader refuses in m that protobuf-c takes: a string
 * that is not UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF), or an unknown field numbered 0 (protobuf-c 1.4 unpacks one
 * whose tag is a long varint, and packs it back short, which no reader
 * takes, itself included); at any depth. NULL when none; else why, in buf
 * (len bytes). */
const char *cr_fuzz_strict_error(const ProtobufCMessage *m, char *buf, size_t len);

#define CR_CODE(c) (1u << (c)) /* one grpc_status_code in a set of codes */

/* The checks every reply gets: its status is in codes (a set of CR_CODE);
 * an error has a message and no body; bytes that do not decode as request
 * are INVALID_ARGUMENT saying "malformed"; an OK body decodes as response,
 * strictly (cr_fuzz_strict_error), and packs back to the same bytes, at
 * most max bytes. Returns the decoded
 * OK body (protobuf_c_message_free_unpacked it), else NULL. */
ProtobufCMessage *cr_fuzz_check_reply(const cr_reply *r, unsigned codes,
                                      const ProtobufCMessageDescriptor *request,
                                      const ProtobufCMessageDescriptor *response,
                                      const uint8_t *data, size_t len, size_t max);

/* The largest answer the fuzzed handlers may give: --max-message-bytes at
 * its lowest (64 KiB), so answer-size limits are in reach of small inputs. */
#define CR_FUZZ_MAX_MESSAGE (64u * 1024u)

/* A new core in a small known state, on a virtual clock that stands
 * still while the fuzzed call runs: 16 owners recorded, a plan from them
 * installed (generation 1), and decisions "r0" .. "r3" with receipts. No
 * probing of this host (cr_core_quiet_probe), no replanner thread, small
 * bounds (receipts, owners, routes) so one input costs little. */
typedef struct cr_fuzz_env {
    cr_core *core;
    cr_handlers handlers; /* what the sidecar hands its cacheroute.v1 handlers */
    double now;           /* the core's clock, seconds */
} cr_fuzz_env;

void cr_fuzz_env_open(cr_fuzz_env *env, cr_route_by route_by);
void cr_fuzz_env_close(cr_fuzz_env *env);

/* One cacheroute.v1 unary method as the sidecar serves it. */
typedef struct cr_fuzz_method {
    cr_handler_fn handle;
    const ProtobufCMessageDescriptor *request, *response;
    unsigned codes;    /* the statuses it may answer, CR_CODE(GRPC_STATUS_OK) included */
    int read_only;     /* 1: even an OK answer leaves the core's state as it was */
    cr_route_by route_by;
    /* The fuzzed call's answer limit; 0: CR_FUZZ_MAX_MESSAGE. Lower than
     * the sidecar allows where a small input cannot reach that one. */
    size_t max_message;
    /* The method's own invariants on an OK answer (NULL: none); req is the
     * request decoded, resp the answer; env->core is after the call. */
    void (*check_ok)(const cr_fuzz_env *env, const ProtobufCMessage *req,
                     const ProtobufCMessage *resp);
} cr_fuzz_method;

/* Runs m's handler on data against the seeded cr_fuzz_env and checks, on
 * top of cr_fuzz_check_reply: an error (or any answer of a read-only
 * method) leaves the core's observable state (every rate, the installed
 * table, GetStats, the routes' counters, and what a fixed dry-run decision
 * sees of the reservations) exactly as it was; after an input that changed
 * it, GetStats still answers OK. The env is kept for the next input while it is unchanged and
 * opened afresh once an input changed it, so every input meets the seeded
 * state. Returns 0 (libFuzzer's "keep going"). */
int cr_fuzz_unary(const cr_fuzz_method *m, const uint8_t *data, size_t len);

/* After a split (wire/pairs.c) took the len bytes at data and left
 * left bytes at rest for protobuf-c: checks that protobuf-c takes the rest
 * exactly when it takes the whole, and returns the whole d message when
 * both decode (the caller compares what the split took with it, then
 * frees it: protobuf_c_message_free_unpacked), else NULL. */
ProtobufCMessage *cr_fuzz_split_agrees(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                                       size_t len, const uint8_t *rest, size_t left);

/* What a method that checks its input and its answer's size may answer. */
#define CR_FUZZ_CODES_CHECKED                                                                  \
    (CR_CODE(GRPC_STATUS_OK) | CR_CODE(GRPC_STATUS_INVALID_ARGUMENT) |                         \
     CR_CODE(GRPC_STATUS_RESOURCE_EXHAUSTED))

/* A target file's entry point: the cr_fuzz_method named. */
#define CR_FUZZ_UNARY_TARGET(method)                                                           \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                               \
    {                                                                                          \
        return cr_fuzz_unary(&(method), data, size);                                           \
    }

/* Whether s is one of the n strings of names. */
int cr_fuzz_one_of(const char *s, const char *const *names, size_t n);

#endif
