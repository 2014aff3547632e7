/* The KV-event subscriber (kvevents.h): one thread polls every shard's SUB
 * socket and keeps each shard's seq chain whole, by a replay from the
 * engine's ROUTER socket when it can and by a reset of the shard's view
 * when it cannot, so the index never keeps blocks an engine may have
 * dropped in a batch nobody saw. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kvevents.h"

#define SEQ_END UINT64_MAX /* the replay's last answer: seq -1 as 8 bytes */
#define MAX_BURST 64       /* messages read from one shard a poll: the others get turns */
#define WHY_LEN 192

/* ---- SHARD=ENDPOINT[,replay=ENDPOINT] ---------------------------------------- */

/* Copies the len bytes of an endpoint at e into out when valid. */
static cr_status endpoint_of(const char *e, size_t len, const char *what, char *out,
                             cr_error *err)
{
    if (len <= 6 || (strncmp(e, "tcp://", 6) && strncmp(e, "ipc://", 6)))
        return cr_fail(err, CR_EINVAL, "%s must be tcp://... or ipc://...", what);
    if (len >= CR_KV_ENDPOINT_MAX || memchr(e, ' ', len))
        return cr_fail(err, CR_EINVAL, "%s must be 1..%d bytes without spaces", what,
                       CR_KV_ENDPOINT_MAX - 1);
    memcpy(out, e, len);
    out[len] = '\0';
    return CR_OK;
}

cr_status cr_kv_engine_parse(const char *text, cr_kv_engine *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    const char *eq = strchr(text, '=');
    size_t digits = strspn(text, "0123456789");
    if (!eq)
        return cr_fail(err, CR_EINVAL, "must be SHARD=ENDPOINT[,replay=ENDPOINT]");
    if (digits == 0 || digits > 2 || text + digits != eq || atoi(text) >= CR_KV_MAX_ENGINES)
        return cr_fail(err, CR_EINVAL, "SHARD must be a decimal in 0..%d",
                       CR_KV_MAX_ENGINES - 1);
    out->shard = (uint32_t)atoi(text);
    const char *ep = eq + 1, *comma = strchr(ep, ',');
    size_t len = comma ? (size_t)(comma - ep) : strlen(ep);
    if (endpoint_of(ep, len, "ENDPOINT", out->endpoint, err) != CR_OK)
        return CR_EINVAL;
    if (!comma)
        return CR_OK;
    if (strncmp(comma, ",replay=", 8))
        return cr_fail(err, CR_EINVAL, "only ,replay=ENDPOINT may follow ENDPOINT");
    return endpoint_of(comma + 8, strlen(comma + 8), "replay=ENDPOINT", out->replay, err);
}

/* ---- the subscriber's state ------------------------------------------------- */

typedef struct shard {
    cr_kv_engine src;
    void *sub;
    /* the thread's own */
    int have_seq;
    uint64_t last_seq;
    uint64_t drops_unreported;
    double next_drop_report;
    /* under the subscriber's lock */
    cr_kv_stats st;
} shard;

struct cr_kv_subscriber {
    cr_core *core;
    cr_kv_hooks hooks;
    void *zmq;
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t lock; /* every shard's st */
    size_t n;
    shard shards[];
};

static void report(cr_kv_subscriber *s, const shard *sh, cr_kv_report r)
{
    r.shard = sh->src.shard;
    if (!r.detail)
        r.detail = "";
    if (s->hooks.report)
        s->hooks.report(s->hooks.ctx, &r);
}

/* Adds to a shard's counters under the lock: the metrics read them from
 * another thread. */
typedef struct counts {
    uint64_t batches, applied, dropped, replayed, gaps, resets;
    int event; /* a batch was applied: its time is the last event's */
} counts;

static void count(cr_kv_subscriber *s, shard *sh, counts c)
{
    double now = c.event ? cr_mono_s() : 0;
    pthread_mutex_lock(&s->lock);
    sh->st.batches += c.batches;
    sh->st.applied += c.applied;
    sh->st.dropped += c.dropped;
    sh->st.replayed += c.replayed;
    sh->st.gaps += c.gaps;
    sh->st.resets += c.resets;
    if (c.event)
        sh->st.last_event_s = now;
    pthread_mutex_unlock(&s->lock);
}

/* A dropped message: counted always, reported at most once a
 * CR_KV_DROP_LOG_S per shard (with how many since the last report), so a
 * publisher sending garbage cannot flood the log. */
