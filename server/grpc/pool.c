#include "pool.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct job {
    void (*fn)(void *);
    void *arg;
    struct job *next;
} job;

struct cr_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t exited; /* a thread is about to return */
    job *head, *tail;
    int stopping;
    int n_threads;
    int alive; /* threads that have not returned yet */
    /* A drain timed out: threads returning from now on detach themselves,
     * as nobody will join them (an unjoined thread that ended is a leak to
     * ThreadSanitizer when the process ends). */
    int abandoned;
    pthread_t *threads;
    struct worker *workers;
    unsigned char *joined;   /* per thread */
    unsigned char *returned; /* per thread: about to return, not detached */
};

typedef struct worker {
    cr_pool *p;
    int i;
} worker;

static void *pool_main(void *arg)
{
    const worker *w = arg;
    cr_pool *p = w->p;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        job *j = p->head;
        if (!j)
            break; /* stopping and nothing left */
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&p->lock);
    }
    p->alive--;
    if (p->abandoned) {
        pthread_detach(pthread_self());
        p->joined[w->i] = 1;
    } else {
        p->returned[w->i] = 1;
    }
    pthread_cond_broadcast(&p->exited);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

cr_pool *cr_pool_new(int threads)
{
    cr_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = calloc((size_t)threads, sizeof *p->threads);
    p->workers = calloc((size_t)threads, sizeof *p->workers);
    p->joined = calloc((size_t)threads, 1);
    p->returned = calloc((size_t)threads, 1);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->exited, &attr);
    pthread_condattr_destroy(&attr);
    int ok = p->threads && p->workers && p->joined && p->returned;
    for (int i = 0; ok && i < threads; i++) {
        pthread_mutex_lock(&p->lock);
        p->alive++;
        pthread_mutex_unlock(&p->lock);
        p->workers[i] = (worker){p, i};
        if (pthread_create(&p->threads[i], NULL, pool_main, &p->workers[i]) != 0) {
            pthread_mutex_lock(&p->lock);
            p->alive--;
            pthread_mutex_unlock(&p->lock);
            break;
        }
        p->n_threads++;
    }
    if (p->n_threads != threads) {
        cr_pool_free(p);
        return NULL;
    }
    return p;
}

int cr_pool_submit(cr_pool *p, void (*fn)(void *), void *arg)
{
    job *j = malloc(sizeof *j);
    if (!j)
        return -1;
    *j = (job){fn, arg, NULL};
    pthread_mutex_lock(&p->lock);
    if (p->stopping) {
        pthread_mutex_unlock(&p->lock);
        free(j);
        return -1;
    }
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int cr_pool_drain_for(cr_pool *p, double seconds)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (!isinf(seconds)) {
        double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + (seconds > 0 ? seconds : 0);
        until.tv_sec = (time_t)end;
        until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    }
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    while (p->alive > 0) {
        if (isinf(seconds))
            pthread_cond_wait(&p->exited, &p->lock);
        else if (pthread_cond_timedwait(&p->exited, &p->lock, &until) != 0)
            break;
    }
    int ended = p->alive == 0;
    if (!ended)
        p->abandoned = 1; /* the rest detach themselves as they return */
    /* Threads that returned before are joined either way: none of them
     * detached, and each is at most finishing its return. Picked under the
     * lock (a thread returning later marks itself), joined outside it. */
    for (int i = 0; i < p->n_threads; i++) {
        if (p->joined[i] || !p->returned[i])
            continue;
        p->joined[i] = 1;
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->threads[i], NULL);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return ended ? 0 : -1;
}

void cr_pool_drain(cr_pool *p) { cr_pool_drain_for(p, INFINITY); }

void cr_pool_free(cr_pool *p)
{
    if (!p)
        return;
    cr_pool_drain(p);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->exited);
    free(p->threads);
    free(p->workers);
    free(p->joined);
    free(p->returned);
    free(p);
}
