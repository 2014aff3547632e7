/* Server lifecycle, workers and call requests. Call kinds live in calls.c,
 * stream.c, health.c and watch.c (the last two pushing streams, push.h). */
#include "rpc.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "pool.h"
#include "sweep.h"

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
 * latency tail grows (`bench/grpc/run.sh`: p99 at 4 was 1.2x the ceiling's; bench/HISTORY.md). */
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
    cr_worker *workers; /* n_workers, then the own lane's (n_queues) */
    int n_workers;
    int port;
    cr_pool *pool;
    cr_sweep *request_sweep;     /* request deadlines; NULL when off */
    cr_sweep *reply_sweep;       /* reply deadlines; NULL when off */
    cr_sweep *stream_sweep;      /* idle streams, and every stream at shutdown */
    grpc_resource_quota *quota;  /* NULL when off */
    _Atomic long in_flight;      /* calls arrived and not yet released */
    _Atomic long *method_calls;  /* the same, per method */
    _Atomic long refused;        /* over max_calls_per_method */
    _Atomic long pending_reply;  /* bytes of unary answers out, not yet read */
    _Atomic long inflating;      /* compressed requests inflated and not yet handled */
};

/* The workers' queues and the own lane's (cr_method_spec.own_lane). */
static int n_queues(const cr_rpc *rpc) { return rpc->n_workers + 1; }
static int is_lane(const cr_rpc *rpc, int queue) { return queue == rpc->n_workers; }
/* How gRPC core hands m's calls over. A unary call normally reads its own
 * request (calls.c), one completion more per call (~30 us on loopback);
 * without a request deadline there is nothing to gain from that, so gRPC
 * core reads the request before the call arrives. */
static grpc_server_register_method_payload_handling payload_of(const cr_rpc_options *opt,
                                                               const cr_method_spec *m)
{
    if (m->kind == &cr_unary_kind && !(opt->limits.request_deadline_s > 0))
        return GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER;
    return m->kind->payload;
}

/* The own lane's queue does no I/O: a second polling thread would take
 * turns with the workers at reading the sockets, and every call it read
 * would wake a worker on another thread (on one pinned CPU that halved
 * the calls per second). The workers poll; requests of 1 MiB and more run
 * on the pool, so the workers stay free to read health calls too. */
static grpc_completion_queue *non_polling_queue(void)
{
    grpc_completion_queue_attributes attr = {GRPC_CQ_CURRENT_VERSION, GRPC_CQ_NEXT,
                                             GRPC_CQ_NON_POLLING, NULL};
    return grpc_completion_queue_create(grpc_completion_queue_factory_lookup(&attr), &attr,
                                        NULL);
}

static int on_own_lane(const cr_rpc_options *opt, const cr_method_spec *m)
{
    const char *p = opt->own_lane_prefix;
    return p && *p && strncmp(m->path, p, strlen(p)) == 0;
}
static size_t method_index(const cr_call *c) { return (size_t)(c->method - c->rpc->methods); }

double cr_rpc_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void call_arrived(cr_tag *tag, int ok);
static void refuse(cr_call *c);

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
    c->read_up_front = payload_of(&rpc->opt, &m->spec) == GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER;
    grpc_byte_buffer **payload = c->read_up_front ? &c->payload : NULL;
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
    long calls = atomic_fetch_add(&c->rpc->method_calls[method_index(c)], 1) + 1;
    /* A unary call says so once its request is in, when its handler is
     * about to run (calls.c). */
    if (c->method->spec.kind != &cr_unary_kind)
        cr_call_log_started(c);
    long cap = c->rpc->opt.limits.max_calls_per_method;
    if (cap > 0 && calls > cap) {
        refuse(c);
        return;
    }
    c->method->spec.kind->arrived(c);
}

