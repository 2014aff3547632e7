/* Server lifecycle, workers and call requests. Call kinds live in calls.c,
 * health.c and watch.c (the last two pushing streams, push.h). */
#include "rpc.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "pool.h"

#if defined(__SANITIZE_THREAD__)
#define CR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CR_TSAN 1
#endif
#endif
#ifdef CR_TSAN
#include <sanitizer/tsan_interface.h>
/* A tag handed to gRPC is released; its completion, dequeued, acquires it. */
#define TAG_HANDOFF(tag) __tsan_release(tag)
#define TAG_RECEIVED(tag) __tsan_acquire(tag)
#else
#define TAG_HANDOFF(tag) ((void)(tag))
#define TAG_RECEIVED(tag) ((void)(tag))
#endif

/* Requested calls kept outstanding per method on each completion queue: with
 * fewer than the streams in flight, new calls wait inside gRPC core and the
 * latency tail grows (bench/README.md: p99 at 4 was 1.2x the ceiling's). */
#define REQUESTS_PER_METHOD 64

typedef struct cr_worker {
    cr_rpc *rpc;
    grpc_completion_queue *cq;
    pthread_t thread;
    int started;
} cr_worker;

/* A call to a method we do not serve: answered UNIMPLEMENTED. */
typedef struct unknown_call {
    cr_tag arrived, done;
    cr_rpc *rpc;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array metadata;
    grpc_slice message;
    int cancelled;
} unknown_call;

struct cr_rpc {
    cr_rpc_options opt;
    grpc_server *server;
    grpc_completion_queue *shutdown_cq;
    cr_method *methods;
    size_t n_methods;
    cr_worker *workers;
    int n_workers;
    int port;
    cr_pool *pool;
    _Atomic long in_flight; /* calls arrived and not yet released */
};

double cr_rpc_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void call_arrived(cr_tag *tag, int ok);

/* Asks the server for the next call to m, delivered on cq. */
static void request_call(cr_rpc *rpc, const cr_method *m, grpc_completion_queue *cq)
{
    cr_call *c = calloc(1, m->spec.kind->size);
    if (!c)
        return; /* one fewer outstanding request; the others still serve */
    c->arrived.fn = call_arrived;
    c->rpc = rpc;
    c->method = m;
    c->cq = cq;
    grpc_metadata_array_init(&c->metadata);
    grpc_byte_buffer **payload =
        m->spec.kind->payload == GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER ? &c->payload : NULL;
    TAG_HANDOFF(&c->arrived);
    if (grpc_server_request_registered_call(rpc->server, m->handle, &c->call, &c->deadline,
                                            &c->metadata, payload, cq, cq, &c->arrived) !=
        GRPC_CALL_OK) {
        grpc_metadata_array_destroy(&c->metadata);
        free(c);
    }
}

static void call_arrived(cr_tag *tag, int ok)
{
    cr_call *c = CR_CONTAINER_OF(tag, cr_call, arrived);
    if (!ok) { /* the server is shutting down: no call, do not ask again */
        grpc_metadata_array_destroy(&c->metadata);
        free(c);
        return;
    }
    request_call(c->rpc, c->method, c->cq);
    c->started = cr_rpc_clock();
    atomic_fetch_add(&c->rpc->in_flight, 1);
    if (cr_log_enabled(CR_LOG_DEBUG))
        cr_log(CR_LOG_DEBUG, "call started", json_pack("{s:s}", "method", c->method->spec.path));
    c->method->spec.kind->arrived(c);
}

void cr_call_release(cr_call *c)
{
    atomic_fetch_sub(&c->rpc->in_flight, 1);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    grpc_metadata_array_destroy(&c->metadata);
    if (c->call)
        grpc_call_unref(c->call);
    free(c);
}

void cr_call_observe(cr_call *c, grpc_status_code status)
{
    double seconds = cr_rpc_clock() - c->started;
    if (c->rpc->opt.observe)
        c->rpc->opt.observe(c->rpc->opt.observe_ctx, (size_t)(c->method - c->rpc->methods), status,
                            seconds);
    if (cr_log_enabled(CR_LOG_DEBUG))
        cr_log(CR_LOG_DEBUG, "call finished",
               json_pack("{s:s,s:i,s:f}", "method", c->method->spec.path, "status", (int)status,
                         "duration_ms", seconds * 1e3));
}

int cr_call_allowed(cr_call *c, const uint8_t *req, size_t len, cr_reply *out)
{
    const cr_method_spec *m = &c->method->spec;
    const cr_rpc_options *o = &c->rpc->opt;
    if (!o->is_admin || m->access == CR_ACCESS_OPEN ||
        (m->access == CR_ACCESS_ADMIN_IF && !m->admin_if(req, len)) ||
        o->is_admin(o->admin_ctx, c->call, &c->metadata))
        return 1;
    int conditional = m->access == CR_ACCESS_ADMIN_IF && m->admin_when;
    cr_reply_error(out, GRPC_STATUS_PERMISSION_DENIED,
                   "%s%s%s needs an admin: a client certificate identity in --admin-identity, "
                   "or the --admin-token-file token as 'authorization: Bearer' metadata",
                   m->path, conditional ? " " : "", conditional ? m->admin_when : "");
    return 0;
}

