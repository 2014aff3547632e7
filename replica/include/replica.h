/* cacheroute replicas: several sidecars over one Redis that plan from the
 * cluster's merged rates and answer routes from one table.
 *
 * Why merging is exact: under --estimator-clock seconds an owner's rate is
 * a sum of one decaying kernel per arrival, so the rate of the union of
 * every replica's arrivals at time t is sum_i r_i 2^(-(t - t_i)/H), r_i
 * the replica's own decayed count as of its t_i (cr_replica_decayed, in
 * one place). The calls clock is not linear in the arrivals and cannot be
 * merged: cr_replica_config_check refuses it with a backend.
 *
 * In Redis, under the prefix cr:{CLUSTER}: (a hash tag: one slot, so the
 * scripts may touch several keys):
 *   r:ID        list of chunks (cr_replica_chunk_encode): the base (every
 *               owner of a full push) then one delta per push since (the
 *               owners touched), so an owner's last entry is its state.
 *               PEXPIREd by --replica-ttl at each push, so a dead replica's
 *               counts go by themselves. A full push replaces the list in
 *               one MULTI; it happens on the first push, after a failed
 *               one or a new connection, when the touched set overflowed,
 *               when the deltas since the base would hold more owners than
 *               the base (so the list stays under twice the owners
 *               tracked), and every min(--replica-ttl / 2, 60 s).
 *   replicas    sorted set: ID scored by its last push, Redis TIME in ms
 *   lease       the leader's ID, SET NX PX --lease-ttl, renewed by a Lua
 *               check-and-extend
 *   table       hash: generation (HINCRBY), blob (cr_replica_table_encode),
 *               leader; written only by the fenced publish script, which
 *               checks the lease is still the caller's
 *   notify      channel: the generation, PUBLISHed by each publish;
 *               "endpoints V" by each endpoint set publish, "forward" by
 *               each follower's forward (the leader takes them at once)
 *   endpoints   hash: version, blob (cr_replica_members_encode), leader;
 *               the leader's endpoint set, written only by the fenced
 *               members publish script (and only a higher version)
 *   forward     list of forwarded SetEndpoints and DrainEndpoint calls
 *               (cr_replica_forward_encode), RPUSHed by followers and
 *               LTRIMmed to the last CR_REPLICA_FORWARD_MAX; the leader
 *               takes the whole list (LRANGE and DEL, fenced by the lease)
 *               and applies it in order
 * Chunks rather than a hash field per owner: Redis spends ~4 us of its one
 * thread on each HSET field on a loaded machine but copies a 24 MB string
 * in milliseconds (`replica_bench` on the hash-field version: bench/HISTORY.md).
 *
 * Every --sync-interval a replica pushes, renews or takes the lease, then:
 * the leader merges every live replica's list at its wall time and, every
 * --replan-interval, plans the merged rates (cr_core_cluster_plan) and
 * publishes; a follower fetches the table when its generation moved and
 * installs it under the same generation, at once when notified (it waits
 * between syncs on a subscription to notify) and at each sync anyway. One background thread does all
 * of it; no RPC ever waits on Redis.
 *
 * The endpoint set (members.c): the leader's is the cluster's. At each
 * sync (and when notified) the leader takes the forwarded calls, applies
 * them in order, retries its DOWN endpoints that are due, and publishes
 * its set when its version moved; a follower fetches the set when the
 * published version is above the one it has and adopts it slot for slot
 * (cr_core_adopt_endpoints). A follower's own SetEndpoints and
 * DrainEndpoint are checked by its core, queued (cr_replica_forward) and
 * pushed by this thread. On taking the lead a replica first adopts the
 * published set, then applies its own (cr_core_follow_endpoints).
 *
 * Clock skew: t_i are each replica's wall clock. A replica whose clock runs
 * s seconds behind the leader's has its contribution weighed 2^(-s/H); one
 * s seconds ahead up to 2^(s/H) (a t_i ahead of the merge counts as the
 * merge's time, so exactly 2^(s/H) once s has passed since its push). A push whose wall time differs
 * from Redis TIME by more than CR_REPLICA_SKEW_WARN_S is reported.
 *
 * AUTH: with --state-backend-password-file, both connections (commands,
 * and the subscription) send AUTH right after each connect, the file read
 * afresh each time (cr_replica_auth_read); a refusal is a backend that is
 * down ("state backend refused AUTH: <Redis's error>"), retried with the
 * backoff. The password is never logged or kept between connects.
 *
 * Tests skew a replica's wall clock and shorten its merge demand through
 * replica_test.h.
 *
 * Thread safety: cr_replica_stats_read, cr_replica_rates and
 * cr_replica_reload may run from any thread at any time between start and
 * stop. The process must ignore
 * SIGPIPE (hiredis writes to a socket Redis may have closed); the sidecar
 * does (server/grpc/signals.h). */
