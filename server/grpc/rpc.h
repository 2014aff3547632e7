/* The gRPC core server: one completion queue and thread per worker, several
 * requested calls outstanding per method on each, and a pool for slow
 * handlers so that one slow call never holds up a worker.
 *
 * Every completion-queue tag is a cr_tag whose fn runs on the worker that
 * dequeues it; call kinds (unary, bidi streams, health and decision
 * watches) are small state machines built from tags. */
#ifndef CR_RPC_H
#define CR_RPC_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

typedef struct cr_tag {
    void (*fn)(struct cr_tag *tag, int ok);
} cr_tag;

#define CR_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

struct cr_method_spec;

/* One reply: a status, a message for errors, and for OK a serialized body;
 * and, set by the rpc layer before the handler runs, the gate its decoded
 * request must pass. */
typedef struct cr_reply {
    grpc_status_code status;
    char message[512];
    uint8_t *body; /* malloc'd; ownership passes to the rpc layer */
    size_t len;
    /* Input: a CR_ACCESS_ADMIN_IF method called by a client that is not an
     * admin (NULL otherwise). The request decoded for the handler (reply.h)
     * is refused PERMISSION_DENIED when the method's admin_if holds for it,
     * so authorization decides on exactly the message the handler acts on. */
    const struct cr_method_spec *gate;
    int gated; /* set when the gate was asked (reply.c): a gate never asked
                * fails the call closed (calls.c) */
    /* Input: the tag of the client's identity (cr_rpc_options.caller_of),
     * 0 without one or without authorization. Handlers pass it to the core
     * so that routes and outcomes stay the client's own. */
    uint64_t caller;
} cr_reply;

/* Turns one request message into one reply. ctx is the method's. Called on a
 * worker thread, or a pool thread for slow methods; must be thread-safe. */
typedef void (*cr_handler_fn)(void *ctx, const uint8_t *req, size_t len, cr_reply *out);

typedef struct cr_rpc cr_rpc;
typedef struct cr_call_kind cr_call_kind;

/* Who may call a method once authorization is on (cr_rpc_options.is_admin
 * set): anyone, admins only, admins only when admin_if holds for the
 * decoded request (Plan with install, SelectInjection that reserves), or
 * clients with an identity (caller_of not 0: routes that count toward the
 * shared outstanding work). Without is_admin every call is allowed. */
typedef enum cr_access {
    CR_ACCESS_OPEN = 0,
    CR_ACCESS_ADMIN,
    CR_ACCESS_ADMIN_IF,
    CR_ACCESS_IDENTIFIED
} cr_access;

typedef struct cr_method_spec {
    const char *path; /* "/package.Service/Method" */
    const cr_call_kind *kind;
    int slow; /* unary only: run on the pool */
    cr_handler_fn fn;
    void *ctx;
    cr_access access;
    /* CR_ACCESS_ADMIN_IF: 1 when this request, as protobuf-c decoded it
     * for the handler, needs an admin; admin_when says which ("with
     * install=true") in the denial. */
    int (*admin_if)(const ProtobufCMessage *m);
    const char *admin_when;
} cr_method_spec;

typedef struct cr_method {
    cr_method_spec spec;
    void *handle; /* from grpc_server_register_method */
} cr_method;

/* The part every call shares; kinds embed it first. */
typedef struct cr_call {
    cr_tag arrived;
    cr_rpc *rpc;
    const cr_method *method;
    grpc_completion_queue *cq;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array metadata;
    grpc_byte_buffer *payload; /* first message, for kinds that read it up front */
    int read_up_front;         /* gRPC core read payload before the call arrived */
    double started;            /* monotonic seconds */
    grpc_slice refusal;        /* a call over its method's cap: why (rpc.c) */
    int refusal_cancelled;
} cr_call;

struct cr_call_kind {
    size_t size; /* of the kind's call struct, which starts with cr_call */
    /* The unary kind's NONE becomes READ_INITIAL_BYTE_BUFFER without a
     * request deadline (cr_call.read_up_front tells). */
    grpc_server_register_method_payload_handling payload;
    void (*arrived)(cr_call *c); /* a client call arrived for this method */
};

extern const cr_call_kind cr_unary_kind;     /* one message in, one out */
/* A stream answered message by message (stream.c): each inbound message
 * goes through the method's handler as a unary request would, and its reply
 * goes out before the next message is read. A reply that is an error ends
 * the stream with that status, its text prefixed "message N: " (N counts
 * from 0); the client half-closing ends it OK. */
extern const cr_call_kind cr_bidi_each_kind;

