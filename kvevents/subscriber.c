/* The KV-event subscriber (kvevents.h): one thread polls every link's SUB
 * socket (a "shard" here is a link: a --kv-events shard's engine, or one
 * rank of a followed endpoint's, follow.c; places in a fixed table, so a
 * link's pointer holds while it is open) and keeps each one's seq chain
 * whole, by a replay from the
 * engine's ROUTER socket when it can and by a reset of the shard's view
 * when it cannot, so the index never keeps blocks an engine may have
 * dropped in a batch nobody saw.
 *
 * A replay is a state of its shard within the one poll loop, not a wait:
 * while it runs, the loop polls the shard's replay socket instead of its
 * SUB socket (whose messages queue in order behind it) and every other
 * shard as before, so a silent replay endpoint delays its own shard only.
 * One thread rather than one a shard: a shard's work is a decode and an
 * apply of a few microseconds a block, the core's index takes one writer
 * at a time anyway, and one decode at a time is what keeps the memory a
 * frame costs (kvevents.h, --kv-events-max-frame-bytes) a bound for the
 * whole subscriber rather than one a shard. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "internal.h"

#define SEQ_END UINT64_MAX /* the replay's last answer: seq -1 as 8 bytes */
#define MAX_BURST 64       /* messages read from one shard a poll: the others get turns */
#define WHY_LEN 192
#define RELINK_S 1.0       /* a dropped link is re-opened at most this often */

uint64_t cr_kv_frame_bound(uint64_t memory_limit)
{
    if (!memory_limit)
        return CR_KV_MAX_FRAME_BYTES;
    uint64_t b = memory_limit / CR_KV_FRAME_SHARE / (1 + CR_KV_DECODE_BYTES_PER_BYTE);
    return b < CR_KV_MIN_FRAME_BYTES ? CR_KV_MIN_FRAME_BYTES
           : b > CR_KV_MAX_FRAME_BYTES ? CR_KV_MAX_FRAME_BYTES : b;
}

/* ---- reports and counts ---------------------------------------------------- */

void cr_kv_report_to(cr_kv_subscriber *s, cr_kv_report r)
{
    if (!r.detail)
        r.detail = "";
    if (s->hooks.report)
        s->hooks.report(s->hooks.ctx, &r);
}

static void report(cr_kv_subscriber *s, const shard *sh, cr_kv_report r)
{
    r.shard = sh->src.shard;
    cr_kv_report_to(s, r);
}

/* Whether to report now: one more counted, and 1 at most once a
 * CR_KV_DROP_LOG_S (then *n is how many since the last report), so that a
 * publisher cannot flood the log. */
static int limited(limiter *l, uint64_t *n)
{
    l->unreported++;
    double now = cr_mono_s();
    if (now < l->next)
        return 0;
    *n = l->unreported;
    l->unreported = 0;
    l->next = now + CR_KV_DROP_LOG_S;
    return 1;
}

/* Adds to a shard's counters under the lock: the metrics read them from
 * another thread. */
typedef struct counts {
    uint64_t batches, applied, dropped, replayed, gaps, resets, reconnects;
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
    sh->st.reconnects += c.reconnects;
    if (c.event)
        sh->st.last_event_s = now;
    pthread_mutex_unlock(&s->lock);
}

