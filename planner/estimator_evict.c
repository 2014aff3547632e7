/* Eviction: a CLOCK hand per partition. Each eviction looks at the next few
 * tracked slots after the hand, takes the one with the lowest rate and
 * moves the hand past them, so its cost is a short sequential run of slots,
 * whatever the table's size, and a full sweep visits every owner once.
 *
 * Rates are compared exactly with no exp2: on the seconds clock every N of
 * a partition is relative to its one epoch (rate(t) = N 2^(-(t - epoch)/H)),
 * so N orders its owners by their rate at any t; on the calls clock r is
 * the rate. */
#include "estimator_parts.h"

#define WINDOW 8     /* tracked slots compared per eviction */
#define MIN_SCAN 64  /* slots looked at before settling for fewer than WINDOW */

void cr_est_evict(cr_estimator *e, cr_est_part *p)
{
    size_t i = p->hand < p->cap ? p->hand : 0, victim = SIZE_MAX;
    double low = 0;
    int seen = 0;
    for (size_t scanned = 0; seen < WINDOW && (scanned < MIN_SCAN || !seen); scanned++) {
        const cr_est_entry *s = &p->slots[i];
        if (s->r != 0) {
            double k = s->r;
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