/* Called once per finished call with the method's index in the specs given
 * to cr_rpc_start, its status and its latency in seconds; from any thread. */
typedef void (*cr_rpc_observer)(void *ctx, size_t method, grpc_status_code status,
                                double seconds);

/* 1 when the call's client is an admin; md is its initial metadata. From
 * any worker or pool thread. */
typedef int (*cr_rpc_admin_fn)(void *ctx, grpc_call *call, const grpc_metadata_array *md);
/* The tag of the call's client identity, 0 for none (cr_reply.caller).
 * From any worker or pool thread. */
typedef uint64_t (*cr_rpc_caller_fn)(void *ctx, grpc_call *call, const grpc_metadata_array *md);
/* What one client may make the server hold; 0 in a field keeps gRPC core's
 * default (handshake 120 s, no idle or age limit, unlimited streams, no
 * quota) or, for the last two, no limit. */
typedef struct cr_rpc_limits {
    double handshake_timeout_s;        /* preface and settings of a new connection */
    double max_connection_idle_s;      /* without calls, then GOAWAY */
    double max_connection_age_s;       /* then GOAWAY ... */
    double max_connection_age_grace_s; /* ... and this long for its calls */
    long max_concurrent_streams;       /* per connection */
    long memory_quota_bytes;           /* gRPC core's resource quota */
    long max_calls_per_method;         /* in flight; more: RESOURCE_EXHAUSTED */
    double request_deadline_s;         /* unary: a request not in this long is cancelled;
                                        * 0: gRPC core reads requests before the call */
    double reply_deadline_s;           /* unary: an answer unread this long is cancelled */
    long max_pending_reply_bytes;      /* unary answers out and not yet read, in all */
    double stream_idle_s;              /* a stream neither read from nor written to this
                                        * long is ended DEADLINE_EXCEEDED; 0: never */
} cr_rpc_limits;

typedef struct cr_rpc_options {
    const char *listen;
    int threads;
    long max_message_bytes;
    cr_rpc_observer observe; /* optional */
    void *observe_ctx;
    /* The listener's credentials (the caller's; kept referenced by gRPC
     * once added), NULL for plaintext. */
    grpc_server_credentials *creds;
    const char *listen_flag; /* names listen in errors; NULL: "--listen" */
    cr_rpc_admin_fn is_admin; /* NULL: no authorization, all calls open */
    cr_rpc_caller_fn caller_of; /* with is_admin; its ctx is admin_ctx */
    void *admin_ctx;
    cr_rpc_limits limits;
    /* Methods whose path starts with this (optional) are served on a
     * completion queue and thread of their own, so that they are answered
     * at once however busy the workers' handlers are (health probes); their
     * handlers must be quick. The lane's queue does no I/O: the workers
     * read its calls between theirs. */
    const char *own_lane_prefix;
    /* Compressed requests (grpc-encoding gzip or deflate): refused
     * UNIMPLEMENTED, or with accept_compressed inflated by us, at most
     * max_message_bytes each and max_inflating at once (gRPC core's own
     * inflating is off: it has no bound). */
    int accept_compressed;
    long max_inflating;
} cr_rpc_options;

/* Binds, registers the methods (specs must outlive the server) and starts
 * serving. grpc_init must have been called. Returns NULL with err filled when
 * the address cannot be bound or threads cannot start. */
cr_rpc *cr_rpc_start(const cr_rpc_options *opt, const cr_method_spec *specs, size_t n,
                     cr_error *err);

/* Stops accepting calls, ends open streams (cr_bidi_each_kind) UNAVAILABLE
 * at once, lets other in-flight calls finish for up to grace seconds,
 * then cancels the rest and gives handlers still running margin seconds
 * more to return. Returns the number of seconds it waited. When every call
 * ended, every thread is joined and *stuck is 0; cr_rpc_free afterwards.
 * Otherwise *stuck is the number of calls whose handler is still running
 * (cr_rpc_describe_running names them), threads are left running, and
 * neither rpc nor anything its handlers use may be freed: the caller is
 * expected to end the process. */
double cr_rpc_shutdown(cr_rpc *rpc, double grace, double margin, long *stuck);
/* The methods with calls in flight and how many, as a JSON object
 * ({"/pkg.Svc/Plan": 1}); NULL when out of memory. Thread-safe. */
json_t *cr_rpc_describe_running(cr_rpc *rpc);
/* Calls refused over --max-calls-per-method, and calls cancelled past
 * --request-deadline, --reply-deadline and --stream-idle-timeout, since
 * start. Thread-safe. */
