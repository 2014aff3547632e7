/* Eviction. A new owner at a full table first takes the place of the
 * coldest owner on its own lookup walk (the slots from its home to the
 * first empty one, in cache from the lookup that missed) if that owner is
 * no hotter than the newcomer just after its arrival: no slot empties, so
 * no other walk breaks and nothing is shifted or probed again. When the
 * walk is empty (the home slot is), the coldest owner of the home's line
 * that ends a run (its next slot is empty) gives way on the same terms: no
 * walk passes it, so it empties with nothing shifted. Under a flood of new
 * ids these are four evictions in five (measured by `estimator_bench --owners
 * 10000000 --max-owners 1000000 --calls 10000000 --batch 1000`), and they
 * never evict an owner hotter than the newcomer.
 *
 * Otherwise a CLOCK hand per partition: the eviction looks at the next few
 * tracked slots after the hand, takes the one with the lowest rate and
 * moves the hand past them, so its cost is a short sequential run of
 * slots, whatever the table's size, and a full sweep visits every owner
 * once.
 *
 * Rates are compared exactly with no exp2: on the seconds clock every N of
 * a partition is relative to its one epoch (rate(t) = N 2^(-(t - epoch)/H)),
 * so N orders its owners by their rate at any t; on the calls clock r is
 * the rate. */
#include "internal.h"

#define WINDOW 8     /* tracked slots compared per eviction */
#define MIN_SCAN 64  /* slots looked at before settling for fewer than WINDOW */

/* With the newcomer's home slot empty (its walk has no owner): an owner of
 * the home's line whose next slot in the line is empty ends a run, so no
 * walk passes it and it empties with nothing shifted while the newcomer
 * takes its home. The coldest such owner gives way if it is no hotter. The
 * line is loaded already; its slots are chosen by index (tables are 64-byte
 * aligned), so the choice never depends on where a table was allocated. */
static int replace_run_end(cr_estimator *e, cr_est_part *p, int64_t owner, size_t home,
                           double n)
{
    size_t line = home / CR_EST_LINE * CR_EST_LINE;
    cr_est_entry *cold = NULL;
    for (size_t k = line; k + 1 < line + CR_EST_LINE; k++) {
        cr_est_entry *s = &p->slots[k];
        if (s->r != 0 && s[1].r == 0 && (!cold || s->r < cold->r))
            cold = s;
    }
    if (!cold || cold->r > n)
        return 0;
    cold->r = 0;
    p->slots[home] = (cr_est_entry){owner, n};
    atomic_fetch_add(&e->evictions, 1);
    return 1;
}

int cr_est_replace_on_walk(cr_estimator *e, cr_est_part *p, int64_t owner, uint64_t h, double n)
{
    size_t home = cr_est_home(h, p->cap);
    cr_est_entry *cold = NULL;
    /* Ends: tables are at most 3/4 full. */
    for (size_t i = home; p->slots[i].r != 0; i = i + 1 == p->cap ? 0 : i + 1)
        if (!cold || p->slots[i].r < cold->r)
            cold = &p->slots[i];
    if (!cold)
        return replace_run_end(e, p, owner, home, n);
    if (cold->r > n)
        return 0;
    *cold = (cr_est_entry){owner, n};
    atomic_fetch_add(&e->evictions, 1);
    return 1;
}

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
