/* The duplex call kind (duplex.h).
 *
 * Four things may be pending on a stream at once: a read, a step (inline
 * on the worker, or on the pool), a send, and at the end the final batch
 * (the status and the close). One lock guards the stream's state, since
 * a step on the pool, the worker's completions and the shutdown's closing
 * thread all touch it; advance() looks at the state and starts what may
 * start. Batches are started with the lock held (gRPC never completes a
 * batch inside the call that starts it), and the call is released by the
 * completion that finds nothing pending once the final batch started.
 *
 * The idle sweeper's entry stays listed from arrival to release and is
 * refreshed on every read and send that completes: only the worker that
 * runs the call's completions adds and removes it, never with the lock
 * held, because the sweeper's close takes the lock with its own held. */
#include "duplex.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "sweep.h"
#include "wire.h"

typedef struct reply {
    struct reply *next;
    grpc_byte_buffer *bb;
    size_t len;
} reply;

struct cr_duplex_out {
    reply *head, *tail;
    size_t n, bytes;
};

typedef struct cr_duplex_call {
    cr_call base;
    const cr_duplex_ops *ops;
    void *session;
    pthread_mutex_t lock;
    cr_tag got, sent, ended;
    grpc_byte_buffer *recv; /* the read's message */
    grpc_byte_buffer *send; /* the send in flight's */
    cr_duplex_out queue;    /* replies not yet sent, the one in flight included */
    size_t max_queued, max_queued_bytes;
    int batches;            /* started and not completed */
    int reading, stepping, sending;
    int woken;              /* a wake was asked while a step ran */
    int metadata_sent;
    int ending;             /* the status is decided; nothing more is read */
    int broke;              /* a batch failed or could not start: nothing more is sent */
    cr_duplex_end how;
    grpc_status_code status;
    char why[sizeof ((cr_reply *)0)->message + 32];
    grpc_slice details;
    int finishing;          /* the final batch started */
    int ended_ok, cancelled;
    long index;             /* messages stepped so far */
    cr_sweep_entry idle;
} duplex_call;

int cr_duplex_put(cr_duplex_out *out, uint8_t *data, size_t len)
{
    reply *r = malloc(sizeof *r);
    if (!r) {
        free(data);
        return -1;
    }
    r->bb = cr_wire_buffer(data, len); /* grpc_slice_new: no copy, free() when sent */
    r->len = len;
    r->next = NULL;
    if (out->tail)
        out->tail->next = r;
    else
        out->head = r;
    out->tail = r;
    out->n++;
    out->bytes += len;
    return 0;
}

static void queue_splice(cr_duplex_out *q, cr_duplex_out *more)
{
    if (!more->head)
        return;
    if (q->tail)
        q->tail->next = more->head;
    else
        q->head = more->head;
    q->tail = more->tail;
    q->n += more->n;
    q->bytes += more->bytes;
    memset(more, 0, sizeof *more);
}

static void queue_clear(cr_duplex_out *q)
{
    for (reply *r = q->head, *next; r; r = next) {
        next = r->next;
        grpc_byte_buffer_destroy(r->bb);
        free(r);
    }
    memset(q, 0, sizeof *q);
}

/* Decides how the stream ends (the first decision wins); lock held. */
static void end_with(duplex_call *d, grpc_status_code status, cr_duplex_end how, const char *why)
{
    if (d->ending)
        return;
    d->ending = 1;
    d->status = status;
    d->how = how;
    snprintf(d->why, sizeof d->why, "%s", why);
}

/* Starts a batch, the initial metadata first if it has not gone; lock
 * held. A batch that cannot start counts as a broken call. */
static void start(duplex_call *d, grpc_op *ops, size_t n, cr_tag *tag)
{
    grpc_op all[4];
    size_t k = 0;
    memset(all, 0, sizeof all);
    if (!d->metadata_sent)
        all[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
    memcpy(all + k, ops, n * sizeof *ops);
    if (cr_start_batch(d->base.call, all, k + n, tag) != GRPC_CALL_OK) {
        end_with(d, GRPC_STATUS_INTERNAL, CR_DUPLEX_BROKEN, "cannot start a batch");
        d->how = CR_DUPLEX_BROKEN;
        d->broke = 1;
        grpc_call_cancel(d->base.call, NULL);
        if (tag == &d->ended)
            d->ended_ok = 0;
        return;
    }
    d->metadata_sent = 1;
    d->batches++;
    if (tag == &d->got)
        d->reading = 1;
    else if (tag == &d->sent)
        d->sending = 1;
}

static void start_final(duplex_call *d)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    d->finishing = 1;
    d->details = grpc_slice_from_copied_string(d->status == GRPC_STATUS_OK ? "" : d->why);
    ops[0].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[0].data.send_status_from_server.status = d->status;
    ops[0].data.send_status_from_server.status_details = &d->details;
    ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[1].data.recv_close_on_server.cancelled = &d->cancelled;
    start(d, ops, 2, &d->ended);
}

