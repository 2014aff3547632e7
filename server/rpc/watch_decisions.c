/* Broadcast watches: one lock guards the hub's list of open watches and
 * each watch's queue (a ring of slice references). A watch's life, like a
 * health Watch's (push.h): initial metadata goes out at once (so a client
 * knows it is listening); then one send at a time drains the queue; the
 * final status goes once the hub ends (after the queue) or at once for a
 * refused call. */
#include "watch_decisions.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "push.h"

typedef struct watch_call {
    cr_push_call push; /* the send in flight, the close */
    struct watch_call *prev, *next;
    cr_watch_hub *hub;
    grpc_slice *queue; /* ring of hub->cfg.queue_len */
    size_t head, count;
    uint64_t lost;         /* dropped since the last message sent */
    int listed;            /* in hub->watches */
    int started;           /* initial metadata sent (or going) */
    int finishing;         /* the final status went (or is going) out */
    grpc_status_code ends; /* the final status, once decided; OK = not yet */
    grpc_slice details;
} watch_call;

struct cr_watch_hub {
    cr_watch_config cfg;
    pthread_mutex_t lock;
    int ending;
    watch_call *watches;
    cr_watch_stats stats;
};

cr_watch_hub *cr_watch_hub_new(const cr_watch_config *cfg)
{
    cr_watch_hub *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->cfg = *cfg;
    if (h->cfg.queue_len == 0)
        h->cfg.queue_len = 1;
    pthread_mutex_init(&h->lock, NULL);
    return h;
}

void cr_watch_hub_free(cr_watch_hub *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h);
}

int cr_watch_active(cr_watch_hub *h)
{
    pthread_mutex_lock(&h->lock);
    int active = h->watches != NULL && !h->ending;
    pthread_mutex_unlock(&h->lock);
    return active;
}

void cr_watch_stats_read(cr_watch_hub *h, cr_watch_stats *out)
{
    pthread_mutex_lock(&h->lock);
    *out = h->stats;
    pthread_mutex_unlock(&h->lock);
}

/* ---- one watch ---- */

static void release_watch(cr_push_call *p)
{
    watch_call *w = (watch_call *)p;
    cr_call_observe(&p->base, w->finishing ? w->ends : GRPC_STATUS_CANCELLED);
    for (size_t i = 0; i < w->count; i++)
        grpc_slice_unref(w->queue[(w->head + i) % w->hub->cfg.queue_len]);
    free(w->queue);
    grpc_slice_unref(w->details);
    cr_call_release(&p->base);
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        p[n++] = (uint8_t)(v | 0x80);
    p[n++] = (uint8_t)v;
    return n;
}

/* The oldest queued message as a byte buffer, with the lost count appended
 * when there is one to tell; h->lock held. */
static grpc_byte_buffer *take_message(watch_call *w)
{
    grpc_slice parts[2];
    size_t n = 1;
    parts[0] = w->queue[w->head];
    w->head = (w->head + 1) % w->hub->cfg.queue_len;
    w->count--;
    if (w->lost) {
        uint8_t suffix[20];
        size_t len = put_varint(suffix, (uint64_t)w->hub->cfg.lost_field << 3);
        len += put_varint(suffix + len, w->lost);
        parts[n++] = grpc_slice_from_copied_buffer((const char *)suffix, len);
        w->lost = 0;
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, n);
    for (size_t i = 0; i < n; i++)
        grpc_slice_unref(parts[i]);
    return bb;
}

/* Starts the batch that ends the call with w->ends; h->lock held. */
static void send_final(watch_call *w, const char *message)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!w->started)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    w->started = w->finishing = 1;
    grpc_slice_unref(w->details);
    w->details = grpc_slice_from_copied_string(message);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = w->ends;
    ops[n++].data.send_status_from_server.status_details = &w->details;
    cr_push_start(&w->push, ops, n);
}

/* Starts the next send if none is in flight: initial metadata, the oldest
 * queued message, or (queue empty, hub ending) the final status; h->lock
 * held. */
static void push(watch_call *w)
{
    if (cr_push_busy(&w->push) || w->finishing)
        return;
    if (w->count == 0 && w->ends != GRPC_STATUS_OK) {
        send_final(w, "server shutting down");
        return;
    }
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!w->started) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        w->started = 1;
    }
    if (w->count) {
        w->push.send = take_message(w);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = w->push.send;
        w->hub->stats.sent++;
    }
    if (n)
        cr_push_start(&w->push, ops, n);
}

static pthread_mutex_t *watch_lock(cr_push_call *p) { return &((watch_call *)p)->hub->lock; }

static void watch_next(cr_push_call *p) { push((watch_call *)p); }

static void unlist(cr_push_call *p)
{
    watch_call *w = (watch_call *)p;
    cr_watch_hub *h = w->hub;
    if (!w->listed)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        h->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    w->listed = 0;
    h->stats.watchers--;
}

