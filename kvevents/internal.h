/* kvevents' private words: the subscriber's state, which subscriber.c
 * runs and follow.c fits to the endpoint set, both on the subscriber's
 * thread. */
#ifndef CR_KVEVENTS_INTERNAL_H
#define CR_KVEVENTS_INTERNAL_H

#include <pthread.h>
#include <zmq.h>

#include "kvevents.h"

/* Up to three parts of one multipart message. */
typedef struct parts {
    zmq_msg_t p[3];
    int kept;  /* initialised parts in p */
    int total; /* parts the message had */
} parts;

/* A replay in progress: the batches wanted are [next, upto); the live
 * message that found the gap (seq upto) waits in held. */
typedef struct replay {
    void *dealer; /* NULL: no replay */
    uint64_t first, next, upto;
    double deadline;
    zmq_msg_t held;
} replay;

/* Reports of one kind for a shard, at most one a CR_KV_DROP_LOG_S. */
typedef struct limiter {
    uint64_t unreported;
    double next;
} limiter;

/* One link: a SUB socket to one engine (a --kv-events shard's, or one rank
 * of a followed endpoint's), feeding src.shard. */
typedef struct shard {
    cr_kv_engine src;
    int used;      /* 0: a free place in the subscriber's table */
    int followed;  /* 1: opened for an endpoint of the set (follow.c), not --kv-events */
    void *sub;     /* NULL while the link waits to be re-opened */
    void *monitor; /* PAIR: the SUB socket's disconnects */
    /* the thread's own */
    double relink_at;    /* sub NULL: when to open it again */
    int have_seq;
    uint64_t last_seq;
    limiter drops, link_drops;
    replay r;
    /* under the subscriber's lock */
    cr_kv_stats st;
} shard;

struct cr_kv_subscriber {
    cr_core *core;
    cr_kv_hooks hooks;
    void *zmq;
    int64_t max_frame; /* ZMQ_MAXMSGSIZE */
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t lock; /* every shard's st, used and src */
    char topic[CR_KV_TOPIC_MAX]; /* ZMQ_SUBSCRIBE's prefix */
    /* following the endpoint set (follow.c) */
    int follow;
    uint32_t dp_size;
    uint64_t taken;       /* the --kv-events shards, a bit each: never followed */
    atomic_int changed;   /* the set changed since the thread last read it */
    unsigned links;       /* links opened: names each monitor's endpoint (the inproc name of
                           * a closed one may not be free yet) */
    size_t n;             /* places in shards[] ever used: the loops' bound */
    size_t cap;           /* places in shards[] */
    shard shards[];
};

/* subscriber.c's, for follow.c (the subscriber's thread only). */

/* Opens a link to src in a free place: 0, or -1 with errno (ENOSPC: all
 * CR_KV_MAX_LINKS places taken). */
int cr_kv_link_open(cr_kv_subscriber *s, const cr_kv_engine *src, int followed);

/* Closes sh's link (a replay in progress abandoned), resets its shard's
 * view (why) and frees its place. */
void cr_kv_link_close(cr_kv_subscriber *s, shard *sh, const char *why);

/* Reports r (its shard set) to the owner's hook; a NULL detail as "". */
void cr_kv_report_to(cr_kv_subscriber *s, cr_kv_report r);

/* follow.c's: the links made to match the set when it changed. */
void cr_kv_follow_sync(cr_kv_subscriber *s);

#endif