/* ---- unknown methods ---- */

static void unknown_arrived(cr_tag *tag, int ok);

static void request_unknown(cr_rpc *rpc, grpc_completion_queue *cq)
{
    unknown_call *u = calloc(1, sizeof *u);
    if (!u)
        return;
    u->arrived.fn = unknown_arrived;
    u->rpc = rpc;
    u->cq = cq;
    grpc_call_details_init(&u->details);
    grpc_metadata_array_init(&u->metadata);
    TAG_HANDOFF(&u->arrived);
    if (grpc_server_request_call(rpc->server, &u->call, &u->details, &u->metadata, cq, cq,
                                 &u->arrived) != GRPC_CALL_OK) {
        grpc_call_details_destroy(&u->details);
        grpc_metadata_array_destroy(&u->metadata);
        free(u);
    }
}

static void unknown_done(cr_tag *tag, int ok)
{
    (void)ok;
    unknown_call *u = CR_CONTAINER_OF(tag, unknown_call, done);
    grpc_slice_unref(u->message);
    if (u->call)
        grpc_call_unref(u->call);
    grpc_call_details_destroy(&u->details);
    grpc_metadata_array_destroy(&u->metadata);
    free(u);
}

static void unknown_arrived(cr_tag *tag, int ok)
{
    unknown_call *u = CR_CONTAINER_OF(tag, unknown_call, arrived);
    if (!ok) {
        u->message = grpc_empty_slice();
        unknown_done(&u->done, 0);
        return;
    }
    request_unknown(u->rpc, u->cq);
    char text[300];
    char *method = grpc_slice_to_c_string(u->details.method);
    snprintf(text, sizeof text, "unknown method %s", method);
    gpr_free(method);
    u->message = grpc_slice_from_copied_string(text);
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = GRPC_STATUS_UNIMPLEMENTED;
    ops[1].data.send_status_from_server.status_details = &u->message;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &u->cancelled;
    u->done.fn = unknown_done;
    if (cr_start_batch(u->call, ops, 3, &u->done) != GRPC_CALL_OK)
        unknown_done(&u->done, 0);
}

/* ---- workers ---- */

static void *worker_main(void *arg)
{
    cr_worker *w = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE) {
            cr_tag *tag = ev.tag;
            TAG_RECEIVED(tag);
            tag->fn(tag, ev.success);
        }
    }
    return NULL;
}

static grpc_server *create_server(const cr_rpc_options *opt)
{
    grpc_arg args[3];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)opt->max_message_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = (int)opt->max_message_bytes;
    /* A second sidecar on the same port must fail, not share it. */
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    grpc_channel_args chargs = {3, args};
    return grpc_server_create(&chargs, NULL);
}

/* The listener, with the caller's credentials or plaintext. */
static int bind_port(cr_rpc *rpc, char *err, size_t errlen)
{
    grpc_server_credentials *creds =
        rpc->opt.creds ? rpc->opt.creds : grpc_insecure_server_credentials_create();
    rpc->port = grpc_server_add_http2_port(rpc->server, rpc->opt.listen, creds);
    if (!rpc->opt.creds)
        grpc_server_credentials_release(creds);
    if (rpc->port == 0) {
        snprintf(err, errlen, "%s: cannot listen on '%s' (bad address, or in use)",
                 rpc->opt.listen_flag ? rpc->opt.listen_flag : "--listen", rpc->opt.listen);
        return -1;
    }
    return 0;
}

