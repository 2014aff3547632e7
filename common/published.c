/* Refcounted values and the published pointer that readers share. */
#include "common.h"

void cr_ref_init(cr_ref *ref, void (*free_fn)(cr_ref *ref))
{
    atomic_init(&ref->n, 1);
    ref->free_fn = free_fn;
}

/* The caller holds a reference (or the lock that keeps one alive), so a
 * relaxed add is enough: nothing is read through this count. */
void cr_ref_retain(cr_ref *ref)
{
    if (ref)
        atomic_fetch_add_explicit(&ref->n, 1, memory_order_relaxed);
}

void cr_ref_release(cr_ref *ref)
{
    /* acq_rel: the last releaser must see every other holder's reads done. */
    if (ref && atomic_fetch_sub_explicit(&ref->n, 1, memory_order_acq_rel) == 1)
        ref->free_fn(ref);
}

void cr_published_init(cr_published *p)
{
    pthread_mutex_init(&p->lock, NULL);
    p->current = NULL;
    p->generation = 0;
}

void cr_published_destroy(cr_published *p)
{
    cr_ref_release(p->current);
    p->current = NULL;
    pthread_mutex_destroy(&p->lock);
}

cr_ref *cr_published_acquire(cr_published *p, uint64_t *generation)
{
    pthread_mutex_lock(&p->lock);
    cr_ref *r = p->current;
    cr_ref_retain(r);
    if (generation)
        *generation = p->generation;
    pthread_mutex_unlock(&p->lock);
    return r;
}

/* g 0: the next generation. */
static uint64_t swap(cr_published *p, cr_ref *value, uint64_t g)
{
    pthread_mutex_lock(&p->lock);
    cr_ref *old = p->current;
    p->current = value;
    p->generation = g ? g : p->generation + 1;
    g = p->generation;
    pthread_mutex_unlock(&p->lock);
    cr_ref_release(old); /* freed here only if no reader holds it */
    return g;
}

uint64_t cr_published_swap(cr_published *p, cr_ref *value) { return swap(p, value, 0); }

void cr_published_swap_as(cr_published *p, cr_ref *value, uint64_t g) { swap(p, value, g); }
