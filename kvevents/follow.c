/* The subscriber following the endpoint set (kvevents.h, "following the
 * endpoint set"): which links a set wants (pure), and the links made to
 * match it on the subscriber's thread. The core's members hook runs on
 * whatever thread changed the set, often under an RPC, so it only raises
 * the flag; the set is read here, where opening and closing sockets
 * delays nobody's call. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The dp_size ranks of base (shard and address set) into out: CR_OK, or
 * CR_EINVAL with err when a rank's endpoint cannot be made. */
static cr_status ranks_of(const cr_kv_engine *base, uint32_t dp_size, cr_kv_engine *out,
                          cr_error *err)
{
    for (uint32_t r = 0; r < dp_size; r++) {
        out[r] = (cr_kv_engine){.shard = base->shard, .rank = r};
        if (cr_kv_rank_endpoint(base->endpoint, r, out[r].endpoint, err) != CR_OK ||
            (*base->replay && cr_kv_rank_endpoint(base->replay, r, out[r].replay, err) != CR_OK))
            return CR_EINVAL;
    }
    return CR_OK;
}

size_t cr_kv_wanted(const cr_endpoints *e, uint32_t dp_size, uint64_t taken, cr_kv_engine *out,
                    size_t max, size_t *refused, size_t *bad, cr_error *err)
{
    size_t k = 0, over = 0, wrong = 0;
    cr_kv_engine ranks[CR_KV_MAX_DP];
    dp_size = dp_size == 0 ? 1 : dp_size > CR_KV_MAX_DP ? CR_KV_MAX_DP : dp_size;
    for (uint32_t slot = 0; e && slot < e->n_slots; slot++) {
        const cr_endpoint *x = &e->slot[slot];
        cr_kv_engine base;
        cr_error why;
        if (x->state == CR_ENDPOINT_GONE || !*x->kv_events ||
            (slot < CR_KV_MAX_ENGINES && (taken >> slot & 1)))
            continue;
        if (cr_kv_address_parse(x->kv_events, &base, &why) != CR_OK ||
            (base.shard = slot, ranks_of(&base, dp_size, ranks, &why) != CR_OK)) {
            if (!wrong++ && err)
                cr_fail(err, CR_EINVAL, "endpoint \"%s\" kv_events: %s", x->id, why.msg);
            continue;
        }
        if (k + dp_size > max) { /* an endpoint's ranks all or none */
            over += dp_size;
            continue;
        }
        memcpy(out + k, ranks, dp_size * sizeof *ranks);
        k += dp_size;
    }
    if (refused)
        *refused = over;
    if (bad)
        *bad = wrong;
    return k;
}

static int same(const cr_kv_engine *a, const cr_kv_engine *b)
{
    return a->shard == b->shard && a->rank == b->rank && !strcmp(a->endpoint, b->endpoint) &&
           !strcmp(a->replay, b->replay);
}

static int listed(const cr_kv_engine *v, size_t n, const cr_kv_engine *x)
{
    for (size_t i = 0; i < n; i++)
        if (same(&v[i], x))
            return 1;
    return 0;
}

/* Whether a followed link to x is open. */
static int open_to(const cr_kv_subscriber *s, const cr_kv_engine *x)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->shards[i].used && s->shards[i].followed && same(&s->shards[i].src, x))
            return 1;
    return 0;
}

/* The followed links no want lists closed, each reported. */
static void close_unwanted(cr_kv_subscriber *s, const cr_kv_engine *want, size_t n)
{
    for (size_t i = 0; i < s->n; i++) {
        shard *sh = &s->shards[i];
        if (!sh->used || !sh->followed || listed(want, n, &sh->src))
            continue;
        cr_kv_report r = {.kind = CR_KV_REPORT_UNSUBSCRIBED, .shard = sh->src.shard,
                          .detail = sh->src.endpoint, .first = sh->src.rank};
        cr_kv_link_close(s, sh, "the endpoint left the set or its kv_events changed");
        cr_kv_report_to(s, r);
    }
}

/* The wanted links not open yet opened, each reported; how many could not
 * be (the first's reason in why). */
static size_t open_wanted(cr_kv_subscriber *s, const cr_kv_engine *want, size_t n, char *why,
                          size_t len)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (open_to(s, &want[i]))
            continue;
        if (cr_kv_link_open(s, &want[i], 1) != 0) {
            if (!failed++)
                snprintf(why, len, "%s: cannot connect: %s", want[i].endpoint,
                         errno == ENOSPC ? "no free link" : zmq_strerror(errno));
            continue;
        }
        cr_kv_report_to(s, (cr_kv_report){.kind = CR_KV_REPORT_SUBSCRIBED,
                                          .shard = want[i].shard, .detail = want[i].endpoint,
                                          .first = want[i].rank});
    }
    return failed;
}

void cr_kv_follow_sync(cr_kv_subscriber *s)
{
    if (!atomic_exchange(&s->changed, 0))
        return;
    size_t fixed = 0; /* --kv-events' links: the followed ones get the other places */
    for (size_t i = 0; i < s->n; i++)
        fixed += s->shards[i].used && !s->shards[i].followed;
    cr_kv_engine *want = malloc(CR_KV_MAX_LINKS * sizeof *want);
    if (!want) {
        atomic_store(&s->changed, 1); /* tried again at the next turn */
        return;
    }
    const cr_endpoints *e = cr_core_endpoints(s->core);
    size_t refused, bad;
    cr_error err = {0};
    size_t n = cr_kv_wanted(e, s->dp_size, s->taken, want, s->cap - fixed, &refused, &bad, &err);
    cr_endpoints_release(e);
    close_unwanted(s, want, n);
    char why[CR_ERRLEN];
    size_t failed = open_wanted(s, want, n, why, sizeof why);
    free(want);
    if (refused + bad + failed == 0)
        return;
    char detail[3 * CR_ERRLEN];
    snprintf(detail, sizeof detail, "%zu past the %d links, %zu bad kv_events%s%s, %zu not opened%s%s",
             refused, CR_KV_MAX_LINKS, bad, bad ? ": " : "", bad ? err.msg : "", failed,
             failed ? ": " : "", failed ? why : "");
    cr_kv_report_to(s, (cr_kv_report){.kind = CR_KV_REPORT_REFUSED, .shard = UINT32_MAX,
                                      .detail = detail, .count = refused + bad + failed});
}
