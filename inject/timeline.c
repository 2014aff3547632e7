/* Link reservations and calibration per source name, in a bounded chained
 * hash table.
 *
 * Names come from requests, so the table is bounded: a fixed pool of cap
 * entries, allocated once, which also means a reservation cannot fail. A
 * new name on a full table first sweeps out expired entries that hold no
 * calibration (their wait is already 0 and they have learnt nothing, so
 * forgetting them changes no decision), then, if none went, evicts the
 * entry idle the longest: the soonest to free among reservations (the loss
 * that understates a future wait the least), a calibrated entry counting
 * as busy until its last observation. A chain is walked through pointers to
 * its links, so that finding an entry also finds what to unlink it from. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return cr_mix64(h);
}

cr_status cr_link_table_init(cr_link_table *t, size_t cap)
{
    size_t n_buckets = 1;
    while (n_buckets < 2 * cap)
        n_buckets <<= 1;
    memset(t, 0, sizeof *t);
    t->pool = calloc(cap, sizeof *t->pool);
    t->buckets = malloc(n_buckets * sizeof *t->buckets);
    if (!t->pool || !t->buckets || cap < 1 || cap > INT32_MAX) {
        cr_link_table_free(t);
        return CR_ENOMEM;
    }
    for (size_t b = 0; b < n_buckets; b++)
        t->buckets[b] = -1;
    for (size_t i = 0; i < cap; i++)
        t->pool[i].next = i + 1 < cap ? (int32_t)(i + 1) : -1;
    t->mask = n_buckets - 1;
    t->cap = cap;
    return CR_OK;
}

void cr_link_table_free(cr_link_table *t)
{
    free(t->pool);
    free(t->buckets);
    memset(t, 0, sizeof *t);
}

/* The link holding name's entry, or the -1 ending its chain. */
static int32_t *link_of(const cr_link_table *t, const char *name)
{
    int32_t *link = &t->buckets[hash_name(name) & t->mask];
    while (*link >= 0 && strcmp(t->pool[*link].name, name) != 0)
        link = &t->pool[*link].next;
    return link;
}

static void unlink_entry(cr_link_table *t, int32_t *link)
{
    int32_t i = *link;
    *link = t->pool[i].next;
    t->pool[i].next = t->free_head;
    t->free_head = i;
    t->used--;
}

/* When the entry stops mattering: its reservation's end, or for one that
 * holds a calibration its last observation when that is later. */
static double idle_from(const cr_link_entry *e)
{
    return e->fit.n ? fmax(e->busy_until_ms, e->observed_ms) : e->busy_until_ms;
}

static void sweep_expired(cr_link_table *t, double now_ms)
{
    for (size_t b = 0; b <= t->mask; b++) {
        int32_t *link = &t->buckets[b];
        while (*link >= 0) {
            const cr_link_entry *e = &t->pool[*link];
            if (!e->fit.n && e->busy_until_ms <= now_ms)
                unlink_entry(t, link);
            else
                link = &t->pool[*link].next;
        }
    }
}

static void evict_idlest(cr_link_table *t)
{
    int32_t *idlest = NULL;
    for (size_t b = 0; b <= t->mask; b++) {
        for (int32_t *link = &t->buckets[b]; *link >= 0; link = &t->pool[*link].next) {
            if (!idlest || idle_from(&t->pool[*link]) < idle_from(&t->pool[*idlest]))
                idlest = link;
        }
    }
    if (idlest)
        unlink_entry(t, idlest);
}

cr_link_entry *cr_link_table_find(const cr_link_table *t, const char *name)
{
    int32_t i = *link_of(t, name);
    return i < 0 ? NULL : &t->pool[i];
}

cr_link_entry *cr_link_table_get(cr_link_table *t, const char *name, double now_ms)
{
    int32_t *link = link_of(t, name);
    if (*link >= 0)
        return &t->pool[*link];
    if (t->used == t->cap) {
        sweep_expired(t, now_ms);
        if (t->used == t->cap)
            evict_idlest(t);
        link = link_of(t, name); /* the chain may have changed */
    }
    int32_t i = t->free_head;
    cr_link_entry *e = &t->pool[i];
    t->free_head = e->next;
    strcpy(e->name, name); /* validated: <= CR_INJECT_NAME_MAX bytes */
    e->busy_until_ms = -INFINITY;
    e->observed_ms = -INFINITY;
    e->fit.n = 0;
    e->next = -1;
    *link = i;
    t->used++;
    return e;
}

void cr_link_table_reserve(cr_link_table *t, const char *name, double now_ms, double busy_ms)
{
    cr_link_entry *e = cr_link_table_get(t, name, now_ms);
    e->busy_until_ms = fmax(e->busy_until_ms, now_ms) + busy_ms;
}
