/* Eviction: a CLOCK hand per partition. Each eviction looks at the next few
 * tracked slots after the hand, takes the one with the lowest rate and
 * moves the hand past them, so its cost is a short sequential run of slots,
 * whatever the table's size, and a full sweep visits every owner once.
 *
 * Rates are compared as time-invariant keys, with no exp2: in seconds mode
 * log2 rate(t) = log2 r + t_last/H - t/H, and the last term is the same for
 * every owner, so log2 r + t_last/H orders owners by their rate at any t.
 * log2 r is read off the double's bits (exponent plus mantissa as a
 * fraction: exact at powers of two, within 0.09 between, and increasing in
 * r, so owners with the same t_last are ordered exactly). */
#include <string.h>

#include "estimator_parts.h"

#define WINDOW 8     /* tracked slots compared per eviction */
#define MIN_SCAN 64  /* slots looked at before settling for fewer than WINDOW */

static double fast_log2(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    return (double)bits * 0x1p-52 - 1023.0;
}

static double key(const cr_estimator *e, const cr_est_entry *s)
{
    if (e->cfg.clock == CR_CLOCK_CALLS)
        return s->r; /* rate() is r: no time term */
    return fast_log2(s->r) + s->t_last * e->inv_hl;
}

void cr_est_evict(cr_estimator *e, cr_est_part *p)
{
    size_t i = p->hand < p->cap ? p->hand : 0, victim = SIZE_MAX;
    double low = 0;
    int seen = 0;
    for (size_t scanned = 0; seen < WINDOW && (scanned < MIN_SCAN || !seen); scanned++) {
        const cr_est_entry *s = &p->slots[i];
        if (s->r != 0) {
            double k = key(e, s);
            if (!seen++ || k < low) {
                victim = i;
                low = k;
            }
        }
        i = i + 1 == p->cap ? 0 : i + 1;
    }
    p->hand = i;
    cr_est_delete(e, p, &p->slots[victim]);
    atomic_fetch_add(&e->evictions, 1);
}

void cr_est_evict_elsewhere(cr_estimator *e)
{
    unsigned start = atomic_fetch_add(&e->evict_cursor, 1);
    for (unsigned k = 0; k < e->n_parts; k++) {
        cr_est_part *q = &e->parts[(start + k) & (e->n_parts - 1)];
        pthread_mutex_lock(&q->lock);
        if (q->count) {
            cr_est_evict(e, q);
            atomic_fetch_sub(&e->size, 1);
            pthread_mutex_unlock(&q->lock);
            return;
        }
        pthread_mutex_unlock(&q->lock);
    }
}
