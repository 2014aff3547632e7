/* Requests the door holds, on their streams (docs/epp.md, "Held at the
 * door"). A stream whose request may be held is listed by its request id
 * before the route, so that a dispatch that comes before the route has
 * returned still finds it. cr_epp_dispatch (a ticker, every
 * cfg.dispatch_s) takes what the door dispatches or drops, parks it on
 * its stream and wakes the stream, whose own step then answers it. A
 * stream that closes first is unlisted and its request taken out of the
 * door; one the door let go meanwhile finds no stream, and its route's
 * work is given back.
 *
 * One lock, hold_lock: listing, parking, waking and closing take it, so a
 * wake never reaches a stream that close has freed. It is taken before
 * the door's lock (cr_core_admit_cancel) and the host's stream lock
 * (wake), never after them. The list is as long as the door's queue
 * (--admit-max-queued) plus the routes in flight; a dispatch searches it. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int cr_epp_holds(cr_epp *e)
{
    cr_admit *door = cr_core_door(e->core);
    return door && cr_admit_config_of(door)->max_queued > 0;
}

double cr_epp_hold_timeout_s(cr_epp *e)
{
    cr_admit *door = cr_core_door(e->core);
    return (door ? cr_admit_config_of(door)->max_wait_ms / 1000 : 0) + 2 * e->cfg.dispatch_s + 1;
}

/* hold_lock held. */
static void unlist(cr_epp *e, cr_epp_hold *h)
{
    if (!h->listed)
        return;
    if (h->prev)
        h->prev->next = h->next;
    else
        e->held = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
    h->listed = 0;
}

void cr_epp_hold_list(cr_epp *e, cr_epp_hold *h)
{
    pthread_mutex_lock(&e->hold_lock);
    h->prev = NULL;
    h->next = e->held;
    if (e->held)
        e->held->prev = h;
    e->held = h;
    h->listed = 1;
    pthread_mutex_unlock(&e->hold_lock);
}

void cr_epp_hold_unlist(cr_epp *e, cr_epp_hold *h)
{
    pthread_mutex_lock(&e->hold_lock);
    unlist(e, h);
    pthread_mutex_unlock(&e->hold_lock);
}

int cr_epp_hold_take(cr_epp *e, cr_epp_hold *h, cr_core_dispatched *got)
{
    pthread_mutex_lock(&e->hold_lock);
    int parked = h->parked;
    if (parked)
        *got = h->got;
    h->parked = 0;
    pthread_mutex_unlock(&e->hold_lock);
    return parked;
}

/* The route of a request whose stream is gone given back: its outstanding
 * work released. */
static void give_back(cr_epp *e, const cr_core_dispatched *d)
{
    cr_outcome o = {.request_id = d->request_id, .has = CR_OUT_ERROR,
                    .error = "stream closed while held at the door"};
    cr_epp_report(e, d->caller, &o);
}

void cr_epp_hold_close(cr_epp *e, cr_epp_hold *h, uint64_t caller)
{
    pthread_mutex_lock(&e->hold_lock);
    int listed = h->listed;
    unlist(e, h);
    if (listed && h->handle) /* 0 when the door let it go: the dispatch finds no stream */
        cr_core_admit_cancel(e->core, h->handle, h->request_id);
    cr_core_dispatched got = h->got;
    int routed = h->parked && !got.dropped;
    h->parked = 0;
    pthread_mutex_unlock(&e->hold_lock);
    if (routed) { /* dispatched, and the stream left before its answer went */
        got.caller = caller;
        give_back(e, &got);
    }
}

/* hold_lock held: the listed stream of request id, or NULL. */
static cr_epp_hold *find(cr_epp *e, const char *id)
{
    for (cr_epp_hold *h = e->held; h; h = h->next)
        if (!strcmp(h->request_id, id))
            return h;
    return NULL;
}

size_t cr_epp_dispatch(cr_epp *e)
{
    enum { BATCH = 16 };
    cr_core_dispatched d[BATCH];
    size_t total = 0, n;
    do {
        n = cr_core_admit_dispatch(e->core, d, BATCH);
        for (size_t i = 0; i < n; i++) {
            pthread_mutex_lock(&e->hold_lock);
            cr_epp_hold *h = find(e, d[i].request_id);
            if (h) {
                h->got = d[i];
                h->parked = 1;
                unlist(e, h);
                h->wake(h->wake_arg);
            }
            pthread_mutex_unlock(&e->hold_lock);
            if (!h && !d[i].dropped)
                give_back(e, &d[i]);
        }
        total += n;
    } while (n == BATCH);
    return total;
}

/* The ticker's: a dispatch whenever a stream is held. */
static void tick(void *ctx, cr_ticker *t)
{
    (void)t;
    cr_epp *e = ctx;
    pthread_mutex_lock(&e->hold_lock);
    int any = e->held != NULL;
    pthread_mutex_unlock(&e->hold_lock);
    if (any)
        cr_epp_dispatch(e);
}

cr_status cr_epp_hold_start(cr_epp *e, cr_error *err)
{
    if (pthread_mutex_init(&e->hold_lock, NULL) != 0)
        return cr_fail(err, CR_ENOMEM, "out of memory");
    e->hold_lock_made = 1;
    if (!cr_epp_holds(e) || !(e->cfg.dispatch_s > 0))
        return CR_OK;
    e->dispatcher = cr_ticker_start(e->cfg.dispatch_s, tick, e, err);
    return e->dispatcher ? CR_OK : CR_ENOMEM;
}

void cr_epp_hold_stop(cr_epp *e)
{
    if (e->dispatcher)
        cr_ticker_stop(e->dispatcher);
    e->dispatcher = NULL;
    if (e->hold_lock_made)
        pthread_mutex_destroy(&e->hold_lock);
    e->hold_lock_made = 0;
}