static void drop(cr_kv_subscriber *s, shard *sh, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void drop(cr_kv_subscriber *s, shard *sh, const char *fmt, ...)
{
    count(s, sh, (counts){.dropped = 1});
    sh->drops_unreported++;
    double now = cr_mono_s();
    if (now < sh->next_drop_report)
        return;
    char why[WHY_LEN + CR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    report(s, sh, (cr_kv_report){.kind = CR_KV_REPORT_DROPPED, .detail = why,
                                 .count = sh->drops_unreported});
    sh->drops_unreported = 0;
    sh->next_drop_report = now + CR_KV_DROP_LOG_S;
}

/* The shard's view cannot be trusted: its index is emptied (the engine's
 * next events rebuild it). */
static void reset(cr_kv_subscriber *s, shard *sh, const char *why)
{
    cr_kv_event clear = {.kind = CR_KV_CLEARED, .shard = sh->src.shard};
    cr_kv_applied applied;
    cr_error err;
    char detail[WHY_LEN + CR_ERRLEN];
    if (cr_core_kv_events(s->core, &clear, 1, &applied, &err) != CR_OK)
        snprintf(detail, sizeof detail, "%s; the clear failed: %s", why, err.msg);
    else
        snprintf(detail, sizeof detail, "%s", why);
    count(s, sh, (counts){.resets = 1});
    report(s, sh, (cr_kv_report){.kind = CR_KV_REPORT_RESET, .detail = detail});
}

/* Decodes one payload and applies its events to the shard; a payload that
 * does not decode, or that the core refuses, is dropped whole. */
static void apply(cr_kv_subscriber *s, shard *sh, const void *data, size_t len, int replayed)
{
    cr_kv_batch b;
    cr_kv_applied applied;
    cr_error err;
    if (cr_kv_decode(data, len, &b, &err) != CR_OK) {
        drop(s, sh, "payload of %zu bytes does not decode: %s", len, err.msg);
        return;
    }
    for (size_t i = 0; i < b.n; i++)
        b.events[i].shard = sh->src.shard;
    cr_status st = cr_core_kv_events(s->core, b.events, b.n, &applied, &err);
    size_t n = b.n;
    cr_kv_batch_free(&b);
    if (st != CR_OK)
        drop(s, sh, "batch refused: %s", err.msg);
    else
        count(s, sh, (counts){.applied = n, .replayed = replayed != 0, .event = 1});
}

/* ---- messages ---------------------------------------------------------------- */

/* Up to three parts of one multipart message. */
typedef struct parts {
    zmq_msg_t p[3];
    int kept;  /* initialised parts in p */
    int total; /* parts the message had */
} parts;

static void parts_close(parts *m)
{
    for (int i = 0; i < m->kept; i++)
        zmq_msg_close(&m->p[i]);
    m->kept = 0;
}

/* Receives one whole message (every part, so the next read starts the next
 * message; parts past the third are closed at once), without waiting.
 * 0, or -1 when none is there (m then holds nothing). */
static int receive(void *sock, parts *m)
{
    m->kept = m->total = 0;
    for (int more = 1; more;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            parts_close(m);
            return -1;
        }
        more = zmq_msg_more(&part);
        if (m->kept < 3)
            m->p[m->kept++] = part;
        else
            zmq_msg_close(&part);
        m->total++;
    }
    return 0;
}

static uint64_t seq_of(zmq_msg_t *part)
{
    const uint8_t *b = zmq_msg_data(part);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

static void seq_bytes(uint64_t v, uint8_t b[8])
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

/* The socket options that bound what a publisher can make us hold. */
static int bound(void *sock)
{
    int64_t max = CR_KV_MAX_MSG_BYTES;
    int hwm = CR_KV_RCV_HWM, linger = 0;
    return zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) ||
           zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm) ||
           zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
}

/* A bounded socket of type connected to endpoint, or NULL with errno. */
static void *open_socket(void *zmq, int type, const char *endpoint)
{
    void *sock = zmq_socket(zmq, type);
    if (!sock)
        return NULL;
    if (bound(sock) || (type == ZMQ_SUB && zmq_setsockopt(sock, ZMQ_SUBSCRIBE, "", 0)) ||
        zmq_connect(sock, endpoint)) {
        int e = zmq_errno();
        zmq_close(sock);
        errno = e;
        return NULL;
    }
    return sock;
}

/* ---- replays ------------------------------------------------------------------- */

/* A replay in progress: the batches wanted are [next, upto). */
typedef struct replay {
    void *dealer;
    uint64_t next, upto;
    double deadline;
} replay;

/* Waits (in CR_KV_POLL_MS slices, so a stop is prompt) for the replay's
 * next answer: 1 when one is readable, 0 at the deadline or a stop. */
