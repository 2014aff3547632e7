/* The stoppable periodic thread.
 *
 * One mutex guards the stop flag and the test counters; the thread sleeps on
 * a condition variable on CLOCK_MONOTONIC (wall-clock jumps don't matter),
 * which cr_ticker_stop broadcasts, so a stop cuts an interval or a sleep
 * inside fn short. The mutex is never held while fn runs.
 *
 * Errors: cr_ticker_start reports every failure through its cr_error. Later
 * pthread calls on objects it initialised cannot fail in a correct program
 * (only a bad object, a bad timespec or a lock not held makes them fail), so
 * a failure there is a bug: it is reported on stderr and aborts, rather than
 * leave a ticker that spins or never stops. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ticker_test.h"

/* Later deadlines are waited for as this one: a timespec holds it whatever
 * the width of time_t, and it is millions of years (or, with a 32-bit
 * time_t, decades) after boot, which is where CLOCK_MONOTONIC starts. */
#define MAX_DEADLINE_S (sizeof(time_t) >= 8 ? 1e15 : 2e9)

struct cr_ticker {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* broadcast by stop; the thread sleeps on it */
    pthread_cond_t progress; /* broadcast when a wait begins (test hooks) */
    int stopping;
    uint64_t waits[2]; /* by cr_ticker_wait_kind */
    double interval_s;
    double first_s; /* deadline of the first call */
    cr_tick_fn fn;
    void *ctx;
    pthread_t thread;
};

/* A pthread call that cannot fail unless the program is broken. */
static void must(int rc, const char *what)
{
    if (rc == 0)
        return;
    cr_error e;
    cr_fail(&e, CR_EINVAL, "cr_ticker: %s failed: %s (%d)", what, strerror(rc), rc);
    fprintf(stderr, "%s\n", e.msg);
    abort();
}

static struct timespec deadline_of(double deadline_s)
{
    if (deadline_s > MAX_DEADLINE_S)
        deadline_s = MAX_DEADLINE_S;
    return cr_timespec_of(deadline_s); /* NaN and the past: 0, already passed */
}

static void plain_sleep_until(double deadline_s)
{
    struct timespec ts = deadline_of(deadline_s);
    int rc;
    while ((rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) == EINTR)
        ;
    must(rc, "clock_nanosleep");
}

/* The one wait: counts itself as kind, then sleeps until the deadline or a
 * stop. Returns 1 when stopping. */
static int sleep_until(cr_ticker *t, double deadline_s, cr_ticker_wait_kind kind)
{
    struct timespec ts = deadline_of(deadline_s);
    must(pthread_mutex_lock(&t->lock), "pthread_mutex_lock");
    if (!t->stopping) {
        t->waits[kind]++;
        must(pthread_cond_broadcast(&t->progress), "pthread_cond_broadcast");
    }
    while (!t->stopping) {
        /* 0 is a wake-up (maybe spurious): look again, the deadline is
         * absolute. ETIMEDOUT: the deadline passed. */
        int rc = pthread_cond_timedwait(&t->wake, &t->lock, &ts);
        if (rc == ETIMEDOUT)
            break;
        must(rc, "pthread_cond_timedwait");
    }
    int stop = t->stopping;
    must(pthread_mutex_unlock(&t->lock), "pthread_mutex_unlock");
    return stop;
}

int cr_ticker_sleep_until(cr_ticker *t, double deadline_s)
{
    if (!t) {
        plain_sleep_until(deadline_s);
        return 0;
    }
    return sleep_until(t, deadline_s, CR_TICKER_IN_CALL);
}

int cr_ticker_wait(void *ticker, double deadline_s)
{
    return cr_ticker_sleep_until(ticker, deadline_s);
}

static void *run(void *arg)
{
    cr_ticker *t = arg;
    double next = t->first_s;
    while (!sleep_until(t, next, CR_TICKER_BETWEEN_CALLS)) {
        t->fn(t->ctx, t);
        next = cr_mono_s() + t->interval_s; /* from the end of the call */
    }
    return NULL;
}

/* A condition variable on CLOCK_MONOTONIC. */
static cr_status mono_cond_init(pthread_cond_t *c, cr_error *err)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc)
        return cr_fail(err, CR_ENOMEM, "cr_ticker: pthread_condattr_init failed: %s",
                       strerror(rc));
    const char *what = "pthread_condattr_setclock";
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!rc) {
        what = "pthread_cond_init";
        rc = pthread_cond_init(c, &attr);
    }
    must(pthread_condattr_destroy(&attr), "pthread_condattr_destroy");
    if (rc)
        return cr_fail(err, rc == ENOMEM || rc == EAGAIN ? CR_ENOMEM : CR_EINVAL,
                       "cr_ticker: %s failed: %s", what, strerror(rc));
    return CR_OK;
}

