/* The "bidi each" call kind (rpc.h): a stream answered message by message,
 * for RecordArrivals and reflection.
 *
 * One batch at a time per stream, sending the previous reply and asking for
 * the next message together: the next message is only read once the reply
 * before it went out, so a stream holds at most one reply and one request
 * whatever its client does, and a client that stops reading stops being
 * read from (HTTP/2 flow control then holds it back). While that batch
 * waits on the client the stream is listed in the rpc's stream sweeper,
 * which cancels it DEADLINE_EXCEEDED past --stream-idle-timeout. Shutdown
 * closes the sweeper: a listed stream then gets its UNAVAILABLE status sent
 * at once from the closing thread (after the reply in flight, which gRPC
 * core writes first), one whose handler runs sends its reply and then the
 * status; a client that never reads is cancelled at the grace's end.
 *
 * A stream's completions all run on its call's worker, one at a time, but
 * the closing thread may start the final batch while the step batch is
 * pending: the call is released when the last of its batches completes. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"
#include "rpc.h"
#include "sweep.h"

typedef struct stream_call {
    cr_call base;
    cr_tag step;  /* the reply out and the next message in */
    cr_tag ended; /* the final status */
    grpc_byte_buffer *recv, *send;
    grpc_slice details;
    grpc_status_code status;
    int cancelled;
    int finishing;      /* the final batch started (by us or the closing thread) */
    int ended_ok;       /* how the final batch completed */
    _Atomic int batches; /* started and not completed */
    long index;          /* messages handled so far: the next one's index */
    cr_sweep_entry idle; /* listed while the step batch waits on the client */
} stream_call;

static void stream_release(stream_call *s)
{
    cr_call_observe(&s->base, cr_call_final_status(s->ended_ok, s->cancelled, s->status));
    grpc_slice_unref(s->details);
    if (s->recv)
        grpc_byte_buffer_destroy(s->recv);
    if (s->send)
        grpc_byte_buffer_destroy(s->send);
    cr_call_release(&s->base);
}

/* Starts one of s's batches; a batch that cannot start completes at once
 * (ok 0), so every batch started is counted down exactly once. */
static void start(stream_call *s, const grpc_op *ops, size_t n, cr_tag *tag)
{
    atomic_fetch_add(&s->batches, 1);
    if (cr_start_batch(s->base.call, ops, n, tag) != GRPC_CALL_OK)
        tag->fn(tag, 0);
}

/* 1 when this completion was s's last batch. */
static int last_batch(stream_call *s) { return atomic_fetch_sub(&s->batches, 1) == 1; }

static void stream_ended(cr_tag *tag, int ok)
{
    stream_call *s = CR_CONTAINER_OF(tag, stream_call, ended);
    s->ended_ok = ok;
    if (last_batch(s))
        stream_release(s);
}

/* The final batch: with_reply also sends s->send first (its buffer then
 * belongs to this batch). */
static void stream_finish(stream_call *s, grpc_status_code status, const char *message,
                          int with_reply)
{
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    s->finishing = 1;
    s->status = status;
    grpc_slice_unref(s->details);
    s->details = grpc_slice_from_copied_string(message);
    if (with_reply && s->send) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = s->send;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = status;
    ops[n++].data.send_status_from_server.status_details = &s->details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &s->cancelled;
    start(s, ops, n, &s->ended);
}

/* cr_sweep_close on a listed stream: its step batch is pending. */
static void stream_closed(cr_sweep_entry *e, grpc_status_code status, const char *why)
{
    stream_finish(CR_CONTAINER_OF(e, stream_call, idle), status, why, 0);
}

/* Sends what is in s->send (if anything) and asks for the next message;
 * once the sweeper is closed, sends it and the status instead. */
static void stream_continue(stream_call *s, int first)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = first ? GRPC_OP_SEND_INITIAL_METADATA : GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = s->send;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &s->recv;
    if (cr_sweep_add(cr_rpc_stream_sweep(s->base.rpc), &s->idle, s->base.call) != 0) {
        stream_finish(s, GRPC_STATUS_UNAVAILABLE, "server shutting down", 1);
        return;
    }
    start(s, ops, 2, &s->step);
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
        stream_finish(s, reply.status, text, 0);
        return;
    }
    s->send = cr_reply_take_body(&reply);
    stream_continue(s, 0);
}

static void stream_step(cr_tag *tag, int ok)
{
    stream_call *s = CR_CONTAINER_OF(tag, stream_call, step);
    /* First: after this the closing thread no longer sees s. */
    cr_sweep_remove(cr_rpc_stream_sweep(s->base.rpc), &s->idle);
    if (s->send) {
        grpc_byte_buffer_destroy(s->send);
        s->send = NULL;
    }
    int last = last_batch(s);
    if (s->finishing) { /* closed meanwhile: the last completion releases */
        if (last)
            stream_release(s);
        return;
    }
    if (!ok || !s->recv) { /* the client half-closed, or the call broke */
        stream_finish(s, GRPC_STATUS_OK, "", 0);
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
    s->ended.fn = stream_ended;
    s->idle.on_close = stream_closed;
    s->details = grpc_empty_slice();
    stream_continue(s, 1);
}

const cr_call_kind cr_bidi_each_kind = {sizeof(stream_call), GRPC_SRM_PAYLOAD_NONE, stream_arrived};
