/* One sync of the replica's thread: the clock check, the push, the lease,
 * then the leader's merge, plan and fenced publish or the follower's
 * fetch and install. Every Redis call is bounded by --backend-timeout; a
 * failure drops the link (link.c retries with backoff) and ends the cycle. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define FULL_PUSH_MAX_S 60.0
#define MIN_BASE 1024 /* deltas up to this many owners never force a full push */

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

void cr_replica_oldest(const cr_replica *r, char *buf, size_t len)
{
    snprintf(buf, len, "(%lld", (long long)((r->redis_time - r->cfg.replica_ttl_s) * 1e3));
}

void cr_replica_set_leader(cr_replica *r, int leader, uint64_t generation)
{
    if (r->stats.leader == leader)
        return;
    pthread_mutex_lock(&r->lock);
    r->stats.leader = leader;
    r->stats.lease_changes++;
    pthread_mutex_unlock(&r->lock);
    if (leader)
        r->last_plan = -1e300; /* a new leader plans at once */
    cr_replica_members_lead(r, leader);
    cr_replica_event_to(r, leader ? CR_REPLICA_LEADER : CR_REPLICA_FOLLOWER, r->id, 0,
                        generation);
}

/* Redis TIME against our wall clock (the middle of the round trip); the
 * wall time, or NAN when the link failed. */
static double check_skew(cr_replica *r)
{
    double before = cr_replica_clock(r);
    redisReply *t = cr_link_cmd(&r->link, "TIME");
    double after = cr_replica_clock(r), wall = (before + after) / 2;
    if (!t)
        return NAN;
    r->redis_time = wall; /* unless Redis says otherwise */
    if (t->type == REDIS_REPLY_ARRAY && t->elements == 2) {
        double redis = atof(t->element[0]->str) + atof(t->element[1]->str) * 1e-6;
        double skew = wall - redis;
        r->redis_time = redis;
        int skewed = fabs(skew) > CR_REPLICA_SKEW_WARN_S;
        if (skewed != r->skewed)
            cr_replica_event_to(r, skewed ? CR_REPLICA_SKEWED : CR_REPLICA_UNSKEWED, r->id,
                                skew, 0);
        r->skewed = skewed;
    }
    freeReplyObject(t);
    return wall;
}

/* What this push sends: the touched owners, or every owner (full: see
 * replica.h for when). */
static cr_estimator_entry *take(cr_replica *r, size_t *n, int *full)
{
    int all = 0;
    double every = fmin(r->cfg.replica_ttl_s / 2, FULL_PUSH_MAX_S);
    cr_estimator_entry *v = cr_core_touched_take(r->core, n, &all);
    size_t base = r->base_entries > MIN_BASE ? r->base_entries : MIN_BASE;
    *full = all || r->need_full || cr_mono_s() - r->last_full >= every ||
            r->log_entries + *n > base;
    if (*full && !all) { /* taken first, so nothing touched in between is lost */
        free(v);
        v = cr_core_export(r->core, n);
    }
    return v;
}

static int append_argv(cr_replica *r, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return cr_link_append(&r->link, argc, argv, lens);
}

#define APPEND(r, ...) append_argv((r), sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *), \
                                   (const char *[]){__VA_ARGS__})

/* RPUSHes v (t_last already wall time) onto our list, a chunk a command;
 * returns the commands appended, or -1. */
static int append_chunks(cr_replica *r, const cr_estimator_entry *v, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i += CR_REPLICA_CHUNK_MAX, k++) {
        size_t m = n - i < CR_REPLICA_CHUNK_MAX ? n - i : CR_REPLICA_CHUNK_MAX, len;
        uint8_t *blob;
        cr_error e;
        if (cr_replica_chunk_encode(v + i, m, &blob, &len, &e) != CR_OK)
            return -1;
        const char *argv[3] = {"RPUSH", r->k_mine, (const char *)blob};
        size_t lens[3] = {5, strlen(r->k_mine), len};
        int rc = cr_link_append(&r->link, 3, argv, lens); /* hiredis copies it */
        free(blob);
        if (rc != 0)
            return -1;
    }
    return k;
}

/* The push's commands: a full one replaces the list in one MULTI; then
 * expiry, our score in the replica set (Redis's time, so a skewed clock
 * never looks dead or immortal) and the count of live replicas. Returns
 * the replies to read, or -1. */
static int append_push(cr_replica *r, const cr_estimator_entry *v, size_t n, int full)
{
    char ttl[32], score[32], oldest[32];
    snprintf(ttl, sizeof ttl, "%lld", (long long)(r->cfg.replica_ttl_s * 1e3));
    snprintf(score, sizeof score, "%lld", (long long)(r->redis_time * 1e3));
    cr_replica_oldest(r, oldest, sizeof oldest);
    if (full && (APPEND(r, "MULTI") != 0 || APPEND(r, "DEL", r->k_mine) != 0))
        return -1;
    int chunks = append_chunks(r, v, n);
    if (chunks < 0 || APPEND(r, "PEXPIRE", r->k_mine, ttl) != 0 ||
        (full && APPEND(r, "EXEC") != 0) || APPEND(r, "ZADD", r->k_set, score, r->id) != 0 ||
        APPEND(r, "ZREMRANGEBYSCORE", r->k_set, "-inf", oldest) != 0 ||
        APPEND(r, "ZCARD", r->k_set) != 0)
        return -1;
    return chunks + 4 + (full ? 3 : 0);
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
static int push(cr_replica *r)
{
    size_t n = 0;
    int full;
    cr_estimator_entry *v = take(r, &n, &full);
    double offset = cr_replica_offset(r);
    for (size_t i = 0; v && i < n; i++)
        v[i].t_last += offset;
    long long live = 0;
    r->need_full = 1;
    int k = n && !v ? -1 : append_push(r, v, n, full);
    int ok = k > 0 && read_replies(r, k, &live) == 0;
    free(v);
    if (!ok) {
        if (r->link.ctx) /* half a pipeline read: the connection is out of step */
            cr_link_fail(&r->link, "a push failed");
        return -1;
    }
    r->need_full = 0;
    if (full) {
        r->last_full = cr_mono_s();
        r->base_entries = n;
        r->log_entries = 0;
    } else {
        r->log_entries += n;
    }
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
    cr_replica_set_leader(r, got, r->stats.generation);
}

/* After cr_replica_reload: the command connection AUTHs again at once, so a
 * wrong new password shows now rather than at the next reconnect; the
 * subscription (which takes no AUTH in subscribe mode) reconnects. */
static void reauth_if_asked(cr_replica *r)
{
    pthread_mutex_lock(&r->lock);
    int asked = r->reauth;
    r->reauth = 0;
    pthread_mutex_unlock(&r->lock);
    if (!asked)
        return;
    cr_link_reauth(&r->link);
    cr_link_close(&r->sub);
}

void cr_replica_sync(cr_replica *r, int push_due)
{
    reauth_if_asked(r);
    if (!r->link.ctx) /* a new connection may be to a Redis that lost everything */
        r->need_full = 1;
    if (!cr_link_up(&r->link)) {
        if (r->stats.leader && cr_mono_s() >= r->lease_until)
            cr_replica_set_leader(r, 0, r->stats.generation);
        set_up(r, 0);
        return;
    }
    double wall = check_skew(r);
    if (!isnan(wall) && push_due)
        push(r);
    if (r->link.ctx)
        lease(r);
    if (r->link.ctx)
        cr_replica_lead_or_follow(r, wall);
    if (r->link.ctx)
        cr_replica_members_sync(r);
    set_up(r, r->link.ctx != NULL);
}