static const cr_push_ops watch_ops = {watch_lock, watch_next, unlist, release_watch};

const char *cr_watch_request_error(const cr_watch_hub *h, const uint8_t *req, size_t len,
                                   cr_error *err)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(h->cfg.request, NULL, len, req);
    if (!m) {
        cr_fail(err, CR_EINVAL, "malformed %s message (%zu bytes)", h->cfg.request->name, len);
        return err->msg;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return cr_wire_check_strings(h->cfg.request, req, len, err) != 0 ? err->msg : NULL;
}

/* Why the call cannot be watched (a fixed text, or err->msg), or NULL: a
 * malformed request. */
static const char *bad_request(const cr_call *c, const cr_watch_hub *h, cr_error *err)
{
    grpc_slice req;
    cr_reply refused = {0};
    if (!c->payload)
        return "missing request message";
    int read = cr_rpc_read_request(c->rpc, c->payload, &req, &refused);
    if (read < 0) {
        cr_fail(err, CR_EINVAL, "%s", refused.message);
        return err->msg;
    }
    const char *bad =
        cr_watch_request_error(h, GRPC_SLICE_START_PTR(req), GRPC_SLICE_LENGTH(req), err);
    cr_rpc_request_done(c->rpc, req, read);
    return bad;
}

/* Lists w, or ends it with why not (denied: its caller may not watch,
 * else bad: its request); h->lock held. */
static void admit(watch_call *w, const cr_reply *denied, const char *bad)
{
    cr_watch_hub *h = w->hub;
    char text[300];
    if (denied->status != GRPC_STATUS_OK) {
        w->ends = denied->status;
        send_final(w, denied->message);
    } else if (bad) {
        w->ends = GRPC_STATUS_INVALID_ARGUMENT;
        send_final(w, bad);
    } else if (h->ending) {
        w->ends = GRPC_STATUS_UNAVAILABLE;
        send_final(w, "server shutting down");
    } else if (h->stats.watchers >= h->cfg.max_watchers) {
        h->stats.refused++;
        snprintf(text, sizeof text, "%s: at most %zu streams may be open at once; close one first",
                 w->push.base.method->spec.path, h->cfg.max_watchers);
        w->ends = GRPC_STATUS_RESOURCE_EXHAUSTED;
        send_final(w, text);
    } else {
        w->next = h->watches;
        if (h->watches)
            h->watches->prev = w;
        h->watches = w;
        w->listed = 1;
        h->stats.watchers++;
        push(w); /* the initial metadata */
    }
}

static void watch_arrived(cr_call *c)
{
    watch_call *w = (watch_call *)c;
    cr_watch_hub *h = c->method->spec.ctx;
    cr_error err;
    w->hub = h;
    w->details = grpc_empty_slice();
    /* an admin's method is refused here as a unary call's is (calls.c); no
     * watch decides on its request, so a gate (ADMIN_IF) refuses too */
    cr_reply denied = {0};
    if (cr_call_allowed(c, &denied) && denied.gate)
        cr_reply_needs_admin(&denied, denied.gate, 0);
    const char *bad = bad_request(c, h, &err);
    w->queue = calloc(h->cfg.queue_len, sizeof *w->queue);
    if (!w->queue && !bad)
        bad = "out of memory for the stream's queue";
    if (cr_push_open(&w->push, &watch_ops) != 0) {
        release_watch(&w->push);
        return;
    }
    pthread_mutex_lock(&h->lock);
    admit(w, &denied, bad);
    pthread_mutex_unlock(&h->lock);
}

const cr_call_kind cr_watch_kind = {sizeof(watch_call), GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
                                    watch_arrived};

/* ---- the hub ---- */

size_t cr_watch_publish(cr_watch_hub *h, uint8_t *body, size_t len)
{
    size_t reached = 0, cap = h->cfg.queue_len;
    grpc_slice s = grpc_slice_new(body, len, free);
    pthread_mutex_lock(&h->lock);
    if (h->watches && !h->ending) {
        for (watch_call *w = h->watches; w; w = w->next) {
            if (w->count == cap) { /* full: drop the oldest waiting */
                grpc_slice_unref(w->queue[w->head]);
                w->head = (w->head + 1) % cap;
                w->count--;
                w->lost++;
                h->stats.lost++;
            }
            w->queue[(w->head + w->count++) % cap] = grpc_slice_ref(s);
            push(w);
            reached++;
        }
    }
    pthread_mutex_unlock(&h->lock);
    grpc_slice_unref(s);
    return reached;
}

void cr_watch_end(cr_watch_hub *h)
{
    pthread_mutex_lock(&h->lock);
    h->ending = 1;
    for (watch_call *w = h->watches; w; w = w->next) {
        w->ends = GRPC_STATUS_UNAVAILABLE;
        push(w);
    }
    pthread_mutex_unlock(&h->lock);
}
