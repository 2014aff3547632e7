/* One shard's LRU prefix cache. Nodes live in one array, linked most
 * recent first, found by cr_mix64(id) through the shared open-addressing
 * index (htable.h), whose backward-shift deletion leaves no tombstones to
 * pile up over a long replay. The index is kept at least twice the node
 * array, so probes stay short. A full cache reuses its least recent node
 * in place: once warm, nothing is allocated. */
#include <stdlib.h>

#include "internal.h"

typedef struct cr_replay_node {
    uint64_t id;
    uint32_t prev, next; /* towards the head (more recent), the tail */
} cr_replay_node;

void cr_replay_cache_init(cr_replay_cache *c, uint32_t cap)
{
    *c = (cr_replay_cache){.cap = cap, .head = CR_REPLAY_NIL, .tail = CR_REPLAY_NIL};
}

void cr_replay_cache_free(cr_replay_cache *c)
{
    free(c->nodes);
    cr_htable_free(&c->index);
    cr_replay_cache_init(c, c->cap);
}

static int is_id(const void *ctx, uint32_t k, const void *id)
{
    return ((const cr_replay_cache *)ctx)->nodes[k].id == *(const uint64_t *)id;
}

static uint64_t id_hash(const void *ctx, uint32_t k)
{
    return cr_mix64(((const cr_replay_cache *)ctx)->nodes[k].id);
}

/* id's node, or CR_REPLAY_NIL (CR_HTABLE_NONE). */
static uint32_t lookup(const cr_replay_cache *c, uint64_t id)
{
    return cr_htable_find(&c->index, cr_mix64(id), is_id, c, &id);
}

static void unlink_node(cr_replay_cache *c, uint32_t k)
{
    cr_replay_node *x = &c->nodes[k];
    if (x->prev != CR_REPLAY_NIL)
        c->nodes[x->prev].next = x->next;
    else
        c->head = x->next;
    if (x->next != CR_REPLAY_NIL)
        c->nodes[x->next].prev = x->prev;
    else
        c->tail = x->prev;
}

static void push_front(cr_replay_cache *c, uint32_t k)
{
    cr_replay_node *x = &c->nodes[k];
    x->prev = CR_REPLAY_NIL;
    x->next = c->head;
    if (c->head != CR_REPLAY_NIL)
        c->nodes[c->head].prev = k;
    else
        c->tail = k;
    c->head = k;
}

/* Doubles the node array (up to cap) and resizes the index for it. */
static int grow(cr_replay_cache *c)
{
    uint32_t n_alloc = c->n_alloc ? c->n_alloc * 2 : 64;
    if (n_alloc > c->cap) /* no overflow: cap <= CR_REPLAY_CACHE_MAX */
        n_alloc = c->cap;
    uint32_t n_slots = 1;
    while (n_slots < 2 * n_alloc)
        n_slots *= 2;
    cr_replay_node *nodes = realloc(c->nodes, (size_t)n_alloc * sizeof *nodes);
    if (!nodes)
        return -1;
    c->nodes = nodes;
    if (cr_htable_reset(&c->index, n_slots) != 0)
        return -1;
    c->n_alloc = n_alloc;
    for (uint32_t k = 0; k < c->n; k++) /* in node order: reads them in a row */
        cr_htable_insert(&c->index, cr_mix64(nodes[k].id), k);
    return 0;
}

/* A node for a new id: a fresh one while there is room, else the least
 * recent one, evicted. */
static int take_node(cr_replay_cache *c, uint32_t *k)
{
    if (c->n == c->n_alloc && c->n < c->cap && grow(c) != 0)
        return -1;
    if (c->n < c->n_alloc) {
        *k = c->n++;
        return 0;
    }
    *k = c->tail;
    unlink_node(c, *k);
    cr_htable_remove(&c->index, cr_mix64(c->nodes[*k].id), *k, (cr_htable_keys){id_hash, c});
    if (c->on_evict)
        c->on_evict(c->evict_ctx, c, c->nodes[*k].id);
    return 0;
}

static int touch(cr_replay_cache *c, uint64_t id)
{
    uint32_t k = lookup(c, id);
    if (k != CR_REPLAY_NIL) {
        unlink_node(c, k);
        push_front(c, k);
        return 0;
    }
    if (take_node(c, &k) != 0)
        return -1;
    c->nodes[k].id = id;
    cr_htable_insert(&c->index, cr_mix64(id), k);
    push_front(c, k);
    return 0;
}

uint32_t cr_replay_cache_prefix(const cr_replay_cache *c, const uint64_t *ids, uint32_t n)
{
    uint32_t i = 0;
    while (i < n && lookup(c, ids[i]) != CR_REPLAY_NIL)
        i++;
    return i;
}

int cr_replay_cache_insert(cr_replay_cache *c, const uint64_t *ids, uint32_t n)
{
    for (uint32_t i = n; i-- > 0;)
        if (touch(c, ids[i]) != 0)
            return -1;
    return 0;
}

uint32_t cr_replay_cache_find(const cr_replay_cache *c, uint64_t id) { return lookup(c, id); }

int cr_replay_cache_use(cr_replay_cache *c, uint64_t id, uint32_t *node)
{
    int fresh = lookup(c, id) == CR_REPLAY_NIL;
    if (touch(c, id) != 0)
        return -1;
    *node = c->head; /* touch leaves id the most recent */
    return fresh;
}

int cr_replay_cache_rank(const cr_replay_cache *c, uint64_t id, uint32_t *rank)
{
    uint32_t r = 0;
    for (uint32_t k = c->head; k != CR_REPLAY_NIL; k = c->nodes[k].next, r++)
        if (c->nodes[k].id == id) {
            if (rank)
                *rank = r;
            return 1;
        }
    return 0;
}