/* Starts whatever may start now: the next send, the next read, or the
 * final batch. Returns 1 when the caller must release the call (nothing
 * pending once finishing: only when a batch could not start). Lock held. */
static int advance(duplex_call *d)
{
    if (!d->finishing && !d->sending && d->queue.head && !d->broke) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        d->send = d->queue.head->bb;
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = d->send;
        start(d, &op, 1, &d->sent);
    }
    int under = d->queue.n < d->max_queued && d->queue.bytes < d->max_queued_bytes;
    if (!d->finishing && !d->ending && !d->reading && !d->stepping && !d->recv && under) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &d->recv;
        start(d, &op, 1, &d->got);
    }
    /* The replies made go before the status (at shutdown too); a broken
     * call sends nothing more. A read still pending completes once the
     * status is out. */
    int drained = !d->sending && (!d->queue.head || d->broke);
    if (!d->finishing && d->ending && !d->stepping && drained)
        start_final(d);
    return d->finishing && d->batches == 0;
}

static void release(duplex_call *d)
{
    cr_sweep_remove(cr_rpc_stream_sweep(d->base.rpc), &d->idle);
    if (d->session)
        d->ops->close(d->session, d->how, cr_rpc_clock());
    queue_clear(&d->queue);
    if (d->recv)
        grpc_byte_buffer_destroy(d->recv);
    cr_call_observe(&d->base, cr_call_final_status(d->ended_ok, d->cancelled, d->status));
    grpc_slice_unref(d->details);
    pthread_mutex_destroy(&d->lock);
    cr_call_release(&d->base);
}

static void run_step(void *arg);
static void run_wake(void *arg);

/* Lock held, no step running: the step due next marked running, the
 * message read first (it waited for a wake's step; one whose read is
 * still counted as pending is duplex_got's to take, though gRPC may have
 * filled recv already), then a wake; 0 none, 1 the message, 2 a wake. */
static int claim_step(duplex_call *d)
{
    if (d->stepping || d->ending || d->broke)
        return 0;
    int message = d->recv && !d->reading;
    if (message || d->woken) {
        d->stepping = 1;
        if (!message)
            d->woken = 0;
        return message ? 1 : 2;
    }
    return 0;
}

/* Runs a claimed step on the pool, or here when the pool refuses it. */
static void launch(duplex_call *d, int which)
{
    void (*fn)(void *) = which == 1 ? run_step : run_wake;
    if (cr_pool_submit(cr_rpc_pool(d->base.rpc), fn, d) != 0)
        fn(d);
}

/* A completion or a step is done with the state: claim the step due next,
 * advance, and release when it was the last (a claimed step keeps the
 * call), else launch the step claimed; the lock is held on entry and
 * released here. */
static void settle(duplex_call *d)
{
    int which = claim_step(d);
    int done = advance(d);
    pthread_mutex_unlock(&d->lock);
    if (done)
        release(d);
    else if (which)
        launch(d, which);
}

/* On the worker, first thing in a read's or a send's completion (whose
 * batch, still counted, keeps the call): the stream was active, so its
 * idle clock starts again. After shutdown closed the sweeper it decides
 * the stream's end UNAVAILABLE instead (the completion then advances). */
static void touch(duplex_call *d)
{
    cr_sweep *s = cr_rpc_stream_sweep(d->base.rpc);
    pthread_mutex_lock(&d->lock);
    int over = d->finishing;
    pthread_mutex_unlock(&d->lock);
    if (over)
        return;
    cr_sweep_remove(s, &d->idle);
    if (cr_sweep_add(s, &d->idle, d->base.call) == 0)
        return;
    pthread_mutex_lock(&d->lock);
    end_with(d, GRPC_STATUS_UNAVAILABLE, CR_DUPLEX_BROKEN, "server shutting down");
    d->how = CR_DUPLEX_BROKEN;
    pthread_mutex_unlock(&d->lock);
}

