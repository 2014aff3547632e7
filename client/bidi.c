/* A bidirectional stream, pipelined: requests go out as fast as HTTP/2
 * flow control takes them while answers are read as they come, on a
 * completion queue of the call's own (the client's pluck queue cannot wait
 * on "whichever finishes first"). One thread: next() may block (reading
 * input), and answers that came meanwhile are handed over after it returns. */
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "call.h"
#include "wire.h"

enum { T_START, T_SEND, T_RECV, T_STATUS };
static char tags[4]; /* each batch's tag is its kind's address */

typedef struct bidi {
    grpc_call *call;
    cr_client_next_fn next;
    void *next_ctx;
    grpc_byte_buffer *send, *recv;
    int sending, receiving, closed, stopped;
} bidi;

static void *tag_of(int kind) { return &tags[kind]; }

/* The next request, or the half-close once next() has none. 0, or -1 when
 * the batch cannot start (the call is broken: its status says why). */
static int start_send(bidi *b)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    const ProtobufCMessage *m = b->stopped ? NULL : b->next(b->next_ctx);
    size_t len;
    if (m && cr_wire_pack(m, SIZE_MAX, &b->send, &len) == 0) {
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = b->send;
    } else {
        op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        b->closed = 1;
    }
    b->sending = grpc_call_start_batch(b->call, &op, 1, tag_of(T_SEND), NULL) == GRPC_CALL_OK;
    return b->sending ? 0 : -1;
}

static void start_recv(bidi *b)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &b->recv;
    b->receiving = grpc_call_start_batch(b->call, &op, 1, tag_of(T_RECV), NULL) == GRPC_CALL_OK;
}

/* One answer in (or none: the server ended the stream). */
static void received(bidi *b, const ProtobufCMessageDescriptor *type, cr_client_each_fn each,
                     void *ctx)
{
    b->receiving = 0;
    if (!b->recv)
        return;
    ProtobufCMessage *m = cr_wire_unpack(b->recv, type);
    grpc_byte_buffer_destroy(b->recv);
    b->recv = NULL;
    if (!m) {
        char text[200];
        snprintf(text, sizeof text, "malformed %s message", type->name);
        grpc_call_cancel_with_status(b->call, GRPC_STATUS_INTERNAL, text, NULL);
        return;
    }
    if (!b->stopped && each(ctx, m)) {
        b->stopped = 1;
        grpc_call_cancel(b->call, NULL);
    } else if (b->stopped) {
        protobuf_c_message_free_unpacked(m, NULL);
    }
    start_recv(b);
}

static void sent(bidi *b, int ok)
{
    if (b->send)
        grpc_byte_buffer_destroy(b->send);
    b->send = NULL;
    b->sending = 0;
    if (ok && !b->closed)
        start_send(b);
}

/* Starts the call's batches; returns how many of the first two (initial
 * metadata, status) started, each to be waited for. */
static int start(bidi *b, cr_client *c, grpc_metadata_array *initial, grpc_op *final)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    cr_client_initial_metadata(c, &ops[0]);
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = initial;
    int n = grpc_call_start_batch(b->call, ops, 2, tag_of(T_START), NULL) == GRPC_CALL_OK;
    n += grpc_call_start_batch(b->call, final, 1, tag_of(T_STATUS), NULL) == GRPC_CALL_OK;
    start_recv(b);
    start_send(b);
    return n;
}

grpc_status_code cr_client_bidi(cr_client *c, const char *method, cr_client_next_fn next,
                                void *next_ctx, const ProtobufCMessageDescriptor *resp_type,
                                cr_client_each_fn each, void *each_ctx, cr_error *err)
{
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice path = grpc_slice_from_static_string(method);
    bidi b = {.next = next, .next_ctx = next_ctx};
    b.call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path, NULL,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op final = cr_client_status_op(&trailing, &status, &details);
    /* Every batch started is waited for, so nothing refers to b after. */
    for (int pending = start(&b, c, &initial, &final); pending || b.sending || b.receiving;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.tag == tag_of(T_SEND))
            sent(&b, ev.success);
        else if (ev.tag == tag_of(T_RECV))
            received(&b, resp_type, each, each_ctx);
        else
            pending--;
    }
    char *text = grpc_slice_to_c_string(details);
    snprintf(err->msg, sizeof err->msg, "%s", text);
    gpr_free(text);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(b.call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    return b.stopped ? GRPC_STATUS_OK : status;
}
