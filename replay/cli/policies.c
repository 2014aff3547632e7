/* The policies the tool knows and how each is made for a run: the
 * baselines (replay.h), cacheroute (the core, knowledge by its injection
 * model), cacheroute's routes under another knowledge rule, and the peers
 * (the routers platform teams deploy, and the exact reference). The
 * knowledge variants and --dump-routes' recorder wrap another policy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* "iws" is cacheroute's own rule under its own name. The first
 * DEFAULT_POLICIES are the default; the next KNOWLEDGE_POLICIES join them
 * when the trace has knowledge. The peers, from FIRST_PEER on, are only
 * run when named. */
static const char *const POLICY_NAMES[] = {
    "cacheroute",  "flat-lb",   "sticky", "chwbl", "least-loaded", "random",
    "always-text", "always-kv", "oracle", "iws",
    "llmd-scorer", "sglang-cache-aware", "dynamo-kv", "aibrix-prefix", "min-ttft-exact",
    "round-robin"};
#define KNOWLEDGE_POLICIES 3
#define FIRST_PEER 10
#define N_POLICY_NAMES (sizeof POLICY_NAMES / sizeof POLICY_NAMES[0])

const char *cli_policy_name(unsigned policy) { return POLICY_NAMES[policy]; }

int cli_policy_index(const char *name, size_t len)
{
    for (size_t k = 0; k < N_POLICY_NAMES; k++)
        if (strlen(POLICY_NAMES[k]) == len && strncmp(POLICY_NAMES[k], name, len) == 0)
            return (int)k;
    return -1;
}

void cli_policy_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < N_POLICY_NAMES && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", k ? ", " : "", POLICY_NAMES[k]);
}

void cli_choose_policies(settings *s, const trace_stats *st)
{
    if ((s->set & SET_POLICIES) || !st->knowledge)
        return;
    for (unsigned k = DEFAULT_POLICIES; k < DEFAULT_POLICIES + KNOWLEDGE_POLICIES; k++)
        s->policies[s->n_policies++] = k;
}

/* ---- the wrapper ---------------------------------------------------------- */

typedef enum kv_rule { KV_OWN, KV_TEXT, KV_ALL, KV_ORACLE } kv_rule;

/* Another policy with a knowledge rule of its own and, optionally, every
 * outcome written to a CSV. */
typedef struct wrapper {
    cr_replay_policy inner;
    kv_rule rule;
    const cr_replay_cluster *c;
    FILE *dump; /* NULL = none */
    double scale;
    size_t next, replans_seen; /* requests served; replans when last looked */
    int replanned;             /* before the request being routed */
} wrapper;

/* The path that is faster for the request under the true model, noise
 * aside (the simulation draws it after the choice), given its prefix hit
 * on its shard: the same sums sim.c charges. */
static int oracle_kv(const wrapper *w, const cr_replay_request *r, uint32_t hit_tokens)
{
    const cr_replay_cost *k = &w->c->truth;
    double L = r->input_tokens, K = r->knowledge_tokens, hit = hit_tokens;
    double text = cr_prefill_ms(&k->prefill, hit, L);
    double kv = cr_prefill_ms(&k->prefill, fmin(L, hit + K), L) + k->kv_fixed_ms +
                k->kv_ms_per_token * K;
    return kv < text;
}

static int wrapper_kv(void *state, const cr_replay_request *r, const cr_replay_view *v,
                      uint32_t shard, uint32_t hit_tokens)
{
    wrapper *w = state;
    switch (w->rule) {
    case KV_TEXT:
        return 0;
    case KV_ALL:
        return 1;
    case KV_ORACLE:
        return oracle_kv(w, r, hit_tokens);
    default:
        return w->inner.kv ? w->inner.kv(w->inner.state, r, v, shard, hit_tokens) : 0;
    }
}

static uint32_t wrapper_route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    wrapper *w = state;
    return w->inner.route(w->inner.state, r, v);
}

/* Notes a replan the inner policy made before this request, for the
 * dump's replanned column. */
