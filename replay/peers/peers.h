/* What the peer routers (replay/peers/, cr_replay_peer in replay.h) share:
 * their constructors, the prompt a view shows, the seeded tie-break, a
 * per-shard block LRU (cache.c) for the peers that keep their own record
 * of what a shard holds, and a pool of fixed-size records for their
 * tables. Internal to the replay library. */
#ifndef CR_REPLAY_PEERS_H
#define CR_REPLAY_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* The routers count prompt characters (SGLang's tree, llm-d's hashes):
 * 4 a token, the usual figure for English text and a BPE tokenizer. */
#define PEER_CHARS_PER_TOKEN 4

/* ---- the peers, one a file (their rules are in replay.h) ----------------- */

cr_status cr_peer_llmd(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err);
cr_status cr_peer_sglang(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err);
cr_status cr_peer_dynamo(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err);
cr_status cr_peer_aibrix(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err);
cr_status cr_peer_exact(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err);
cr_status cr_peer_round_robin(const cr_replay_cluster *c, cr_replay_policy *out,
                              cr_error *err);

/* ---- what a policy reads from a request and a view ------------------------- */

/* r's block ids, *n of them; none (NULL, 0) in a view without the pool. */
static inline const uint64_t *peer_prompt(const cr_replay_view *v, const cr_replay_request *r,
                                          uint32_t *n)
{
    *n = v->blocks ? r->n_blocks : 0;
    return v->blocks ? v->blocks + r->first_block : NULL;
}

/* A run over a policy starts with its clock behind the one before (the
 * trace's first arrival after its last): the policy then forgets what the
 * run before taught it, as a freshly started router would. Keeps now. */
static inline int peer_new_run(double *clock, double now)
{
    int back = now < *clock;
    *clock = now;
    return back;
}

/* The loads' extremes over the serving shards, for the peers' imbalance
 * tests: the most and the fewest queued (in flight). */
static inline void peer_queued_range(const cr_replay_view *v, uint32_t *most, uint32_t *least)
{
    *most = 0;
    *least = UINT32_MAX;
    CR_REPLAY_FOR_SERVING(v, k) {
        *most = v->queued[k] > *most ? v->queued[k] : *most;
        *least = v->queued[k] < *least ? v->queued[k] : *least;
    }
}

/* Whether a membership event removes a shard from the candidate set (a
 * drain or a fail: a terminating pod is not ready), and which. */
static inline int peer_removal(const cr_replay_member_event *ev, uint32_t *shard)
{
    if (!ev || ev->kind == CR_REPLAY_JOIN)
        return 0;
    *shard = ev->slot;
    return 1;
}

/* One of the n tied candidates, uniform, drawn from the seed and r's
 * first block (the baselines' counter-based stream): no state between
 * requests, the same choice on every run. n >= 1. */
static inline uint32_t peer_pick(uint64_t seed, const cr_replay_request *r,
                                 const uint32_t *cands, uint32_t n)
{
    uint64_t bits32 = cr_replay_draw(seed, r->first_block) >> 32;
    return cands[(bits32 * n) >> 32];
}

/* Every serving shard with the fewest queued (in flight) into cands, in
 * index order; returns how many (>= 1). cands has room for v->shards. */
uint32_t peer_least_queued(const cr_replay_view *v, uint32_t *cands);

/* ---- per-shard block LRUs (cache.c) ------------------------------------------- */

typedef struct peer_lrus {
    uint32_t shards, cap; /* cap: blocks per shard */
    cr_replay_cache *c;
} peer_lrus;

/* One empty LRU of blocks (clamped to CR_REPLAY_CACHE_MAX, more than any
 * trace holds; each grows only as used) per shard; -1 when out of memory. */
int peer_lrus_init(peer_lrus *l, uint32_t shards, uint64_t blocks);
void peer_lrus_clear(peer_lrus *l); /* all empty again, memory returned */
void peer_lrus_free(peer_lrus *l);

/* ---- a pool of fixed-size records ----------------------------------------------- */

/* Records of size bytes (>= 4) addressed by index, grown geometrically;
 * a record given back is reused before the pool grows. Zeroed is not
 * ready: peer_pool_init first. */
typedef struct peer_pool {
    unsigned char *mem;
    size_t size;
    uint32_t n, cap; /* records handed out at least once; allocated */
    uint32_t free;   /* the given-back list's head, CR_REPLAY_NIL when empty */
} peer_pool;

void peer_pool_init(peer_pool *p, size_t size);
/* A record's index (its bytes as they were), or CR_REPLAY_NIL when out of
 * memory. */
uint32_t peer_pool_take(peer_pool *p);
void peer_pool_give(peer_pool *p, uint32_t k);
void peer_pool_free(peer_pool *p); /* and empty again, same size */

static inline void *peer_pool_at(const peer_pool *p, uint32_t k)
{
    return p->mem + (size_t)k * p->size;
}

#endif
