/* Endpoint sets (endpoints.h): each change copies the old set into a new
 * one, so a set a route holds never changes under it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints.h"

static const char *const STATE[] = {"active", "draining", "down", "gone"};

const char *cr_endpoint_state_name(cr_endpoint_state s)
{
    return (unsigned)s < 4 ? STATE[s] : "unknown";
}

static void set_free(cr_ref *ref)
{
    free((cr_endpoints *)((char *)ref - offsetof(cr_endpoints, ref)));
}

void cr_endpoints_retain(const cr_endpoints *e)
{
    if (e)
        cr_ref_retain((cr_ref *)&e->ref);
}

void cr_endpoints_release(const cr_endpoints *e)
{
    if (e)
        cr_ref_release((cr_ref *)&e->ref);
}

/* 1 when s is 1..max bytes of printable ASCII. */
static int printable(const char *s, size_t max)
{
    size_t n = s ? strnlen(s, max + 1) : 0;
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return 0;
    return 1;
}

/* The first bytes of s for a message, quoted and cut. */
static const char *shown(const char *s, char *buf, size_t len)
{
    snprintf(buf, len, "%.60s%s", s ? s : "", s && strlen(s) > 60 ? "..." : "");
    for (char *p = buf; *p; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '"')
            *p = '?';
    return buf;
}

cr_status cr_endpoint_weight_check(const char *what, double w, const char *text,
                                   cr_error *err)
{
    char got[80], cut[72];
    if (!text && (w == 0 || (w >= CR_ENDPOINT_WEIGHT_MIN && w <= CR_ENDPOINT_WEIGHT_MAX)))
        return CR_OK;
    if (text)
        snprintf(got, sizeof got, "\"%s\"", shown(text, cut, sizeof cut));
    else
        snprintf(got, sizeof got, "%g", w);
    return cr_fail(err, CR_EINVAL, "%s.weight must be in [%g, %g] or 0 (for 1), got %s", what,
                   CR_ENDPOINT_WEIGHT_MIN, CR_ENDPOINT_WEIGHT_MAX, got);
}

cr_status cr_endpoints_check(const cr_endpoint_spec *v, size_t n, cr_error *err)
{
    char got[80];
    if (n == 0)
        return cr_fail(err, CR_EINVAL, "endpoints must not be empty");
    if (n > CR_ENDPOINTS_MAX)
        return cr_fail(err, CR_EINVAL, "endpoints has %zu entries, at most %d", n,
                       CR_ENDPOINTS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (!printable(v[i].id, CR_ENDPOINT_ID_MAX))
            return cr_fail(err, CR_EINVAL,
                           "endpoints[%zu].id must be 1..%d bytes of printable ASCII, got \"%s\"",
                           i, CR_ENDPOINT_ID_MAX, shown(v[i].id, got, sizeof got));
        if (!printable(v[i].address, CR_ENDPOINT_ADDRESS_MAX))
            return cr_fail(err, CR_EINVAL,
                           "endpoints[%zu].address must be 1..%d bytes of printable ASCII, got "
                           "\"%s\"",
                           i, CR_ENDPOINT_ADDRESS_MAX, shown(v[i].address, got, sizeof got));
        if (v[i].kv_events && *v[i].kv_events &&
            !printable(v[i].kv_events, CR_ENDPOINT_ADDRESS_MAX))
            return cr_fail(err, CR_EINVAL,
                           "endpoints[%zu].kv_events must be 0..%d bytes of printable ASCII, "
                           "got \"%s\"",
                           i, CR_ENDPOINT_ADDRESS_MAX, shown(v[i].kv_events, got, sizeof got));
        if (v[i].stated && (unsigned)v[i].state > CR_ENDPOINT_DOWN)
            return cr_fail(err, CR_EINVAL,
                           "endpoints[%zu].state must be active, draining or down, got %d", i,
                           (int)v[i].state);
        char what[32];
        snprintf(what, sizeof what, "endpoints[%zu]", i);
        if (cr_endpoint_weight_check(what, v[i].weight, NULL, err) != CR_OK)
            return CR_EINVAL;
        /* O(n^2) over at most 1024 short ids, once per change */
        for (size_t j = 0; j < i; j++)
            if (strcmp(v[j].id, v[i].id) == 0)
                return cr_fail(err, CR_EINVAL,
                               "endpoints[%zu].id \"%s\" is given twice (endpoints[%zu])", i,
                               shown(v[i].id, got, sizeof got), j);
    }
    return CR_OK;
}

