/* The touched set: per stripe a dense list of the owners added (what a
 * take hands out) and an open-addressing index over it (so a repeat is
 * kept once). A take swaps the list out and clears only the slots it used,
 * so it costs O(owners touched), not O(capacity). */
#include "touched.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define STRIPES 16

typedef struct stripe {
    pthread_mutex_t lock;
    int64_t *list;   /* owners in the order added, len of cap */
    uint32_t *index; /* slot -> list position + 1; 0 = empty */
    size_t len, cap, slots; /* slots: a power of two >= 2 cap */
    int overflowed;
} __attribute__((aligned(64))) stripe;

struct cr_touched {
    stripe s[STRIPES];
};

cr_touched *cr_touched_new(size_t max_owners)
{
    cr_touched *t = aligned_alloc(64, sizeof *t);
    if (!t)
        return NULL;
    memset(t, 0, sizeof *t);
    size_t cap = max_owners / STRIPES + 1, slots = 2;
    while (slots < 2 * cap)
        slots *= 2;
    for (int i = 0; i < STRIPES; i++) {
        stripe *s = &t->s[i];
        pthread_mutex_init(&s->lock, NULL);
        s->cap = cap;
        s->slots = slots;
        s->list = malloc(cap * sizeof *s->list);
        s->index = calloc(slots, sizeof *s->index);
        if (!s->list || !s->index) {
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
        free(t->s[i].index);
    }
    free(t);
}

static void add_one(stripe *s, int64_t owner, uint64_t h)
{
    size_t mask = s->slots - 1, i = (h >> 4) & mask;
    for (; s->index[i]; i = (i + 1) & mask) /* ends: slots > len */
        if (s->list[s->index[i] - 1] == owner)
            return;
    if (s->len == s->cap) {
        s->overflowed = 1;
        return;
    }
    s->list[s->len++] = owner;
    s->index[i] = (uint32_t)s->len;
}

void cr_touched_add(cr_touched *t, const int64_t *owners, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t h = cr_mix64((uint64_t)owners[k]);
        stripe *s = &t->s[h % STRIPES];
        pthread_mutex_lock(&s->lock);
        add_one(s, owners[k], h);
        pthread_mutex_unlock(&s->lock);
    }
}

/* Appends s's owners to out (room for them checked by the caller), then
 * empties s. s is locked. */
static size_t drain(stripe *s, int64_t *out)
{
    size_t mask = s->slots - 1, n = s->len;
    if (out)
        memcpy(out, s->list, n * sizeof *out);
    for (size_t k = 0; k < n; k++) {
        size_t i = (cr_mix64((uint64_t)s->list[k]) >> 4) & mask;
        while (s->index[i] != k + 1)
            i = (i + 1) & mask;
        s->index[i] = 0;
    }
    /* Each owner's slot is found by its position, not by an empty slot
     * ending the probe, so clearing in list order never loses one. */
    s->len = 0;
    return n;
}

int64_t *cr_touched_take(cr_touched *t, size_t *n, int *overflowed)
{
    size_t total = 0;
    for (int i = 0; i < STRIPES; i++)
        total += t->s[i].cap;
    int64_t *out = malloc(total * sizeof *out);
    *n = 0;
    *overflowed = out == NULL;
    for (int i = 0; i < STRIPES; i++) {
        stripe *s = &t->s[i];
        pthread_mutex_lock(&s->lock);
        *overflowed |= s->overflowed;
        s->overflowed = 0;
        *n += drain(s, out ? out + *n : NULL);
        pthread_mutex_unlock(&s->lock);
    }
    if (!*n) {
        free(out);
        return NULL;
    }
    return out;
}
