/* The receipt store: a ring of fixed-size slots, the oldest overwritten
 * first, with a chained hash index by request_id. Slots come in chunks
 * allocated as the ring first reaches them, so a store that never fills
 * costs what it holds, and one that fills never grows past its bound. The
 * chains (each slot's hash and next) live in dense arrays of their own, so
 * walking one touches a few bytes per slot instead of a receipt's cache
 * lines; only a hash match reads the receipt. */
#include <stdlib.h>
#include <string.h>

#include "loop.h"

#define CHUNK 1024 /* slots per allocation */
#define NONE UINT32_MAX

struct cr_receipt_store {
    pthread_mutex_t lock;
    uint64_t cap;
    cr_receipt **chunks; /* cap / CHUNK rounded up, each NULL until reached;
                          * a slot with seq 0 is empty or dropped */
    uint32_t *buckets; /* first slot of each chain, or NONE */
    uint32_t mask;     /* buckets - 1: a power of two >= cap */
    uint32_t *hash;    /* per slot: its id's hash */
    uint32_t *next;    /* per slot: the chain's next slot, or NONE */
    uint64_t made, live, evicted, replaced, bytes;
};

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
    uint64_t nb = 1;
    while (nb < cap)
        nb <<= 1;
    size_t n_chunks = (size_t)((cap + CHUNK - 1) / CHUNK);
    s->cap = cap;
    s->mask = (uint32_t)(nb - 1);
    s->chunks = calloc(n_chunks, sizeof *s->chunks);
    s->buckets = malloc(nb * sizeof *s->buckets);
    s->hash = malloc(cap * sizeof *s->hash);
    s->next = malloc(cap * sizeof *s->next);
    if (!s->chunks || !s->buckets || !s->hash || !s->next) {
        cr_receipts_free(s);
        return NULL;
    }
    memset(s->buckets, 0xff, nb * sizeof *s->buckets); /* NONE */
    s->bytes = sizeof *s + n_chunks * sizeof *s->chunks + nb * sizeof *s->buckets +
               cap * (sizeof *s->hash + sizeof *s->next);
    return s;
}

void cr_receipts_free(cr_receipt_store *s)
{
    if (!s)
        return;
    for (uint64_t i = 0; s->chunks && i < (s->cap + CHUNK - 1) / CHUNK; i++)
        free(s->chunks[i]);
    free(s->chunks);
    free(s->buckets);
    free(s->hash);
    free(s->next);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static cr_receipt *at(const cr_receipt_store *s, uint32_t i) { return &s->chunks[i / CHUNK][i % CHUNK]; }

/* The slot holding id, or NONE; *link is the pointer to it in its chain. */
static uint32_t find(cr_receipt_store *s, const char *id, uint32_t h, uint32_t **link)
{
    uint32_t *l = &s->buckets[h & s->mask];
    while (*l != NONE && !(s->hash[*l] == h && strcmp(at(s, *l)->request_id, id) == 0))
        l = &s->next[*l];
    if (link)
        *link = l;
    return *l;
}

/* Unlinks slot i (live) from its chain and empties it. */
static void drop(cr_receipt_store *s, uint32_t i)
{
    uint32_t *l = &s->buckets[s->hash[i] & s->mask];
    while (*l != i)
        l = &s->next[*l];
    *l = s->next[i];
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
    uint32_t old = find(s, r->request_id, h, NULL);
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
    s->next[i] = s->buckets[h & s->mask];
    s->buckets[h & s->mask] = i;
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
    uint32_t i = find(s, id, h, NULL);
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
