#include "call.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tls.h"
#include "wire.h"

int cr_client_open(cr_client *c, const char *target, double timeout,
                   const cr_client_security *sec, cr_error *err)
{
    /* Answers are bounded by the server's --max-message-bytes, not by the
     * 4 MiB client default. */
    grpc_arg arg = {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}};
    grpc_channel_args args = {1, &arg};
    memset(c, 0, sizeof *c);
    grpc_channel_credentials *creds = cr_client_credentials(sec, err);
    if (!creds || cr_client_token(c, sec, err) != 0) {
        if (creds)
            grpc_channel_credentials_release(creds);
        return -1;
    }
    c->channel = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    c->cq = grpc_completion_queue_create_for_pluck(NULL);
    c->timeout = timeout;
    return 0;
}

void cr_client_initial_metadata(cr_client *c, grpc_op *op)
{
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    op->data.send_initial_metadata.count = c->has_auth ? 1 : 0;
    op->data.send_initial_metadata.metadata = c->has_auth ? &c->auth : NULL;
}

grpc_op cr_client_status_op(grpc_metadata_array *trailing, grpc_status_code *status,
                            grpc_slice *details)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = trailing;
    op.data.recv_status_on_client.status = status;
    op.data.recv_status_on_client.status_details = details;
    return op;
}

void cr_client_close(cr_client *c)
{
    cr_client_token_free(c);
    grpc_channel_destroy(c->channel);
    grpc_completion_queue_shutdown(c->cq);
    while (grpc_completion_queue_pluck(c->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(c->cq);
}

grpc_status_code cr_client_call(cr_client *c, const char *method, const ProtobufCMessage *req,
                                const ProtobufCMessageDescriptor *resp_type,
                                ProtobufCMessage **resp, cr_error *err)
{
    /* Beyond about 30 years a timeout means "no deadline" (and would
     * overflow the millisecond count). */
    gpr_timespec deadline =
        c->timeout > 1e9 ? gpr_inf_future(GPR_CLOCK_REALTIME)
                         : gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                        gpr_time_from_millis((int64_t)(c->timeout * 1e3),
                                                             GPR_TIMESPAN));
    grpc_slice path = grpc_slice_from_static_string(method);
    grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                               path, NULL, deadline, NULL);
    grpc_byte_buffer *send, *recv = NULL;
    size_t send_len;
    int packed = cr_wire_pack(req, SIZE_MAX, &send, &send_len);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    cr_client_initial_metadata(c, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5] = cr_client_status_op(&trailing, &status, &details);
    *resp = NULL;
    if (packed != 0) {
        cr_fail(err, CR_ENOMEM, "out of memory packing %s (%zu bytes)", req->descriptor->name,
                send_len);
        status = GRPC_STATUS_RESOURCE_EXHAUSTED;
    } else if (grpc_call_start_batch(call, ops, 6, call, NULL) != GRPC_CALL_OK) {
        cr_fail(err, CR_EINVAL, "cannot start the call");
        status = GRPC_STATUS_INTERNAL;
    } else {
        grpc_completion_queue_pluck(c->cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        char *text = grpc_slice_to_c_string(details);
        snprintf(err->msg, sizeof err->msg, "%s", text);
        gpr_free(text);
        if (status == GRPC_STATUS_OK && !(*resp = cr_wire_unpack(recv, resp_type))) {
            cr_fail(err, CR_EINVAL, "malformed %s answer", resp_type->name);
            status = GRPC_STATUS_INTERNAL;
        }
    }
    if (send)
        grpc_byte_buffer_destroy(send);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    return status;
}

/* ---- server streaming ---- */

typedef struct stream {
    cr_client *c;
    grpc_call *call;
    volatile sig_atomic_t *stop;
    int stopped; /* the call was cancelled by us */
} stream;

/* Waits for tag's batch, cancelling the call (once) when *stop is set. */
static void stream_wait(stream *s, void *tag)
{
    for (;;) {
        gpr_timespec slice = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                          gpr_time_from_millis(100, GPR_TIMESPAN));
        if (grpc_completion_queue_pluck(s->c->cq, tag, slice, NULL).type == GRPC_OP_COMPLETE)
            return;
        if (*s->stop && !s->stopped) {
            s->stopped = 1;
            grpc_call_cancel(s->call, NULL);
        }
    }
}

grpc_status_code cr_client_stream(cr_client *c, const char *method, const ProtobufCMessage *req,
                                  const ProtobufCMessageDescriptor *resp_type,
                                  cr_client_each_fn each, void *ctx,
                                  volatile sig_atomic_t *stop, cr_error *err)
{
    grpc_slice path = grpc_slice_from_static_string(method);
    stream s = {c, NULL, stop, 0};
    s.call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, path, NULL,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_byte_buffer *send, *recv = NULL;
    size_t send_len;
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    int start_tag, status_tag, recv_tag; /* addresses only */
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    cr_client_initial_metadata(c, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    grpc_op final = cr_client_status_op(&trailing, &status, &details);
    grpc_op next;
    memset(&next, 0, sizeof next);
    next.op = GRPC_OP_RECV_MESSAGE;
    next.data.recv_message.recv_message = &recv;
    if (cr_wire_pack(req, SIZE_MAX, &send, &send_len) != 0) {
        cr_fail(err, CR_ENOMEM, "out of memory packing %s", req->descriptor->name);
        grpc_call_unref(s.call);
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    ops[1].data.send_message.send_message = send;
    int started = grpc_call_start_batch(s.call, ops, 4, &start_tag, NULL) == GRPC_CALL_OK &&
                  grpc_call_start_batch(s.call, &final, 1, &status_tag, NULL) == GRPC_CALL_OK;
    if (started) {
        stream_wait(&s, &start_tag);
        int done = 0;
        while (!done && grpc_call_start_batch(s.call, &next, 1, &recv_tag, NULL) == GRPC_CALL_OK) {
            stream_wait(&s, &recv_tag);
            ProtobufCMessage *m = recv ? cr_wire_unpack(recv, resp_type) : NULL;
            done = !recv || s.stopped;
            if (recv)
                grpc_byte_buffer_destroy(recv);
            recv = NULL;
            if (m && done) {
                protobuf_c_message_free_unpacked(m, NULL);
            } else if (m && each(ctx, m)) {
                s.stopped = 1;
                grpc_call_cancel(s.call, NULL);
            } else if (!m && !done) {
                char text[200];
                snprintf(text, sizeof text, "malformed %s message", resp_type->name);
                grpc_call_cancel_with_status(s.call, GRPC_STATUS_INTERNAL, text, NULL);
            }
        }
        stream_wait(&s, &status_tag);
        char *text = grpc_slice_to_c_string(details);
        snprintf(err->msg, sizeof err->msg, "%s", text);
        gpr_free(text);
    } else {
        cr_fail(err, CR_EINVAL, "cannot start the call");
        status = GRPC_STATUS_INTERNAL;
    }
    grpc_byte_buffer_destroy(send);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(s.call);
    return s.stopped ? GRPC_STATUS_OK : status;
}