#ifndef CR_REPLICA_H
#define CR_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

/* Bytes of --replica-id (a Kubernetes pod name is up to 253) and of
 * --cluster; a Redis key is cr:{CLUSTER}:r:ID, so CR_REPLICA_KEY_MAX holds
 * the longest with room to spare. */
#define CR_REPLICA_ID_MAX 253
#define CR_REPLICA_CLUSTER_MAX 128
#define CR_REPLICA_KEY_MAX (CR_REPLICA_CLUSTER_MAX + CR_REPLICA_ID_MAX + 32)
#define CR_REPLICA_SKEW_WARN_S 1.0   /* a push this far from Redis TIME is skewed */
#define CR_REPLICA_TABLE_VERSION 1   /* the blob's version */
/* The endpoint set blob's and a forwarded request's versions. 2 carries
 * each endpoint's KV-event address and its source-stated state (version
 * 1 did not: a follower lost both). Either is read; 2 is written only
 * when a slot or spec has one of them, so a set without them reads on
 * replicas of before version 2 too. */
#define CR_REPLICA_MEMBERS_VERSION 2
#define CR_REPLICA_FORWARD_VERSION 2
/* Forwarded requests a follower holds before pushing them, and the forward
 * list's length in Redis. */
#define CR_REPLICA_FORWARD_MAX 64
#define CR_REPLICA_MERGE_DEMAND_S 30.0 /* a merged GetRates keeps merges coming this long */
/* A merged GetRates before any merge waits this long at most for one. */
#define CR_REPLICA_FIRST_MERGE_WAIT_S 5.0

typedef enum cr_backend_start { CR_BACKEND_DEGRADED, CR_BACKEND_REQUIRE } cr_backend_start;

/* Defaults and bounds: the rows of cr_replica_options. */
typedef struct cr_replica_config {
    char *state_backend;     /* --state-backend: redis://HOST:PORT[/DB], unix:PATH[?db=N];
                              * "" = standalone (no replica) */
    char *state_backend_password_file; /* --state-backend-password-file; "" = no AUTH;
                              * read at check and at each connect */
    char *replica_id;        /* --replica-id; "" = the host name */
    char *cluster;           /* --cluster */
    double sync_interval_s;  /* --sync-interval */
    double lease_ttl_s;      /* --lease-ttl */
    double replica_ttl_s;    /* --replica-ttl, >= lease_ttl_s */
    long backend_timeout_ms; /* --backend-timeout: connect and each command */
    int backend_start;       /* cr_backend_start; --backend-start */
} cr_replica_config;

/* The rows (--state-backend, --state-backend-password-file, --replica-id,
 * --cluster, --sync-interval, --lease-ttl, --replica-ttl, --backend-timeout,
 * --backend-start); group "replica". */
extern const cr_option_table cr_replica_options;

void cr_replica_config_default(cr_replica_config *cfg);

/* The rows' bounds, then what they cannot see: --replica-ttl >=
 * --lease-ttl, and with a backend the estimator's clock must be seconds
 * and the password file, when given, readable and well formed (it is read
 * here, and forgotten; without a backend it is not read). CR_EINVAL with
 * err naming the flag and the value (the file, never its contents). */
cr_status cr_replica_config_check(const cr_replica_config *cfg, cr_clock clock, cr_error *err);

/* ---- pure parts (unit-tested on their own) ---- */

typedef struct cr_replica_url {
    int is_unix;
    char host[256]; /* redis:// */
    int port;
    char path[108]; /* unix: (sun_path) */
    int db;         /* SELECTed when > 0 */
} cr_replica_url;

/* Parses --state-backend. CR_EINVAL with err "--state-backend must be
 * redis://HOST:PORT[/DB] or unix:PATH[?db=N] (...), got \"VALUE\"". */
cr_status cr_replica_parse_url(const char *url, cr_replica_url *out, cr_error *err);