/* A set of n slots, one reference, its counts left to tally. */
static cr_endpoints *set_new(uint32_t n)
{
    cr_endpoints *e = calloc(1, sizeof *e + (size_t)n * sizeof e->slot[0]);
    if (!e)
        return NULL;
    cr_ref_init(&e->ref, set_free);
    e->n_slots = n;
    return e;
}

/* The counts and next retry of e from its slots; old's totals (NULL:
 * none) plus chg. */
static void tally(cr_endpoints *e, const cr_endpoints *old, const cr_endpoints_change *chg)
{
    const uint32_t add[6] = {chg->joined, chg->removed, chg->drained,
                             chg->undrained, chg->failed, chg->recovered};
    for (int i = 0; i < 6; i++)
        e->total[i] = (old ? old->total[i] : 0) + add[i];
    e->sessions_to_move = old ? old->sessions_to_move : 0;
    memset(e->n_state, 0, sizeof e->n_state);
    e->next_retry_s = INFINITY;
    e->longest_id = e->longest_address = 0;
    for (uint32_t s = 0; s < e->n_slots; s++) {
        const cr_endpoint *x = &e->slot[s];
        uint32_t a = (uint32_t)strlen(x->id), b = (uint32_t)strlen(x->address);
        e->longest_id = a > e->longest_id ? a : e->longest_id;
        e->longest_address = b > e->longest_address ? b : e->longest_address;
        e->n_state[x->state]++;
        if (x->state == CR_ENDPOINT_DOWN && x->down_until_s < e->next_retry_s)
            e->next_retry_s = x->down_until_s;
    }
}

/* x enters state at now, counted in chg (a join's state is not a change). */
static void enter(cr_endpoint *x, cr_endpoint_state state, double now, int joined,
                  cr_endpoints_change *chg)
{
    cr_endpoint_state was = x->state;
    if (was == state)
        return;
    x->state = state;
    x->since_s = now;
    x->down_until_s = state == CR_ENDPOINT_DOWN ? INFINITY : 0;
    if (joined)
        return;
    chg->drained += state == CR_ENDPOINT_DRAINING;
    chg->failed += state == CR_ENDPOINT_DOWN;
    chg->undrained += state == CR_ENDPOINT_ACTIVE && was == CR_ENDPOINT_DRAINING;
    chg->recovered += state == CR_ENDPOINT_ACTIVE && was == CR_ENDPOINT_DOWN;
}

/* x takes v's id, address, weight and KV-event address, and its stated
 * state ("stated" in endpoints.h). */
static void fill(cr_endpoint *x, const cr_endpoint_spec *v, double now, int joined,
                 cr_endpoints_change *chg)
{
    snprintf(x->id, sizeof x->id, "%s", v->id);
    snprintf(x->address, sizeof x->address, "%s", v->address);
    snprintf(x->kv_events, sizeof x->kv_events, "%s", v->kv_events ? v->kv_events : "");
    x->weight = v->weight > 0 ? v->weight : 1;
    if (!v->stated)
        return;
    if (v->state != CR_ENDPOINT_ACTIVE) {
        enter(x, v->state, now, joined, chg);
        x->by_source = 1;
    } else if (x->by_source) {
        enter(x, CR_ENDPOINT_ACTIVE, now, joined, chg);
        x->by_source = 0;
    }
}

/* Where one apply puts its endpoints: old's slots, which of them stay
 * listed or are taken by a join, and the end of the slots in use. */
typedef struct placing {
    const cr_endpoints *old;
    uint32_t old_n, end;
    uint8_t *taken, *listed;
    double now;
} placing;

