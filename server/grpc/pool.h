/* A fixed pool of threads running submitted jobs in order. */
#ifndef CR_POOL_H
#define CR_POOL_H

typedef struct cr_pool cr_pool;

/* Returns NULL when threads cannot start. */
cr_pool *cr_pool_new(int threads);
/* Queues fn(arg); returns 0, or -1 after cr_pool_drain or out of memory. */
int cr_pool_submit(cr_pool *p, void (*fn)(void *), void *arg);
/* Runs every queued job to completion, then stops and joins the threads. */
void cr_pool_drain(cr_pool *p);
/* cr_pool_drain for at most seconds: 0 when every thread ended and was
 * joined; -1 when a job still runs at the deadline (the threads are left
 * running: call cr_pool_free only once they end, or end the process). */
int cr_pool_drain_for(cr_pool *p, double seconds);
void cr_pool_free(cr_pool *p);

#endif