void cr_call_release(cr_call *c)
{
    atomic_fetch_sub(&c->rpc->method_calls[method_index(c)], 1);
    atomic_fetch_sub(&c->rpc->in_flight, 1);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    grpc_metadata_array_destroy(&c->metadata);
    if (c->call)
        grpc_call_unref(c->call);
    free(c);
}

void cr_call_log_started(const cr_call *c)
{
    if (cr_log_enabled(CR_LOG_DEBUG))
        cr_log(CR_LOG_DEBUG, "call started", json_pack("{s:s}", "method", c->method->spec.path));
}

void cr_call_observe(cr_call *c, grpc_status_code status)
{
    double seconds = cr_rpc_clock() - c->started;
    if (c->rpc->opt.observe)
        c->rpc->opt.observe(c->rpc->opt.observe_ctx, method_index(c), status, seconds);
    if (cr_log_enabled(CR_LOG_DEBUG))
        cr_log(CR_LOG_DEBUG, "call finished",
               json_pack("{s:s,s:i,s:f}", "method", c->method->spec.path, "status", (int)status,
                         "duration_ms", seconds * 1e3));
}

int cr_call_allowed(cr_call *c, cr_reply *out)
{
    const cr_method_spec *m = &c->method->spec;
    const cr_rpc_options *o = &c->rpc->opt;
    if (o->is_admin && o->caller_of)
        out->caller = o->caller_of(o->admin_ctx, c->call, &c->metadata);
    if (o->is_admin && m->access == CR_ACCESS_IDENTIFIED && !out->caller) {
        cr_reply_needs_identity(out, m);
        return 0;
    }
    if (!o->is_admin || m->access == CR_ACCESS_OPEN || m->access == CR_ACCESS_IDENTIFIED ||
        o->is_admin(o->admin_ctx, c->call, &c->metadata))
        return 1;
    if (m->access == CR_ACCESS_ADMIN_IF) { /* decided on the decoded request */
        out->gate = m;
        return 1;
    }
    cr_reply_needs_admin(out, m, 0);
    return 0;
}

/* Ends a call that has run nothing: status with details, as one batch
 * whose completion runs tag. */
static grpc_call_error answer_at_once(grpc_call *call, grpc_status_code status,
                                      grpc_slice *details, int *cancelled, cr_tag *tag)
{
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = status;
    ops[1].data.send_status_from_server.status_details = details;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = cancelled;
    return cr_start_batch(call, ops, 3, tag);
}

/* ---- calls over their method's cap ---- */

static void refused_done(cr_tag *tag, int ok)
{
    cr_call *c = CR_CONTAINER_OF(tag, cr_call, arrived);
    cr_call_observe(c, ok && !c->refusal_cancelled ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                                   : GRPC_STATUS_CANCELLED);
    grpc_slice_unref(c->refusal);
    cr_call_release(c);
}

/* Answers RESOURCE_EXHAUSTED before the kind sees the call: nothing of it
 * runs. The arrival tag is free again, so the answer reuses it. */
