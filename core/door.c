/* Admission at the door around the route (core.h, "admission at the
 * door"; the design in docs/admission.md). For a sheddable request the
 * door weighs the rule's prediction (cr_router_predict: its pick, nothing
 * remembered) and the request is placed only when the door routes it, so
 * that a request held or shed leaves nothing behind: no blocks in the
 * prefix index as if sent, no session, no work. Placed then, in the same
 * state, it goes where the prediction said: a request the door lets
 * through is placed exactly as without a door. A critical request is
 * placed as always and its pick then sampled (it is never held or shed).
 *
 * A held request is one block (held_request and copies of everything its
 * pointers name), whose address is its handle in the door's queue. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct held_request {
    cr_route_request q; /* its pointers into this block */
    cr_admit_ask ask;   /* fairness into this block */
    size_t bytes;
} held_request;

cr_status cr_core_set_door(cr_core *c, const cr_admit_config *cfg, const cr_admit_objective *t,
                           size_t n, cr_error *err)
{
    if (c->door)
        return cr_fail(err, CR_ESTATE, "the core has a door already");
    c->door = cr_admit_new(cfg, t, n, err);
    return c->door ? CR_OK : cr_admit_config_check(cfg, err) != CR_OK ? CR_EINVAL : CR_ENOMEM;
}

cr_admit *cr_core_door(cr_core *c) { return c->door; }

void cr_core_door_free(cr_core *c)
{
    if (!c->door)
        return;
    cr_admit_item it;
    while (cr_admit_expire(c->door, INFINITY, &it, 1)) /* every one is past an endless now */
        free((void *)(uintptr_t)it.handle);
    cr_admit_free(c->door);
    c->door = NULL;
}

/* q's objective as the door sees it: the table's defaults for its name
 * (an unknown name: critical, no SLO, counted under none), its own
 * priority and SLO over them. 0 when it names none of them. */
static int ask_of(cr_core *c, const cr_route_request *q, cr_admit_ask *ask)
{
    memset(ask, 0, sizeof *ask);
    ask->objective = CR_ADMIT_NO_OBJECTIVE;
    if (q->objective_len) {
        size_t n;
        const cr_admit_objective *t = cr_admit_objectives(c->door, &n);
        ask->objective = cr_admit_objective_find(t, n, q->objective, q->objective_len);
        if (ask->objective != CR_ADMIT_NO_OBJECTIVE) {
            ask->priority = t[ask->objective].priority;
            ask->slo_ms = t[ask->objective].slo_ms;
        }
    }
    if (q->has_priority)
        ask->priority = q->priority;
    if (q->slo_ttft_ms > 0)
        ask->slo_ms = q->slo_ttft_ms;
    ask->fairness = q->fairness;
    ask->fairness_len = q->fairness ? q->fairness_len : 0;
    ask->can_wait = q->can_wait;
    ask->has_objective = q->objective_len || q->has_priority || q->slo_ttft_ms > 0;
    return ask->has_objective;
}

/* Appends n bytes of src at *at (advanced); the copy's address. */
static void *put(char **at, const void *src, size_t n)
{
    void *p = *at;
    if (n)
        memcpy(p, src, n);
    *at += n;
    return p;
}

/* A copy of q in one block, to hold; NULL when out of memory. */
static held_request *hold_copy(const cr_route_request *q, const cr_admit_ask *ask)
{
    size_t id = q->request_id ? strlen(q->request_id) + 1 : 0;
    size_t bytes = sizeof(held_request) + q->n_hashes * sizeof *q->hashes +
                   (q->only ? q->n_only * sizeof *q->only : 0) + (q->space ? q->space_len : 0) +
                   id + ask->fairness_len;
    held_request *h = malloc(bytes);
    if (!h)
        return NULL;
    char *at = (char *)(h + 1);
    h->q = *q;
    h->ask = *ask;
    h->bytes = bytes;
    h->q.hashes = put(&at, q->hashes, q->n_hashes * sizeof *q->hashes);
    h->q.only = q->only ? put(&at, q->only, q->n_only * sizeof *q->only) : NULL;
    h->q.space = q->space ? put(&at, q->space, q->space_len) : NULL;
    h->q.request_id = id ? put(&at, q->request_id, id) : NULL;
    h->ask.fairness = put(&at, ask->fairness, ask->fairness_len);
    h->q.fairness = h->ask.fairness;
    h->q.objective = NULL; /* the ask holds what it meant */
    h->q.objective_len = 0;
    return h;
}

