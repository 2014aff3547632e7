/* The "duplex" call kind: a full-duplex stream whose messages each give
 * zero or more replies, sent while the next messages are read (the data
 * plane of an ext_proc stream sends body chunks without waiting for
 * answers). The method's ctx points to a cr_duplex_ops, so that the
 * framework knows nothing of what the stream means.
 *
 * Bounds: one read outstanding and one step running at a time; at most one
 * send in flight; replies made and not yet sent at most max_queued of them
 * and max_queued_bytes (over either, the stream stops reading until they
 * drain, and HTTP/2 flow control then holds the client back; one step's
 * replies are always taken whole). A stream neither read from nor written
 * to for --stream-idle-timeout is ended DEADLINE_EXCEEDED; shutdown ends
 * open streams UNAVAILABLE (after the replies already made, within the
 * grace) as the bidi kind does. */
#ifndef CR_DUPLEX_H
#define CR_DUPLEX_H

#include <stddef.h>
#include <stdint.h>

#include "rpc.h"

#define CR_DUPLEX_MAX_QUEUED 64                 /* replies not yet sent, default bound */
#define CR_DUPLEX_MAX_QUEUED_BYTES (4u << 20)   /* their bytes, default bound */

/* The replies one step gives, in order (cr_duplex_put). */
typedef struct cr_duplex_out cr_duplex_out;

/* Appends a reply of len bytes at data, which it takes over (data must come
 * from malloc; it is sent without a copy and freed once gRPC is done with
 * it, or at once when this fails). 0, or -1 when out of memory (the step
 * should then fail the stream). */
int cr_duplex_put(cr_duplex_out *out, uint8_t *data, size_t len);

/* What a step asks of the framework. */
typedef enum cr_duplex_next {
    CR_DUPLEX_MORE,     /* send the replies, read on */
    CR_DUPLEX_FINISHED, /* send the replies, then end the stream OK */
    CR_DUPLEX_FAILED    /* send the replies, then end it INVALID_ARGUMENT */
} cr_duplex_next;

/* How a stream ended, for close. */
typedef enum cr_duplex_end {
    CR_DUPLEX_CLOSED, /* the client half-closed, or a step finished or failed it */
    CR_DUPLEX_BROKEN  /* cancelled, reset, deadline, idle timeout, or shutdown */
} cr_duplex_end;

/* One stream, as its session may name it to answer later (cr_duplex_wake). */
typedef struct cr_duplex_call cr_duplex_call;

/* What a duplex method does; its cr_method_spec.ctx points here. Every
 * function may run on any worker or pool thread; one session is driven by
 * one thread at a time. */
typedef struct cr_duplex_ops {
    /* A new session for a client whose identity has tag caller
     * (cr_reply.caller) at now (cr_rpc_clock), on the stream self; NULL
     * when out of memory (the stream ends RESOURCE_EXHAUSTED). */
    void *(*open)(void *ctx, uint64_t caller, double now, cr_duplex_call *self);
    /* One message's len bytes at now: its replies appended to out and, for
     * CR_DUPLEX_FAILED, why (at most why_len bytes, NUL-terminated). With
     * msg NULL (len 0) it is a wake (cr_duplex_wake): no message came,
     * the session answers what it has for it. */
    cr_duplex_next (*step)(void *session, const uint8_t *msg, size_t len, double now,
                           cr_duplex_out *out, char *why, size_t why_len);
    /* Called exactly once for every session opened, however the stream
     * ended, once nothing else runs on it; frees it. */
    void (*close)(void *session, cr_duplex_end how, double now);
    /* Optional: 1 when a step may block (on I/O, a bounded time): every
     * step then runs on the pool, off the I/O threads. Steps on messages
     * of CR_INLINE_MAX_BYTES and more always do. */
    int (*may_block)(void *ctx);
    void *ctx;
    size_t max_queued, max_queued_bytes; /* 0: CR_DUPLEX_MAX_QUEUED(_BYTES) */
} cr_duplex_ops;

/* Asks for a wake: a step with no message on self's session, on the
 * pool, after the step running now if there is one (wakes asked before
 * it runs are one; a message read meanwhile is stepped after it). So a
 * session that answered nothing to a message (CR_DUPLEX_MORE) answers
 * later from another thread, in the stream's own order. Nothing when the
 * stream's end is decided. Any thread, but never once close was called:
 * the session must make sure of that (a lock that close also takes, held
 * across this call; this takes only the stream's own lock). */
void cr_duplex_wake(cr_duplex_call *self);

extern const cr_call_kind cr_duplex_kind;

#endif
