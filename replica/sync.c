/* One sync of the replica's thread: the clock check, the push, the lease,
 * then the leader's merge, plan and fenced publish or the follower's
 * fetch and install. Every Redis call is bounded by --backend-timeout; a
 * failure drops the link (link.c retries with backoff) and ends the cycle. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define PAIRS_PER_HSET 1000 /* owners per HSET: argv of 2 + 2000 */
#define FULL_PUSH_MAX_S 60.0

static void set_up(cr_replica *r, int up)
{
    if (r->up_known && r->was_up == up)
        return;
    r->up_known = 1;
    r->was_up = up;
    pthread_mutex_lock(&r->lock);
    r->stats.backend_up = up;
    if (!up)
        snprintf(r->down_why, sizeof r->down_why, "%s", r->link.why);
    pthread_mutex_unlock(&r->lock);
    cr_replica_event_to(r, up ? CR_REPLICA_BACKEND_UP : CR_REPLICA_BACKEND_DOWN,
                        up ? r->cfg.state_backend : r->link.why, 0, 0);
}

static void set_leader(cr_replica *r, int leader, uint64_t generation)
{
    if (r->stats.leader == leader)
        return;
    pthread_mutex_lock(&r->lock);
    r->stats.leader = leader;
    r->stats.lease_changes++;
    pthread_mutex_unlock(&r->lock);
    if (leader)
        r->last_plan = -1e300; /* a new leader plans at once */
    cr_replica_event_to(r, leader ? CR_REPLICA_LEADER : CR_REPLICA_FOLLOWER, r->id, 0,
                        generation);
}

/* Redis TIME against our wall clock (the middle of the round trip); the
 * wall time, or NAN when the link failed. */
static double check_skew(cr_replica *r)
{
    double before = cr_replica_wall();
    redisReply *t = cr_link_cmd(&r->link, "TIME");
    double after = cr_replica_wall(), wall = (before + after) / 2;
    if (!t)
        return NAN;
    if (t->type == REDIS_REPLY_ARRAY && t->elements == 2) {
        double redis = atof(t->element[0]->str) + atof(t->element[1]->str) * 1e-6;
        double skew = wall - redis;
        int skewed = fabs(skew) > CR_REPLICA_SKEW_WARN_S;
        if (skewed != r->skewed)
            cr_replica_event_to(r, skewed ? CR_REPLICA_SKEWED : CR_REPLICA_UNSKEWED, r->id,
                                skew, 0);
        r->skewed = skewed;
    }
    freeReplyObject(t);
    return wall;
}

/* What this push sends: the touched owners, or every owner (full). */
static cr_estimator_entry *take(cr_replica *r, size_t *n, int *full)
{
    int all = 0;
    double every = fmin(r->cfg.replica_ttl_s / 2, FULL_PUSH_MAX_S);
    *full = r->need_full || cr_mono_s() - r->last_full >= every;
    cr_estimator_entry *v = cr_core_touched_take(r->core, n, &all);
    if (*full && !all) { /* taken first, so nothing touched in between is lost */
        free(v);
        v = cr_core_export(r->core, n);
    }
    *full |= all;
    return v;
}

/* Appends the HSETs of v (t_last already wall time) to key. */
static int append_hsets(cr_replica *r, const char *key, const cr_estimator_entry *v, size_t n,
                        uint8_t *bytes)
{
    const char *argv[2 + 2 * PAIRS_PER_HSET];
    size_t lens[2 + 2 * PAIRS_PER_HSET];
    int sent = 0;
    for (size_t i = 0; i < n; i += PAIRS_PER_HSET) {
        size_t k = n - i < PAIRS_PER_HSET ? n - i : PAIRS_PER_HSET;
        argv[0] = "HSET", lens[0] = 4, argv[1] = key, lens[1] = strlen(key);
        for (size_t j = 0; j < k; j++) {
            uint8_t *f = bytes + (i + j) * 24;
            cr_replica_encode(&v[i + j], f, f + 8);
            argv[2 + 2 * j] = (const char *)f, lens[2 + 2 * j] = 8;
            argv[3 + 2 * j] = (const char *)f + 8, lens[3 + 2 * j] = 16;
        }
        if (cr_link_append(&r->link, (int)(2 + 2 * k), argv, lens) != 0)
            return -1;
        sent++;
    }
    return sent;
}

static int append_text(cr_replica *r, const char *fmt, const char *a, const char *b,
                       const char *c)
{
    const char *argv[4] = {fmt, a, b, c};
    size_t lens[4];
    int argc = c ? 4 : b ? 3 : 2;
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return cr_link_append(&r->link, argc, argv, lens);
}

