/* The life of a server-streaming call that pushes messages (health Watch,
 * WatchDecisions): RECV_CLOSE_ON_SERVER starts on arrival, at most one send
 * batch is in flight, and the call is released once its last send completed
 * and it closed. A kind keeps its own lock, list of calls and what to send
 * next; cr_push_* is the bookkeeping every such kind shares. */
#ifndef CR_PUSH_H
#define CR_PUSH_H

#include <pthread.h>

#include "rpc.h"

typedef struct cr_push_call cr_push_call;

typedef struct cr_push_ops {
    /* The lock guarding the call's state (the kind's own). */
    pthread_mutex_t *(*lock)(cr_push_call *p);
    /* Lock held, after a send completed: start the next one, if any. */
    void (*next)(cr_push_call *p);
    /* Lock held: the call closed (the client left, or the status went). */
    void (*closed)(cr_push_call *p);
    /* No lock: nothing is in flight any more; observe and free the call. */
    void (*release)(cr_push_call *p);
} cr_push_ops;

/* A kind's call struct starts with this (which starts with cr_call). */
struct cr_push_call {
    cr_call base;
    const cr_push_ops *ops;
    cr_tag sent, closed;
    grpc_byte_buffer *send; /* sent by the batch in flight; destroyed after it */
    int sending;            /* a batch is in flight on sent */
    int is_closed;          /* RECV_CLOSE_ON_SERVER completed */
    int cancelled;
};

/* On arrival: starts RECV_CLOSE_ON_SERVER. Returns 0, or -1 when the call
 * cannot start (the caller releases it then). */
int cr_push_open(cr_push_call *p, const cr_push_ops *ops);

/* Lock held, nothing in flight: starts ops (which may send p->send) as the
 * one batch in flight. */
void cr_push_start(cr_push_call *p, const grpc_op *ops, size_t n);

/* Lock held: whether nothing may be started now (a batch is in flight, or
 * the call closed). */
int cr_push_busy(const cr_push_call *p);

#endif
