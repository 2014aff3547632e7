/* aibrix-prefix: the AIBrix gateway's prefix-cache router (rule in
 * replay.h). Load is in-flight requests. Past an imbalance of 8 it is a
 * load balancer; otherwise it matches the prompt in one table shared by
 * all pods, of what it routed where, and sends the request to the best
 * matching pod that is not loaded past the mean plus one standard
 * deviation.
 *
 * The table is an LRU of block ids (cache.c, 200,000 of them) with, per
 * id, the pods it was routed to and when it was last used: a side table
 * indexed by the LRU's node. An entry unused for the TTL (20 minutes of
 * virtual time) is expired: it matches nothing and is reset when used
 * again. That is eviction of the expired first: their last use is the
 * oldest, so they are the LRU's tail, and the LRU evicts them before any
 * live entry.
 *
 * A pod leaving (drained or failed) is removed from every entry; a new
 * pod is in none. Loads, their mean and spread are over the serving
 * pods. */
#include <math.h>
#include <stdlib.h>

#include "peers.h"

#define TABLE_ENTRIES 200000
#define TTL_S (20 * 60.0)
#define IMBALANCE 8 /* in-flight requests, max - min */

typedef struct entry {
    double last_s;
    uint32_t pods; /* a list of pod_link in the pool, CR_REPLAY_NIL when none */
} entry;

typedef struct pod_link {
    uint32_t next, pod;
} pod_link;

typedef struct aibrix {
    uint64_t seed;
    cr_replay_cache table; /* block ids, LRU */
    entry *entries;        /* per table node */
    peer_pool links;       /* pod_link */
    uint32_t *matched;     /* per pod: leading blocks matched, this request */
    uint32_t *set, n_set;  /* pods holding every block so far */
    uint64_t *mark, stamp; /* pods of the block being walked: mark == stamp */
    uint32_t *cands;
    double clock;
} aibrix;

static pod_link *link_at(const aibrix *s, uint32_t l) { return peer_pool_at(&s->links, l); }

/* Takes pod's link out of e (every pod's, with CR_REPLAY_NIL). */
static void drop_pod(aibrix *s, entry *e, uint32_t pod)
{
    for (uint32_t *l = &e->pods; *l != CR_REPLAY_NIL;) {
        uint32_t k = *l;
        if (pod != CR_REPLAY_NIL && link_at(s, k)->pod != pod) {
            l = &link_at(s, k)->next;
            continue;
        }
        *l = link_at(s, k)->next;
        peer_pool_give(&s->links, k);
    }
}

static void drop_pods(aibrix *s, entry *e) { drop_pod(s, e, CR_REPLAY_NIL); }

static void reset(aibrix *s)
{
    cr_replay_cache_free(&s->table);
    peer_pool_free(&s->links);
    for (uint32_t k = 0; k < TABLE_ENTRIES; k++)
        s->entries[k].pods = CR_REPLAY_NIL;
}

/* The live entry of id, or NULL. */
static const entry *live(const aibrix *s, uint64_t id, double now)
{
    uint32_t k = cr_replay_cache_find(&s->table, id);
    if (k == CR_REPLAY_NIL || now - s->entries[k].last_s > TTL_S)
        return NULL;
    return &s->entries[k];
}

/* Walks ids while some pod holds all of them so far: each pod's matched
 * is the leading blocks it held while the walk lasted. Returns the pods
 * that held the first (the candidates) in cands, how many through *n. */
static void match(aibrix *s, const uint64_t *ids, uint32_t n_ids, double now, uint32_t *n)
{
    *n = 0;
    s->n_set = 0;
    for (uint32_t i = 0; i < n_ids; i++) {
        const entry *e = live(s, ids[i], now);
        if (!e)
            return;
        s->stamp++;
        for (uint32_t l = e->pods; l != CR_REPLAY_NIL;) {
            const pod_link *p = peer_pool_at(&s->links, l);
            s->mark[p->pod] = s->stamp;
            if (i == 0) {
                s->set[s->n_set++] = p->pod;
                s->cands[(*n)++] = p->pod;
            }
            l = p->next;
        }
        uint32_t kept = 0;
        for (uint32_t j = 0; j < s->n_set; j++)
            if (s->mark[s->set[j]] == s->stamp)
                s->set[kept++] = s->set[j];
        s->n_set = kept;
        if (!kept)
            return;
        for (uint32_t j = 0; j < kept; j++)
            s->matched[s->set[j]] = i + 1;
    }
}

/* The best ranked candidate (most matched, then fewer in flight, then the
 * lower index) whose load is at most mean + 1 std; CR_REPLAY_NIL if none. */
