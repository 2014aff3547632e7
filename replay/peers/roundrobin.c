/* round-robin: what a gateway does with no endpoint picker (Envoy's
 * default lb_policy, ROUND_ROBIN; a Kubernetes Service's spreading is
 * close to it): each request to the next serving shard in index order,
 * blind to prompts and loads. The baseline of the EPP demo
 * (scripts/demo-epp.sh), whose driver sends the same way. */
#include <stdlib.h>

#include "peers.h"

typedef struct round_robin {
    uint32_t next;
    double clock;
} round_robin;

static uint32_t route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    (void)r;
    round_robin *s = state;
    if (peer_new_run(&s->clock, v->now_s))
        s->next = 0;
    return cr_replay_serving_at(v, s->next++ % cr_replay_n_serving(v));
}

static void round_robin_free(void *state) { free(state); }

cr_status cr_peer_round_robin(const cr_replay_cluster *c, cr_replay_policy *out, cr_error *err)
{
    (void)c;
    round_robin *s = calloc(1, sizeof *s);
    if (!s)
        return cr_fail(err, CR_ENOMEM, "out of memory for policy round-robin");
    *out = (cr_replay_policy){
        .name = "round-robin", .state = s, .route = route, .free = round_robin_free};
    return CR_OK;
}