static int bind_and_register(cr_rpc *rpc, const cr_method_spec *specs, char *err, size_t errlen)
{
    for (size_t i = 0; i < rpc->n_methods; i++) {
        rpc->methods[i].spec = specs[i];
        rpc->methods[i].handle = grpc_server_register_method(
            rpc->server, specs[i].path, NULL, specs[i].kind->payload, 0);
        if (!rpc->methods[i].handle) {
            snprintf(err, errlen, "cannot register method %s", specs[i].path);
            return -1;
        }
    }
    for (int i = 0; i < rpc->n_workers; i++) {
        rpc->workers[i].rpc = rpc;
        rpc->workers[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(rpc->server, rpc->workers[i].cq, NULL);
    }
    rpc->shutdown_cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(rpc->server, rpc->shutdown_cq, NULL);
    return bind_port(rpc, err, errlen);
}

cr_rpc *cr_rpc_start(const cr_rpc_options *opt, const cr_method_spec *specs, size_t n,
                     char *err, size_t errlen)
{
    cr_rpc *rpc = calloc(1, sizeof *rpc);
    if (!rpc)
        return NULL;
    rpc->opt = *opt;
    rpc->n_methods = n;
    rpc->n_workers = opt->threads;
    rpc->methods = calloc(n, sizeof *rpc->methods);
    rpc->workers = calloc((size_t)opt->threads, sizeof *rpc->workers);
    rpc->server = create_server(opt);
    rpc->pool = cr_pool_new(opt->threads);
    if (!rpc->methods || !rpc->workers || !rpc->server || !rpc->pool) {
        snprintf(err, errlen, "out of memory starting the server");
        cr_rpc_free(rpc);
        return NULL;
    }
    if (bind_and_register(rpc, specs, err, errlen) != 0) {
        cr_rpc_free(rpc);
        return NULL;
    }
    grpc_server_start(rpc->server);
    for (int i = 0; i < rpc->n_workers; i++) {
        for (size_t m = 0; m < n; m++)
            for (int k = 0; k < REQUESTS_PER_METHOD; k++)
                request_call(rpc, &rpc->methods[m], rpc->workers[i].cq);
        request_unknown(rpc, rpc->workers[i].cq);
        if (pthread_create(&rpc->workers[i].thread, NULL, worker_main, &rpc->workers[i]) != 0) {
            snprintf(err, errlen, "cannot start worker thread %d", i);
            cr_rpc_shutdown(rpc, 0);
            cr_rpc_free(rpc);
            return NULL;
        }
        rpc->workers[i].started = 1;
    }
    return rpc;
}

cr_pool *cr_rpc_pool(cr_rpc *rpc) { return rpc->pool; }
int cr_rpc_port(const cr_rpc *rpc) { return rpc->port; }
long cr_rpc_in_flight(cr_rpc *rpc) { return atomic_load(&rpc->in_flight); }

/* Waits for the server's shutdown to complete, for at most grace seconds,
 * then cancels what is left. A call that raced the signal can sit in gRPC
 * core unmatched (no handler ever sees it) and would hold shutdown for the
 * whole grace: once none of our own calls is left, twice 50 ms apart,
 * whatever remains is such a call and is cancelled at once. */
static void wait_for_drain(cr_rpc *rpc, double grace)
{
    double deadline = cr_rpc_clock() + grace;
    int idle_polls = 0;
    for (;;) {
        double left = deadline - cr_rpc_clock();
        gpr_timespec slice = gpr_time_add(
            gpr_now(GPR_CLOCK_MONOTONIC),
            gpr_time_from_millis(left < 0.05 ? (int64_t)(left > 0 ? left * 1e3 : 0) : 50,
                                 GPR_TIMESPAN));
        if (grpc_completion_queue_next(rpc->shutdown_cq, slice, NULL).type == GRPC_OP_COMPLETE)
            return;
        idle_polls = atomic_load(&rpc->in_flight) == 0 ? idle_polls + 1 : 0;
        if (idle_polls >= 2 || cr_rpc_clock() >= deadline)
            break;
    }
    grpc_server_cancel_all_calls(rpc->server);
    grpc_completion_queue_next(rpc->shutdown_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
}

double cr_rpc_shutdown(cr_rpc *rpc, double grace)
{
    double t0 = cr_rpc_clock();
    static cr_tag shutdown_tag; /* only compared, never run */
    grpc_server_shutdown_and_notify(rpc->server, rpc->shutdown_cq, &shutdown_tag);
    wait_for_drain(rpc, grace);
    /* gRPC is done with every call, but a handler may still be running (on
     * the pool, or inline on a worker when the pool was already draining) and
     * will start its last batch on its worker's queue: the queues may only
     * shut down once every call we accepted has been released. */
    cr_pool_drain(rpc->pool);
    while (atomic_load(&rpc->in_flight) > 0)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    for (int i = 0; i < rpc->n_workers; i++)
        grpc_completion_queue_shutdown(rpc->workers[i].cq);
    for (int i = 0; i < rpc->n_workers; i++)
        if (rpc->workers[i].started) {
            pthread_join(rpc->workers[i].thread, NULL);
            rpc->workers[i].started = 0;
        }
    return cr_rpc_clock() - t0;
}

static void drain_and_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

void cr_rpc_free(cr_rpc *rpc)
{
    if (!rpc)
        return;
    if (rpc->server)
        grpc_server_destroy(rpc->server);
    for (int i = 0; rpc->workers && i < rpc->n_workers; i++)
        if (rpc->workers[i].cq)
            drain_and_destroy(rpc->workers[i].cq);
    if (rpc->shutdown_cq)
        drain_and_destroy(rpc->shutdown_cq);
    cr_pool_free(rpc->pool);
    free(rpc->methods);
    free(rpc->workers);
    free(rpc);
}

/* ---- helpers for call kinds ---- */

grpc_call_error cr_start_batch(grpc_call *call, const grpc_op *ops, size_t n, cr_tag *tag)
{
    TAG_HANDOFF(tag);
    return grpc_call_start_batch(call, ops, n, tag, NULL);
}

grpc_byte_buffer *cr_reply_take_body(cr_reply *r)
{
    if (r->status != GRPC_STATUS_OK)
        return NULL;
    grpc_byte_buffer *bb = cr_wire_buffer(r->body, r->len);
    r->body = NULL;
    return bb;
}

void cr_reply_error(cr_reply *r, grpc_status_code status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    r->status = status;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}