static void refuse(cr_call *c)
{
    char text[300];
    atomic_fetch_add(&c->rpc->refused, 1);
    snprintf(text, sizeof text,
             "%s: %ld calls in flight already, the most --max-calls-per-method allows",
             c->method->spec.path, c->rpc->opt.limits.max_calls_per_method);
    c->refusal = grpc_slice_from_copied_string(text);
    c->arrived.fn = refused_done;
    if (answer_at_once(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED, &c->refusal,
                       &c->refusal_cancelled, &c->arrived) != GRPC_CALL_OK)
        refused_done(&c->arrived, 0);
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
    u->done.fn = unknown_done;
    if (answer_at_once(u->call, GRPC_STATUS_UNIMPLEMENTED, &u->message, &u->cancelled,
                       &u->done) != GRPC_CALL_OK)
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

static int millis(double s) { return s * 1e3 >= INT_MAX ? INT_MAX : (int)(s * 1e3); }

static grpc_arg int_arg(const char *key, int value)
{
    grpc_arg a;
    a.type = GRPC_ARG_INTEGER;
    a.key = (char *)key;
    a.value.integer = value;
    return a;
}

/* The channel args of l (at most LIMIT_ARGS) into args; returns how many. */
#define LIMIT_ARGS 6
static size_t limit_args(const cr_rpc_limits *l, grpc_resource_quota *quota, grpc_arg *args)
{
    size_t n = 0;
    if (l->handshake_timeout_s > 0)
        args[n++] = int_arg(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, millis(l->handshake_timeout_s));
    if (l->max_connection_idle_s > 0)
        args[n++] = int_arg(GRPC_ARG_MAX_CONNECTION_IDLE_MS, millis(l->max_connection_idle_s));
    if (l->max_connection_age_s > 0) {
        args[n++] = int_arg(GRPC_ARG_MAX_CONNECTION_AGE_MS, millis(l->max_connection_age_s));
        args[n++] = int_arg(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                            millis(l->max_connection_age_grace_s));
    }
    if (l->max_concurrent_streams > 0)
        args[n++] = int_arg(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                            l->max_concurrent_streams > INT_MAX ? INT_MAX
                                                                : (int)l->max_concurrent_streams);
    if (quota) {
        args[n].type = GRPC_ARG_POINTER;
        args[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
        args[n].value.pointer.p = quota;
        args[n++].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    }
    return n;
}

static grpc_server *create_server(const cr_rpc_options *opt, grpc_resource_quota *quota)
{
    grpc_arg args[4 + LIMIT_ARGS];
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
    /* Core would inflate a compressed request whole before any limit
     * applies: compressed requests reach cr_rpc_read_request as they came. */
    args[3] = int_arg(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);
    grpc_channel_args chargs = {4 + limit_args(&opt->limits, quota, args + 4), args};
    return grpc_server_create(&chargs, NULL);
}

/* The listener, with the caller's credentials or plaintext. */
static int bind_port(cr_rpc *rpc, cr_error *err)
{
    grpc_server_credentials *creds =
        rpc->opt.creds ? rpc->opt.creds : grpc_insecure_server_credentials_create();
    rpc->port = grpc_server_add_http2_port(rpc->server, rpc->opt.listen, creds);
    if (!rpc->opt.creds)
        grpc_server_credentials_release(creds);
    if (rpc->port == 0) {
        cr_fail(err, CR_EINVAL, "%s: cannot listen on '%s' (bad address, or in use)",
                rpc->opt.listen_flag ? rpc->opt.listen_flag : "--listen", rpc->opt.listen);
        return -1;
    }
    return 0;
}

static int bind_and_register(cr_rpc *rpc, const cr_method_spec *specs, cr_error *err)
{
    for (size_t i = 0; i < rpc->n_methods; i++) {
        rpc->methods[i].spec = specs[i];
        rpc->methods[i].handle = grpc_server_register_method(
            rpc->server, specs[i].path, NULL, payload_of(&rpc->opt, &specs[i]), 0);
        if (!rpc->methods[i].handle) {
            cr_fail(err, CR_EINVAL, "cannot register method %s", specs[i].path);
            return -1;
        }
    }
    for (int i = 0; i < n_queues(rpc); i++) {
        rpc->workers[i].rpc = rpc;
        rpc->workers[i].cq = is_lane(rpc, i) ? non_polling_queue()
                                             : grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(rpc->server, rpc->workers[i].cq, NULL);
    }
    rpc->shutdown_cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(rpc->server, rpc->shutdown_cq, NULL);
    return bind_port(rpc, err);
}

cr_rpc *cr_rpc_start(const cr_rpc_options *opt, const cr_method_spec *specs, size_t n,
                     cr_error *err)
{
    cr_rpc *rpc = calloc(1, sizeof *rpc);
    if (!rpc) {
        cr_fail(err, CR_ENOMEM, "out of memory starting the server");
        return NULL;
    }
    rpc->opt = *opt;
    rpc->n_methods = n;
    rpc->n_workers = opt->threads;
    rpc->methods = calloc(n, sizeof *rpc->methods);
    rpc->method_calls = calloc(n, sizeof *rpc->method_calls);
    rpc->workers = calloc((size_t)n_queues(rpc), sizeof *rpc->workers);
    if (opt->limits.memory_quota_bytes > 0) {
        rpc->quota = grpc_resource_quota_create("cacheroute");
        grpc_resource_quota_resize(rpc->quota, (size_t)opt->limits.memory_quota_bytes);
    }
    rpc->server = create_server(opt, rpc->quota);
    rpc->pool = cr_pool_new(opt->threads);
    const cr_rpc_limits *l = &opt->limits;
    if (l->request_deadline_s > 0)
        rpc->request_sweep = cr_sweep_new(
            l->request_deadline_s, "the request did not arrive within --request-deadline");
    if (l->reply_deadline_s > 0)
        rpc->reply_sweep =
            cr_sweep_new(l->reply_deadline_s, "the answer was not read within --reply-deadline");
    /* Kept without an idle limit too, for shutdown to end streams: its
     * timeout is then longer than any process lives. */
    rpc->stream_sweep = cr_sweep_new(l->stream_idle_s > 0 ? l->stream_idle_s : 1e9,
                                     "the stream was idle for --stream-idle-timeout");
    if (!rpc->methods || !rpc->method_calls || !rpc->workers || !rpc->server || !rpc->pool ||
        !rpc->stream_sweep ||
        (l->request_deadline_s > 0 && !rpc->request_sweep) ||
        (l->reply_deadline_s > 0 && !rpc->reply_sweep)) {
        cr_fail(err, CR_ENOMEM, "out of memory starting the server");
        cr_rpc_free(rpc);
        return NULL;
    }
    if (bind_and_register(rpc, specs, err) != 0) {
        cr_rpc_free(rpc);
        return NULL;
    }
    grpc_server_start(rpc->server);
    for (int i = 0; i < n_queues(rpc); i++) {
        for (size_t m = 0; m < n; m++)
            for (int k = 0; is_lane(rpc, i) == on_own_lane(opt, &specs[m]) &&
                            k < REQUESTS_PER_METHOD;
                 k++)
                request_call(rpc, &rpc->methods[m], rpc->workers[i].cq);
        if (!is_lane(rpc, i))
            request_unknown(rpc, rpc->workers[i].cq);
        if (pthread_create(&rpc->workers[i].thread, NULL, worker_main, &rpc->workers[i]) != 0) {
            cr_fail(err, CR_ENOMEM, "cannot start worker thread %d", i);
            long stuck;
            cr_rpc_shutdown(rpc, 0, 1, &stuck);
            if (!stuck) /* else a thread may still use rpc: leave it */
                cr_rpc_free(rpc);
            return NULL;
        }
        rpc->workers[i].started = 1;
    }
    return rpc;
}

cr_pool *cr_rpc_pool(cr_rpc *rpc) { return rpc->pool; }
cr_sweep *cr_rpc_request_sweep(cr_rpc *rpc) { return rpc->request_sweep; }
cr_sweep *cr_rpc_reply_sweep(cr_rpc *rpc) { return rpc->reply_sweep; }
cr_sweep *cr_rpc_stream_sweep(cr_rpc *rpc) { return rpc->stream_sweep; }
long cr_rpc_refused(cr_rpc *rpc) { return atomic_load(&rpc->refused); }
long cr_rpc_pending_reply_bytes(cr_rpc *rpc) { return atomic_load(&rpc->pending_reply); }

int cr_rpc_reserve_reply(cr_rpc *rpc, size_t len)
{
    long cap = rpc->opt.limits.max_pending_reply_bytes;
    long now = atomic_fetch_add(&rpc->pending_reply, (long)len) + (long)len;
    if (cap > 0 && now > cap) {
        atomic_fetch_sub(&rpc->pending_reply, (long)len);
        return -1;
    }
    return 0;
}

void cr_rpc_release_reply(cr_rpc *rpc, size_t len)
{
    atomic_fetch_sub(&rpc->pending_reply, (long)len);
}
long cr_rpc_request_timeouts(cr_rpc *rpc) { return cr_sweep_cancelled(rpc->request_sweep); }
long cr_rpc_reply_timeouts(cr_rpc *rpc) { return cr_sweep_cancelled(rpc->reply_sweep); }
long cr_rpc_stream_timeouts(cr_rpc *rpc) { return cr_sweep_cancelled(rpc->stream_sweep); }

json_t *cr_rpc_describe_running(cr_rpc *rpc)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < rpc->n_methods; i++) {
        long k = atomic_load(&rpc->method_calls[i]);
        if (k > 0)
            json_object_set_new(o, rpc->methods[i].spec.path, json_integer(k));
    }
    return o;
}
int cr_rpc_port(const cr_rpc *rpc) { return rpc->port; }
long cr_rpc_in_flight(cr_rpc *rpc) { return atomic_load(&rpc->in_flight); }

