/* Request and reply deadlines, and idle streams: gRPC core holds a half-received request, or
 * an answer until the client reads it, for as long as the client likes, and
 * has no server-side alarm for that. Calls waiting on their client are
 * listed here with a due time; one thread cancels those still listed when
 * it passes, which fails their batch and frees what they hold.
 * Thread-safe. */
#ifndef CR_SWEEP_H
#define CR_SWEEP_H

#include <grpc/grpc.h>

typedef struct cr_sweep cr_sweep;

/* One listed call; embedded in the call's struct, owned by the caller. */
typedef struct cr_sweep_entry {
    struct cr_sweep_entry *prev, *next;
    grpc_call *call;
    double due; /* monotonic seconds */
    int listed;
    /* Optional: how cr_sweep_close ends this call instead of cancelling it
     * (a stream sends its status, so the client is sure to read it). Runs
     * on the closing thread with the sweep's lock held: it may only start
     * batches and set what the call's next completion reads. */
    void (*on_close)(struct cr_sweep_entry *e, grpc_status_code status, const char *why);
} cr_sweep_entry;

/* Starts the thread; calls are cancelled timeout_s (> 0) after they are
 * added, with DEADLINE_EXCEEDED and why (static text) as the message. NULL
 * when out of memory or the thread cannot start. */
cr_sweep *cr_sweep_new(double timeout_s, const char *why);

/* Lists e for call (which must stay referenced until cr_sweep_remove) and
 * returns 0; s NULL does nothing (deadlines off). After cr_sweep_close it
 * lists nothing and returns -1: the caller ends the call (an entry without
 * on_close is cancelled here first). */
int cr_sweep_add(cr_sweep *s, cr_sweep_entry *e, grpc_call *call);

/* Unlists e (if the sweeper has not already). After it returns the sweeper
 * no longer touches e or its call. s NULL does nothing. */
void cr_sweep_remove(cr_sweep *s, cr_sweep_entry *e);

/* Ends every listed call now with status and why (static text): its
 * on_close, else a cancel; from then on cr_sweep_add lists nothing (see
 * there). For shutdown; not counted as cancelled. */
void cr_sweep_close(cr_sweep *s, grpc_status_code status, const char *why);

/* Calls cancelled so far (past their timeout). */
long cr_sweep_cancelled(cr_sweep *s);

/* Stops and joins the thread; every entry must be removed already. NULL is
 * ignored. */
void cr_sweep_free(cr_sweep *s);

#endif
