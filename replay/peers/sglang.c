/* sglang-cache-aware: the SGLang model gateway's cache-aware policy with
 * its command-line defaults (rule in replay.h). Load is in-flight
 * requests; past an imbalance (max - min > 64 and max > 1.5 min) it sends
 * to the least loaded worker; else it matches the prompt in one
 * approximate radix tree of what it routed where and follows the match
 * when it covers more than 0.3 of the prompt.
 *
 * The tree here is a trie over block ids (the gateway's is over
 * characters; a block is 512 tokens, 2048 characters). Each node has the
 * workers that hold it (tenants), each with when it last used the node
 * and since when it has held it. A worker that holds a node holds all its
 * ancestors (an insert covers the whole path, eviction takes leaves
 * first), so a node without tenants has no children and is freed. Nodes
 * are found by (parent, block) through the shared open-addressing index
 * (htable.h).
 *
 * Eviction, every 120 s of virtual time as the gateway's timer: each
 * worker's least recently used leaves go until it holds at most 2^26
 * characters (2^24 tokens: 32768 blocks of 512). A parent is touched
 * whenever a child is, so ordering a worker's nodes by last use, deeper
 * first on a tie, lists leaves before their parents: one sort gives the
 * gateway's leaf-by-leaf order. The gateway grows without bound between
 * timers; here a worker past twice its limit is evicted at once, so the
 * tree holds at most 2 limits' worth of nodes per worker.
 *
 * A worker leaving (drained or failed) is pruned from the tree: evicted
 * down to nothing, the same leaf-first walk. A new worker has no node. */
#include <stdlib.h>

#include "peers.h"
#include "htable.h"

#define ABS_THRESHOLD 64
#define REL_THRESHOLD 1.5
#define CACHE_THRESHOLD 0.3
#define EVICT_EVERY_S 120.0
#define MAX_CHARS (1u << 26) /* per worker */

typedef struct node {
    uint64_t block;
    uint32_t parent; /* CR_REPLAY_NIL at the top */
    uint32_t depth;  /* 1 at the top */
    uint32_t tenants; /* a list of tenant records, never empty */
} node;

typedef struct tenant {
    uint32_t next, worker;
    double last_s, since_s;
} tenant;

/* A tenant record in eviction order. */
typedef struct victim {
    double last_s;
    uint32_t depth, node, worker;
} victim;

typedef struct sglang {
    uint32_t workers, block_tokens; /* workers: every slot a run may open */
    uint64_t limit; /* blocks per worker */
    peer_pool nodes, tenants;
    cr_htable index;                      /* node by (parent, block) */
    uint64_t *held;                      /* per worker: nodes it is a tenant of */
    victim *victims;
    size_t cap_victims;
    uint32_t *cands;
    double clock, next_evict_s;
} sglang;

static node *at(const sglang *s, uint32_t k) { return peer_pool_at(&s->nodes, k); }
static tenant *tenant_at(const sglang *s, uint32_t k) { return peer_pool_at(&s->tenants, k); }

/* ---- the (parent, block) table ------------------------------------------------ */

/* A node's key: the edge from its parent. */
typedef struct edge {
    uint32_t parent;
    uint64_t block;
} edge;

static uint64_t edge_hash(uint32_t parent, uint64_t block)
{
    return cr_mix64(block ^ cr_mix64(parent));
}

static int is_edge(const void *ctx, uint32_t k, const void *key)
{
    const node *x = at(ctx, k);
    const edge *e = key;
    return x->parent == e->parent && x->block == e->block;
}

static uint64_t node_hash(const void *ctx, uint32_t k)
{
    const node *x = at(ctx, k);
    return edge_hash(x->parent, x->block);
}

static uint32_t child(const sglang *s, uint32_t parent, uint64_t block)
{
    edge e = {parent, block};
    return cr_htable_find(&s->index, edge_hash(parent, block), is_edge, s, &e);
}

/* Keeps the slots at least twice the nodes, so probes stay short. */
static int reserve_slot(sglang *s)
{
    uint64_t want = 2 * (s->index.used + 1);
    if (s->index.slots && want <= s->index.mask + 1)
        return 0;
    uint64_t n = s->index.slots ? 2 * (s->index.mask + 1) : 1024;
    if (n > ((uint64_t)1 << 31))
        return -1;
    return cr_htable_resize(&s->index, n, (cr_htable_keys){node_hash, s});
}

/* Empties node k's slot. */
static void unslot(sglang *s, uint32_t k)
{
    cr_htable_remove(&s->index, node_hash(s, k), k, (cr_htable_keys){node_hash, s});
}

/* ---- tenants ------------------------------------------------------------------- */

