/* cr_replay_peer and what the peers share (peers.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peers.h"

static const struct {
    const char *name;
    cr_status (*make)(const cr_replay_cluster *, cr_replay_policy *, cr_error *);
} PEERS[] = {
    {"llmd-scorer", cr_peer_llmd},
    {"sglang-cache-aware", cr_peer_sglang},
    {"dynamo-kv", cr_peer_dynamo},
    {"aibrix-prefix", cr_peer_aibrix},
    {"min-ttft-exact", cr_peer_exact},
    {"round-robin", cr_peer_round_robin},
};
#define N_PEERS (sizeof PEERS / sizeof PEERS[0])

cr_status cr_replay_peer(const char *name, const cr_replay_cluster *c, cr_replay_policy *out,
                         cr_error *err)
{
    memset(out, 0, sizeof *out);
    char names[128] = "";
    for (size_t k = 0, used = 0; k < N_PEERS; k++) {
        if (strcmp(PEERS[k].name, name) == 0) {
            cr_status st = cr_replay_cluster_check(c, err);
            return st == CR_OK ? PEERS[k].make(c, out, err) : st;
        }
        if (used < sizeof names)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", k ? ", " : "",
                                     PEERS[k].name);
    }
    return cr_fail(err, CR_EINVAL, "unknown peer \"%.32s\" (%s)", name, names);
}

uint32_t peer_least_queued(const cr_replay_view *v, uint32_t *cands)
{
    uint32_t n = 0, least = UINT32_MAX;
    CR_REPLAY_FOR_SERVING(v, k) {
        if (v->queued[k] < least) {
            least = v->queued[k];
            n = 0;
        }
        if (v->queued[k] == least)
            cands[n++] = k;
    }
    return n;
}

/* ---- per-shard block LRUs ---------------------------------------------------------- */

int peer_lrus_init(peer_lrus *l, uint32_t shards, uint64_t blocks)
{
    uint64_t cap = blocks < CR_REPLAY_CACHE_MAX ? blocks : CR_REPLAY_CACHE_MAX;
    *l = (peer_lrus){.shards = shards, .cap = (uint32_t)(cap ? cap : 1)};
    l->c = calloc(shards, sizeof *l->c);
    if (!l->c)
        return -1;
    for (uint32_t k = 0; k < shards; k++)
        cr_replay_cache_init(&l->c[k], l->cap);
    return 0;
}

void peer_lrus_clear(peer_lrus *l)
{
    for (uint32_t k = 0; l->c && k < l->shards; k++)
        cr_replay_cache_free(&l->c[k]);
}

void peer_lrus_free(peer_lrus *l)
{
    peer_lrus_clear(l);
    free(l->c);
    l->c = NULL;
}

/* ---- the pool ---------------------------------------------------------------------- */

void peer_pool_init(peer_pool *p, size_t size)
{
    *p = (peer_pool){.size = size, .free = CR_REPLAY_NIL};
}

uint32_t peer_pool_take(peer_pool *p)
{
    uint32_t k = p->free;
    if (k != CR_REPLAY_NIL) { /* a given-back record keeps the next one's index */
        memcpy(&p->free, peer_pool_at(p, k), sizeof p->free);
        return k;
    }
    if (p->n == p->cap) {
        if (p->cap >= CR_REPLAY_NIL / 2)
            return CR_REPLAY_NIL;
        uint32_t cap = p->cap ? 2 * p->cap : 256;
        unsigned char *mem = realloc(p->mem, (size_t)cap * p->size);
        if (!mem)
            return CR_REPLAY_NIL;
        p->mem = mem;
        p->cap = cap;
    }
    return p->n++;
}

void peer_pool_give(peer_pool *p, uint32_t k)
{
    memcpy(peer_pool_at(p, k), &p->free, sizeof p->free);
    p->free = k;
}

void peer_pool_free(peer_pool *p)
{
    free(p->mem);
    peer_pool_init(p, p->size);
}
