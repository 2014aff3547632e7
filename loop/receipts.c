/* The receipt store: a ring of fixed-size slots, the oldest overwritten
 * first, found by request_id through the shared open-addressing index
 * (htable.h), at most 3/4 full. Slots come in chunks allocated as the ring
 * first reaches them, so a store that never fills costs what it holds, and
 * one that fills never grows past its bound. Each slot's hash lives in a
 * dense array of its own, so a probe touches a few bytes per entry instead
 * of a receipt's cache lines; only a hash match reads the receipt. */
#include <stdlib.h>
#include <string.h>

#include "htable.h"
#include "loop.h"

#define CHUNK 1024 /* slots per allocation */
#define NONE CR_HTABLE_NONE

struct cr_receipt_store {
    pthread_mutex_t lock;
    uint64_t cap;
    cr_receipt **chunks; /* cap / CHUNK rounded up, each NULL until reached;
                          * a slot with seq 0 is empty or dropped */
    cr_htable index;   /* live slots by request_id */
    uint32_t *hash;    /* per slot: its id's hash */
    uint64_t made, live, evicted, replaced, bytes;
};

static cr_receipt *at(const cr_receipt_store *s, uint32_t i) { return &s->chunks[i / CHUNK][i % CHUNK]; }

/* An id and its hash, as the index looks for them. */
typedef struct key {
    const char *id;
    uint32_t h;
} key;

static int is_key(const void *ctx, uint32_t i, const void *k)
{
    const cr_receipt_store *s = ctx;
    const key *x = k;
    return s->hash[i] == x->h && strcmp(at(s, i)->request_id, x->id) == 0;
}

static uint64_t hash_of(const void *ctx, uint32_t i)
{
    return ((const cr_receipt_store *)ctx)->hash[i];
}

/* FNV-1a, then the shared mixer for the low bits the mask keeps. */
static uint32_t hash_id(const char *id)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (uint32_t)cr_mix64(h);
}

cr_receipt_store *cr_receipts_new(uint64_t cap)
{
    cr_receipt_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    uint64_t n = 2;
    while (n * 3 < cap * 4)
        n <<= 1;
    size_t n_chunks = (size_t)((cap + CHUNK - 1) / CHUNK);
    s->cap = cap;
    s->chunks = calloc(n_chunks, sizeof *s->chunks);
    s->hash = malloc(cap * sizeof *s->hash);
    if (!s->chunks || !s->hash || cr_htable_reset(&s->index, n) != 0) {
        cr_receipts_free(s);
        return NULL;
    }
    s->bytes = sizeof *s + n_chunks * sizeof *s->chunks + cr_htable_bytes(&s->index) +
               cap * sizeof *s->hash;
    return s;
}

void cr_receipts_free(cr_receipt_store *s)
{
    if (!s)
        return;
    for (uint64_t i = 0; s->chunks && i < (s->cap + CHUNK - 1) / CHUNK; i++)
        free(s->chunks[i]);
    free(s->chunks);
    cr_htable_free(&s->index);
    free(s->hash);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* The slot holding id, or NONE. */
static uint32_t find(const cr_receipt_store *s, const char *id, uint32_t h)
{
    return cr_htable_find(&s->index, h, is_key, s, &(key){id, h});
}

/* Takes slot i (live) out of the index and empties it. */
static void drop(cr_receipt_store *s, uint32_t i)
{
    cr_htable_remove(&s->index, s->hash[i], i, (cr_htable_keys){hash_of, s});
    at(s, i)->seq = 0;
    s->live--;
}

/* The slot the next receipt goes to, its chunk allocated; NULL when out of
 * memory. The last chunk holds only what the bound leaves. */
static cr_receipt *next_slot(cr_receipt_store *s, uint32_t *index)
{
    uint32_t i = (uint32_t)(s->made % s->cap);
    cr_receipt **chunk = &s->chunks[i / CHUNK];
    if (!*chunk) {
        uint64_t first = (uint64_t)(i / CHUNK) * CHUNK;
        size_t n = (size_t)(s->cap - first < CHUNK ? s->cap - first : CHUNK);
        if (!(*chunk = malloc(n * sizeof **chunk)))
            return NULL;
        for (size_t k = 0; k < n; k++)
            (*chunk)[k].seq = 0;
        s->bytes += n * sizeof **chunk;
    }
    *index = i;
    return &(*chunk)[i % CHUNK];
}

int cr_receipts_put(cr_receipt_store *s, cr_receipt *r)
{
    uint32_t h = hash_id(r->request_id), i;
    pthread_mutex_lock(&s->lock);
    cr_receipt *e = next_slot(s, &i);
    if (!e) {
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    uint32_t old = find(s, r->request_id, h);
    if (old != NONE) {
        drop(s, old);
        s->replaced++;
    }
    if (e->seq) {
        drop(s, i);
        s->evicted++;
    }
    r->seq = ++s->made;
    *e = *r;
    s->hash[i] = h;
    cr_htable_insert(&s->index, h, i);
    s->live++;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int cr_receipts_update(cr_receipt_store *s, const char *id,
                       void (*fn)(cr_receipt *r, const void *ctx), const void *ctx,
                       cr_receipt *out)
{
    uint32_t h = hash_id(id);
    pthread_mutex_lock(&s->lock);
    uint32_t i = find(s, id, h);
    if (i != NONE) {
        if (fn)
            fn(at(s, i), ctx);
        *out = *at(s, i);
    }
    pthread_mutex_unlock(&s->lock);
    return i != NONE;
}

int cr_receipts_get(cr_receipt_store *s, const char *id, cr_receipt *out)
{
    return cr_receipts_update(s, id, NULL, NULL, out);
}

void cr_receipts_stats(cr_receipt_store *s, cr_loop_stats *out)
{
    pthread_mutex_lock(&s->lock);
    out->receipts = s->live;
    out->receipts_capacity = s->cap;
    out->receipts_made = s->made;
    out->receipts_evicted = s->evicted;
    out->receipts_replaced = s->replaced;
    out->receipt_bytes = s->bytes;
    pthread_mutex_unlock(&s->lock);
}
