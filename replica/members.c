/* The endpoint set across replicas (replica.h): a follower's forwarded
 * calls, queued by any thread and pushed by the replica's; the leader's
 * applying them and publishing its set; a follower's fetch and adoption. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void add(cr_replica *r, uint64_t *stat, uint64_t n)
{
    pthread_mutex_lock(&r->lock);
    *stat += n;
    pthread_mutex_unlock(&r->lock);
}

cr_status cr_replica_forward(cr_replica *r, const cr_forward *f, cr_error *err)
{
    cr_forward mine = *f;
    mine.from = r->id;
    uint8_t *blob;
    size_t len;
    cr_status st = cr_replica_forward_encode(&mine, &blob, &len, err);
    if (st != CR_OK)
        return st;
    pthread_mutex_lock(&r->lock);
    int full = r->n_forward == CR_REPLICA_FORWARD_MAX;
    if (!full) {
        r->forward[r->n_forward++] = (struct cr_forward_blob){blob, len};
        r->stats.forward_queue = r->n_forward;
    }
    pthread_mutex_unlock(&r->lock);
    if (full) {
        free(blob);
        return cr_fail(err, CR_ENOMEM,
                       "this replica holds %d forwarded endpoint calls already, its bound: "
                       "retry after --sync-interval (%g s), when they have gone to the leader",
                       CR_REPLICA_FORWARD_MAX, r->cfg.sync_interval_s);
    }
    cr_replica_wake(r); /* pushed now, not at the next sync */
    return CR_OK;
}

/* Applies one forwarded call (the leader): counted, and reported when its
 * core refuses it (the endpoint left meanwhile, say). */
static void apply(cr_replica *r, const void *p, size_t len)
{
    static const char *const what[] = {"", "SetEndpoints", "DrainEndpoint", "undrain"};
    cr_forward *f;
    cr_core_members_event ev;
    cr_error e;
    cr_status st = cr_replica_forward_decode(p, len, &f, &e);
    if (st == CR_OK)
        st = f->kind == CR_FORWARD_SET
                 ? cr_core_set_endpoints(r->core, f->specs, f->n, &ev, &e)
                 : cr_core_drain_endpoint(r->core, f->id, f->kind == CR_FORWARD_DRAIN, &ev, &e);
    if (st == CR_OK) {
        add(r, &r->stats.forwards_applied, 1);
    } else {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why, "a forwarded %s from %.64s: %.150s", f ? what[f->kind] : "call",
                 f ? f->from : "?", e.msg);
        add(r, &r->stats.forwards_refused, 1);
        cr_replica_event_to(r, CR_REPLICA_FORWARD_REFUSED, why, 0, 0);
    }
    free(f);
}

/* The first k queued calls onto the forward list (bounded by LTRIM), and
 * a word to the leader; 0, or -1 (kept for the next sync). */
static int push(cr_replica *r, size_t k)
{
    const char *argv[CR_REPLICA_FORWARD_MAX + 2] = {"RPUSH", r->k_forward};
    size_t lens[CR_REPLICA_FORWARD_MAX + 2] = {5, strlen(r->k_forward)};
    for (size_t i = 0; i < k; i++) { /* below n_forward: only this thread changes them */
        argv[i + 2] = (const char *)r->forward[i].p;
        lens[i + 2] = r->forward[i].len;
    }
    char keep[24];
    snprintf(keep, sizeof keep, "-%d", CR_REPLICA_FORWARD_MAX);
    const char *trim[] = {"LTRIM", r->k_forward, keep, "-1"};
    size_t trim_lens[] = {5, strlen(r->k_forward), strlen(keep), 2};
    const char *say[] = {"PUBLISH", r->k_notify, "forward"};
    size_t say_lens[] = {7, strlen(r->k_notify), 7};
    if (cr_link_append(&r->link, (int)k + 2, argv, lens) != 0 ||
        cr_link_append(&r->link, 4, trim, trim_lens) != 0 ||
        cr_link_append(&r->link, 3, say, say_lens) != 0)
        return -1;
    r->link.round_trips++;
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        redisReply *rep = cr_link_read(&r->link);
        if (!rep)
            return -1;
        bad |= rep->type == REDIS_REPLY_ERROR;
        freeReplyObject(rep);
    }
    return bad ? -1 : 0;
}

/* The queued calls: to Redis (a follower) or applied here (a leader, as
 * when it took the lead before pushing them). */
static void flush(cr_replica *r)
{
    pthread_mutex_lock(&r->lock);
    size_t k = r->n_forward;
    pthread_mutex_unlock(&r->lock);
    int leader = r->stats.leader;
    if (!k || (!leader && (!r->link.ctx || push(r, k) != 0)))
        return;
    for (size_t i = 0; leader && i < k; i++)
        apply(r, r->forward[i].p, r->forward[i].len);
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < k; i++)
        free(r->forward[i].p);
    r->n_forward -= k;
    memmove(r->forward, r->forward + k, r->n_forward * sizeof r->forward[0]);
    r->stats.forward_queue = r->n_forward;
    if (!leader)
        r->stats.forwarded += k;
    pthread_mutex_unlock(&r->lock);
}

/* The leader: every forwarded call, in push order. */
static void take_forwarded(cr_replica *r)
{
    redisReply *l = cr_script_take(&r->link, r->k_lease, r->k_forward, r->id);
    for (size_t i = 0; l && l->type == REDIS_REPLY_ARRAY && i < l->elements; i++)
        if (l->element[i]->type == REDIS_REPLY_STRING)
            apply(r, l->element[i]->str, l->element[i]->len);
    freeReplyObject(l);
}