/* A dropped message: counted always, reported as limited() lets. */
static void drop(cr_kv_subscriber *s, shard *sh, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void drop(cr_kv_subscriber *s, shard *sh, const char *fmt, ...)
{
    count(s, sh, (counts){.dropped = 1});
    uint64_t n;
    if (!limited(&sh->drops, &n))
        return;
    char why[WHY_LEN + CR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    report(s, sh, (cr_kv_report){.kind = CR_KV_REPORT_DROPPED, .detail = why, .count = n});
}

/* The shard's view cannot be trusted: its index is emptied (the engine's
 * next events rebuild it); reported when report_it. */
static void reset(cr_kv_subscriber *s, shard *sh, const char *why, int report_it)
{
    cr_kv_event clear = {.kind = CR_KV_CLEARED, .shard = sh->src.shard};
    cr_kv_applied applied;
    cr_error err;
    char detail[2 * WHY_LEN + CR_ERRLEN];
    if (cr_core_kv_events(s->core, &clear, 1, &applied, &err) != CR_OK)
        snprintf(detail, sizeof detail, "%s; the clear failed: %s", why, err.msg);
    else
        snprintf(detail, sizeof detail, "%s", why);
    count(s, sh, (counts){.resets = 1});
    if (report_it)
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

/* ---- sockets ------------------------------------------------------------------- */

/* The socket options that bound what a publisher can make us hold. */
static int bound(void *sock, int64_t max_frame)
{
    int hwm = CR_KV_RCV_HWM, linger = 0;
    return zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) ||
           zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm) ||
           zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
}

/* A bounded socket of type connected to endpoint, its disconnects sent to
 * monitor_at when given (before it connects, so none is missed); NULL
 * with errno. */
static void *open_socket(cr_kv_subscriber *s, int type, const char *endpoint,
                         const char *monitor_at)
{
    void *sock = zmq_socket(s->zmq, type);
    if (!sock)
        return NULL;
    if (bound(sock, s->max_frame) ||
        (type == ZMQ_SUB && zmq_setsockopt(sock, ZMQ_SUBSCRIBE, s->topic, strlen(s->topic))) ||
        (monitor_at && zmq_socket_monitor(sock, monitor_at, ZMQ_EVENT_DISCONNECTED)) ||
        zmq_connect(sock, endpoint)) {
        int e = zmq_errno();
        zmq_close(sock);
        errno = e;
        return NULL;
    }
    return sock;
}

static void close_link(shard *sh)
{
    if (sh->monitor)
        zmq_close(sh->monitor);
    if (sh->sub) {
        zmq_socket_monitor(sh->sub, NULL, 0);
        zmq_close(sh->sub);
    }
    sh->sub = sh->monitor = NULL;
}

/* The shard's SUB socket and the PAIR reading its disconnects: libzmq
 * ends a session for good on a frame past ZMQ_MAXMSGSIZE (a protocol
 * error, never reconnected), and says no more than that it disconnected,
 * so a disconnect is what re-opens the link. 0, or -1 with errno. */
static int open_link(cr_kv_subscriber *s, shard *sh)
{
    char at[64];
    snprintf(at, sizeof at, "inproc://cr-kv-%p-%u-%u", (void *)s, sh->src.shard, s->links++);
    sh->sub = open_socket(s, ZMQ_SUB, sh->src.endpoint, at);
    if (!sh->sub)
        return -1;
    if (!(sh->monitor = zmq_socket(s->zmq, ZMQ_PAIR)) || zmq_connect(sh->monitor, at)) {
        int e = zmq_errno();
        close_link(sh);
        errno = e;
        return -1;
    }
    return 0;
}

/* ---- replays ------------------------------------------------------------------- */

static void replay_close(replay *r)
{
    if (!r->dealer)
        return;
    zmq_close(r->dealer);
    zmq_msg_close(&r->held);
    r->dealer = NULL;
}

/* The replay over, filled (ok) or not (why): the gap reset when not, then
 * the held message applied, as it would have been without a gap. */
static void replay_end(cr_kv_subscriber *s, shard *sh, int ok, const char *why)
{
    replay *r = &sh->r;
    char detail[2 * WHY_LEN];
    if (ok) {
        report(s, sh, (cr_kv_report){.kind = CR_KV_REPORT_REPLAYED, .count = r->upto - r->first,
                                     .first = r->first, .last = r->upto - 1});
    } else {
        snprintf(detail, sizeof detail, "seq %" PRIu64 "..%" PRIu64 " missed and not replayed: %s",
                 r->first, r->upto - 1, why);
        reset(s, sh, detail, 1);
    }
    apply(s, sh, zmq_msg_data(&r->held), zmq_msg_size(&r->held), 0);
    sh->last_seq = r->upto;
    replay_close(r);
    count(s, sh, (counts){.batches = 1});
}

/* One answer, [seq, payload] after an optional empty delimiter: applied
 * when it is the next batch wanted. 1 to read on, 0 when the replay has
 * ended (its end marker, or nothing more wanted), -1 with why when it
 * cannot fill the gap. */
static int replay_answer(cr_kv_subscriber *s, shard *sh, parts *m, char *why)
{
    replay *r = &sh->r;
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

/* The answers readable now (MAX_BURST at most: the other shards get
 * turns), the replay ended when they end it. */
static void replay_read(cr_kv_subscriber *s, shard *sh)
{
    replay *r = &sh->r;
    char why[WHY_LEN];
    parts m;
    for (int k = 0; k < MAX_BURST && r->dealer && receive(r->dealer, &m) == 0; k++) {
        int rc = replay_answer(s, sh, &m, why);
        parts_close(&m);
        if (rc < 0)
            replay_end(s, sh, 0, why);
        else if (rc == 0 && r->next < r->upto) {
            snprintf(why, WHY_LEN, "the replay ended before seq %" PRIu64, r->next);
            replay_end(s, sh, 0, why);
        } else if (rc == 0)
            replay_end(s, sh, 1, NULL);
    }
}

/* Asks the shard's replay endpoint for the batches in (last, upto), the
 * live message m (seq upto) held until they are in. 0 when asked, else -1
 * with why (nothing held). */
static int replay_start(cr_kv_subscriber *s, shard *sh, uint64_t upto, parts *m, char *why)
{
    replay *r = &sh->r;
    if (!*sh->src.replay) {
        snprintf(why, WHY_LEN, "no --kv-events replay endpoint");
        return -1;
    }
    void *dealer = open_socket(s, ZMQ_DEALER, sh->src.replay, NULL);
    uint8_t start[8];
    seq_bytes(sh->last_seq + 1, start);
    if (!dealer) {
        snprintf(why, WHY_LEN, "cannot open the replay socket: %s", zmq_strerror(errno));
        return -1;
    }
    if (zmq_send(dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(dealer, start, 8, ZMQ_DONTWAIT) < 0) {
        snprintf(why, WHY_LEN, "cannot ask for a replay: %s", zmq_strerror(zmq_errno()));
        zmq_close(dealer);
        return -1;
    }
    *r = (replay){.dealer = dealer, .first = sh->last_seq + 1, .next = sh->last_seq + 1,
                  .upto = upto, .deadline = cr_mono_s() + CR_KV_REPLAY_WAIT_S};
    zmq_msg_init(&r->held);
    zmq_msg_move(&r->held, &m->p[2]);
    return 0;
}

/* ---- live messages ------------------------------------------------------------- */

/* One live message: [topic, seq, payload]. 1 when it is held for a replay
 * (counted when that ends), else 0. */
static int handle(cr_kv_subscriber *s, shard *sh, parts *m)
{
    char why[WHY_LEN], detail[2 * WHY_LEN];
    if (m->total != 3) {
        drop(s, sh, "a message of %d parts, not [topic, seq, payload]", m->total);
        return 0;
    }
    if (zmq_msg_size(&m->p[1]) != 8) {
        drop(s, sh, "a seq of %zu bytes, not 8", zmq_msg_size(&m->p[1]));
        return 0;
    }
    uint64_t seq = seq_of(&m->p[1]);
    if (sh->have_seq && seq <= sh->last_seq) {
        snprintf(detail, sizeof detail, "the publisher restarted: seq %" PRIu64 " after %" PRIu64,
                 seq, sh->last_seq);
        reset(s, sh, detail, 1);
    } else if (sh->have_seq && seq > sh->last_seq + 1) {
        count(s, sh, (counts){.gaps = 1});
        if (replay_start(s, sh, seq, m, why) == 0)
            return 1;
        snprintf(detail, sizeof detail, "seq %" PRIu64 "..%" PRIu64 " missed and not replayed: %s",
                 sh->last_seq + 1, seq - 1, why);
        reset(s, sh, detail, 1);
    }
    apply(s, sh, zmq_msg_data(&m->p[2]), zmq_msg_size(&m->p[2]), 0);
    sh->have_seq = 1;
    sh->last_seq = seq;
    return 0;
}

/* The live messages readable now on the shard's SUB socket, until one
 * starts a replay (the rest wait behind it) or MAX_BURST. Each counted
 * once handled, replay and reset included, so that a reader who sees the
 * count sees what the message did. */
static void read_live(cr_kv_subscriber *s, shard *sh)
{
    parts m;
    for (int k = 0; k < MAX_BURST && !sh->r.dealer && receive(sh->sub, &m) == 0; k++) {
        if (!handle(s, sh, &m))
            count(s, sh, (counts){.batches = 1});
        parts_close(&m);
    }
}

/* The link dropped (libzmq's monitor said so): closed, to be re-opened
 * (at most once a RELINK_S, so a publisher that drops it at once cannot
 * spin us), and the view reset when it held anything: what was lost on
 * the way, and the frame that ended it, cannot be asked for. A replay in
 * progress ends with it, its held message dropped with the view. */
static void link_dropped(cr_kv_subscriber *s, shard *sh)
{
    if (sh->r.dealer) {
        replay_close(&sh->r);
        count(s, sh, (counts){.batches = 1});
    }
    close_link(sh);
    sh->relink_at = cr_mono_s() + RELINK_S;
    count(s, sh, (counts){.reconnects = 1});
    if (!sh->have_seq)
        return; /* nothing since the last reset: nothing to reset */
    uint64_t n = 0;
    int report_it = limited(&sh->link_drops, &n);
    char why[WHY_LEN];
    snprintf(why, sizeof why, "the link dropped (a frame over --kv-events-max-frame-bytes, "
             "%" PRId64 ", or the engine went away) and is re-opened (%" PRIu64 " times since "
             "the last report)", s->max_frame, n);
    reset(s, sh, why, report_it);
    sh->have_seq = 0; /* the next seq starts a new chain */
}

/* The monitor's events readable now: [event (uint16) and value (uint32),
 * endpoint]. 1 when one is a disconnect. */
static int disconnected(shard *sh)
{
    parts m;
    int any = 0;
    while (sh->monitor && receive(sh->monitor, &m) == 0) {
        uint16_t event;
        if (m.kept >= 1 && zmq_msg_size(&m.p[0]) == 6) {
            memcpy(&event, zmq_msg_data(&m.p[0]), sizeof event);
            any |= event == ZMQ_EVENT_DISCONNECTED;
        }
        parts_close(&m);
    }
    return any;
}

/* ---- the loop ------------------------------------------------------------------ */

/* What the loop polls for each shard: its replay socket while a replay
 * runs, else its SUB socket; its monitor. */
typedef struct polled {
    zmq_pollitem_t items[2 * CR_KV_MAX_LINKS];
    shard *of[2 * CR_KV_MAX_LINKS];
    int n;
    long timeout_ms;
} polled;

static void add(polled *p, void *sock, shard *sh)
{
    p->items[p->n] = (zmq_pollitem_t){.socket = sock, .events = ZMQ_POLLIN};
    p->of[p->n++] = sh;
}

/* Ends replays past their deadline, re-opens links due, and lists what to
 * poll, until the next deadline at most. */
static void prepare(cr_kv_subscriber *s, polled *p)
{
    double now = cr_mono_s(), next = now + CR_KV_POLL_MS / 1e3;
    char why[WHY_LEN];
    p->n = 0;
    for (size_t i = 0; i < s->n; i++) {
        shard *sh = &s->shards[i];
        if (!sh->used)
            continue;
        if (sh->r.dealer && now >= sh->r.deadline) {
            snprintf(why, WHY_LEN, "no replay within %g s", CR_KV_REPLAY_WAIT_S);
            replay_end(s, sh, 0, why);
        }
        if (!sh->sub && now >= sh->relink_at && open_link(s, sh) != 0)
            sh->relink_at = now + RELINK_S; /* out of sockets or memory: later */
        if (sh->r.dealer) {
            add(p, sh->r.dealer, sh);
            next = sh->r.deadline < next ? sh->r.deadline : next;
        } else if (sh->sub)
            add(p, sh->sub, sh);
        else
            next = sh->relink_at < next ? sh->relink_at : next;
        if (sh->monitor)
            add(p, sh->monitor, sh);
    }
    long ms = (long)((next - now) * 1e3) + 1;
    p->timeout_ms = ms < 1 ? 1 : ms > CR_KV_POLL_MS ? CR_KV_POLL_MS : ms;
}

static void *run(void *arg)
{
    cr_kv_subscriber *s = arg;
    polled p;
    while (!atomic_load(&s->stop)) {
        if (s->follow)
            cr_kv_follow_sync(s); /* first: no link polled below is closed meanwhile */
        prepare(s, &p);
        if (zmq_poll(p.items, p.n, p.timeout_ms) <= 0)
            continue; /* timeout, or EINTR */
        for (int i = 0; i < p.n; i++) {
            shard *sh = p.of[i];
            void *sock = p.items[i].socket;
            if (!(p.items[i].revents & ZMQ_POLLIN))
                continue;
            if (sock == sh->monitor) {
                if (disconnected(sh))
                    link_dropped(s, sh);
            } else if (sock == sh->r.dealer)
                replay_read(s, sh);
            else if (sock == sh->sub)
                read_live(s, sh);
        }
    }
    return NULL;
}

/* ---- links, start, stop, figures ----------------------------------------------- */

int cr_kv_link_open(cr_kv_subscriber *s, const cr_kv_engine *src, int followed)
{
    size_t i = 0;
    while (i < s->cap && s->shards[i].used)
        i++;
    if (i == s->cap) {
        errno = ENOSPC;
        return -1;
    }
    shard *sh = &s->shards[i];
    pthread_mutex_lock(&s->lock); /* the figures' reader skips it, but reads used */
    *sh = (shard){.src = *src, .followed = followed,
                  .st = {.shard = src->shard, .last_event_s = -1}};
    pthread_mutex_unlock(&s->lock);
    if (open_link(s, sh) != 0)
        return -1; /* the place stays free */
    pthread_mutex_lock(&s->lock);
    sh->used = 1;
    if (i >= s->n)
        s->n = i + 1;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

void cr_kv_link_close(cr_kv_subscriber *s, shard *sh, const char *why)
{
    replay_close(&sh->r);
    close_link(sh);
    reset(s, sh, why, 0); /* the caller reports the unsubscription */
    pthread_mutex_lock(&s->lock);
    sh->used = 0;
    pthread_mutex_unlock(&s->lock);
}

static void close_all(cr_kv_subscriber *s)
{
    for (size_t i = 0; i < s->n; i++) {
        replay_close(&s->shards[i].r);
        close_link(&s->shards[i]);
    }
    if (s->zmq)
        zmq_ctx_term(s->zmq);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static cr_status open_all(cr_kv_subscriber *s, const cr_kv_engine *sources, size_t n,
                          cr_error *err)
{
    if (!(s->zmq = zmq_ctx_new()))
        return cr_fail(err, CR_ENOMEM, "--kv-events: cannot make a ZeroMQ context: %s",
                       zmq_strerror(zmq_errno()));
    /* SUB, its monitor's two ends and a replay's DEALER a link, and spare */
    zmq_ctx_set(s->zmq, ZMQ_MAX_SOCKETS, 4 * CR_KV_MAX_LINKS + 16);
    for (size_t i = 0; i < n; i++) {
        if (cr_kv_link_open(s, &sources[i], 0) != 0)
            return cr_fail(err, CR_EINVAL, "--kv-events %" PRIu32 "=%s: cannot connect: %s",
                           sources[i].shard, sources[i].endpoint, zmq_strerror(errno));
        s->taken |= 1ull << sources[i].shard;
    }
    return CR_OK;
}

cr_kv_subscriber *cr_kv_start(const cr_kv_engine *sources, size_t n, const cr_kv_options *opt,
                              cr_core *core, const cr_kv_hooks *hooks, cr_error *err)
{
    int follow = opt && opt->follow;
    if (n == 0 && !follow)
        return NULL;
    if (n > CR_KV_MAX_ENGINES) {
        cr_fail(err, CR_EINVAL, "--kv-events must be given at most %d times, got %zu",
                CR_KV_MAX_ENGINES, n);
        return NULL;
    }
    const char *topic = opt && opt->topic ? opt->topic : "";
    if (strlen(topic) >= CR_KV_TOPIC_MAX || (opt && opt->dp_size > CR_KV_MAX_DP)) {
        cr_fail(err, CR_EINVAL, "--kv-events-topic must be below %d bytes and "
                "--kv-events-dp-size at most %d", CR_KV_TOPIC_MAX, CR_KV_MAX_DP);
        return NULL;
    }
    size_t cap = follow ? CR_KV_MAX_LINKS : n;
    cr_kv_subscriber *s = calloc(1, sizeof *s + cap * sizeof(shard));
    if (!s) {
        cr_fail(err, CR_ENOMEM, "out of memory for --kv-events");
        return NULL;
    }
    s->core = core;
    s->cap = cap;
    s->follow = follow;
    s->dp_size = opt && opt->dp_size ? opt->dp_size : 1;
    snprintf(s->topic, sizeof s->topic, "%s", topic);
    uint64_t max_frame = opt ? opt->max_frame : 0;
    s->max_frame = (int64_t)(max_frame ? max_frame : CR_KV_MAX_FRAME_BYTES);
    if (hooks)
        s->hooks = *hooks;
    atomic_init(&s->stop, 0);
    atomic_init(&s->changed, follow); /* the set current at start */
    pthread_mutex_init(&s->lock, NULL);
    if (open_all(s, sources, n, err) != CR_OK) {
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

void cr_kv_endpoints_changed(cr_kv_subscriber *s)
{
    if (s)
        atomic_store(&s->changed, 1);
}

void cr_kv_stop(cr_kv_subscriber *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    close_all(s);
}

/* Adds one link's figures to its shard's. */
static void add_stats(cr_kv_stats *to, const cr_kv_stats *st)
{
    to->batches += st->batches;
    to->applied += st->applied;
    to->dropped += st->dropped;
    to->replayed += st->replayed;
    to->gaps += st->gaps;
    to->resets += st->resets;
    to->reconnects += st->reconnects;
    if (st->last_event_s > to->last_event_s)
        to->last_event_s = st->last_event_s;
}

size_t cr_kv_stats_read(cr_kv_subscriber *s, cr_kv_stats *out, size_t max)
{
    if (!s)
        return 0;
    size_t k = 0;
    uint64_t seen[(CR_ENDPOINTS_MAX + 63) / 64] = {0}; /* shards already counted */
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++) {
        const shard *sh = &s->shards[i];
        if (!sh->used)
            continue;
        uint32_t at = sh->st.shard;
        if (at < CR_ENDPOINTS_MAX && !(seen[at / 64] >> (at % 64) & 1)) {
            seen[at / 64] |= 1ull << (at % 64);
            if (k < max)
                out[k] = sh->st;
            k++;
            continue;
        }
        for (size_t j = 0; j < k && j < max; j++)
            if (out[j].shard == at)
                add_stats(&out[j], &sh->st);
    }
    pthread_mutex_unlock(&s->lock);
    return k;
}