/* Runs the step on msg (NULL: a wake); on the worker, or on the pool. */
static void step_on(duplex_call *d, grpc_byte_buffer *msg)
{
    cr_duplex_out out = {0};
    cr_reply refused;
    grpc_slice req = grpc_empty_slice();
    char why[sizeof d->why - 32] = "";
    cr_duplex_next next;
    int read = msg ? cr_rpc_read_request(d->base.rpc, msg, &req, &refused) : 0;
    if (read < 0) {
        next = CR_DUPLEX_FAILED;
    } else {
        next = d->ops->step(d->session, msg ? GRPC_SLICE_START_PTR(req) : NULL,
                            msg ? GRPC_SLICE_LENGTH(req) : 0, cr_rpc_clock(), &out, why,
                            sizeof why);
        if (msg)
            cr_rpc_request_done(d->base.rpc, req, read);
    }
    if (msg)
        grpc_byte_buffer_destroy(msg);
    pthread_mutex_lock(&d->lock);
    long index = msg ? d->index++ : d->index;
    d->stepping = 0;
    if (d->broke)
        queue_clear(&out); /* nothing more goes out */
    queue_splice(&d->queue, &out);
    if (read < 0) {
        char text[sizeof d->why];
        snprintf(text, sizeof text, "message %ld: %s", index, refused.message);
        end_with(d, refused.status, CR_DUPLEX_CLOSED, text);
    } else if (next == CR_DUPLEX_FAILED) {
        char text[sizeof d->why];
        snprintf(text, sizeof text, "%s %ld: %s", msg ? "message" : "answer after message",
                 index - !msg, why);
        end_with(d, GRPC_STATUS_INVALID_ARGUMENT, CR_DUPLEX_CLOSED, text);
    } else if (next == CR_DUPLEX_FINISHED) {
        end_with(d, GRPC_STATUS_OK, CR_DUPLEX_CLOSED, "");
    }
    settle(d);
}

static void run_step(void *arg)
{
    duplex_call *d = arg;
    pthread_mutex_lock(&d->lock); /* no read is pending while the message waits */
    grpc_byte_buffer *msg = d->recv;
    d->recv = NULL;
    pthread_mutex_unlock(&d->lock);
    step_on(d, msg);
}

static void run_wake(void *arg) { step_on(arg, NULL); }

void cr_duplex_wake(cr_duplex_call *d)
{
    pthread_mutex_lock(&d->lock);
    if (d->finishing || d->ending || d->broke) {
        pthread_mutex_unlock(&d->lock);
        return;
    }
    d->woken = 1;
    int which = claim_step(d); /* 0 while a step runs: it claims the wake as it ends */
    pthread_mutex_unlock(&d->lock);
    void (*fn)(void *) = which == 1 ? run_step : run_wake;
    if (which && cr_pool_submit(cr_rpc_pool(d->base.rpc), fn, d) != 0) {
        /* the pool is draining (shutdown) or out of memory: the stream
         * ends, by the cancel's completions (never here: the caller holds
         * the session's lock, which close takes) */
        pthread_mutex_lock(&d->lock);
        d->stepping = 0;
        end_with(d, GRPC_STATUS_UNAVAILABLE, CR_DUPLEX_BROKEN, "no thread for a later answer");
        d->how = CR_DUPLEX_BROKEN;
        d->broke = 1;
        grpc_call_cancel(d->base.call, NULL);
        pthread_mutex_unlock(&d->lock);
    }
}

static void duplex_got(cr_tag *tag, int ok)
{
    duplex_call *d = CR_CONTAINER_OF(tag, duplex_call, got);
    if (ok)
        touch(d);
    pthread_mutex_lock(&d->lock);
    d->batches--;
    d->reading = 0;
    if (!ok || !d->recv || d->finishing || d->ending) {
        if (d->recv) { /* a message after the end was decided: not stepped */
            grpc_byte_buffer_destroy(d->recv);
            d->recv = NULL;
        }
        if (ok) { /* the client half-closed */
            end_with(d, GRPC_STATUS_OK, CR_DUPLEX_CLOSED, "");
        } else {
            end_with(d, GRPC_STATUS_CANCELLED, CR_DUPLEX_BROKEN, "the call broke");
            d->how = CR_DUPLEX_BROKEN; /* even when a step had decided otherwise */
            d->broke = 1;
        }
        settle(d);
        return;
    }
    if (d->stepping) { /* a wake's step runs: the message is stepped after it */
        pthread_mutex_unlock(&d->lock);
        return;
    }
    d->stepping = 1;
    int pool = (d->ops->may_block && d->ops->may_block(d->ops->ctx)) ||
               grpc_byte_buffer_length(d->recv) >= CR_INLINE_MAX_BYTES;
    pthread_mutex_unlock(&d->lock);
    if (pool && cr_pool_submit(cr_rpc_pool(d->base.rpc), run_step, d) == 0)
        return;
    run_step(d);
}