static uint32_t best_candidate(const aibrix *s, const cr_replay_view *v, uint32_t n)
{
    double sum = 0, sum2 = 0, pods = cr_replay_n_serving(v);
    CR_REPLAY_FOR_SERVING(v, k)
        sum += v->queued[k];
    double mean = sum / pods;
    CR_REPLAY_FOR_SERVING(v, k)
        sum2 += (v->queued[k] - mean) * (v->queued[k] - mean);
    double bound = mean + sqrt(sum2 / pods);
    uint32_t best = CR_REPLAY_NIL;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t p = s->cands[j];
        if (v->queued[p] > bound || !cr_replay_usable(v, p)) /* unusable: its removal ran out */
            continue;
        if (best == CR_REPLAY_NIL || s->matched[p] > s->matched[best] ||
            (s->matched[p] == s->matched[best] &&
             (v->queued[p] < v->queued[best] || (v->queued[p] == v->queued[best] && p < best))))
            best = p;
    }
    return best;
}

/* ids now also went to pod, at now. Last to first, so a prompt's leading
 * blocks are the most recent (the LRU evicts a prefix from its tail). */
static void record(aibrix *s, const uint64_t *ids, uint32_t n, uint32_t pod, double now)
{
    for (uint32_t i = n; i-- > 0;) {
        uint32_t k;
        int fresh = cr_replay_cache_use(&s->table, ids[i], &k);
        if (fresh < 0)
            return; /* out of memory: the rest unrecorded, as if evicted */
        entry *e = &s->entries[k];
        if (fresh || now - e->last_s > TTL_S)
            drop_pods(s, e);
        e->last_s = now;
        uint32_t l = e->pods;
        while (l != CR_REPLAY_NIL && ((pod_link *)peer_pool_at(&s->links, l))->pod != pod)
            l = ((pod_link *)peer_pool_at(&s->links, l))->next;
        if (l != CR_REPLAY_NIL || (l = peer_pool_take(&s->links)) == CR_REPLAY_NIL)
            continue;
        *(pod_link *)peer_pool_at(&s->links, l) = (pod_link){.next = e->pods, .pod = pod};
        e->pods = l;
    }
}

static uint32_t route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    aibrix *s = state;
    if (peer_new_run(&s->clock, v->now_s))
        reset(s);
    uint32_t most, least;
    peer_queued_range(v, &most, &least);
    uint32_t n, n_cands = 0, pod = CR_REPLAY_NIL;
    const uint64_t *ids = peer_prompt(v, r, &n);
    if (most - least <= IMBALANCE) {
        match(s, ids, n, v->now_s, &n_cands);
        pod = best_candidate(s, v, n_cands);
    }
    if (pod == CR_REPLAY_NIL)
        pod = peer_pick(s->seed, r, s->cands, peer_least_queued(v, s->cands));
    record(s, ids, n, pod, v->now_s);
    return pod;
}

static void members(void *state, const uint8_t *usable, uint32_t n_slots,
                    const cr_replay_member_event *ev)
{
    aibrix *s = state;
    uint32_t pod;
    (void)usable;
    (void)n_slots;
    if (peer_removal(ev, &pod))
        for (uint32_t k = 0; k < TABLE_ENTRIES; k++)
            drop_pod(s, &s->entries[k], pod);
}

static void aibrix_free(void *state)
{
    aibrix *s = state;
    if (!s)
        return;
    cr_replay_cache_free(&s->table);
    peer_pool_free(&s->links);
    free(s->entries);
    free(s->matched);
    free(s->set);
    free(s->mark);
    free(s->cands);
    free(s);
}

cr_status cr_peer_aibrix(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err)
{
    aibrix *s = calloc(1, sizeof *s);
    if (s) {
        uint32_t slots = cr_replay_slots(c);
        *s = (aibrix){.seed = c->seed};
        cr_replay_cache_init(&s->table, TABLE_ENTRIES);
        peer_pool_init(&s->links, sizeof(pod_link));
        s->entries = malloc(TABLE_ENTRIES * sizeof *s->entries);
        s->matched = calloc(slots, sizeof *s->matched);
        s->set = calloc(slots, sizeof *s->set);
        s->mark = calloc(slots, sizeof *s->mark);
        s->cands = calloc(slots, sizeof *s->cands);
    }
    if (!s || !s->entries || !s->matched || !s->set || !s->mark || !s->cands) {
        aibrix_free(s);
        return cr_fail(err, CR_ENOMEM, "out of memory for policy aibrix-prefix");
    }
    reset(s);
    *out = (cr_replay_policy){
        .name = "aibrix-prefix", .state = s, .route = route, .free = aibrix_free,
        .members = members};
    return CR_OK;
}