static int replay_wait(cr_kv_subscriber *s, replay *r)
{
    for (;;) {
        double left = r->deadline - cr_mono_s();
        if (left <= 0 || atomic_load(&s->stop))
            return 0;
        zmq_pollitem_t it = {.socket = r->dealer, .events = ZMQ_POLLIN};
        long ms = (long)(left * 1e3) + 1;
        if (zmq_poll(&it, 1, ms < CR_KV_POLL_MS ? ms : CR_KV_POLL_MS) > 0)
            return 1;
    }
}

/* One answer, [seq, payload] after an optional empty delimiter: applied
 * when it is the next batch wanted. 1 to read on, 0 when the replay has
 * ended (its end marker, or nothing more wanted), -1 with why when it
 * cannot fill the gap. */
static int replay_answer(cr_kv_subscriber *s, shard *sh, replay *r, parts *m, char *why)
{
    int at = m->total == 3 && zmq_msg_size(&m->p[0]) == 0; /* DEALER's delimiter */
    if (m->total - at != 2 || zmq_msg_size(&m->p[at]) != 8) {
        snprintf(why, WHY_LEN, "a replay answer of %d parts is not [seq, payload]", m->total);
        return -1;
    }
    uint64_t seq = seq_of(&m->p[at]);
    if (seq == SEQ_END)
        return 0;
    if (seq < r->next) /* before the gap: already applied */
        return 1;
    if (seq > r->next) {
        snprintf(why, WHY_LEN, "the replay has seq %" PRIu64 " where %" PRIu64 " was missed",
                 seq, r->next);
        return -1;
    }
    apply(s, sh, zmq_msg_data(&m->p[at + 1]), zmq_msg_size(&m->p[at + 1]), 1);
    return ++r->next < r->upto;
}

/* Reads answers until the gap is filled, the replay ends or fails, or the
 * deadline. 0 when every batch in [next, upto) was applied. */
static int replay_read(cr_kv_subscriber *s, shard *sh, replay *r, char *why)
{
    int rc = 1;
    while (rc == 1) {
        parts m;
        if (!replay_wait(s, r)) {
            snprintf(why, WHY_LEN, "no replay within %g s", CR_KV_REPLAY_WAIT_S);
            return -1;
        }
        if (receive(r->dealer, &m) != 0)
            continue;
        rc = replay_answer(s, sh, r, &m, why);
        parts_close(&m);
    }
    if (rc < 0)
        return -1;
    if (r->next < r->upto) {
        snprintf(why, WHY_LEN, "the replay ended before seq %" PRIu64, r->next);
        return -1;
    }
    return 0;
}

/* Asks the shard's replay endpoint for the batches in (last, upto) and
 * applies them in order. 0 when the gap is filled, else -1 with why (what
 * was applied of it is reset with the rest). */