static void duplex_sent(cr_tag *tag, int ok)
{
    duplex_call *d = CR_CONTAINER_OF(tag, duplex_call, sent);
    if (ok)
        touch(d);
    pthread_mutex_lock(&d->lock);
    d->batches--;
    d->sending = 0;
    reply *r = d->queue.head; /* the one that was in flight */
    d->queue.head = r->next;
    if (!d->queue.head)
        d->queue.tail = NULL;
    d->queue.n--;
    d->queue.bytes -= r->len;
    grpc_byte_buffer_destroy(r->bb);
    free(r);
    d->send = NULL;
    if (!ok) {
        end_with(d, GRPC_STATUS_CANCELLED, CR_DUPLEX_BROKEN, "the call broke");
        d->how = CR_DUPLEX_BROKEN;
        d->broke = 1;
    }
    settle(d);
}

static void duplex_ended(cr_tag *tag, int ok)
{
    duplex_call *d = CR_CONTAINER_OF(tag, duplex_call, ended);
    pthread_mutex_lock(&d->lock);
    d->batches--;
    d->ended_ok = ok;
    if (d->cancelled)
        d->how = CR_DUPLEX_BROKEN;
    settle(d);
}

/* cr_sweep_close (shutdown), the sweep's lock held: stop reading, send the
 * replies already made, then UNAVAILABLE. It never releases the call:
 * something is always pending or running on a listed stream (a read, a
 * send, a step, a completion, the arrival), and that settles it later. */
static void duplex_closed(cr_sweep_entry *e, grpc_status_code status, const char *why)
{
    duplex_call *d = CR_CONTAINER_OF(e, duplex_call, idle);
    pthread_mutex_lock(&d->lock);
    end_with(d, status, CR_DUPLEX_BROKEN, why);
    d->how = CR_DUPLEX_BROKEN;
    (void)advance(d);
    pthread_mutex_unlock(&d->lock);
}

static void duplex_arrived(cr_call *c)
{
    duplex_call *d = (duplex_call *)c;
    d->ops = c->method->spec.ctx;
    pthread_mutex_init(&d->lock, NULL);
    d->got.fn = duplex_got;
    d->sent.fn = duplex_sent;
    d->ended.fn = duplex_ended;
    d->idle.on_close = duplex_closed;
    d->details = grpc_empty_slice();
    d->max_queued = d->ops->max_queued ? d->ops->max_queued : CR_DUPLEX_MAX_QUEUED;
    d->max_queued_bytes =
        d->ops->max_queued_bytes ? d->ops->max_queued_bytes : CR_DUPLEX_MAX_QUEUED_BYTES;
    cr_call_log_started(c);
    int closed = cr_sweep_add(cr_rpc_stream_sweep(c->rpc), &d->idle, c->call) != 0;
    cr_reply who;
    memset(&who, 0, sizeof who);
    pthread_mutex_lock(&d->lock); /* the sweeper's close may have ended it meanwhile */
    if (closed) {
        end_with(d, GRPC_STATUS_UNAVAILABLE, CR_DUPLEX_BROKEN, "server shutting down");
        d->how = CR_DUPLEX_BROKEN;
    } else if (d->ending) {
        /* nothing opened */
    } else if (!cr_call_allowed(c, &who)) {
        end_with(d, who.status, CR_DUPLEX_CLOSED, who.message);
    } else if (!(d->session = d->ops->open(d->ops->ctx, who.caller, cr_rpc_clock(), d))) {
        end_with(d, GRPC_STATUS_RESOURCE_EXHAUSTED, CR_DUPLEX_CLOSED, "out of memory");
    }
    settle(d);
}

const cr_call_kind cr_duplex_kind = {sizeof(duplex_call), GRPC_SRM_PAYLOAD_NONE, duplex_arrived};
