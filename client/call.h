/* Unary, server-streaming and bidirectional gRPC calls over the C core with
 * protobuf-c messages (packed and unpacked by wire.h, which also names the
 * status codes). */
#ifndef CR_CLIENT_CALL_H
#define CR_CLIENT_CALL_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <signal.h>

#include "common.h"

typedef struct cr_client {
    grpc_channel *channel;
    grpc_completion_queue *cq;
    double timeout; /* seconds per call */
    grpc_metadata auth; /* "authorization: Bearer TOKEN" sent on every call */
    int has_auth;
} cr_client;

/* How to reach the sidecar: paths of PEM files, each NULL when not given. */
typedef struct cr_client_security {
    const char *ca;         /* --tls-ca: TLS, trusting these roots */
    const char *cert, *key; /* --tls-cert, --tls-key: a client certificate (mTLS) */
    const char *token_file; /* --token-file: a bearer token for admin calls */
} cr_client_security;

/* Opens a channel to target (host:port): plaintext, or TLS when sec->ca is
 * set; grpc_init first. Returns 0, or -1 with err naming the flag and file
 * that cannot be read (or a cert without its key). */
int cr_client_open(cr_client *c, const char *target, double timeout,
                   const cr_client_security *sec, cr_error *err);
void cr_client_close(cr_client *c);

/* Calls method ("/pkg.Service/Method") with req and unpacks the answer as
 * resp_type into *resp (free with protobuf_c_message_free_unpacked). Returns
 * the gRPC status; on anything but OK, err holds the server's message (as
 * much of it as err->msg holds). */
grpc_status_code cr_client_call(cr_client *c, const char *method, const ProtobufCMessage *req,
                                const ProtobufCMessageDescriptor *resp_type,
                                ProtobufCMessage **resp, cr_error *err);

/* Handed each streamed answer (the callee's: free it with
 * protobuf_c_message_free_unpacked); nonzero stops the stream. */
typedef int (*cr_client_each_fn)(void *ctx, ProtobufCMessage *m);

/* Calls a server-streaming method with req, with no deadline, and hands
 * each answer, unpacked as resp_type, to each(ctx, m) until the server ends
 * the stream, each returns nonzero, or *stop becomes nonzero (a signal
 * handler's flag, looked at every 100 ms); the last two cancel the call.
 * Returns the stream's final status, OK when it was stopped by each or
 * *stop; on anything else err holds the server's message (cut as above). */
grpc_status_code cr_client_stream(cr_client *c, const char *method, const ProtobufCMessage *req,
                                  const ProtobufCMessageDescriptor *resp_type,
                                  cr_client_each_fn each, void *ctx,
                                  volatile sig_atomic_t *stop, cr_error *err);

/* The first batch's SEND_INITIAL_METADATA into op, with the token when
 * there is one. */
void cr_client_initial_metadata(cr_client *c, grpc_op *op);

/* A RECV_STATUS_ON_CLIENT op filling the three (the caller's, alive until
 * the op completes). */
grpc_op cr_client_status_op(grpc_metadata_array *trailing, grpc_status_code *status,
                            grpc_slice *details);

/* The next request of a bidirectional stream, valid until the next call;
 * NULL when there is none (the stream is then half-closed). */
typedef const ProtobufCMessage *(*cr_client_next_fn)(void *ctx);

/* Calls a bidirectional method (bidi.c) with no deadline: sends what next
 * gives, pipelined, until it gives NULL, and hands each answer, unpacked
 * as resp_type, to each(ctx, m) as it comes; each returning nonzero
 * cancels the call. Returns the stream's final status (OK when each
 * stopped it); on anything else err holds the server's message (cut as
 * above). Both functions run on the calling thread. */
grpc_status_code cr_client_bidi(cr_client *c, const char *method, cr_client_next_fn next,
                                void *next_ctx, const ProtobufCMessageDescriptor *resp_type,
                                cr_client_each_fn each, void *each_ctx, cr_error *err);

#endif
