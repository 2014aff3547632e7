/* Internal to the replica: the Redis link (link.c), the scripts
 * (scripts.c), the thread's state (replica.c) and one sync (sync.c). */
#ifndef CR_REPLICA_INTERNAL_H
#define CR_REPLICA_INTERNAL_H

#include <hiredis.h>
#include <pthread.h>

#include "bytes.h"
#include "replica.h"

/* ---- codec.c: what every blob's decoder checks first ---- */

/* CR_OK when c has not run short and got (the blob's version, read from
 * c) is want; else CR_EINVAL with err "WHAT must be version WANT, got
 * [SHORT]GOT", SHORT (e.g. "a short blob ") said only when c ran short. */
cr_status cr_replica_check_version(const cr_cursor *c, uint32_t got, uint32_t want,
                                   const char *what, const char *short_text, cr_error *err);

/* ---- link.c: one connection with backoff ---- */

typedef struct cr_link {
    redisContext *ctx; /* NULL while down */
    cr_replica_url url;
    const char *password_file; /* NULL or "": no AUTH (replica.h) */
    double timeout_s;
    double next_try, backoff; /* cr_mono_s; seconds */
    char why[CR_ERRLEN];      /* the last failure */
    uint64_t round_trips;
} cr_link;

/* Connected (1) or not (0) after trying once when the backoff allows;
 * a connection counts once AUTH (password_file re-read) and SELECT passed.
 * A refused AUTH fails the link with why "state backend refused AUTH:
 * Redis's error"; an unreadable file with the file's error. */
int cr_link_up(cr_link *l);
/* AUTH again on an open connection (the file re-read); refused, the link
 * fails as in cr_link_up. Not for a connection in subscribe mode. */
void cr_link_reauth(cr_link *l);
/* Drops the connection, keeping why, and backs off. */
void cr_link_fail(cr_link *l, const char *why);
void cr_link_close(cr_link *l);
/* One command (argv form); NULL when the link failed (l->why says; the
 * link is down). A Redis error reply is returned as a reply. */
redisReply *cr_link_argv(cr_link *l, int argc, const char **argv, const size_t *len);
/* printf-style, for commands of short text arguments. */
redisReply *cr_link_cmd(cr_link *l, const char *fmt, ...);
/* Pipelines: append, then read n replies (each freed unless kept). */
int cr_link_append(cr_link *l, int argc, const char **argv, const size_t *len);
redisReply *cr_link_read(cr_link *l);

/* ---- scripts.c: the lease and the fence ---- */

/* Takes the lease (SET NX PX) or renews it when ours (Lua check-and-
 * extend): 1 ours now, 0 another's, -1 link failed. */
int cr_script_lease(cr_link *l, const char *key, const char *id, int held, double ttl_s);
/* Gives the lease up when ours. */
void cr_script_release(cr_link *l, const char *key, const char *id);
typedef struct cr_publish_keys {
    const char *lease, *table, *channel, *id;
} cr_publish_keys;
/* Publishes blob into table as the next generation (above Redis's and
 * above), only while lease holds id, and PUBLISHes it on channel: the
 * generation (>= 1), 0 when the fence refused, -1 when the link failed. */
long long cr_script_publish(cr_link *l, const cr_publish_keys *k, const uint8_t *blob,
                            size_t len, uint64_t above);
/* Publishes an endpoint set blob of version (>= 1) into k->table (the
 * endpoints hash), only while lease holds id and version is above the
 * one there, and PUBLISHes "endpoints VERSION" on channel: version when
 * written, 0 when the fence refused, -V when Redis holds V >= version
 * already (nothing written), -1 << 62 when the link failed. */
#define CR_SCRIPT_LINK_FAILED (-(1LL << 62))
long long cr_script_publish_members(cr_link *l, const cr_publish_keys *k, const uint8_t *blob,
                                    size_t len, uint64_t version);
/* The forward list taken whole (its entries in push order, then the list
 * deleted) while lease holds id: the array reply (the caller frees it),
 * a nil reply when the lease is not ours, NULL when the link failed. */
redisReply *cr_script_take(cr_link *l, const char *lease, const char *list, const char *id);

/* ---- notify.c: the wait between syncs ---- */

struct cr_replica;
/* Waits until until (cr_mono_s), a wake (cr_replica_wake: a stop, or work
 * asked for now) or a notification: 1 for a notification (a table was
 * published: fetch it now), -1 for a wake, else 0. */
int cr_replica_wait(struct cr_replica *r, double until);
int cr_replica_wake_open(struct cr_replica *r); /* 0, or -1 */
void cr_replica_wake(struct cr_replica *r);     /* cuts the wait short */
void cr_replica_wake_close(struct cr_replica *r);

/* ---- the replica ---- */

typedef struct cr_merged {
    cr_session_rate *rates; /* ascending owner */
    size_t n;
    double at; /* wall time of the merge */
} cr_merged;

