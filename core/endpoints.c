/* The endpoint set behind SetEndpoints, DrainEndpoint and ListEndpoints
 * (cr_core_endpoints, which every answer naming endpoints reads too), and
 * the failure detector (core.h, "endpoints"): each change makes a new
 * set (endpoints.h), tells
 * the router which shards serve and what a departed engine left, then
 * publishes the set; routes read the set's slot count and the router's
 * mask, which is updated first, so a route never sees a slot the router
 * does not know. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Errors of one slot in its current window. */
struct cr_core_errors {
    double since; /* the window's start */
    uint32_t n;
};

void cr_members_init(cr_core *c, const cr_endpoints_config *cfg)
{
    c->endpoints_cfg = *cfg;
    cr_published_init(&c->members);
    pthread_mutex_init(&c->members_lock, NULL);
    atomic_store(&c->next_retry, INFINITY);
}

void cr_members_destroy(cr_core *c)
{
    cr_published_destroy(&c->members);
    pthread_mutex_destroy(&c->members_lock);
    free(c->errors);
    free(c->own);
}

const cr_endpoints *cr_members_current(cr_core *c)
{
    return (const cr_endpoints *)cr_published_acquire(&c->members, NULL);
}

const cr_endpoints *cr_core_endpoints(cr_core *c)
{
    /* every RecordArrival and Route answer asks: without a set, no lock */
    if (!atomic_load_explicit(&c->member_slots, memory_order_acquire))
        return NULL;
    double now = core_now(c);
    if (now >= atomic_load_explicit(&c->next_retry, memory_order_relaxed))
        cr_members_retry(c, now);
    return cr_members_current(c);
}

/* 1 when slot s's engine went with this change (GONE or DOWN now, serving
 * before), a new endpoint took a gone slot, or the slot names another
 * endpoint (a leader's set adopted over a different history): the router
 * forgets it. */
static int departed(const cr_endpoints *old, const cr_endpoints *e, uint32_t s)
{
    cr_endpoint_state now = e->slot[s].state, was;
    if (!old || s >= old->n_slots)
        return 0;
    was = old->slot[s].state;
    int gone_now = now == CR_ENDPOINT_GONE || now == CR_ENDPOINT_DOWN;
    int gone_was = was == CR_ENDPOINT_GONE || was == CR_ENDPOINT_DOWN;
    return (gone_now && !gone_was) || (was == CR_ENDPOINT_GONE && now != CR_ENDPOINT_GONE) ||
           strcmp(old->slot[s].id, e->slot[s].id) != 0;
}

cr_status cr_members_publish(cr_core *c, const cr_endpoints *old, cr_endpoints *e,
                         cr_core_members_event *ev, cr_error *err)
{
    uint32_t n = e->n_slots;
    uint8_t *usable = malloc(n), *forget = malloc(n);
    double *speed = malloc(n * sizeof *speed);
    struct cr_core_errors *errors =
        realloc(c->errors, (size_t)(n ? n : 1) * sizeof *errors);
    int64_t leaving = -1;
    if (errors) {
        uint32_t had = old ? old->n_slots : 0;
        c->errors = errors;
        if (n > had)
            memset(errors + had, 0, (n - had) * sizeof *errors);
    }
    if (usable && forget && speed && errors) {
        cr_endpoints_usable(e, usable);
        for (uint32_t s = 0; s < n; s++) {
            speed[s] = e->slot[s].weight > 0 ? e->slot[s].weight : 1;
            forget[s] = (uint8_t)departed(old, e, s);
            if (forget[s] || (old && s < old->n_slots && old->slot[s].state != e->slot[s].state))
                errors[s] = (struct cr_core_errors){0, 0}; /* a new life counts anew */
        }
        leaving = cr_router_members(c->router, n, usable, speed, forget);
    }
    free(usable), free(forget), free(speed);
    if (leaving < 0) {
        cr_endpoints_release(e);
        return cr_fail(err, CR_ENOMEM, "out of memory for %u endpoint slots", n);
    }
    ev->version = e->version;
    ev->n_slots = n;
    ev->sessions_to_move = (uint64_t)leaving;
    e->sessions_to_move += (uint64_t)leaving; /* not yet shared: still ours to fill */
    /* A follower retries nothing itself: the leader's retry comes adopted. */
    atomic_store_explicit(&c->next_retry, cr_members_followed(c) ? INFINITY : e->next_retry_s,
                          memory_order_relaxed);
    cr_published_swap(&c->members, (cr_ref *)&e->ref);
    atomic_store_explicit(&c->member_slots, n, memory_order_release);
    return CR_OK;
}