/* The tail of a push: expiry, our score in the replica set, the count of
 * live replicas. Returns the commands appended, or -1. */
static int append_tail(cr_replica *r, double wall, int full, int any)
{
    char ttl[32], score[32], oldest[32];
    snprintf(ttl, sizeof ttl, "%lld", (long long)(r->cfg.replica_ttl_s * 1e3));
    snprintf(score, sizeof score, "%lld", (long long)(wall * 1e3));
    snprintf(oldest, sizeof oldest, "(%lld", (long long)((wall - r->cfg.replica_ttl_s) * 1e3));
    int k = 0;
    if (full && (any ? append_text(r, "RENAME", r->k_tmp, r->k_mine, NULL)
                     : append_text(r, "DEL", r->k_mine, NULL, NULL)) == 0)
        k++;
    if (append_text(r, "PEXPIRE", r->k_mine, ttl, NULL) == 0 &&
        append_text(r, "ZADD", r->k_set, score, r->id) == 0 &&
        append_text(r, "ZREMRANGEBYSCORE", r->k_set, "-inf", oldest) == 0 &&
        append_text(r, "ZCARD", r->k_set, NULL, NULL) == 0)
        return k + 4;
    return -1;
}

/* Reads k replies; the last one's integer into *last. -1 on a failed link
 * or an error reply. */
static int read_replies(cr_replica *r, int k, long long *last)
{
    int bad = 0;
    r->link.round_trips++;
    for (int i = 0; i < k; i++) {
        redisReply *rep = cr_link_read(&r->link);
        if (!rep)
            return -1;
        if (rep->type == REDIS_REPLY_ERROR && !bad) {
            bad = 1;
            cr_replica_event_to(r, CR_REPLICA_ERROR, rep->str, 0, 0);
        }
        if (i == k - 1 && rep->type == REDIS_REPLY_INTEGER)
            *last = rep->integer;
        freeReplyObject(rep);
    }
    return bad ? -1 : 0;
}

static void pushed(cr_replica *r, size_t n, int full, long long live)
{
    pthread_mutex_lock(&r->lock);
    r->last_push_mono = cr_mono_s();
    r->stats.pushes++;
    r->stats.pushed_owners += n;
    r->stats.full_pushes += (uint64_t)full;
    r->stats.replicas_seen = (uint64_t)live;
    r->stats.round_trips = r->link.round_trips;
    pthread_mutex_unlock(&r->lock);
}

/* Pushes; a failed push makes the next one full, so nothing is lost. */
static int push(cr_replica *r, double wall)
{
    size_t n = 0;
    int full;
    cr_estimator_entry *v = take(r, &n, &full);
    uint8_t *bytes = malloc(n * 24 + 1);
    double offset = cr_replica_offset(r);
    for (size_t i = 0; v && i < n; i++)
        v[i].t_last += offset;
    int k = -1;
    long long live = 0;
    r->need_full = 1;
    if (bytes && (n == 0 || v) &&
        (!full || append_text(r, "DEL", r->k_tmp, NULL, NULL) == 0)) {
        int h = append_hsets(r, full ? r->k_tmp : r->k_mine, v, n, bytes);
        int t = h >= 0 ? append_tail(r, wall, full, n > 0) : -1;
        k = t >= 0 ? h + t + full : -1;
    }
    int ok = k > 0 && read_replies(r, k, &live) == 0;
    free(bytes);
    free(v);
    if (!ok)
        return -1;
    r->need_full = 0;
    if (full)
        r->last_full = cr_mono_s();
    pushed(r, n, full, live);
    return 0;
}

/* Takes or renews the lease; a leader cut off from Redis past its lease
 * steps down on its own. */
static void lease(cr_replica *r)
{
    double t0 = cr_mono_s();
    int got = cr_script_lease(&r->link, r->k_lease, r->id, r->stats.leader,
                              r->cfg.lease_ttl_s);
    if (got < 0)
        return;
    if (got)
        r->lease_until = t0 + r->cfg.lease_ttl_s;
    set_leader(r, got, r->stats.generation);
}

void cr_replica_sync(cr_replica *r, int push_due)
{
    if (!r->link.ctx) /* a new connection may be to a Redis that lost everything */
        r->need_full = 1;
    if (!cr_link_up(&r->link)) {
        if (r->stats.leader && cr_mono_s() >= r->lease_until)
            set_leader(r, 0, r->stats.generation);
        set_up(r, 0);
        return;
    }
    double wall = check_skew(r);
    if (!isnan(wall) && push_due)
        push(r, wall);
    if (r->link.ctx)
        lease(r);
    if (r->link.ctx)
        cr_replica_lead_or_follow(r, wall);
    set_up(r, r->link.ctx != NULL);
}