/* Waits for the server's shutdown to complete, for at most grace seconds,
 * then cancels what is left and waits for gRPC core until hard (cr_rpc_clock
 * time). A call that raced the signal can sit in gRPC core unmatched (no
 * handler ever sees it) and would hold shutdown for the whole grace: once
 * none of our own calls is left, twice 50 ms apart, whatever remains is such
 * a call and is cancelled at once. Returns 0 once gRPC core is done, -1 at
 * hard. */
static int wait_for_drain(cr_rpc *rpc, double grace, double hard)
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
            return 0;
        idle_polls = atomic_load(&rpc->in_flight) == 0 ? idle_polls + 1 : 0;
        if (idle_polls >= 2 || cr_rpc_clock() >= deadline)
            break;
    }
    grpc_server_cancel_all_calls(rpc->server);
    double left = hard - cr_rpc_clock();
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                      gpr_time_from_millis(left > 0 ? (int64_t)(left * 1e3) : 0,
                                                           GPR_TIMESPAN));
    return grpc_completion_queue_next(rpc->shutdown_cq, until, NULL).type == GRPC_OP_COMPLETE
               ? 0
               : -1;
}

double cr_rpc_shutdown(cr_rpc *rpc, double grace, double margin, long *stuck)
{
    double t0 = cr_rpc_clock(), hard = t0 + grace + margin;
    static cr_tag shutdown_tag; /* only compared, never run */
    grpc_server_shutdown_and_notify(rpc->server, rpc->shutdown_cq, &shutdown_tag);
    /* A stream lasts as long as its client likes: waiting for it would
     * only spend the grace. */
    cr_sweep_close(rpc->stream_sweep, GRPC_STATUS_UNAVAILABLE, "server shutting down");
    int done = wait_for_drain(rpc, grace, hard) == 0;
    /* gRPC is done with every call, but a handler may still be running (on
     * the pool, or inline on a worker when the pool was already draining) and
     * will start its last batch on its worker's queue: the queues may only
     * shut down once every call we accepted has been released. A handler
     * that outlives hard is not waited for (the caller ends the process). */
    done = done && cr_pool_drain_for(rpc->pool, hard - cr_rpc_clock()) == 0;
    while (done && atomic_load(&rpc->in_flight) > 0 && cr_rpc_clock() < hard)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    *stuck = atomic_load(&rpc->in_flight);
    if (!done && *stuck == 0)
        *stuck = 1; /* gRPC core itself did not finish */
    if (*stuck)
        return cr_rpc_clock() - t0;
    for (int i = 0; i < n_queues(rpc); i++)
        grpc_completion_queue_shutdown(rpc->workers[i].cq);
    for (int i = 0; i < n_queues(rpc); i++)
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
    for (int i = 0; rpc->workers && i < n_queues(rpc); i++)
        if (rpc->workers[i].cq)
            drain_and_destroy(rpc->workers[i].cq);
    if (rpc->shutdown_cq)
        drain_and_destroy(rpc->shutdown_cq);
    cr_pool_free(rpc->pool);
    cr_sweep_free(rpc->request_sweep);
    cr_sweep_free(rpc->reply_sweep);
    cr_sweep_free(rpc->stream_sweep);
    if (rpc->quota)
        grpc_resource_quota_unref(rpc->quota);
    free(rpc->method_calls);
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

void cr_reply_needs_admin(cr_reply *out, const cr_method_spec *m, int conditional)
{
    conditional = conditional && m->admin_when;
    cr_reply_error(out, GRPC_STATUS_PERMISSION_DENIED,
                   "%s%s%s needs an admin: a client certificate identity in --admin-identity, "
                   "or the --admin-token-file token as 'authorization: Bearer' metadata",
                   m->path, conditional ? " " : "", conditional ? m->admin_when : "");
}

void cr_reply_needs_identity(cr_reply *out, const cr_method_spec *m)
{
    cr_reply_error(out, GRPC_STATUS_PERMISSION_DENIED,
                   "%s needs a client identity once authorization is on (its routes count "
                   "toward every client's): a client certificate identity in --route-identity "
                   "or --admin-identity, or the --admin-token-file token as 'authorization: "
                   "Bearer' metadata (--route-access anyone opens it)",
                   m->path);
}

int cr_rpc_read_request(cr_rpc *rpc, grpc_byte_buffer *bb, grpc_slice *out, cr_reply *reply)
{
    if (cr_wire_compression(bb) == GRPC_COMPRESS_NONE) {
        if (cr_wire_read(bb, out) == 0)
            return 0;
        cr_reply_error(reply, GRPC_STATUS_INTERNAL, "cannot read the request message");
        return -1;
    }
    const char *name = "?";
    grpc_compression_algorithm_name(cr_wire_compression(bb), &name);
    if (!rpc->opt.accept_compressed) {
        cr_reply_error(reply, GRPC_STATUS_UNIMPLEMENTED,
                       "grpc-encoding %s: compressed requests are refused; send them "
                       "uncompressed, or start the sidecar with --compressed-requests inflate",
                       name);
        return -1;
    }
    long max = rpc->opt.max_inflating > 0 ? rpc->opt.max_inflating : 1;
    if (atomic_fetch_add(&rpc->inflating, 1) >= max) {
        atomic_fetch_sub(&rpc->inflating, 1);
        cr_reply_error(reply, GRPC_STATUS_RESOURCE_EXHAUSTED,
                       "%ld compressed requests are being inflated already, the most a "
                       "quarter of --memory-quota-bytes holds at --max-message-bytes each",
                       max);
        return -1;
    }
    cr_error err;
    if (cr_wire_inflate(bb, (size_t)rpc->opt.max_message_bytes, out, &err) == 0)
        return 1;
    atomic_fetch_sub(&rpc->inflating, 1);
    cr_reply_error(reply, err.msg[0] && strstr(err.msg, "inflates past")
                              ? GRPC_STATUS_RESOURCE_EXHAUSTED
                              : GRPC_STATUS_INVALID_ARGUMENT,
                   "%s", err.msg);
    return -1;
}

void cr_rpc_request_done(cr_rpc *rpc, grpc_slice req, int read)
{
    size_t len = GRPC_SLICE_LENGTH(req);
    grpc_slice_unref(req);
    if (read == 1)
        atomic_fetch_sub(&rpc->inflating, 1);
    /* A big request's copy and what its handler malloc'd went back to
     * glibc, which keeps freed heap (its mmap threshold rises to the
     * largest block freed): given back to the system here, so RSS falls
     * after big calls rather than staying at their peak. */
    if (len >= CR_INLINE_MAX_BYTES)
        malloc_trim(0);
}
