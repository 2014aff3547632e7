/* The touched owners: per stripe an append-only list; a thread keeps to
 * one stripe (given round-robin at its first add) until it is full, so
 * threads rarely share a lock or a cache line. A take copies every list
 * out, empties them, then sorts (cr_sort_records) and drops repeats. */
#include "touched.h"

#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define STRIPES 16

typedef struct stripe {
    pthread_mutex_t lock;
    int64_t *list;
    size_t len, cap;
    int overflowed;
} __attribute__((aligned(64))) stripe;

struct cr_touched {
    stripe s[STRIPES];
    atomic_int full; /* every stripe was full: adds return at once until the take */
};

static atomic_uint next_stripe;
static _Thread_local unsigned my_stripe; /* 0 = not given yet; else index + 1 */

cr_touched *cr_touched_new(size_t max_entries)
{
    cr_touched *t = aligned_alloc(64, sizeof *t);
    if (!t)
        return NULL;
    memset(t, 0, sizeof *t);
    size_t cap = max_entries / STRIPES + 1;
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_init(&t->s[i].lock, NULL);
        t->s[i].cap = cap;
        if (!(t->s[i].list = malloc(cap * sizeof *t->s[i].list))) {
            cr_touched_free(t);
            return NULL;
        }
    }
    return t;
}

void cr_touched_free(cr_touched *t)
{
    if (!t)
        return;
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_destroy(&t->s[i].lock);
        free(t->s[i].list);
    }
    free(t);
}

/* Appends what fits of owners[0..n) to s; returns how many. */
static size_t append(stripe *s, const int64_t *owners, size_t n)
{
    pthread_mutex_lock(&s->lock);
    size_t room = s->cap - s->len, k = n < room ? n : room;
    memcpy(s->list + s->len, owners, k * sizeof *owners);
    s->len += k;
    pthread_mutex_unlock(&s->lock);
    return k;
}

/* The thread's own stripe first; a full one spills into the next ones, so
 * one busy thread may use the whole bound. */
void cr_touched_add(cr_touched *t, const int64_t *owners, size_t n)
{
    if (atomic_load_explicit(&t->full, memory_order_relaxed))
        return;
    if (!my_stripe)
        my_stripe = atomic_fetch_add(&next_stripe, 1) % STRIPES + 1;
    size_t done = 0;
    for (unsigned k = 0; k < STRIPES && done < n; k++)
        done += append(&t->s[(my_stripe - 1 + k) % STRIPES], owners + done, n - done);
    if (done < n) {
        stripe *s = &t->s[my_stripe - 1];
        pthread_mutex_lock(&s->lock);
        s->overflowed = 1;
        pthread_mutex_unlock(&s->lock);
        atomic_store(&t->full, 1);
    }
}

/* Sorts out[0..n) and drops repeats; returns how many are left, or -1
 * when out of memory (out unchanged). */
static long distinct(int64_t *out, size_t n)
{
    cr_sorted_i64 *s = cr_sort_i64(out, sizeof *out, n);
    int64_t *sorted = s ? malloc((n ? n : 1) * sizeof *sorted) : NULL;
    size_t k = 0;
    for (size_t i = 0; sorted && i < n; i++)
        if (!k || s[i].key != s[i - 1].key)
            sorted[k++] = out[s[i].at];
    if (sorted)
        memcpy(out, sorted, k * sizeof *out);
    free(sorted);
    free(s);
    return sorted ? (long)k : -1;
}

int64_t *cr_touched_take(cr_touched *t, size_t *n, int *overflowed)
{
    size_t total = 0;
    for (int i = 0; i < STRIPES; i++)
        total += t->s[i].cap;
    int64_t *out = malloc(total * sizeof *out);
    *n = 0;
    int was_full = atomic_exchange(&t->full, 0); /* first: a racing loss is never missed */
    *overflowed = out == NULL || was_full;
    for (int i = 0; i < STRIPES; i++) {
        stripe *s = &t->s[i];
        pthread_mutex_lock(&s->lock);
        *overflowed |= s->overflowed;
        if (out)
            memcpy(out + *n, s->list, s->len * sizeof *out);
        *n += out ? s->len : 0;
        s->len = 0;
        s->overflowed = 0;
        pthread_mutex_unlock(&s->lock);
    }
    long k = out ? distinct(out, *n) : 0;
    if (k < 0) { /* nothing lost: the taker pushes every owner instead */
        *overflowed = 1;
        k = 0;
    }
    *n = (size_t)k;
    if (!k) {
        free(out);
        return NULL;
    }
    return out;
}