/* A pushed chunk: u32 CR_REPLICA_CHUNK_VERSION, u64 owners, then per
 * owner i64 owner, f64 count, f64 t_i (wall-clock Unix seconds: e->t_last
 * here), little-endian (bytes.h): 24 B an owner, at most
 * CR_REPLICA_CHUNK_MAX owners (24 MB), far below Redis's 512 MB strings. */
#define CR_REPLICA_CHUNK_VERSION 1
#define CR_REPLICA_CHUNK_MAX 1000000
#define CR_REPLICA_ENTRY_BYTES 24
/* n <= CR_REPLICA_CHUNK_MAX entries into a malloc'd *out of *len bytes.
 * CR_ENOMEM out of memory, CR_EINVAL for n over the bound. */
cr_status cr_replica_chunk_encode(const cr_estimator_entry *v, size_t n, uint8_t **out,
                                  size_t *len, cr_error *err);
/* The reverse, into a malloc'd *out of *n entries (NULL when 0). CR_EINVAL
 * naming what is wrong (version, a count the bytes do not hold, a count
 * not finite and > 0, a time not finite: nothing is returned then),
 * CR_ENOMEM out of memory. */
cr_status cr_replica_chunk_decode(const void *p, size_t len, cr_estimator_entry **out,
                                  size_t *n, cr_error *err);

/* v holds a replica's pushes in push order (an owner may repeat): keeps
 * each owner's last one, ascending by owner; returns how many are left.
 * -1 when out of memory (v unchanged). */
long cr_replica_keep_latest(cr_estimator_entry *v, size_t n);

/* count as of t_i, decayed to t: count 2^(-(t - t_i)/H), never grown (a t_i
 * ahead of t counts as t): the estimator's rate of an exported (count,
 * t_i) pair, to rounding (the estimator scales by its partition's epoch). */
double cr_replica_decayed(double count, double t_i, double t, double half_life);

/* The merged rate of each owner at wall time t from n contributions (any
 * order, several per owner, summed in v's order), ascending by owner, in a
 * malloc'd *out of *n_out; each contribution and each sum at most
 * CR_PLAN_MAX_RATE (a foreign entry's count may be anything finite).
 * CR_ENOMEM when out of memory. */
cr_status cr_replica_merge(const cr_estimator_entry *v, size_t n, double t, double half_life,
                           cr_session_rate **out, size_t *n_out, cr_error *err);

/* A table as the published blob: u32 CR_REPLICA_TABLE_VERSION then the
 * table's section (cr_table_save). *out malloc'd. CR_ENOMEM out of memory. */
cr_status cr_replica_table_encode(const cr_table *t, uint8_t **out, size_t *len, cr_error *err);
/* The reverse, checked as cr_table_load checks (and the version, and no
 * trailing bytes). */
cr_status cr_replica_table_decode(const void *p, size_t len, cr_table **out, cr_error *err);

/* The leader's endpoint set as the published blob: u32
 * CR_REPLICA_MEMBERS_VERSION, u64 the set's version, u32 slots, then per
 * slot u8 state, f64 weight, f64 seconds in its state, f64 seconds until
 * a DOWN one's retry (0 otherwise), and the id and address (u32 length,
 * bytes). Times as durations from now (the core's clock), so replicas'
 * clocks need not agree. *out malloc'd; CR_ENOMEM out of memory. */
cr_status cr_replica_members_encode(const cr_endpoints *e, double now, uint8_t **out,
                                    size_t *len, cr_error *err);
/* The reverse, the durations put back onto now (this core's clock): *out
 * a malloc'd array of *n slots, *version the set's. Bounded: 1 to
 * CR_ENDPOINTS_MAX slots that the bytes can hold, strings of 1 to
 * CR_ENDPOINT_ID_MAX / CR_ENDPOINT_ADDRESS_MAX bytes without a NUL, a
 * known state, finite durations >= 0, no trailing bytes. Anything wrong
 * refuses it whole: CR_EINVAL naming what (nothing returned); CR_ENOMEM.
 * The slots' own rules are cr_endpoints_adopt's. */
cr_status cr_replica_members_decode(const void *p, size_t len, double now, cr_endpoint **out,
                                    uint32_t *n, uint64_t *version, cr_error *err);

/* A SetEndpoints or DrainEndpoint a follower forwards to its leader. */
typedef enum cr_forward_kind {
    CR_FORWARD_SET = 1,
    CR_FORWARD_DRAIN = 2,
    CR_FORWARD_UNDRAIN = 3
} cr_forward_kind;