/* Since when slot s is free to take: a GONE slot's since_s, now for one
 * this change removes; -1 when it is not free. */
static double free_since(const placing *p, uint32_t s)
{
    if (p->taken[s])
        return -1;
    if (p->old->slot[s].state == CR_ENDPOINT_GONE)
        return p->old->slot[s].since_s;
    return p->listed[s] ? -1 : p->now;
}

/* The gone slot id left last, or UINT32_MAX: a returning endpoint comes
 * back where it was, so churning one id never takes a second slot. */
static uint32_t own_slot(const placing *p, const char *id)
{
    uint32_t at = UINT32_MAX;
    for (uint32_t s = 0; s < p->old_n; s++)
        if (!p->taken[s] && p->old->slot[s].state == CR_ENDPOINT_GONE &&
            strcmp(p->old->slot[s].id, id) == 0 &&
            (at == UINT32_MAX || p->old->slot[s].since_s > p->old->slot[at].since_s))
            at = s;
    return at;
}

/* The slot a new endpoint takes: the lowest GONE one out of quarantine,
 * else a new one at the end, else (all CR_ENDPOINTS_MAX in use) the one
 * free longest, quarantine or not. There always is one: the listed
 * endpoints are at most CR_ENDPOINTS_MAX, and every other slot is free. */
static uint32_t free_slot(const placing *p)
{
    uint32_t oldest = UINT32_MAX;
    for (uint32_t s = 0; s < p->old_n; s++) {
        double since = free_since(p, s);
        if (since >= 0 && p->old->slot[s].state == CR_ENDPOINT_GONE &&
            p->now - since >= CR_ENDPOINTS_REUSE_S)
            return s;
        if (since >= 0 && (oldest == UINT32_MAX || since < free_since(p, oldest)))
            oldest = s;
    }
    return p->end < CR_ENDPOINTS_MAX ? p->end : oldest;
}

/* at[i]: where v[i] goes; p->taken and p->listed filled, p->end past the
 * last slot in use. */
static void place(placing *p, const cr_endpoint_spec *v, size_t n, uint32_t *at)
{
    for (size_t i = 0; i < n; i++) {
        at[i] = cr_endpoints_find(p->old, v[i].id);
        if (at[i] != UINT32_MAX)
            p->taken[at[i]] = p->listed[at[i]] = 1;
    }
    for (size_t i = 0; i < n; i++) /* the returning ones first: their own slots */
        if (at[i] == UINT32_MAX && (at[i] = own_slot(p, v[i].id)) != UINT32_MAX)
            p->taken[at[i]] = 1;
    for (size_t i = 0; i < n; i++) {
        if (at[i] != UINT32_MAX)
            continue;
        at[i] = free_slot(p);
        if (at[i] == p->end)
            p->end++;
        else
            p->taken[at[i]] = 1;
    }
}