void cr_members_report(cr_core *c, const cr_core_members_event *ev)
{
    if (c->hooks.members)
        c->hooks.members(c->hooks.ctx, ev);
}


cr_status cr_members_set_state(cr_core *c, const cr_endpoints *old, uint32_t slot,
                           cr_endpoint_state state, double now, double until_s,
                           cr_core_members_event *ev, cr_error *err)
{
    cr_endpoints *e;
    cr_status st =
        cr_endpoints_with_state(old, slot, state, now, until_s, &e, &ev->change, err);
    return st == CR_OK ? cr_members_publish(c, old, e, ev, err) : st;
}



void cr_members_retry(cr_core *c, double now)
{
    for (;;) { /* one endpoint per change, each reported */
        cr_core_members_event ev = {.by = "retry"};
        char id[CR_ENDPOINT_ID_MAX + 1] = "";
        pthread_mutex_lock(&c->members_lock);
        const cr_endpoints *old = cr_members_current(c);
        uint32_t slot = UINT32_MAX;
        for (uint32_t s = 0; old && now >= old->next_retry_s && s < old->n_slots; s++)
            if (old->slot[s].state == CR_ENDPOINT_DOWN && old->slot[s].down_until_s <= now) {
                slot = s;
                break;
            }
        cr_error err;
        int changed = slot != UINT32_MAX &&
                      cr_members_set_state(c, old, slot, CR_ENDPOINT_ACTIVE, now, 0, &ev, &err) == CR_OK;
        if (changed)
            memcpy(id, old->slot[slot].id, sizeof id);
        pthread_mutex_unlock(&c->members_lock);
        cr_endpoints_release(old);
        if (!changed)
            return; /* none due (or out of memory: the next call tries again) */
        ev.id = id;
        cr_members_report(c, &ev);
    }
}

int cr_members_error(cr_core *c, uint32_t shard, double now)
{
    const cr_endpoints_config *cfg = &c->endpoints_cfg;
    cr_core_members_event ev = {.by = "errors"};
    char id[CR_ENDPOINT_ID_MAX + 1] = "";
    int down = 0, known;
    pthread_mutex_lock(&c->members_lock);
    const cr_endpoints *old = cr_members_current(c);
    known = old && shard < old->n_slots && old->slot[shard].state != CR_ENDPOINT_GONE;
    /* A follower marks nothing down: its set is the leader's (core.h). */
    if (known && old->slot[shard].state == CR_ENDPOINT_ACTIVE && cfg->fail_errors &&
        !cr_members_followed(c)) {
        struct cr_core_errors *x = &c->errors[shard];
        if (!x->n || now - x->since > cfg->fail_window_s)
            *x = (struct cr_core_errors){now, 0};
        cr_error err;
        down = ++x->n >= cfg->fail_errors &&
               cr_members_set_state(c, old, shard, CR_ENDPOINT_DOWN, now, now + cfg->down_s, &ev, &err) ==
                   CR_OK;
        if (down)
            memcpy(id, old->slot[shard].id, sizeof id);
    }
    pthread_mutex_unlock(&c->members_lock);
    cr_endpoints_release(old);
    if (down) {
        ev.id = id;
        cr_members_report(c, &ev);
    }
    return known;
}
