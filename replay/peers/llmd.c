/* llmd-scorer: the llm-d inference scheduler's default profile (rule in
 * replay.h). Three scorers, weighted 2, 2 and 3, summed; the highest sum
 * wins, ties drawn. The queue and KV scorers read metrics the scheduler
 * scrapes from the engines (vllm:num_requests_waiting and
 * vllm:kv_cache_usage_perc), so here they read the cluster's scrape when
 * the run has one (--scrape-interval: every request, foreign ones too),
 * else a snapshot of the view taken when 50 ms of virtual time have
 * passed since the last: a request routed between scrapes does not show
 * in them, which is what makes a burst pile onto one pod. The prefix
 * scorer reads the scheduler's own
 * index of what it sent where (an LRU per pod, filled at routing), never
 * the engines' caches. */
#include <stdlib.h>
#include <string.h>

#include "peers.h"

#define W_QUEUE 2.0
#define W_KV 2.0
#define W_PREFIX 3.0
#define SCRAPE_S 0.050
/* The prefix scorer hashes at most 256 blocks of 64 characters of the
 * prompt: its first 4096 tokens, 8 of the replay's 512-token blocks. */
#define PREFIX_CHARS (256 * 64)

typedef struct llmd {
    uint32_t slots, prefix_blocks;
    uint64_t seed, capacity; /* the cluster's shard_blocks, where the view has none */
    peer_lrus index;   /* per pod: the leading blocks routed there */
    double clock;
    int scraped;       /* a snapshot is held */
    double scraped_at; /* s */
    uint32_t *waiting; /* the snapshot, per pod */
    double *usage;
    uint32_t *cands;
} llmd;

/* vLLM's num_requests_waiting: a shard serves one prefill at a time, and
 * that one is running, not waiting. From the cluster's scrape when there
 * is one, else from the view now. */
static void scrape(llmd *s, const cr_replay_view *v)
{
    double capacity = (double)(v->shard_blocks ? v->shard_blocks : s->capacity);
    const cr_replay_scrape *m = v->scrape;
    CR_REPLAY_FOR_SERVING(v, k) {
        s->waiting[k] = m ? m->waiting[k] : v->queued[k] ? v->queued[k] - 1 : 0;
        const uint32_t *blocks = m ? m->blocks_held : v->blocks_held;
        double held = blocks ? blocks[k] : 0; /* none shown: empty */
        s->usage[k] = held < capacity ? held / capacity : 1.0;
    }
    s->scraped = 1;
    s->scraped_at = m ? m->at_s : v->now_s;
}

static uint32_t route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    llmd *s = state;
    if (peer_new_run(&s->clock, v->now_s)) {
        peer_lrus_clear(&s->index);
        s->scraped = 0;
        /* A pod joining before the next scrape shows what a new pod does. */
        memset(s->waiting, 0, s->slots * sizeof *s->waiting);
        memset(s->usage, 0, s->slots * sizeof *s->usage);
    }
    if (v->scrape || !s->scraped || v->now_s - s->scraped_at >= SCRAPE_S)
        scrape(s, v); /* the cluster's scrape is read as it stands */
    uint32_t n;
    const uint64_t *ids = peer_prompt(v, r, &n);
    uint32_t hashed = n < s->prefix_blocks ? n : s->prefix_blocks;
    uint32_t most = 0, least = UINT32_MAX;
    CR_REPLAY_FOR_SERVING(v, k) {
        most = s->waiting[k] > most ? s->waiting[k] : most;
        least = s->waiting[k] < least ? s->waiting[k] : least;
    }
    double best = -1;
    uint32_t n_best = 0;
    CR_REPLAY_FOR_SERVING(v, k) {
        double queue = most == least ? 1.0 : (double)(most - s->waiting[k]) / (most - least);
        double prefix =
            hashed ? (double)cr_replay_cache_prefix(&s->index.c[k], ids, hashed) / hashed : 0;
        double score = W_QUEUE * queue + W_KV * (1.0 - s->usage[k]) + W_PREFIX * prefix;
        if (score > best) {
            best = score;
            n_best = 0;
        }
        if (score == best)
            s->cands[n_best++] = k;
    }
    uint32_t pod = peer_pick(s->seed, r, s->cands, n_best);
    /* Out of memory: the index misses these blocks, as after an eviction. */
    (void)cr_replay_cache_insert(&s->index.c[pod], ids, hashed);
    return pod;
}

/* A pod leaving the candidate set takes its prefix-index entries with it;
 * a new pod starts with none (its LRU is empty until routed to). */
static void members(void *state, const uint8_t *usable, uint32_t n_slots,
                    const cr_replay_member_event *ev)
{
    llmd *s = state;
    uint32_t pod;
    (void)usable;
    (void)n_slots;
    if (peer_removal(ev, &pod))
        cr_replay_cache_free(&s->index.c[pod]);
}

static void llmd_free(void *state)
{
    llmd *s = state;
    if (!s)
        return;
    peer_lrus_free(&s->index);
    free(s->waiting);
    free(s->usage);
    free(s->cands);
    free(s);
}

cr_status cr_peer_llmd(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err)
{
    llmd *s = calloc(1, sizeof *s);
    if (s) {
        uint32_t blocks = PREFIX_CHARS / PEER_CHARS_PER_TOKEN / c->block_tokens;
        *s = (llmd){.slots = cr_replay_slots(c), .prefix_blocks = blocks ? blocks : 1,
                    .seed = c->seed, .capacity = c->shard_blocks};
        s->waiting = calloc(s->slots, sizeof *s->waiting);
        s->usage = calloc(s->slots, sizeof *s->usage);
        s->cands = calloc(s->slots, sizeof *s->cands);
    }
    if (!s || !s->waiting || !s->usage || !s->cands ||
        peer_lrus_init(&s->index, s->slots, c->shard_blocks) != 0) {
        llmd_free(s);
        return cr_fail(err, CR_ENOMEM, "out of memory for policy llmd-scorer");
    }
    *out = (cr_replay_policy){
        .name = "llmd-scorer", .state = s, .route = route, .free = llmd_free,
        .members = members};
    return CR_OK;
}
