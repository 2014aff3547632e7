/* min-ttft-exact: the reference every router is measured against, not a
 * router one could deploy. It is told the truth (the view's hit_blocks
 * reads the simulator's caches, and the true cost model is the cluster's),
 * so it sends each request where its TTFT will be lowest given what is
 * queued ahead of it: that shard's backlog plus the true prefill with that
 * shard's hit, noise aside (the simulator draws it after the choice). It
 * is greedy: it does not weigh what the choice costs the requests after.
 * It keeps nothing per shard: it looks only at the view's serving ones. */
#include <math.h>
#include <stdlib.h>

#include "peers.h"

typedef struct exact {
    cr_replay_cost truth;
    uint32_t block_tokens;
} exact;

static uint32_t route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const exact *s = state;
    double L = r->input_tokens, best = INFINITY;
    uint32_t shard = cr_replay_serving_at(v, 0);
    CR_REPLAY_FOR_SERVING(v, k) {
        /* A view without the lookup (a test's) hits nothing. */
        double blocks = v->hit_blocks ? v->hit_blocks(v->hit_ctx, k, r) : 0;
        double hit = blocks * s->block_tokens < L ? blocks * s->block_tokens : L;
        double ttft = v->backlog_ms[k] + cr_prefill_ms(&s->truth.prefill, hit, L);
        if (ttft < best) {
            best = ttft;
            shard = k;
        }
    }
    return shard;
}

static void exact_free(void *state) { free(state); }

cr_status cr_peer_exact(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err)
{
    exact *s = malloc(sizeof *s);
    if (!s)
        return cr_fail(err, CR_ENOMEM, "out of memory for policy min-ttft-exact");
    *s = (exact){.truth = c->truth, .block_tokens = c->block_tokens};
    *out = (cr_replay_policy){
        .name = "min-ttft-exact", .state = s, .route = route, .free = exact_free};
    return CR_OK;
}
