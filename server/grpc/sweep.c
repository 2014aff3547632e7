/* The list is in due order because every entry gets the same timeout: a
 * new one goes at the tail, so the sweeper only ever looks at the head. For
 * the same reason adding never wakes the sweeper (a wake per call costs the
 * hot path a context switch): with the list empty at t it sleeps until
 * t + timeout, and nothing added after t can be due before that. */
#include "sweep.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "rpc.h"

struct cr_sweep {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    cr_sweep_entry *head, *tail;
    double timeout_s;
    const char *why;
    long cancelled;
    int stopping;
    int closed; /* cr_sweep_close: cancel with closed_status, list nothing */
    grpc_status_code closed_status;
    const char *closed_why;
};

static void unlink_entry(cr_sweep *s, cr_sweep_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
    e->prev = e->next = NULL;
    e->listed = 0;
}

static struct timespec abs_time(double mono_s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)mono_s;
    ts.tv_nsec = (long)((mono_s - (double)ts.tv_sec) * 1e9);
    return ts;
}

/* Cancels (lock held) every entry past due; the cancel only flags the call
 * inside gRPC core, so holding the lock over it is short and lets
 * cr_sweep_remove promise that nothing touches e afterwards. */
static void cancel_due(cr_sweep *s, double now)
{
    while (s->head && s->head->due <= now) {
        cr_sweep_entry *e = s->head;
        unlink_entry(s, e);
        grpc_call_cancel_with_status(e->call, GRPC_STATUS_DEADLINE_EXCEEDED, s->why, NULL);
        s->cancelled++;
    }
}

static void *sweep_main(void *arg)
{
    cr_sweep *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        cancel_due(s, cr_rpc_clock());
        struct timespec due =
            abs_time(s->head ? s->head->due : cr_rpc_clock() + s->timeout_s);
        pthread_cond_timedwait(&s->wake, &s->lock, &due);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

cr_sweep *cr_sweep_new(double timeout_s, const char *why)
{
    cr_sweep *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* cr_rpc_clock's */
    pthread_cond_init(&s->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&s->lock, NULL);
    s->timeout_s = timeout_s;
    s->why = why;
    if (pthread_create(&s->thread, NULL, sweep_main, s) != 0) {
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

int cr_sweep_add(cr_sweep *s, cr_sweep_entry *e, grpc_call *call)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    e->call = call;
    if (s->closed) {
        e->listed = 0;
        if (!e->on_close)
            grpc_call_cancel_with_status(call, s->closed_status, s->closed_why, NULL);
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    e->due = cr_rpc_clock() + s->timeout_s;
    e->next = NULL;
    e->prev = s->tail;
    if (s->tail)
        s->tail->next = e;
    else
        s->head = e;
    s->tail = e;
    e->listed = 1;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

void cr_sweep_remove(cr_sweep *s, cr_sweep_entry *e)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    if (e->listed)
        unlink_entry(s, e);
    pthread_mutex_unlock(&s->lock);
}

void cr_sweep_close(cr_sweep *s, grpc_status_code status, const char *why)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->closed = 1;
    s->closed_status = status;
    s->closed_why = why;
    while (s->head) {
        cr_sweep_entry *e = s->head;
        unlink_entry(s, e);
        if (e->on_close)
            e->on_close(e, status, why);
        else
            grpc_call_cancel_with_status(e->call, status, why, NULL);
    }
    pthread_mutex_unlock(&s->lock);
}

long cr_sweep_cancelled(cr_sweep *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    long n = s->cancelled;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void cr_sweep_free(cr_sweep *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
