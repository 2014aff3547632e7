#include "push.h"

#include <string.h>

void cr_push_start(cr_push_call *p, const grpc_op *ops, size_t n)
{
    p->sending = cr_start_batch(p->base.call, ops, n, &p->sent) == GRPC_CALL_OK;
}

int cr_push_busy(const cr_push_call *p) { return p->sending || p->is_closed; }

static void push_sent(cr_tag *tag, int ok)
{
    cr_push_call *p = CR_CONTAINER_OF(tag, cr_push_call, sent);
    pthread_mutex_t *lock = p->ops->lock(p);
    pthread_mutex_lock(lock);
    p->sending = 0;
    if (p->send) {
        grpc_byte_buffer_destroy(p->send);
        p->send = NULL;
    }
    if (ok && !p->is_closed)
        p->ops->next(p); /* what landed while this send was in flight */
    int done = !p->sending && p->is_closed;
    pthread_mutex_unlock(lock);
    if (done)
        p->ops->release(p);
}

static void push_closed(cr_tag *tag, int ok)
{
    (void)ok;
    cr_push_call *p = CR_CONTAINER_OF(tag, cr_push_call, closed);
    pthread_mutex_t *lock = p->ops->lock(p);
    pthread_mutex_lock(lock);
    p->is_closed = 1;
    p->ops->closed(p);
    int done = !p->sending;
    pthread_mutex_unlock(lock);
    if (done)
        p->ops->release(p);
}

int cr_push_open(cr_push_call *p, const cr_push_ops *ops)
{
    p->ops = ops;
    p->sent.fn = push_sent;
    p->closed.fn = push_closed;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &p->cancelled;
    return cr_start_batch(p->base.call, &op, 1, &p->closed) == GRPC_CALL_OK ? 0 : -1;
}
