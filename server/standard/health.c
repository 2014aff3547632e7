/* Health: one lock guards the serving flag and the list of open watches.
 * A watch has at most one send in flight (push.h); a change that lands
 * meanwhile is sent when that send completes, so watchers always end on the
 * last status. */
#include "health.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "push.h"
#include "reply.h"

#define SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define NOT_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
#define SERVICE_UNKNOWN GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN

typedef struct watch_call {
    cr_push_call push; /* the send in flight, the close (push.h) */
    struct watch_call *prev, *next;
    cr_health *health;
    char *service;
    int last_sent;   /* status last sent; -1 before the first */
    int finishing;   /* the final status went (or is going) out */
    grpc_slice details;
} watch_call;

struct cr_health {
    pthread_mutex_t lock;
    int serving;
    int ending;
    watch_call *watches;
};

cr_health *cr_health_new(void)
{
    cr_health *h = calloc(1, sizeof *h);
    if (h)
        pthread_mutex_init(&h->lock, NULL);
    return h;
}

void cr_health_free(cr_health *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/* The services answered for, all with the one serving flag: the server,
 * the main service, the endpoint picker's (--epp-listen; Gateway API
 * inference gateways probe it by name), and kubelet's usual probe names. */
static const char *const SERVICES[] = {"", "cacheroute.v1.CacheRoute",
                                       "envoy.service.ext_proc.v3.ExternalProcessor",
                                       "liveness", "readiness"};

/* NULL: a name that cannot be a service (not UTF-8, a NUL inside). */
static int known_service(const char *name)
{
    for (size_t i = 0; name && i < sizeof SERVICES / sizeof *SERVICES; i++)
        if (!strcmp(name, SERVICES[i]))
            return 1;
    return 0;
}

static int status_of(const cr_health *h, const char *service)
{
    if (!known_service(service))
        return SERVICE_UNKNOWN;
    return h->serving ? SERVING : NOT_SERVING;
}

static int pack_status(int status, uint8_t **body, size_t *len)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = status;
    return cr_pack(&resp.base, SIZE_MAX, body, len);
}

static void check(void *ctx, const void *message, cr_reply *out)
{
    cr_health *h = ctx;
    const Grpc__Health__V1__HealthCheckRequest *r = message;
    if (!known_service(r->service)) {
        cr_reply_error(out, GRPC_STATUS_NOT_FOUND, "unknown service '%s'", r->service);
    } else {
        pthread_mutex_lock(&h->lock);
        int status = status_of(h, r->service);
        pthread_mutex_unlock(&h->lock);
        if (pack_status(status, &out->body, &out->len) != 0)
            cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    }
}

void cr_health_check(void *ctx, const uint8_t *req, size_t len, cr_reply *out)
{
    cr_run_decoded(ctx, &grpc__health__v1__health_check_request__descriptor, req, len, out, check);
}

/* ---- Watch ---- */

/* Frees w once its last batch completed and the call closed. */
static void release_watch(cr_push_call *p)
{
    watch_call *w = (watch_call *)p;
    /* A watch ends when the client cancels it, or with our UNAVAILABLE. */
    cr_call_observe(&p->base, w->finishing ? GRPC_STATUS_UNAVAILABLE : GRPC_STATUS_CANCELLED);
    free(w->service);
    grpc_slice_unref(w->details);
    cr_call_release(&p->base);
}

/* Starts the batch that ends the call; h->lock held. */
static void send_final(watch_call *w)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    w->finishing = 1;
    w->details = grpc_slice_from_static_string("server shutting down");
    op.op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op.data.send_status_from_server.status = GRPC_STATUS_UNAVAILABLE;
    op.data.send_status_from_server.status_details = &w->details;
    cr_push_start(&w->push, &op, 1);
}

/* Sends the watcher's current status if it changed, or ends the call when
 * the health service is ending and the last status is out; h->lock held. */
static void push(watch_call *w)
{
    if (cr_push_busy(&w->push) || w->finishing)
        return;
    int status = status_of(w->health, w->service);
    if (status == w->last_sent) {
        if (w->health->ending)
            send_final(w);
        return;
    }
    grpc_op ops[2];
    size_t n = 0;
    uint8_t *body;
    size_t len;
    if (pack_status(status, &body, &len) != 0)
        return;
    w->push.send = cr_wire_buffer(body, len);
    memset(ops, 0, sizeof ops);
    if (w->last_sent < 0)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = w->push.send;
    w->last_sent = status;
    cr_push_start(&w->push, ops, n);
}

static pthread_mutex_t *watch_lock(cr_push_call *p) { return &((watch_call *)p)->health->lock; }

static void watch_next(cr_push_call *p) { push((watch_call *)p); }

static void watch_unlist(cr_push_call *p)
{
    watch_call *w = (watch_call *)p;
    cr_health *h = w->health;
    if (w->prev)
        w->prev->next = w->next;
    else if (h->watches == w)
        h->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

static const cr_push_ops watch_ops = {watch_lock, watch_next, watch_unlist, release_watch};

static void watch_arrived(cr_call *c)
{
    watch_call *w = (watch_call *)c;
    cr_health *h = c->method->spec.ctx;
    w->health = h;
    w->last_sent = -1;
    w->details = grpc_empty_slice();
    Grpc__Health__V1__HealthCheckRequest *r = NULL;
    grpc_slice req;
    int bad_name = 0;
    if (c->payload && cr_byte_buffer_read(c->payload, &req) == 0) {
        cr_error why;
        bad_name = cr_wire_check_strings(&grpc__health__v1__health_check_request__descriptor,
                                         GRPC_SLICE_START_PTR(req), GRPC_SLICE_LENGTH(req),
                                         &why) != 0;
        r = grpc__health__v1__health_check_request__unpack(NULL, GRPC_SLICE_LENGTH(req),
                                                           GRPC_SLICE_START_PTR(req));
        grpc_slice_unref(req);
    }
    /* A name cut at a NUL could pass for another service: it is unknown. */
    w->service = bad_name ? NULL : strdup(r ? r->service : "");
    if (r)
        grpc__health__v1__health_check_request__free_unpacked(r, NULL);
    if (cr_push_open(&w->push, &watch_ops) != 0) {
        release_watch(&w->push);
        return;
    }
    pthread_mutex_lock(&h->lock);
    w->next = h->watches;
    if (h->watches)
        h->watches->prev = w;
    h->watches = w;
    push(w);
    pthread_mutex_unlock(&h->lock);
}

const cr_call_kind cr_health_watch_kind = {sizeof(watch_call),
                                           GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
                                           watch_arrived};

void cr_health_set_serving(cr_health *h, int serving)
{
    pthread_mutex_lock(&h->lock);
    h->serving = serving;
    for (watch_call *w = h->watches; w; w = w->next)
        push(w);
    pthread_mutex_unlock(&h->lock);
}

void cr_health_end_watches(cr_health *h)
{
    pthread_mutex_lock(&h->lock);
    h->ending = 1;
    for (watch_call *w = h->watches; w; w = w->next)
        push(w);
    pthread_mutex_unlock(&h->lock);
}