static void published(cr_replica *r, uint64_t version, int installed)
{
    r->members_have = version;
    pthread_mutex_lock(&r->lock);
    r->stats.members_version = version;
    if (installed)
        r->stats.members_installed++;
    else
        r->stats.members_published++;
    pthread_mutex_unlock(&r->lock);
}

/* The leader: its set (DOWN endpoints due for a retry made ACTIVE first)
 * through the fence when its version moved. */
static void publish(cr_replica *r)
{
    const cr_endpoints *e = cr_core_endpoints(r->core);
    uint8_t *blob = NULL;
    size_t len;
    cr_error err;
    if (!e || e->version == r->members_have ||
        cr_replica_members_encode(e, cr_core_now(r->core), &blob, &len, &err) != CR_OK) {
        cr_endpoints_release(e);
        return;
    }
    cr_publish_keys keys = {r->k_lease, r->k_members, r->k_notify, r->id};
    long long v = cr_script_publish_members(&r->link, &keys, blob, len, e->version);
    uint64_t ours = e->version;
    free(blob);
    cr_endpoints_release(e);
    if (v > 0) {
        published(r, (uint64_t)v, 0);
    } else if (v == 0) {
        cr_replica_event_to(r, CR_REPLICA_REFUSED,
                            "the lease is no longer ours (endpoint set publish)", 0, ours);
        cr_replica_set_leader(r, 0, r->stats.generation);
    } else if (v != CR_SCRIPT_LINK_FAILED) { /* Redis is ahead: its set is the cluster's */
        char why[CR_ERRLEN];
        snprintf(why, sizeof why,
                 "the published endpoint set is version %lld, not below this leader's %llu: "
                 "adopting it",
                 -v, (unsigned long long)ours);
        cr_replica_event_to(r, CR_REPLICA_REFUSED, why, 0, ours);
        cr_replica_fetch_members(r);
    }
}

/* A published set this replica will not adopt: said and counted once per
 * reason. */
static void refuse(cr_replica *r, const char *why)
{
    if (!cr_replica_first_time(r->refused_members, sizeof r->refused_members, why))
        return;
    add(r, &r->stats.members_refused, 1);
    cr_replica_event_to(r, CR_REPLICA_MEMBERS_REFUSED, why, 0, r->members_have);
}

/* The blob of version v from h (HMGET version blob), adopted; 0, or -1
 * with why. */
static int adopt(cr_replica *r, const redisReply *h, uint64_t v, cr_error *e)
{
    cr_endpoint *slots = NULL;
    uint32_t n;
    uint64_t version;
    if (!(h && h->type == REDIS_REPLY_ARRAY && h->elements == 2 &&
          h->element[1]->type == REDIS_REPLY_STRING &&
          cr_replica_parse_generation(h->element[0]) == v)) {
        e->msg[0] = 0; /* it moved since: the next tick */
        return -1;
    }
    cr_status st = cr_replica_members_decode(h->element[1]->str, h->element[1]->len,
                                             cr_core_now(r->core), &slots, &n, &version, e);
    if (st == CR_OK && version != v)
        st = cr_fail(e, CR_EINVAL, "the published endpoint set says version %llu, its hash %llu",
                     (unsigned long long)version, (unsigned long long)v);
    if (st == CR_OK)
        st = cr_core_adopt_endpoints(r->core, slots, n, v, NULL, e);
    free(slots);
    return st == CR_OK ? 0 : -1;
}

int cr_replica_fetch_members(cr_replica *r)
{
    redisReply *g = cr_link_cmd(&r->link, "HGET %s version", r->k_members);
    uint64_t v = cr_replica_parse_generation(g), have = r->members_have;
    char why[CR_ERRLEN];
    if (g && g->type == REDIS_REPLY_STRING && v != have && v <= have) {
        snprintf(why, sizeof why,
                 "the published endpoint set's version \"%.*s\" is refused: versions only move "
                 "forward, from %llu",
                 (int)(g->len < 64 ? g->len : 64), g->str, (unsigned long long)have);
        refuse(r, why);
    }
    freeReplyObject(g);
    if (v <= have)
        return 0;
    redisReply *h = cr_link_cmd(&r->link, "HMGET %s version blob", r->k_members);
    cr_error e;
    int ok = adopt(r, h, v, &e) == 0;
    freeReplyObject(h);
    if (ok)
        published(r, v, 1);
    else if (e.msg[0])
        refuse(r, e.msg);
    return ok;
}

void cr_replica_members_sync(cr_replica *r)
{
    flush(r);
    if (!r->link.ctx)
        return;
    if (!r->stats.leader) {
        cr_replica_fetch_members(r);
        return;
    }
    take_forwarded(r);
    if (r->link.ctx && r->stats.leader)
        publish(r);
}

void cr_replica_members_lead(cr_replica *r, int leader)
{
    cr_error e;
    if (leader && r->link.ctx) /* the cluster's set first, so no slot is renumbered */
        cr_replica_fetch_members(r);
    if (cr_core_follow_endpoints(r->core, !leader, NULL, &e) != CR_OK) {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why, "taking the lead, this replica's own endpoints: %.190s", e.msg);
        cr_replica_event_to(r, CR_REPLICA_ERROR, why, 0, 0);
    }
}

void cr_replica_members_free(cr_replica *r)
{
    for (size_t i = 0; i < r->n_forward; i++)
        free(r->forward[i].p);
    r->n_forward = 0;
}
