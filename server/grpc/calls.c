/* The unary call kind: one message in, one reply (stream.c has the
 * streaming kind built on the same handlers). */
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "rpc.h"
#include "sweep.h"
#include "wire.h"

/* A unary call reads its request itself (rather than gRPC core before the
 * call arrives) so that a stalled upload is a call we can see: it counts
 * against its method's cap and --request-deadline cancels it. With the
 * deadline off, gRPC core reads it up front (cr_call.read_up_front). */
typedef struct unary_call {
    cr_call base;
    cr_tag received, done;
    cr_reply reply;
    grpc_byte_buffer *send;
    grpc_slice details;
    int cancelled;
    size_t reserved;      /* bytes of the answer counted as pending (rpc.h) */
    cr_sweep_entry sweep; /* listed while the request or the answer is on its way */
} unary_call;

void cr_call_handle(cr_call *c, grpc_byte_buffer *message, cr_reply *reply)
{
    grpc_slice req;
    int read;
    memset(reply, 0, sizeof *reply);
    if (!message) {
        cr_reply_error(reply, GRPC_STATUS_INVALID_ARGUMENT, "missing request message");
    } else if ((read = cr_rpc_read_request(c->rpc, message, &req, reply)) < 0) {
        /* refused: reply says why */
    } else {
        if (cr_call_allowed(c, reply))
            c->method->spec.fn(c->method->spec.ctx, GRPC_SLICE_START_PTR(req),
                               GRPC_SLICE_LENGTH(req), reply);
        if (reply->gate && !reply->gated && reply->status == GRPC_STATUS_OK) {
            /* A handler that did not decode through reply.h: never answer
             * as if authorized. */
            free(reply->body);
            reply->body = NULL;
            cr_reply_error(reply, GRPC_STATUS_INTERNAL,
                           "%s: authorization was not decided on the request",
                           c->method->spec.path);
        }
        cr_rpc_request_done(c->rpc, req, read);
    }
}

grpc_status_code cr_call_final_status(int ok, int cancelled, grpc_status_code sent)
{
    return ok && !cancelled ? sent : GRPC_STATUS_CANCELLED;
}

/* An answer counts against --max-pending-reply-bytes until it is read (or
 * the call ends); one that would pass it is not sent at all. */
static void reserve_reply(unary_call *u)
{
    cr_reply *r = &u->reply;
    if (r->status != GRPC_STATUS_OK || r->len == 0)
        return;
    if (cr_rpc_reserve_reply(u->base.rpc, r->len) == 0) {
        u->reserved = r->len;
        return;
    }
    cr_reply_error(r, GRPC_STATUS_RESOURCE_EXHAUSTED,
                   "%s: answers not yet read by their clients hold more than "
                   "--max-pending-reply-bytes with this one (%zu bytes); try again later",
                   u->base.method->spec.path, r->len);
}

static void unary_done(cr_tag *tag, int ok)
{
    unary_call *u = CR_CONTAINER_OF(tag, unary_call, done);
    cr_sweep_remove(cr_rpc_reply_sweep(u->base.rpc), &u->sweep);
    cr_rpc_release_reply(u->base.rpc, u->reserved);
    cr_call_observe(&u->base, cr_call_final_status(ok, u->cancelled, u->reply.status));
    if (u->send)
        grpc_byte_buffer_destroy(u->send);
    grpc_slice_unref(u->details);
    free(u->reply.body);
    cr_call_release(&u->base);
}

static void unary_run(void *arg)
{
    unary_call *u = arg;
    cr_call_handle(&u->base, u->base.payload, &u->reply);
    reserve_reply(u);
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    u->send = cr_reply_take_body(&u->reply);
    if (u->send) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = u->send;
    }
    u->details = grpc_slice_from_copied_string(u->reply.status ? u->reply.message : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = u->reply.status;
    ops[n++].data.send_status_from_server.status_details = &u->details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &u->cancelled;
    u->done.fn = unary_done;
    cr_sweep_add(cr_rpc_reply_sweep(u->base.rpc), &u->sweep, u->base.call);
    if (cr_start_batch(u->base.call, ops, n, &u->done) != GRPC_CALL_OK)
        unary_done(&u->done, 0);
}

/* The request is in (or the call broke: then there is no payload, and the
 * reply batch fails at once, which ends the call). */
static void unary_received(cr_tag *tag, int ok)
{
    (void)ok;
    unary_call *u = CR_CONTAINER_OF(tag, unary_call, received);
    cr_call *c = &u->base;
    cr_sweep_remove(cr_rpc_request_sweep(c->rpc), &u->sweep);
    cr_call_log_started(c);
    int big = c->payload && grpc_byte_buffer_length(c->payload) >= CR_INLINE_MAX_BYTES;
    if ((c->method->spec.slow || big) && cr_pool_submit(cr_rpc_pool(c->rpc), unary_run, c) == 0)
        return;
    unary_run(c);
}

static void unary_arrived(cr_call *c)
{
    unary_call *u = (unary_call *)c;
    if (c->read_up_front) {
        unary_received(&u->received, 1);
        return;
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->payload;
    u->received.fn = unary_received;
    cr_sweep_add(cr_rpc_request_sweep(c->rpc), &u->sweep, c->call);
    if (cr_start_batch(c->call, &op, 1, &u->received) != GRPC_CALL_OK)
        unary_received(&u->received, 0);
}

const cr_call_kind cr_unary_kind = {sizeof(unary_call), GRPC_SRM_PAYLOAD_NONE, unary_arrived};
