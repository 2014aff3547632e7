/* The trace: loaded or generated, and the figures the report states and
 * the defaults (--shard-fraction, the sweep's grid) derive from; and the
 * membership events played over it. */
#include <stdlib.h>

#include "cli.h"
#include "internal.h" /* the LRU cache, as a set; the owners' counts */

/* 0 when out of memory. */
static size_t count_owners(const cr_replay_trace *t)
{
    size_t n = 0, *counts = cr_replay_owner_counts(t, &n);
    free(counts);
    return counts ? n : 0;
}

/* Distinct block ids: an LRU set as large as the pool never evicts, so
 * its size is the count. */
static size_t count_blocks(const cr_replay_trace *t)
{
    cr_replay_cache set;
    uint32_t cap = t->n_blocks < CR_REPLAY_CACHE_MAX ? (uint32_t)t->n_blocks : CR_REPLAY_CACHE_MAX;
    cr_replay_cache_init(&set, cap ? cap : 1);
    int bad = cr_replay_cache_insert(&set, t->blocks, (uint32_t)t->n_blocks) != 0;
    size_t n = bad ? 0 : set.n;
    cr_replay_cache_free(&set);
    return n;
}

void cli_measure(const cr_replay_trace *t, const cr_replay_cost *truth, trace_stats *st)
{
    *st = (trace_stats){.requests = t->n, .owner_gini = cr_replay_owner_gini(t)};
    st->span_s = (t->reqs[t->n - 1].t_ms - t->reqs[0].t_ms) / 1000.0;
    st->rate_per_s = st->span_s > 0 ? (double)t->n / st->span_s : 0;
    st->owners = count_owners(t);
    st->distinct_blocks = count_blocks(t);
    double cold = 0;
    for (size_t i = 0; i < t->n; i++) {
        st->knowledge |= t->reqs[i].knowledge_tokens > 0;
        cold += cr_prefill_ms(&truth->prefill, 0, t->reqs[i].input_tokens);
    }
    st->cold_ms_mean = cold / (double)t->n;
}

int cli_open_trace(const settings *s, cr_replay_trace *t, cr_error *err)
{
    cr_status st = s->generate ? cr_replay_generate(&s->gen, t, err)
                               : cr_replay_trace_load(s->trace, &s->key, t, err);
    if (st == CR_OK)
        return 0;
    return st == CR_EINVAL ? 2 : 1;
}

int cli_open_events(settings *s, cr_error *err)
{
    if (!s->events_path[0])
        return 0;
    cr_status st = cr_replay_events_load(s->events_path, s->cluster.shards, &s->events, err);
    if (st != CR_OK)
        return st == CR_EINVAL ? 2 : 1;
    s->cluster.events = &s->events;
    return 0;
}