long cr_rpc_refused(cr_rpc *rpc);
long cr_rpc_request_timeouts(cr_rpc *rpc);
long cr_rpc_reply_timeouts(cr_rpc *rpc);
long cr_rpc_stream_timeouts(cr_rpc *rpc);
/* The bound TCP port (useful with --listen host:0). */
int cr_rpc_port(const cr_rpc *rpc);
/* Calls that arrived and have not finished (health watches included). */
long cr_rpc_in_flight(cr_rpc *rpc);
void cr_rpc_free(cr_rpc *rpc);

/* Starts a batch whose completion runs tag->fn on a worker. Every batch goes
 * through here: under ThreadSanitizer it also records that what the caller
 * did before happens before the completion (gRPC's own synchronization is
 * invisible to TSan in Debian's uninstrumented build). */
grpc_call_error cr_start_batch(grpc_call *call, const grpc_op *ops, size_t n, cr_tag *tag);

/* Helpers for call kinds. */
struct cr_pool *cr_rpc_pool(cr_rpc *rpc);
/* Counts len bytes of an answer against max_pending_reply_bytes until
 * cr_rpc_release_reply: 0, or -1 (nothing counted) when they would pass it.
 * Thread-safe. */
int cr_rpc_reserve_reply(cr_rpc *rpc, size_t len);
void cr_rpc_release_reply(cr_rpc *rpc, size_t len);
long cr_rpc_pending_reply_bytes(cr_rpc *rpc);
/* The request and reply deadlines' sweepers; NULL when off. */
struct cr_sweep *cr_rpc_request_sweep(cr_rpc *rpc);
struct cr_sweep *cr_rpc_reply_sweep(cr_rpc *rpc);
/* Open streams waiting on their client: the idle limit's sweeper, which
 * shutdown also closes (sweep.h); never NULL. */
struct cr_sweep *cr_rpc_stream_sweep(cr_rpc *rpc);
double cr_rpc_clock(void); /* monotonic seconds */
void cr_call_release(cr_call *c);                 /* unref the call and free c */
void cr_call_observe(cr_call *c, grpc_status_code status);
/* 1 when c may run (see cr_access), with out->gate set for a
 * CR_ACCESS_ADMIN_IF method and a client that is not an admin; otherwise 0
 * with out set to PERMISSION_DENIED naming the method and what it needs. */
int cr_call_allowed(cr_call *c, cr_reply *out);
/* One request message, whole, in *out: 0 read as it came (uncompressed),
 * 1 inflated (see cr_rpc_options.accept_compressed), -1 refused with reply
 * set. Give it back with cr_rpc_request_done(rpc, *out, what it returned)
 * once the handler is done with it. */
int cr_rpc_read_request(cr_rpc *rpc, grpc_byte_buffer *bb, grpc_slice *out, cr_reply *reply);
void cr_rpc_request_done(cr_rpc *rpc, grpc_slice req, int read);
/* Runs c's handler on one message (NULL: it is missing) once
 * cr_call_allowed lets it; reply (overwritten) is then OK or an error. */
void cr_call_handle(cr_call *c, grpc_byte_buffer *message, cr_reply *reply);
/* What the client saw: sent, unless the call was cancelled (by the client,
 * a deadline, or shutdown) or broke (!ok) before the status went out. */
grpc_status_code cr_call_final_status(int ok, int cancelled, grpc_status_code sent);
/* A message at least this big is decoded and handled on the pool even for
 * a quick method: decoding 64 MiB takes long enough to hold a worker (and
 * the calls queued behind it) for a noticeable time. */
#define CR_INLINE_MAX_BYTES (1 << 20)
/* The debug "call started" line (once per call). */
void cr_call_log_started(const cr_call *c);
/* cr_wire_read (wire/include/wire.h) by its old name: bb whole in *out; 0, or -1. */
static inline int cr_byte_buffer_read(grpc_byte_buffer *bb, grpc_slice *out)
{
    return cr_wire_read(bb, out);
}
/* PERMISSION_DENIED naming m's path, and with conditional its admin_when
 * ("with install=true"), and how to be an admin. */
void cr_reply_needs_admin(cr_reply *out, const cr_method_spec *m, int conditional);
/* PERMISSION_DENIED naming m's path and how to have an identity. */
void cr_reply_needs_identity(cr_reply *out, const cr_method_spec *m);

/* An OK reply's body as a byte buffer the caller owns (it takes r->body over,
 * leaving it NULL; no body gives an empty message); NULL unless r is OK. */
grpc_byte_buffer *cr_reply_take_body(cr_reply *r);
void cr_reply_error(cr_reply *r, grpc_status_code status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