/* The door's word on q at now, a the rule's pick (predicted 1; placed
 * already for a critical request) or nothing (0: q waits behind a held
 * request whatever the rule says). Held or shed, a says so. */
static cr_admit_verdict door_one(cr_core *c, const cr_route_request *q, const cr_admit_ask *asked,
                                 cr_route_answer *a, int predicted, double now)
{
    cr_admit_ask ask = *asked;
    cr_admit_candidate pick = {a->shard, a->queue_wait_ms, a->queue_wait_ms + a->prefill_ms};
    size_t n = predicted && a->shard != CR_ROUTE_NO_SHARD ? 1 : 0;
    held_request *h = ask.priority < 0 ? hold_copy(q, &ask) : NULL; /* only these are held */
    /* its prompt tokens weigh it in the round robin: known predicted or
     * not, so every held request is weighed alike (a prefill is predicted
     * only with a pick) */
    uint64_t tokens = q->prompt_tokens ? q->prompt_tokens
                                       : (uint64_t)q->n_hashes * c->route.block_tokens;
    cr_admit_item it = {.handle = (uintptr_t)h, .cost = tokens ? (double)tokens : 1,
                        .bytes = h ? h->bytes : 0, .service_ms = a->prefill_ms};
    uint32_t at;
    cr_admit_verdict v = ask.priority < 0 && !h
                                 ? CR_ADMIT_SHED /* out of memory to hold it: as if full */
                                 : cr_admit_offer(c->door, &ask, &pick, n, now, &it, &at);
    if (v == CR_ADMIT_ROUTE) {
        free(h);
        return v;
    }
    a->admitted = 0;
    a->door = v == CR_ADMIT_HOLD ? CR_ROUTE_DOOR_QUEUED : CR_ROUTE_DOOR_SHED;
    if (v == CR_ADMIT_HOLD)
        a->held = (uintptr_t)h; /* its address only: h may be gone already */
    else
        free(h);
    return v;
}

void cr_core_door_meet(cr_core *c, cr_route_request *q)
{
    cr_admit_ask ask;
    int meet = cr_admit_config_of(c->door)->meet_slo;
    q->meet_ms = 0;
    if (meet == CR_ADMIT_MEET_OFF || !ask_of(c, q, &ask))
        return;
    /* pressed: only while the door acts, so an idle door changes no route */
    if (meet == CR_ADMIT_MEET_ALWAYS || cr_admit_acts(c->door, ask.priority))
        q->meet_ms = ask.slo_ms;
}

int cr_core_door_before(cr_core *c, const cr_table *t, uint32_t shards,
                        const cr_route_request *q, cr_route_answer *a, double now)
{
    cr_admit_ask ask;
    if (!ask_of(c, q, &ask) || ask.priority >= 0)
        return 0;
    memset(a, 0, sizeof *a);
    a->shard = CR_ROUTE_NO_SHARD;
    a->owner = q->owner;
    int behind = cr_admit_behind(c->door, ask.priority);
    if (!behind)
        cr_router_predict(c->router, t, shards, q, a, now);
    return door_one(c, q, &ask, a, !behind, now) != CR_ADMIT_ROUTE;
}

void cr_core_door_after(cr_core *c, uint32_t shards, const cr_route_request *q,
                        cr_route_answer *a, double now)
{
    cr_admit_ask ask;
    if (!ask_of(c, q, &ask) || ask.priority < 0)
        return;
    ask.spare = cr_router_any_idle(c->router, shards, now);
    door_one(c, q, &ask, a, 1, now); /* critical: always routed */
}