typedef struct cr_forward {
    int kind;                      /* cr_forward_kind */
    const char *from;              /* the replica that took the call */
    const char *id;                /* DRAIN, UNDRAIN: the endpoint */
    const cr_endpoint_spec *specs; /* SET: the whole set, n of them */
    size_t n;
} cr_forward;

/* f as a blob: u32 CR_REPLICA_FORWARD_VERSION, u8 kind, the origin, then
 * u32 n and per spec id, address (u32 length, bytes) and f64 weight, or
 * the id. *out malloc'd; CR_ENOMEM out of memory. */
cr_status cr_replica_forward_encode(const cr_forward *f, uint8_t **out, size_t *len,
                                    cr_error *err);
/* The reverse into one malloc'd block (free()): version, kind, at most
 * CR_ENDPOINTS_MAX specs the bytes can hold, strings bounded as the
 * members blob's (the origin by CR_REPLICA_ID_MAX), no trailing bytes;
 * else CR_EINVAL naming what. The specs' own rules are the core's, checked
 * when the leader applies them. */
cr_status cr_replica_forward_decode(const void *p, size_t len, cr_forward **out,
                                    cr_error *err);

/* What --state-backend-password-file holds, for AUTH right after each
 * connect (both connections): one line, "PASSWORD" (AUTH PASSWORD, the
 * default user or requirepass) or "USER PASSWORD" (AUTH USER PASSWORD, a
 * Redis 6 ACL user); words separated by spaces or tabs, trailing blanks and
 * the newline dropped, at most CR_REPLICA_AUTH_MAX bytes. */
#define CR_REPLICA_AUTH_MAX 4096
typedef struct cr_replica_auth {
    char user[CR_REPLICA_AUTH_MAX + 1]; /* "" = AUTH PASSWORD */
    char pass[CR_REPLICA_AUTH_MAX + 1];
} cr_replica_auth;

/* Parses the file's len bytes of text into *out. CR_EINVAL for empty or
 * blank text, three words or more, a second line, a control character or
 * over CR_REPLICA_AUTH_MAX bytes, with err "--state-backend-password-file
 * PATH: why" (path only names the file there; text is never quoted); *out
 * is then zeroed. Pure. */
cr_status cr_replica_auth_parse(const char *text, size_t len, const char *path,
                                cr_replica_auth *out, cr_error *err);
/* Reads and parses the file at path; CR_EINVAL "... PATH: cannot read:
 * strerror" when it cannot be read, else as cr_replica_auth_parse. Its
 * bytes are wiped from the stack before returning. */
cr_status cr_replica_auth_read(const char *path, cr_replica_auth *out, cr_error *err);
/* Wipes *a (explicit_bzero), as every holder must once done with it. */
void cr_replica_auth_clear(cr_replica_auth *a);

/* ---- the running replica ---- */

typedef enum cr_replica_event_kind {
    CR_REPLICA_BACKEND_UP,
    CR_REPLICA_BACKEND_DOWN, /* detail: why */
    CR_REPLICA_LEADER,
    CR_REPLICA_FOLLOWER,
    CR_REPLICA_SKEWED,       /* skew_s: our wall time minus Redis TIME */
    CR_REPLICA_UNSKEWED,
    CR_REPLICA_REFUSED,      /* a publish refused by the fence; detail */
    CR_REPLICA_TABLE_REFUSED, /* a published table not installed (generation,
                               * shard count); detail says why */
    CR_REPLICA_MEMBERS_REFUSED, /* a published endpoint set not adopted (version,
                                 * a bad blob); detail says why */
    CR_REPLICA_FORWARD_REFUSED, /* the leader could not apply a forwarded call;
                                 * detail names it, its origin and why */
    CR_REPLICA_ERROR         /* anything else that went wrong; detail */
} cr_replica_event_kind;

typedef struct cr_replica_event {
    cr_replica_event_kind kind;
    const char *detail; /* valid for the call; may be "" */
    double skew_s;
    uint64_t generation; /* LEADER, REFUSED: the table's */
} cr_replica_event;

/* Called on the replica's thread (or in cr_replica_start) once per change
 * of state (up/down, leader/follower, skewed/not) and per refused publish
 * or error; must not block. */
typedef struct cr_replica_hooks {
    void (*event)(void *ctx, const cr_replica_event *ev);
    void *ctx;
} cr_replica_hooks;