struct cr_replica {
    cr_replica_config cfg; /* strings copied below */
    char id[CR_REPLICA_ID_MAX + 1];
    char k_mine[CR_REPLICA_KEY_MAX], k_set[CR_REPLICA_KEY_MAX], k_lease[CR_REPLICA_KEY_MAX];
    char k_table[CR_REPLICA_KEY_MAX], k_notify[CR_REPLICA_KEY_MAX];
    char k_members[CR_REPLICA_KEY_MAX], k_forward[CR_REPLICA_KEY_MAX];
    cr_core *core;
    double half_life, replan_interval_s;
    cr_replica_hooks hooks;
    cr_link link;
    cr_link sub;    /* the publish channel, subscribed (notify.c) */
    int wake_fd[2]; /* stop's pipe into the wait */
    pthread_t thread;
    pthread_mutex_t lock; /* guards stop, reauth, stats and merged */
    int stop, started;
    int reauth; /* cr_replica_reload asked; the next sync takes it */
    /* thread-only */
    int need_full, skewed, was_up, up_known, offset_known;
    double offset; /* wall minus the core's clock: see cr_replica_offset */
    double test_skew_s;    /* replica_test.h; 0 in production */
    double merge_demand_s; /* CR_REPLICA_MERGE_DEMAND_S, or replica_test.h's */
    char refused_table[CR_ERRLEN]; /* the last refusal of a published table, said once */
    char refused_members[CR_ERRLEN]; /* likewise of a published endpoint set */
    uint64_t members_have;       /* the endpoint set version adopted or published here */
    double redis_time;  /* Redis TIME at this sync, Unix seconds */
    size_t base_entries, log_entries; /* owners in our list's base and deltas */
    double last_full, last_plan, lease_until, last_merge; /* cr_mono_s */
    /* shared, under lock (merged is replaced only by the thread, which
     * reads it unlocked) */
    cr_replica_stats stats;
    double last_push_mono;
    double merged_wanted_until;
    pthread_cond_t merged_cond; /* broadcast when a merge lands (lead.c) */
    cr_merged merged;
    char down_why[CR_ERRLEN];
    /* forwarded calls to push (members.c): appended by any thread, taken
     * from the front by the thread */
    struct cr_forward_blob {
        uint8_t *p;
        size_t len;
    } forward[CR_REPLICA_FORWARD_MAX];
    size_t n_forward;
};

double cr_replica_wall(void);
struct cr_replica;
/* This replica's wall clock: cr_replica_wall plus the test hook's skew. */
double cr_replica_clock(const struct cr_replica *r);
/* Wall time minus the core's clock, measured afresh but kept while within
 * 1 ms of the kept one, so an owner's pushed t_i does not jitter from push
 * to push (an error of 2^(jitter/H)); it follows real steps and slews. */
double cr_replica_offset(cr_replica *r);
void cr_replica_event_to(cr_replica *r, cr_replica_event_kind kind, const char *detail,
                         double skew_s, uint64_t generation);
/* sync.c: one cycle (push, lease, merge, plan, publish or fetch); the
 * first with seed: also installs the table and seeds the estimator. */
void cr_replica_sync(cr_replica *r, int push_due);
/* Leader or follower now: counted and reported when it changed; a new
 * leader plans at its next sync. */
void cr_replica_set_leader(cr_replica *r, int leader, uint64_t generation);
/* "(MS": the replica set's exclusive lower bound of live scores, Redis's
 * time minus --replica-ttl, for ZRANGEBYSCORE and ZREMRANGEBYSCORE. */
void cr_replica_oldest(const cr_replica *r, char *buf, size_t len);
/* lead.c: the leader's merge, plan and publish, or the follower's fetch
 * (and merge while merged rates are asked for). */
void cr_replica_lead_or_follow(cr_replica *r, double wall);
int cr_replica_fetch_table(cr_replica *r);
void cr_replica_seed(cr_replica *r);
/* A published generation or version as Redis holds it: decimal digits
 * alone, in 1..CR_CORE_MAX_GENERATION; 0 for anything else. */
uint64_t cr_replica_parse_generation(const redisReply *g);
/* 1 when why differs from the reason in last (len bytes), which it then
 * becomes: a refusal is said and counted once per reason, as followers
 * poll every tick. */
int cr_replica_first_time(char *last, size_t len, const char *why);

/* ---- members.c: the endpoint set ---- */

/* The leader's or the follower's part of a sync: forwarded calls pushed
 * (follower) or applied (leader, with the forward list's), then the
 * leader's publish or the follower's fetch. */
void cr_replica_members_sync(cr_replica *r);
/* Fetches and adopts the published endpoint set when its version is above
 * the one this replica has; 1 when it adopted one. */
int cr_replica_fetch_members(cr_replica *r);
/* Leadership changed: a new leader adopts the published set, then applies
 * its own and publishes at its next sync; a follower follows. */
void cr_replica_members_lead(cr_replica *r, int leader);
/* Frees what is still queued to forward. */
void cr_replica_members_free(cr_replica *r);

#endif