static void wrapper_tick(void *state, double now_s)
{
    wrapper *w = state;
    if (!w->inner.tick)
        return;
    w->inner.tick(w->inner.state, now_s);
    size_t n = 0;
    const double *changed, *at;
    if (w->dump && w->inner.replans && w->inner.replans(w->inner.state, &n, &changed, &at) == 0 &&
        n != w->replans_seen) {
        w->replanned = 1;
        w->replans_seen = n;
    }
}

static void wrapper_served(void *state, const cr_replay_request *r, const cr_replay_outcome *o)
{
    wrapper *w = state;
    if (w->dump)
        fprintf(w->dump, "%s,%.15g,%zu,%lld,%u,%u,%u,%u,%.17g,%.17g,%.17g,%.17g,%d,%d\n",
                w->inner.name, w->scale, w->next, (long long)r->owner, r->input_tokens,
                r->knowledge_tokens, o->shard, o->hit_tokens, o->queue_wait_ms, o->prefill_ms,
                o->kv_ms, o->ttft_ms, o->used_kv, w->replanned);
    w->next++;
    w->replanned = 0;
    if (w->inner.served)
        w->inner.served(w->inner.state, r, o);
}

static int wrapper_replans(void *state, size_t *n, const double **changed, const double **at)
{
    wrapper *w = state;
    if (!w->inner.replans) {
        *n = 0;
        return 0;
    }
    return w->inner.replans(w->inner.state, n, changed, at);
}

static int wrapper_predicted(void *state, uint32_t *tokens)
{
    wrapper *w = state;
    return w->inner.predicted(w->inner.state, tokens);
}

static void wrapper_evicted(void *state, uint32_t shard, uint64_t id)
{
    wrapper *w = state;
    w->inner.evicted(w->inner.state, shard, id);
}

static void wrapper_members(void *state, const uint8_t *usable, uint32_t n_slots,
                            const cr_replay_member_event *ev)
{
    wrapper *w = state;
    w->inner.members(w->inner.state, usable, n_slots, ev);
}

static void wrapper_free(void *state)
{
    wrapper *w = state;
    if (w->inner.free)
        w->inner.free(w->inner.state);
    free(w);
}

/* Wraps *p (taken over: freed on failure too) in place. */
static cr_status wrap(cr_replay_policy *p, const char *name, kv_rule rule,
                      const cr_replay_cluster *c, FILE *dump, cr_error *err)
{
    wrapper *w = calloc(1, sizeof *w);
    if (!w) {
        if (p->free)
            p->free(p->state);
        return cr_fail(err, CR_ENOMEM, "out of memory for policy %s", name);
    }
    *w = (wrapper){.inner = *p, .rule = rule, .c = c, .dump = dump, .scale = c->scale};
    w->inner.name = name;
    *p = (cr_replay_policy){.name = name, .state = w, .route = wrapper_route,
                            .kv = wrapper_kv, .served = wrapper_served, .tick = wrapper_tick,
                            .free = wrapper_free, .replans = wrapper_replans,
                            .predicted = w->inner.predicted ? wrapper_predicted : NULL,
                            .evicted = w->inner.evicted ? wrapper_evicted : NULL,
                            .members = w->inner.members ? wrapper_members : NULL};
    return CR_OK;
}

/* The knowledge variants route like cacheroute (the same core, so the same
 * shards request by request); a baseline, a peer or cacheroute itself is
 * wrapped only to record its outcomes. */
cr_status cli_make_policy(unsigned name, const cr_core_config *core, const settings *s,
                          const cr_replay_cluster *c, FILE *dump, cr_replay_policy *out,
                          cr_error *err)
{
    const char *n = POLICY_NAMES[name];
    static const kv_rule RULES[] = {[6] = KV_TEXT, [7] = KV_ALL, [8] = KV_ORACLE, [9] = KV_OWN};
    int own_rule = name < DEFAULT_POLICIES || name >= FIRST_PEER;
    cr_status st;
    if (name >= FIRST_PEER)
        st = cr_replay_peer(n, c, out, err);
    else if (name == 0 || !own_rule)
        st = cr_replay_cacheroute_policy(core, s->weight, s->call, s->kv_events, c, out, err);
    else
        st = cr_replay_baseline(n, c, out, err);
    if (st != CR_OK || (own_rule && !dump))
        return st;
    return wrap(out, n, own_rule ? KV_OWN : RULES[name], c, dump, err);
}