cr_ticker *cr_ticker_start(double interval_s, cr_tick_fn fn, void *ctx, cr_error *err)
{
    cr_error scratch;
    if (!err)
        err = &scratch;
    if (!(isfinite(interval_s) && interval_s > 0)) {
        cr_fail(err, CR_EINVAL, "interval_s must be finite and > 0, got %g", interval_s);
        return NULL;
    }
    if (!fn) {
        cr_fail(err, CR_EINVAL, "cr_ticker: fn must not be NULL");
        return NULL;
    }
    cr_ticker *t = calloc(1, sizeof *t);
    if (!t) {
        cr_fail(err, CR_ENOMEM, "cr_ticker: out of memory");
        return NULL;
    }
    t->interval_s = interval_s;
    t->fn = fn;
    t->ctx = ctx;
    int rc = pthread_mutex_init(&t->lock, NULL);
    if (rc) {
        cr_fail(err, CR_ENOMEM, "cr_ticker: pthread_mutex_init failed: %s", strerror(rc));
        free(t);
        return NULL;
    }
    if (mono_cond_init(&t->wake, err) != CR_OK)
        goto no_wake;
    if (mono_cond_init(&t->progress, err) != CR_OK)
        goto no_progress;
    t->first_s = cr_mono_s() + interval_s;
    rc = pthread_create(&t->thread, NULL, run, t);
    if (rc) {
        cr_fail(err, CR_ENOMEM, "cr_ticker: pthread_create failed: %s", strerror(rc));
        goto no_thread;
    }
    return t;

no_thread:
    must(pthread_cond_destroy(&t->progress), "pthread_cond_destroy");
no_progress:
    must(pthread_cond_destroy(&t->wake), "pthread_cond_destroy");
no_wake:
    must(pthread_mutex_destroy(&t->lock), "pthread_mutex_destroy");
    free(t);
    return NULL;
}

void cr_ticker_stop(cr_ticker *t)
{
    if (!t)
        return;
    must(pthread_mutex_lock(&t->lock), "pthread_mutex_lock");
    t->stopping = 1;
    must(pthread_cond_broadcast(&t->wake), "pthread_cond_broadcast");
    must(pthread_cond_broadcast(&t->progress), "pthread_cond_broadcast");
    must(pthread_mutex_unlock(&t->lock), "pthread_mutex_unlock");
    /* EDEADLK here means a call from fn, which the contract forbids. */
    must(pthread_join(t->thread, NULL), "pthread_join");
    must(pthread_cond_destroy(&t->progress), "pthread_cond_destroy");
    must(pthread_cond_destroy(&t->wake), "pthread_cond_destroy");
    must(pthread_mutex_destroy(&t->lock), "pthread_mutex_destroy");
    free(t);
}

/* ---- test hooks (ticker_test.h) ---- */

uint64_t cr_ticker_test_waits(cr_ticker *t, cr_ticker_wait_kind kind)
{
    if (kind != CR_TICKER_BETWEEN_CALLS && kind != CR_TICKER_IN_CALL)
        return 0;
    must(pthread_mutex_lock(&t->lock), "pthread_mutex_lock");
    uint64_t n = t->waits[kind];
    must(pthread_mutex_unlock(&t->lock), "pthread_mutex_unlock");
    return n;
}

int cr_ticker_test_await(cr_ticker *t, cr_ticker_wait_kind kind, uint64_t n, double timeout_s)
{
    if (kind != CR_TICKER_BETWEEN_CALLS && kind != CR_TICKER_IN_CALL)
        return -1;
    struct timespec ts = deadline_of(cr_mono_s() + timeout_s);
    must(pthread_mutex_lock(&t->lock), "pthread_mutex_lock");
    while (t->waits[kind] < n && !t->stopping) {
        int rc = pthread_cond_timedwait(&t->progress, &t->lock, &ts);
        if (rc == ETIMEDOUT)
            break;
        must(rc, "pthread_cond_timedwait");
    }
    int ok = t->waits[kind] >= n;
    must(pthread_mutex_unlock(&t->lock), "pthread_mutex_unlock");
    return ok ? 0 : -1;
}
