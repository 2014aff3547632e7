/* dynamo-kv: NVIDIA Dynamo's KV router, routing prefills (rule in
 * replay.h). Per worker its cost is the prefill it would have queued, in
 * blocks: (the uncached tokens of what is in flight there + the prompt -
 * the prompt's overlap with the worker's cache) / block_tokens; the
 * lowest wins (temperature 0), ties to the smaller cache, then drawn.
 *
 * The router knows a worker's cache only from the worker's KV events, and
 * a prefill's blocks are stored (and reported) when it completes. So the
 * policy keeps a shadow LRU per worker, as large as the real one, fed at
 * each request's completion (its arrival + queue wait + prefill, known in
 * served): a min-heap of completions (finishes.c), and before each
 * routing decision every completion due is applied. A block routed to a
 * worker whose prefill has not completed is no overlap yet.
 *
 * What is in flight is the router's own bookkeeping: a request charges
 * its worker the tokens the router expected to prefill (the prompt less
 * the overlap it saw) from routing until its completion.
 *
 * A worker leaving (drained or failed) is removed from the indexer: its
 * shadow and its charges go, and completions it reports later are not
 * heard (it is no longer a candidate). A joining worker starts empty. */
#include <stdlib.h>

#include "peers.h"

typedef struct dynamo {
    uint32_t slots, block_tokens;
    uint64_t seed;
    peer_lrus shadow;            /* per worker: blocks completed there */
    cr_replay_finishes pending;  /* routed, prefill not yet completed */
    uint64_t *inflight_tokens;   /* per worker: their charges */
    uint32_t *cands;
    double clock;
    uint32_t charged; /* the request just routed: its charge, for served */
} dynamo;

static void reset(dynamo *s)
{
    peer_lrus_clear(&s->shadow);
    cr_replay_finishes_free(&s->pending);
    for (uint32_t k = 0; k < s->slots; k++)
        s->inflight_tokens[k] = 0;
}

/* The KV events of every prefill completed by now: its blocks stored, its
 * charge released; none from a worker removed. */
static void apply_completions(dynamo *s, const cr_replay_view *v)
{
    cr_replay_finish f;
    while (cr_replay_finishes_pop_due(&s->pending, v->now_s, &f)) {
        if (!cr_replay_usable(v, f.shard))
            continue;
        s->inflight_tokens[f.shard] -= f.prompt_tokens - f.cached_tokens;
        if (v->blocks) /* out of memory: the shadow misses them, as after an eviction */
            (void)cr_replay_cache_insert(&s->shadow.c[f.shard], v->blocks + f.first_block,
                                         f.n_blocks);
    }
}

static uint32_t route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    dynamo *s = state;
    if (peer_new_run(&s->clock, v->now_s))
        reset(s);
    apply_completions(s, v);
    uint32_t n;
    const uint64_t *ids = peer_prompt(v, r, &n);
    /* Costs compared times block_tokens: whole tokens, so ties are exact. */
    int64_t best = INT64_MAX;
    uint32_t n_best = 0, smallest = UINT32_MAX;
    CR_REPLAY_FOR_SERVING(v, k) {
        const cr_replay_cache *shadow = &s->shadow.c[k];
        uint32_t overlap = cr_replay_cache_prefix(shadow, ids, n);
        int64_t cost = (int64_t)s->inflight_tokens[k] + r->input_tokens -
                       (int64_t)overlap * s->block_tokens;
        if (cost < best || (cost == best && shadow->n < smallest)) {
            best = cost;
            smallest = shadow->n;
            n_best = 0;
        }
        if (cost == best && shadow->n == smallest)
            s->cands[n_best++] = k;
    }
    uint32_t worker = peer_pick(s->seed, r, s->cands, n_best);
    /* Tied workers may tie with different overlaps: the chosen one's. */
    uint64_t cached = (uint64_t)cr_replay_cache_prefix(&s->shadow.c[worker], ids, n) *
                      s->block_tokens;
    s->charged = cached < r->input_tokens ? r->input_tokens - (uint32_t)cached : 0;
    s->inflight_tokens[worker] += s->charged;
    return worker;
}

static void served(void *state, const cr_replay_request *r, const cr_replay_outcome *o)
{
    dynamo *s = state;
    cr_replay_finish f = {
        .at_s = s->clock + (o->queue_wait_ms + o->prefill_ms) / 1000.0,
        .owner = r->owner,
        .shard = o->shard,
        .prompt_tokens = r->input_tokens,
        .cached_tokens = r->input_tokens - s->charged, /* as the router expected */
        .first_block = r->first_block,
        .n_blocks = r->n_blocks,
    };
    if (cr_replay_finishes_push(&s->pending, f) != 0) /* out of memory: forget it whole */
        s->inflight_tokens[o->shard] -= s->charged;
    s->charged = 0;
}

static void members(void *state, const uint8_t *usable, uint32_t n_slots,
                    const cr_replay_member_event *ev)
{
    dynamo *s = state;
    uint32_t worker;
    (void)usable;
    (void)n_slots;
    if (!peer_removal(ev, &worker))
        return;
    cr_replay_cache_free(&s->shadow.c[worker]);
    s->inflight_tokens[worker] = 0;
}

static void dynamo_free(void *state)
{
    dynamo *s = state;
    if (!s)
        return;
    peer_lrus_free(&s->shadow);
    cr_replay_finishes_free(&s->pending);
    free(s->inflight_tokens);
    free(s->cands);
    free(s);
}

cr_status cr_peer_dynamo(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err)
{
    dynamo *s = calloc(1, sizeof *s);
    if (s) {
        *s = (dynamo){.slots = cr_replay_slots(c), .block_tokens = c->block_tokens,
                      .seed = c->seed};
        s->inflight_tokens = calloc(s->slots, sizeof *s->inflight_tokens);
        s->cands = calloc(s->slots, sizeof *s->cands);
    }
    if (!s || !s->inflight_tokens || !s->cands ||
        peer_lrus_init(&s->shadow, s->slots, c->shard_blocks) != 0) {
        dynamo_free(s);
        return cr_fail(err, CR_ENOMEM, "out of memory for policy dynamo-kv");
    }
    *out = (cr_replay_policy){.name = "dynamo-kv", .state = s, .route = route,
                              .served = served, .free = dynamo_free, .members = members};
    return CR_OK;
}