typedef struct cr_replica cr_replica;

/* Checks cfg, resolves the id, starts tracking touched owners in core
 * (max_owners of them: the estimator's bound), then tries the backend once
 * (within --backend-timeout): installs the published table and seeds an
 * empty estimator with this replica's own previous counts (its list, if
 * still live). Unreachable: with require, NULL and err "--state-backend
 * URL: cannot reach Redis: why (--backend-start require)"; with degraded,
 * it starts anyway and retries. Then starts the thread. replan_interval_s:
 * how often the leader plans (0 = never). NULL with err on a bad config or
 * out of memory. core, and the strings cfg points to, must outlive the
 * replica. */
cr_replica *cr_replica_start(const cr_replica_config *cfg, cr_core *core,
                             double replan_interval_s, const cr_replica_hooks *hooks,
                             cr_error *err);

/* Stops the thread (a cycle in progress finishes first; bounded by the
 * backend timeout), gives up the lease if held, frees. NULL ignored. */
void cr_replica_stop(cr_replica *r);

/* SIGHUP: with --state-backend-password-file, the replica's thread reads
 * the file again at its next sync (within --sync-interval and --lease-ttl
 * / 3) and AUTHs the open connection with it; refused, the backend is down
 * (BACKEND_DOWN, "state backend refused AUTH: ...") and retried with
 * backoff, each connect reading the file afresh. Without a file, nothing.
 * Any thread; NULL ignored; never blocks on Redis. */
void cr_replica_reload(cr_replica *r);

typedef struct cr_replica_stats {
    int backend_up;
    int leader;
    double last_sync_age_s;       /* since the last successful push; -1 never */
    uint64_t lease_changes;       /* leader <-> follower */
    uint64_t tables_published, tables_installed;
    /* Published tables not installed: a generation that did not move
     * forward or did not parse (N12), or another shard count than this
     * replica's --n-shards (N10). */
    uint64_t tables_refused;
    double merge_seconds;         /* the last merge's duration */
    uint64_t merges;              /* merges that succeeded: the leader's for its
                                   * plans, anyone's for merged GetRates */
    uint64_t replicas_seen;       /* live in the last push or merge */
    uint64_t generation;          /* the last cluster table installed */
    /* The endpoint set: versions this replica published as leader and
     * adopted as follower, published sets it refused (a version that did
     * not move forward, a bad blob), and the version it has. */
    uint64_t members_published, members_installed, members_refused, members_version;
    /* Forwarded calls: pushed to Redis by this follower, applied and
     * refused by this leader; and held here now, to push. */
    uint64_t forwarded, forwards_applied, forwards_refused, forward_queue;
    uint64_t pushes, pushed_owners, full_pushes, round_trips;
} cr_replica_stats;

void cr_replica_stats_read(cr_replica *r, cr_replica_stats *out);

/* Queues f (its from is filled here with this replica's id) for the
 * leader: the thread pushes it onto the forward list at once (woken) and
 * the leader applies it at its next sync or notification. For a
 * follower's SetEndpoints and DrainEndpoint once its core has checked them
 * (cr_core_members_event.followed); a replica that takes the lead before
 * pushing applies them itself. CR_ENOMEM when CR_REPLICA_FORWARD_MAX are
 * queued already ("... holds 64 forwarded calls, its bound ..."), or out
 * of memory. Any thread; never waits on Redis. */
cr_status cr_replica_forward(cr_replica *r, const cr_forward *f, cr_error *err);

typedef enum cr_replica_answer {
    CR_REPLICA_RATES,       /* *out filled */
    CR_REPLICA_UNAVAILABLE, /* the backend is down or nothing merged yet; err says */
    CR_REPLICA_NOMEM
} cr_replica_answer;

/* The cluster's merged rates now (wall time): of the n listed owners (0
 * for unknown ones), or with n 0 of every merged owner ascending; from the
 * last merge, decayed to now. Asking makes a follower merge at each sync
 * for the next CR_REPLICA_MERGE_DEMAND_S (the leader merges when it plans
 * too), though at most once per 4 merge durations. *out malloc'd;
 * *merged_owners = owners in the merge. Never touches Redis. */
cr_replica_answer cr_replica_rates(cr_replica *r, const int64_t *owners, size_t n,
                                   cr_session_rate **out, size_t *n_out,
                                   uint64_t *merged_owners, cr_error *err);

#endif