static int replay_gap(cr_kv_subscriber *s, shard *sh, uint64_t upto, char *why)
{
    uint64_t first = sh->last_seq + 1;
    replay r = {.next = first, .upto = upto, .deadline = cr_mono_s() + CR_KV_REPLAY_WAIT_S};
    if (!*sh->src.replay) {
        snprintf(why, WHY_LEN, "no --kv-events replay endpoint");
        return -1;
    }
    r.dealer = open_socket(s->zmq, ZMQ_DEALER, sh->src.replay);
    uint8_t start[8];
    seq_bytes(r.next, start);
    int rc = -1;
    if (!r.dealer)
        snprintf(why, WHY_LEN, "cannot open the replay socket: %s", zmq_strerror(errno));
    else if (zmq_send(r.dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
             zmq_send(r.dealer, start, 8, ZMQ_DONTWAIT) < 0)
        snprintf(why, WHY_LEN, "cannot ask for a replay: %s", zmq_strerror(zmq_errno()));
    else
        rc = replay_read(s, sh, &r, why);
    if (r.dealer)
        zmq_close(r.dealer);
    if (rc == 0)
        report(s, sh, (cr_kv_report){.kind = CR_KV_REPORT_REPLAYED, .count = upto - first,
                                     .first = first, .last = upto - 1});
    return rc;
}

/* Before applying the batch numbered seq: keeps the chain whole, or resets
 * the view when it cannot. */
static void follow(cr_kv_subscriber *s, shard *sh, uint64_t seq)
{
    char why[WHY_LEN], detail[2 * WHY_LEN];
    if (!sh->have_seq || seq == sh->last_seq + 1)
        return;
    if (seq <= sh->last_seq) {
        snprintf(detail, sizeof detail, "the publisher restarted: seq %" PRIu64 " after %" PRIu64,
                 seq, sh->last_seq);
        reset(s, sh, detail);
        return;
    }
    count(s, sh, (counts){.gaps = 1});
    if (replay_gap(s, sh, seq, why) == 0)
        return;
    snprintf(detail, sizeof detail, "seq %" PRIu64 "..%" PRIu64 " missed and not replayed: %s",
             sh->last_seq + 1, seq - 1, why);
    reset(s, sh, detail);
}

/* One live message: [topic, seq, payload]. */
static void handle(cr_kv_subscriber *s, shard *sh, parts *m)
{
    if (m->total != 3) {
        drop(s, sh, "a message of %d parts, not [topic, seq, payload]", m->total);
        return;
    }
    if (zmq_msg_size(&m->p[1]) != 8) {
        drop(s, sh, "a seq of %zu bytes, not 8", zmq_msg_size(&m->p[1]));
        return;
    }
    uint64_t seq = seq_of(&m->p[1]);
    follow(s, sh, seq);
    apply(s, sh, zmq_msg_data(&m->p[2]), zmq_msg_size(&m->p[2]), 0);
    sh->have_seq = 1;
    sh->last_seq = seq;
}

/* Counted once handled, replay and reset included, so that a reader who
 * sees the count sees what the message did. */
static void on_message(cr_kv_subscriber *s, shard *sh, parts *m)
{
    handle(s, sh, m);
    count(s, sh, (counts){.batches = 1});
}

static void *run(void *arg)
{
    cr_kv_subscriber *s = arg;
    zmq_pollitem_t items[CR_KV_MAX_ENGINES];
    for (size_t i = 0; i < s->n; i++)
        items[i] = (zmq_pollitem_t){.socket = s->shards[i].sub, .events = ZMQ_POLLIN};
    while (!atomic_load(&s->stop)) {
        if (zmq_poll(items, (int)s->n, CR_KV_POLL_MS) <= 0)
            continue; /* timeout, or EINTR */
        for (size_t i = 0; i < s->n; i++) {
            parts m;
            for (int k = 0; (items[i].revents & ZMQ_POLLIN) && k < MAX_BURST &&
                            receive(items[i].socket, &m) == 0;
                 k++) {
                on_message(s, &s->shards[i], &m);
                parts_close(&m);
            }
        }
    }
    return NULL;
}

/* ---- start, stop, figures ---------------------------------------------------- */

static void close_all(cr_kv_subscriber *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->shards[i].sub)
            zmq_close(s->shards[i].sub);
    if (s->zmq)
        zmq_ctx_term(s->zmq);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static cr_status open_all(cr_kv_subscriber *s, cr_error *err)
{
    if (!(s->zmq = zmq_ctx_new()))
        return cr_fail(err, CR_ENOMEM, "--kv-events: cannot make a ZeroMQ context: %s",
                       zmq_strerror(zmq_errno()));
    for (size_t i = 0; i < s->n; i++) {
        shard *sh = &s->shards[i];
        if (!(sh->sub = open_socket(s->zmq, ZMQ_SUB, sh->src.endpoint)))
            return cr_fail(err, CR_EINVAL, "--kv-events %" PRIu32 "=%s: cannot connect: %s",
                           sh->src.shard, sh->src.endpoint, zmq_strerror(errno));
    }
    return CR_OK;
}

cr_kv_subscriber *cr_kv_start(const cr_kv_engine *sources, size_t n, cr_core *core,
                              const cr_kv_hooks *hooks, cr_error *err)
{
    if (n == 0)
        return NULL;
    if (n > CR_KV_MAX_ENGINES) {
        cr_fail(err, CR_EINVAL, "--kv-events must be given at most %d times, got %zu",
                CR_KV_MAX_ENGINES, n);
        return NULL;
    }
    cr_kv_subscriber *s = calloc(1, sizeof *s + n * sizeof(shard));
    if (!s) {
        cr_fail(err, CR_ENOMEM, "out of memory for --kv-events");
        return NULL;
    }
    s->core = core;
    s->n = n;
    if (hooks)
        s->hooks = *hooks;
    atomic_init(&s->stop, 0);
    pthread_mutex_init(&s->lock, NULL);
    for (size_t i = 0; i < n; i++)
        s->shards[i] = (shard){.src = sources[i],
                               .st = {.shard = sources[i].shard, .last_event_s = -1}};
    if (open_all(s, err) != CR_OK) {
        close_all(s);
        return NULL;
    }
    int e = pthread_create(&s->thread, NULL, run, s);
    if (e) {
        cr_fail(err, CR_ENOMEM, "--kv-events: cannot start a thread: %s", strerror(e));
        close_all(s);
        return NULL;
    }
    return s;
}

void cr_kv_stop(cr_kv_subscriber *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    close_all(s);
}

size_t cr_kv_stats_read(cr_kv_subscriber *s, cr_kv_stats *out, size_t max)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n && i < max; i++)
        out[i] = s->shards[i].st;
    pthread_mutex_unlock(&s->lock);
    return s->n;
}