/* Worker w's record on node k, and the record before it (or NIL). */
static uint32_t find_tenant(const sglang *s, uint32_t k, uint32_t w, uint32_t *prev)
{
    *prev = CR_REPLAY_NIL;
    for (uint32_t t = at(s, k)->tenants; t != CR_REPLAY_NIL; t = tenant_at(s, t)->next) {
        if (tenant_at(s, t)->worker == w)
            return t;
        *prev = t;
    }
    return CR_REPLAY_NIL;
}

/* The serving tenant that has held node k the longest, lower index on a
 * tie; NIL when none serves (a pruned worker's nodes are gone, unless
 * pruning ran out of memory). */
static uint32_t first_tenant(const sglang *s, const cr_replay_view *v, uint32_t k)
{
    const tenant *best = NULL;
    for (uint32_t t = at(s, k)->tenants; t != CR_REPLAY_NIL; t = tenant_at(s, t)->next) {
        const tenant *x = tenant_at(s, t);
        if (cr_replay_usable(v, x->worker) &&
            (!best || x->since_s < best->since_s ||
             (x->since_s == best->since_s && x->worker < best->worker)))
            best = x;
    }
    return best ? best->worker : CR_REPLAY_NIL;
}

/* Worker w leaves node k, and the node goes when nobody holds it. */
static void untenant(sglang *s, uint32_t k, uint32_t w)
{
    uint32_t prev, t = find_tenant(s, k, w, &prev);
    if (t == CR_REPLAY_NIL)
        return;
    uint32_t next = tenant_at(s, t)->next;
    if (prev == CR_REPLAY_NIL)
        at(s, k)->tenants = next;
    else
        tenant_at(s, prev)->next = next;
    peer_pool_give(&s->tenants, t);
    s->held[w]--;
    if (at(s, k)->tenants == CR_REPLAY_NIL) {
        unslot(s, k);
        peer_pool_give(&s->nodes, k);
    }
}

/* The deepest node on ids' path, and how deep; NIL and 0 when none. */
static uint32_t match(const sglang *s, const uint64_t *ids, uint32_t n, uint32_t *depth)
{
    uint32_t k = CR_REPLAY_NIL, i = 0;
    for (; i < n; i++) {
        uint32_t c = child(s, k, ids[i]);
        if (c == CR_REPLAY_NIL)
            break;
        k = c;
    }
    *depth = i;
    return k;
}

/* Worker w now holds ids' path, used at now. Out of memory: the path is
 * cut there, as if evicted. */
static void insert(sglang *s, const uint64_t *ids, uint32_t n, uint32_t w, double now)
{
    uint32_t k = CR_REPLAY_NIL;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c = child(s, k, ids[i]), prev;
        if (c == CR_REPLAY_NIL) {
            if (reserve_slot(s) != 0 || (c = peer_pool_take(&s->nodes)) == CR_REPLAY_NIL)
                return;
            *at(s, c) = (node){.block = ids[i], .parent = k, .depth = i + 1,
                               .tenants = CR_REPLAY_NIL};
            cr_htable_insert(&s->index, edge_hash(k, ids[i]), c);
        }
        uint32_t t = find_tenant(s, c, w, &prev);
        if (t == CR_REPLAY_NIL) {
            if ((t = peer_pool_take(&s->tenants)) == CR_REPLAY_NIL) {
                if (at(s, c)->tenants == CR_REPLAY_NIL) { /* just made: undo */
                    unslot(s, c);
                    peer_pool_give(&s->nodes, c);
                }
                return;
            }
            *tenant_at(s, t) = (tenant){.next = at(s, c)->tenants, .worker = w, .since_s = now};
            at(s, c)->tenants = t;
            s->held[w]++;
        }
        tenant_at(s, t)->last_s = now;
        k = c;
    }
}

/* ---- eviction -------------------------------------------------------------------- */

static int victim_order(const void *pa, const void *pb)
{
    const victim *a = pa, *b = pb;
    if (a->last_s != b->last_s)
        return a->last_s < b->last_s ? -1 : 1;
    if (a->depth != b->depth)
        return a->depth > b->depth ? -1 : 1; /* leaves before their parents */
    if (a->node != b->node)
        return a->node < b->node ? -1 : 1;
    return (a->worker > b->worker) - (a->worker < b->worker);
}

/* Whether worker w is one evict_down looks at: every worker, or one. */
static int evicting(uint32_t only, uint32_t w) { return only == CR_REPLAY_NIL || only == w; }

/* Every worker over limit (only that one, unless only is NIL) loses its
 * least recently used leaves until it is at limit. Out of memory: nothing
 * is evicted this time. */