cr_status cr_endpoints_apply(const cr_endpoints *old, const cr_endpoint_spec *v, size_t n,
                             double now, cr_endpoints **out, cr_endpoints_change *chg,
                             cr_error *err)
{
    *out = NULL;
    memset(chg, 0, sizeof *chg);
    cr_status st = cr_endpoints_check(v, n, err);
    if (st != CR_OK)
        return st;
    uint32_t old_n = old ? old->n_slots : 0;
    placing p = {.old = old, .old_n = old_n, .end = old_n, .now = now,
                 .taken = calloc(old_n + 1, 1), .listed = calloc(old_n + 1, 1)};
    uint32_t *at = malloc(n * sizeof *at);
    cr_endpoints *e = NULL;
    if (at && p.taken && p.listed) {
        place(&p, v, n, at);
        e = set_new(p.end);
    }
    free(p.taken);
    uint8_t *listed = p.listed;
    if (!e) {
        free(at), free(listed);
        return cr_fail(err, CR_ENOMEM, "out of memory for %zu endpoints", n);
    }
    e->version = old ? old->version + 1 : 1;
    for (uint32_t s = 0; s < old_n; s++) {
        e->slot[s] = old->slot[s];
        if (!listed[s] && e->slot[s].state != CR_ENDPOINT_GONE) {
            e->slot[s].state = CR_ENDPOINT_GONE;
            e->slot[s].since_s = now;
            chg->removed++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        cr_endpoint *x = &e->slot[at[i]];
        int joined = at[i] >= old_n || !listed[at[i]];
        if (joined) { /* a join, maybe into a gone slot */
            memset(x, 0, sizeof *x);
            x->state = CR_ENDPOINT_ACTIVE;
            x->since_s = now;
            chg->joined++;
        }
        fill(x, &v[i], now, joined, chg);
    }
    free(at), free(listed);
    tally(e, old, chg);
    *out = e;
    return CR_OK;
}

cr_status cr_endpoints_with_state(const cr_endpoints *old, uint32_t slot, cr_endpoint_state state,
                                  double now, double until_s, cr_endpoints **out,
                                  cr_endpoints_change *chg, cr_error *err)
{
    *out = NULL;
    memset(chg, 0, sizeof *chg);
    if (!old || slot >= old->n_slots || old->slot[slot].state == CR_ENDPOINT_GONE ||
        state == CR_ENDPOINT_GONE)
        return cr_fail(err, CR_EINVAL, "endpoint slot %u is not in the set", slot);
    cr_endpoints *e = set_new(old->n_slots);
    if (!e)
        return cr_fail(err, CR_ENOMEM, "out of memory for %u endpoint slots", old->n_slots);
    memcpy(e->slot, old->slot, old->n_slots * sizeof e->slot[0]);
    e->version = old->version + 1;
    cr_endpoint *x = &e->slot[slot];
    enter(x, state, now, 0, chg);
    x->down_until_s = state == CR_ENDPOINT_DOWN ? until_s : 0;
    x->by_source = 0; /* a drain, an undo or a failure: the set's own now */
    tally(e, old, chg);
    *out = e;
    return CR_OK;
}

uint32_t cr_endpoints_find(const cr_endpoints *e, const char *id)
{
    for (uint32_t s = 0; e && id && s < e->n_slots; s++)
        if (e->slot[s].state != CR_ENDPOINT_GONE && strcmp(e->slot[s].id, id) == 0)
            return s;
    return UINT32_MAX;
}

void cr_endpoints_usable(const cr_endpoints *e, uint8_t *usable)
{
    cr_endpoint_state take = e->n_state[CR_ENDPOINT_ACTIVE]     ? CR_ENDPOINT_ACTIVE
                             : e->n_state[CR_ENDPOINT_DRAINING] ? CR_ENDPOINT_DRAINING
                                                                : CR_ENDPOINT_DOWN;
    for (uint32_t s = 0; s < e->n_slots; s++)
        usable[s] = e->slot[s].state == take;
}

/* Slot s of an adopted set as cr_endpoints_adopt wants it. */
static cr_status check_slot(const cr_endpoint *x, uint32_t s, cr_error *err)
{
    char got[80];
    if (!printable(x->id, CR_ENDPOINT_ID_MAX))
        return cr_fail(err, CR_EINVAL,
                       "slot[%u].id must be 1..%d bytes of printable ASCII, got \"%s\"", s,
                       CR_ENDPOINT_ID_MAX, shown(x->id, got, sizeof got));
    if (!printable(x->address, CR_ENDPOINT_ADDRESS_MAX))
        return cr_fail(err, CR_EINVAL,
                       "slot[%u].address must be 1..%d bytes of printable ASCII, got \"%s\"", s,
                       CR_ENDPOINT_ADDRESS_MAX, shown(x->address, got, sizeof got));
    if (!(x->weight >= CR_ENDPOINT_WEIGHT_MIN && x->weight <= CR_ENDPOINT_WEIGHT_MAX))
        return cr_fail(err, CR_EINVAL, "slot[%u].weight must be in [%g, %g], got %g", s,
                       CR_ENDPOINT_WEIGHT_MIN, CR_ENDPOINT_WEIGHT_MAX, x->weight);
    if (x->kv_events[0] && !printable(x->kv_events, CR_ENDPOINT_ADDRESS_MAX))
        return cr_fail(err, CR_EINVAL,
                       "slot[%u].kv_events must be 0..%d bytes of printable ASCII, got \"%s\"", s,
                       CR_ENDPOINT_ADDRESS_MAX, shown(x->kv_events, got, sizeof got));
    if ((unsigned)x->state > CR_ENDPOINT_GONE)
        return cr_fail(err, CR_EINVAL, "slot[%u].state must be 0..%d, got %d", s,
                       CR_ENDPOINT_GONE, (int)x->state);
    if (!isfinite(x->since_s) || isnan(x->down_until_s) || x->down_until_s < 0)
        return cr_fail(err, CR_EINVAL,
                       "slot[%u] times must be finite (down_until_s may be inf), got %g and %g", s,
                       x->since_s, x->down_until_s);
    return CR_OK;
}

/* What slot s's change from old to e counts as (a different id in a slot
 * is a join, and a removal when the old one was still listed). */
static void count_change(const cr_endpoints *old, const cr_endpoints *e, uint32_t s,
                         cr_endpoints_change *chg)
{
    const cr_endpoint *x = &e->slot[s];
    const cr_endpoint *o = old && s < old->n_slots ? &old->slot[s] : NULL;
    int was_listed = o && o->state != CR_ENDPOINT_GONE, listed = x->state != CR_ENDPOINT_GONE;
    int same = was_listed && listed && strcmp(o->id, x->id) == 0;
    if (!same) {
        chg->removed += was_listed;
        chg->joined += listed;
        chg->drained += listed && x->state == CR_ENDPOINT_DRAINING;
        chg->failed += listed && x->state == CR_ENDPOINT_DOWN;
        return;
    }
    if (o->state == x->state)
        return;
    chg->drained += x->state == CR_ENDPOINT_DRAINING;
    chg->failed += x->state == CR_ENDPOINT_DOWN;
    chg->undrained += x->state == CR_ENDPOINT_ACTIVE && o->state == CR_ENDPOINT_DRAINING;
    chg->recovered += x->state == CR_ENDPOINT_ACTIVE && o->state == CR_ENDPOINT_DOWN;
}

cr_status cr_endpoints_adopt(const cr_endpoints *old, const cr_endpoint *slots, uint32_t n,
                             uint64_t version, cr_endpoints **out, cr_endpoints_change *chg,
                             cr_error *err)
{
    char got[80];
    *out = NULL;
    memset(chg, 0, sizeof *chg);
    if (n == 0 || n > CR_ENDPOINTS_MAX)
        return cr_fail(err, CR_EINVAL, "an endpoint set has 1..%d slots, got %u",
                       CR_ENDPOINTS_MAX, n);
    for (uint32_t s = 0; s < n; s++) {
        cr_status st = check_slot(&slots[s], s, err);
        if (st != CR_OK)
            return st;
        /* O(n^2) over at most 1024 short ids, once per adoption */
        for (uint32_t t = 0; slots[s].state != CR_ENDPOINT_GONE && t < s; t++)
            if (slots[t].state != CR_ENDPOINT_GONE && strcmp(slots[t].id, slots[s].id) == 0)
                return cr_fail(err, CR_EINVAL, "slot[%u].id \"%s\" is held twice (slot[%u])",
                               s, shown(slots[s].id, got, sizeof got), t);
    }
    cr_endpoints *e = set_new(n);
    if (!e)
        return cr_fail(err, CR_ENOMEM, "out of memory for %u endpoint slots", n);
    memcpy(e->slot, slots, (size_t)n * sizeof e->slot[0]);
    e->version = version;
    for (uint32_t s = 0; s < n; s++)
        count_change(old, e, s, chg);
    for (uint32_t s = n; old && s < old->n_slots; s++) /* a shorter set: its tail left */
        chg->removed += old->slot[s].state != CR_ENDPOINT_GONE;
    tally(e, old, chg);
    *out = e;
    return CR_OK;
}
