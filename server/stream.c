/* The "bidi each" call kind (rpc.h): a stream answered message by message,
 * for RecordArrivals and reflection.
 *
 * One batch at a time per stream, sending the previous reply and asking for
 * the next message together: the next message is only read once the reply
 * before it went out, so a stream holds at most one reply and one request
 * whatever its client does, and a client that stops reading stops being
 * read from (HTTP/2 flow control then holds it back). While that batch
 * waits on the client the stream is listed in the rpc's stream sweeper,
 * which ends it DEADLINE_EXCEEDED past --stream-idle-timeout and
 * UNAVAILABLE at shutdown; while its handler runs it is not listed, so a
 * message being applied is never cut short. */
#include <stdio.h>
#include <string.h>

#include "pool.h"
#include "rpc.h"
#include "sweep.h"

typedef struct stream_call {
    cr_call base;
    cr_tag step;
    grpc_byte_buffer *recv, *send;
    grpc_slice details;
    grpc_status_code status;
    int cancelled, finishing;
    long index;          /* messages handled so far: the next one's index */
    cr_sweep_entry idle; /* listed while the batch waits on the client */
} stream_call;

static void stream_release(stream_call *s, int ok)
{
    cr_call_observe(&s->base, cr_call_final_status(ok, s->cancelled, s->status));
    grpc_slice_unref(s->details);
    if (s->recv)
        grpc_byte_buffer_destroy(s->recv);
    cr_call_release(&s->base);
}

static void stream_finish(stream_call *s, grpc_status_code status, const char *message)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    s->finishing = 1;
    s->status = status;
    grpc_slice_unref(s->details);
    s->details = grpc_slice_from_copied_string(message);
    ops[0].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[0].data.send_status_from_server.status = status;
    ops[0].data.send_status_from_server.status_details = &s->details;
    ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[1].data.recv_close_on_server.cancelled = &s->cancelled;
    if (cr_start_batch(s->base.call, ops, 2, &s->step) != GRPC_CALL_OK)
        stream_release(s, 0);
}

/* Sends what is in s->send (if anything) and asks for the next message. */
static void stream_continue(stream_call *s, int first)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = first ? GRPC_OP_SEND_INITIAL_METADATA : GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = s->send;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &s->recv;
    cr_sweep_add(cr_rpc_stream_sweep(s->base.rpc), &s->idle, s->base.call);
    if (cr_start_batch(s->base.call, ops, 2, &s->step) != GRPC_CALL_OK) {
        cr_sweep_remove(cr_rpc_stream_sweep(s->base.rpc), &s->idle);
        stream_finish(s, GRPC_STATUS_INTERNAL, "cannot continue the stream");
    }
}

/* Handles the message in s->recv: its reply goes out with the next read, or
 * its error ends the stream. On a worker, or the pool for a big message. */
static void stream_handle(void *arg)
{
    stream_call *s = arg;
    cr_reply reply;
    cr_call_handle(&s->base, s->recv, &reply);
    grpc_byte_buffer_destroy(s->recv);
    s->recv = NULL;
    long index = s->index++;
    if (reply.status != GRPC_STATUS_OK) {
        char text[sizeof reply.message + 32];
        snprintf(text, sizeof text, "message %ld: %s", index, reply.message);
        stream_finish(s, reply.status, text);
        return;
    }
    s->send = cr_reply_take_body(&reply);
    stream_continue(s, 0);
}

static void stream_step(cr_tag *tag, int ok)
{
    stream_call *s = CR_CONTAINER_OF(tag, stream_call, step);
    if (s->send) {
        grpc_byte_buffer_destroy(s->send);
        s->send = NULL;
    }
    if (s->finishing) {
        stream_release(s, ok);
        return;
    }
    cr_sweep_remove(cr_rpc_stream_sweep(s->base.rpc), &s->idle);
    if (!ok || !s->recv) { /* the client half-closed, or the call broke */
        stream_finish(s, GRPC_STATUS_OK, "");
        return;
    }
    if (grpc_byte_buffer_length(s->recv) >= CR_INLINE_MAX_BYTES &&
        cr_pool_submit(cr_rpc_pool(s->base.rpc), stream_handle, s) == 0)
        return;
    stream_handle(s);
}

static void stream_arrived(cr_call *c)
{
    stream_call *s = (stream_call *)c;
    s->step.fn = stream_step;
    s->details = grpc_empty_slice();
    stream_continue(s, 1);
}

const cr_call_kind cr_bidi_each_kind = {sizeof(stream_call), GRPC_SRM_PAYLOAD_NONE, stream_arrived};