static void evict_down(sglang *s, uint32_t only, uint64_t limit)
{
    uint64_t n = 0;
    for (uint32_t w = 0; w < s->workers; w++)
        n += evicting(only, w) && s->held[w] > limit ? s->held[w] : 0;
    if (!n)
        return;
    if (n > s->cap_victims) {
        victim *v = realloc(s->victims, n * sizeof *v);
        if (!v)
            return;
        s->victims = v;
        s->cap_victims = n;
    }
    size_t m = 0;
    for (uint64_t i = 0; s->index.slots && i <= s->index.mask; i++) {
        uint32_t k = cr_htable_at(&s->index, i);
        if (k == CR_REPLAY_NIL)
            continue;
        for (uint32_t t = at(s, k)->tenants; t != CR_REPLAY_NIL; t = tenant_at(s, t)->next) {
            const tenant *x = tenant_at(s, t);
            if (evicting(only, x->worker) && s->held[x->worker] > limit)
                s->victims[m++] = (victim){x->last_s, at(s, k)->depth, k, x->worker};
        }
    }
    qsort(s->victims, m, sizeof *s->victims, victim_order);
    for (size_t i = 0; i < m; i++)
        if (s->held[s->victims[i].worker] > limit)
            untenant(s, s->victims[i].node, s->victims[i].worker);
}

/* The gateway's timer, and its bound: every worker down to the limit. */
static void evict(sglang *s) { evict_down(s, CR_REPLAY_NIL, s->limit); }

/* ---- the policy -------------------------------------------------------------------- */

static void reset(sglang *s)
{
    peer_pool_free(&s->nodes);
    peer_pool_free(&s->tenants);
    cr_htable_free(&s->index);
    for (uint32_t w = 0; w < s->workers; w++)
        s->held[w] = 0;
    s->next_evict_s = EVICT_EVERY_S;
}

static uint32_t route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    sglang *s = state;
    if (peer_new_run(&s->clock, v->now_s))
        reset(s);
    if (v->now_s >= s->next_evict_s) {
        evict(s);
        s->next_evict_s = ((uint64_t)(v->now_s / EVICT_EVERY_S) + 1) * EVICT_EVERY_S;
    }
    uint32_t most, least;
    peer_queued_range(v, &most, &least);
    uint32_t n, worker = CR_REPLAY_NIL;
    const uint64_t *ids = peer_prompt(v, r, &n);
    if (!(most - least > ABS_THRESHOLD && most > REL_THRESHOLD * least)) {
        uint32_t depth, k = match(s, ids, n, &depth);
        double hit = (double)depth * s->block_tokens;
        if (k != CR_REPLAY_NIL && hit > CACHE_THRESHOLD * r->input_tokens)
            worker = first_tenant(s, v, k);
    }
    if (worker == CR_REPLAY_NIL) {
        peer_least_queued(v, s->cands);
        worker = s->cands[0]; /* the lowest index */
    }
    insert(s, ids, n, worker, v->now_s);
    if (s->held[worker] > 2 * s->limit)
        evict(s);
    return worker;
}

static void members(void *state, const uint8_t *usable, uint32_t n_slots,
                    const cr_replay_member_event *ev)
{
    sglang *s = state;
    uint32_t worker;
    (void)usable;
    (void)n_slots;
    if (peer_removal(ev, &worker))
        evict_down(s, worker, 0);
}

static void sglang_free(void *state)
{
    sglang *s = state;
    if (!s)
        return;
    peer_pool_free(&s->nodes);
    peer_pool_free(&s->tenants);
    cr_htable_free(&s->index);
    free(s->held);
    free(s->victims);
    free(s->cands);
    free(s);
}

cr_status cr_peer_sglang(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err)
{
    sglang *s = calloc(1, sizeof *s);
    if (s) {
        uint64_t limit = MAX_CHARS / PEER_CHARS_PER_TOKEN / c->block_tokens;
        *s = (sglang){.workers = cr_replay_slots(c), .block_tokens = c->block_tokens,
                      .limit = limit ? limit : 1, .next_evict_s = EVICT_EVERY_S};
        peer_pool_init(&s->nodes, sizeof(node));
        peer_pool_init(&s->tenants, sizeof(tenant));
        s->held = calloc(s->workers, sizeof *s->held);
        s->cands = calloc(s->workers, sizeof *s->cands);
    }
    if (!s || !s->held || !s->cands) {
        sglang_free(s);
        return cr_fail(err, CR_ENOMEM, "out of memory for policy sglang-cache-aware");
    }
    *out = (cr_replay_policy){
        .name = "sglang-cache-aware", .state = s, .route = route, .free = sglang_free,
        .members = members};
    return CR_OK;
}