/* What ready weighs a held request against. */
typedef struct dispatch_view {
    cr_core *c;
    const cr_table *t;
    uint32_t n_shards;
    double now, budget_ms;
} dispatch_view;

/* The head met where the rule would send it now (cr_router_predict: the
 * shard cr_router_place then gives it, in the same state): the wait
 * there within the budget, and plus its prefill within its SLO less what
 * it waited. Not wherever the work is least: the rule may prefer a
 * longer queue that holds its prefix, and a dispatch into that queue
 * would delay the critical requests behind it. */
static int ready(void *ctx, const cr_admit_item *it)
{
    const dispatch_view *v = ctx;
    const held_request *h = (const held_request *)(uintptr_t)it->handle;
    cr_route_answer a;
    cr_router_predict(v->c->router, v->t, v->n_shards, &h->q, &a, v->now);
    if (a.shard == CR_ROUTE_NO_SHARD)
        return 0;
    double bound = INFINITY;
    if (it->slo_ms > 0)
        bound = it->slo_ms - (v->now - it->arrived_s) * 1000.0;
    return a.queue_wait_ms + a.prefill_ms <= bound &&
           (v->budget_ms <= 0 || a.queue_wait_ms <= v->budget_ms);
}

static void dispatched_of(const held_request *h, const cr_admit_item *it, double now,
                          cr_core_dispatched *d)
{
    memset(d, 0, sizeof *d);
    d->held = it->handle;
    d->held_ms = (now - it->arrived_s) * 1000.0;
    if (h->q.request_id)
        snprintf(d->request_id, sizeof d->request_id, "%s", h->q.request_id);
    d->caller = h->q.caller;
    d->owner = h->q.owner;
    d->has_owner = h->q.has_owner;
}

size_t cr_core_admit_dispatch(cr_core *c, cr_core_dispatched *out, size_t max)
{
    if (!c->door)
        return 0;
    double now = core_now(c);
    size_t k = 0;
    while (k < max) { /* the deadlines first: a dropped one never goes */
        cr_admit_item it;
        if (!cr_admit_expire(c->door, now, &it, 1))
            break;
        held_request *h = (held_request *)(uintptr_t)it.handle;
        dispatched_of(h, &it, now, &out[k]);
        out[k].dropped = 1;
        out[k].answer.shard = CR_ROUTE_NO_SHARD;
        out[k].answer.door = CR_ROUTE_DOOR_SHED;
        out[k++].answer.held = it.handle;
        free(h);
    }
    if (k == max)
        return k;
    uint64_t gen;
    cr_installed *t = cr_core_acquire(c, &gen);
    uint32_t n = cr_core_shards(c, t);
    dispatch_view v = {c, t ? t->table : NULL, n, now, cr_admit_config_of(c->door)->budget_ms};
    cr_admit_item it;
    cr_core_route_model_update(c); /* before the predictions: what places them predicted them */
    while (n && k < max && cr_admit_next(c->door, now, ready, &v, &it)) {
        held_request *h = (held_request *)(uintptr_t)it.handle;
        cr_core_dispatched *d = &out[k++];
        dispatched_of(h, &it, now, d);
        cr_router_place(c->router, v.t, n, &h->q, &d->answer, 1, now);
        d->answer.door = CR_ROUTE_DOOR_ROUTED;
        d->answer.held = it.handle;
        free(h);
    }
    cr_installed_release(t);
    return k;
}

/* What cr_core_admit_cancel looks for. */
typedef struct held_key {
    uint64_t held;
    const char *request_id;
} held_key;

static int is_held(const void *ctx, const cr_admit_item *it)
{
    const held_key *k = ctx;
    const held_request *h = (const held_request *)(uintptr_t)it->handle;
    return it->handle == k->held && h->q.request_id && !strcmp(h->q.request_id, k->request_id);
}

int cr_core_admit_cancel(cr_core *c, uint64_t held, const char *request_id)
{
    held_key k = {held, request_id};
    cr_admit_item it;
    if (!c->door || !request_id || !cr_admit_cancel(c->door, is_held, &k, &it))
        return 0;
    free((void *)(uintptr_t)it.handle);
    return 1;
}
