/* A GPU's reservations not yet confirmed by an outcome, oldest first. A
 * reservation is expected to be done at its predicted end (its queue ahead
 * plus its own time); one no outcome confirms by then plus a margin was
 * never served (or never reported) and stops holding the timeline. Ends
 * ascend in the ring (each starts when the one before ends), and an expiry
 * moves every later end earlier by the same amount, so only the head is
 * ever looked at: O(1) amortised per reservation. */
#include <stdlib.h>

#include "internal.h"

void cr_pending_free(cr_pending *p)
{
    free(p->ring);
    *p = (cr_pending){0};
}

/* The item seq names, or NULL when it left the ring. */
static cr_pending_item *find(cr_pending *p, uint64_t seq)
{
    if (!p->ring || seq < p->head_seq || seq >= p->head_seq + p->n)
        return NULL;
    return &p->ring[(p->head + (seq - p->head_seq)) % CR_PENDING_CAP];
}

/* Pops the head; an unconfirmed one gives its time back to the timeline
 * unless kept (it only stops being tracked). */
static double pop(cr_pending *p, int keep)
{
    cr_pending_item *it = &p->ring[p->head];
    double back = it->confirmed || keep ? 0 : it->ms;
    p->shifted_ms += back;
    p->head = (p->head + 1) % CR_PENDING_CAP;
    p->head_seq++;
    p->n--;
    if (back > 0)
        p->expired++;
    return back;
}

double cr_pending_expire(cr_pending *p, double now_ms, double margin_ms)
{
    double back = 0;
    while (p->n) {
        const cr_pending_item *it = &p->ring[p->head];
        double end = it->end_ms - (p->shifted_ms - it->shifted_at);
        if (!it->confirmed && end + margin_ms >= now_ms)
            break;
        back += pop(p, 0);
    }
    return back;
}

uint64_t cr_pending_add(cr_pending *p, double end_ms, double ms, double *back)
{
    *back = 0;
    if (!p->ring && !(p->ring = calloc(CR_PENDING_CAP, sizeof *p->ring)))
        return 0; /* not tracked: it holds the timeline until it passes */
    if (p->n == CR_PENDING_CAP)
        *back = pop(p, 1); /* the oldest stops being tracked, its time kept */
    uint64_t seq = p->head_seq + p->n;
    p->ring[(p->head + p->n) % CR_PENDING_CAP] =
        (cr_pending_item){.end_ms = end_ms, .ms = ms, .shifted_at = p->shifted_ms};
    p->n++;
    return seq + 1; /* 0 means none */
}

void cr_pending_confirm(cr_pending *p, uint64_t id)
{
    cr_pending_item *it = id ? find(p, id - 1) : NULL;
    if (it)
        it->confirmed = 1;
}
