/* cacheroute-epp-load: a load driver for Envoy external processors
 * (ext_proc v3) acting as a Gateway API inference endpoint picker
 * (bench/epp_bench.sh; bench/README.md, "EPP: requests through the picker,
 * against a no-op ext_proc").
 *
 * It plays what Envoy does for each HTTP request in FULL_DUPLEX_STREAMED
 * mode, over --streams concurrent Process streams (one gRPC call per HTTP
 * request; a stream slot opens the next call when one ends):
 *   1. request_headers (:method POST, :path /v1/chat/completions, raw_value,
 *      with ProtocolConfiguration), then the chat body (load_msgs.c) in
 *      --chunk-bytes chunks, the last with end_of_stream, sent back to back;
 *   2. waits for the HeadersResponse with x-gateway-destination-endpoint and
 *      clear_route_cache, and for the whole body echoed as streamed_response
 *      chunks (their bytes counted, the last end_of_stream);
 *   3. response_headers, --sse-chunks SSE token chunks and a final usage
 *      chunk (end_of_stream), each echo counted the same way;
 *   4. half-closes and waits for the status, OK wanted.
 * By default each stream starts its next request as soon as one ends (a
 * closed loop: the server saturated, its queue in every latency); with
 * --rate R, requests start R per second on whichever stream is idle (an
 * open loop below saturation, where the decision time is the server's
 * work and not its queue; a start that finds every stream busy is "late").
 * With --request-only it half-closes after step 2 instead: the request
 * phase alone, so that a run of each gives the response phase's cost by
 * difference.
 *
 * Measured over --seconds after --warmup: requests completed per second;
 * the decision time, from the last request body chunk sent (its send
 * completed: the bytes went to the transport) to the HeadersResponse
 * received, p50 and p99; with --server-pid, the server process's CPU time
 * (utime+stime of /proc/PID/stat, every thread) over the same window per
 * request; and the driver's own CPU use, to show it was not the limit.
 * Any request whose echo or status is wrong counts as an error (exit 1).
 * At the end the requests in flight are finished, not cancelled: a picker
 * counts a stream reset after its route as the endpoint's error.
 *
 * One thread, one completion queue, gRPC C core. */
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "load_msgs.h"

#define METHOD "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
#define MAX_CONVS 64

typedef struct opts {
    const char *target;
    unsigned streams, convs, sse_chunks;
    size_t body_bytes, chunk_bytes;
    double seconds, warmup;
    int request_only;
    long server_pid;
    double rate; /* requests started per second, 0 = each stream at once again */
} opts;

enum { K_START, K_SEND, K_RECV, K_STATUS }; /* a batch's kind: its tag's low bits */

typedef struct stream {
    grpc_call *call;
    const epp_conv *conv;
    size_t sent;          /* messages whose send completed, of the request's plan */
    int sending, receiving, start_pending, status_pending, closed;
    grpc_byte_buffer *out, *in;
    /* what came back */
    int decided;
    size_t req_echo, resp_echo, resp_headers;
    int req_end, resp_end, bad;
    double t_begin, t_last_chunk, t_decided;
    grpc_metadata_array initial, trailing;
    grpc_status_code status;
    grpc_slice details;
} stream;

typedef struct run {
    const opts *o;
    grpc_channel *channel;
    grpc_completion_queue *cq;
    epp_conv convs[MAX_CONVS];
    stream *streams;
    unsigned next_conv;
    int stopping;
    stream **idle;        /* --rate: streams waiting for their next start */
    unsigned n_idle;
    double next_start;    /* --rate: when the next request starts */
    uint64_t late;        /* --rate: starts that found no idle stream in time */
    double late_at;       /* the start last counted late */
    double measure_from, measure_to; /* the window, monotonic seconds */
    uint64_t done, errors, immediate;
    uint64_t *lat_ns;                /* decision times in the window */
    size_t n_lat, cap_lat;
    char first_error[256];
} run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *tag_of(stream *s, int kind) { return (void *)((uintptr_t)s | (uintptr_t)kind); }

static size_t plan_len(const run *r, const stream *s)
{
    return s->conv->n_req + (r->o->request_only ? 0 : s->conv->n_resp);
}

static grpc_slice plan_msg(const stream *s, size_t i)
{
    return i < s->conv->n_req ? s->conv->req[i] : s->conv->resp[i - s->conv->n_req];
}

static void fail(run *r, stream *s, const char *why)
{
    if (!s->bad && !r->first_error[0])
        snprintf(r->first_error, sizeof r->first_error, "%s", why);
    s->bad = 1;
}

static int request_echoed(const stream *s)
{
    return s->decided && s->req_end && s->req_echo == s->conv->body_bytes;
}

/* The next message of the plan, or the half-close once the plan is sent;
 * the response phase waits until the request's echo is complete. */
static void start_send(run *r, stream *s)
{
    if (s->sending || s->closed || !s->call)
        return;
    if (s->sent == s->conv->n_req && !request_echoed(s))
        return; /* received() calls again when it is */
    grpc_op op;
    memset(&op, 0, sizeof op);
    if (s->sent < plan_len(r, s) && !s->bad) {
        grpc_slice m = plan_msg(s, s->sent);
        if (s->sent + 1 == s->conv->n_req)
            s->t_last_chunk = now_s(); /* replaced by its completion, if before the answer */
        s->out = grpc_raw_byte_buffer_create(&m, 1);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = s->out;
    } else {
        op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        s->closed = 1;
    }
    s->sending = grpc_call_start_batch(s->call, &op, 1, tag_of(s, K_SEND), NULL) == GRPC_CALL_OK;
}

static void start_recv(stream *s)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->in;
    s->receiving = grpc_call_start_batch(s->call, &op, 1, tag_of(s, K_RECV), NULL) == GRPC_CALL_OK;
}

static void start_call(run *r, stream *s)
{
    s->conv = &r->convs[r->next_conv++ % r->o->convs];
    s->sent = 0;
    s->closed = s->decided = s->req_end = s->resp_end = s->bad = 0;
    s->req_echo = s->resp_echo = s->resp_headers = 0;
    s->t_begin = now_s();
    s->t_last_chunk = s->t_decided = 0;
    s->status = GRPC_STATUS_UNKNOWN;
    s->details = grpc_empty_slice();
    grpc_metadata_array_init(&s->initial);
    grpc_metadata_array_init(&s->trailing);
    s->call = grpc_channel_create_call(r->channel, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq,
                                       grpc_slice_from_static_string(METHOD), NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &s->initial;
    s->start_pending = grpc_call_start_batch(s->call, ops, 2, tag_of(s, K_START), NULL) == GRPC_CALL_OK;
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &s->trailing;
    ops[0].data.recv_status_on_client.status = &s->status;
    ops[0].data.recv_status_on_client.status_details = &s->details;
    s->status_pending = grpc_call_start_batch(s->call, ops, 1, tag_of(s, K_STATUS), NULL) == GRPC_CALL_OK;
    start_recv(s);
    start_send(r, s);
}

static void add_latency(run *r, double seconds)
{
    if (r->n_lat == r->cap_lat) {
        size_t cap = r->cap_lat ? r->cap_lat * 2 : 65536;
        uint64_t *p = realloc(r->lat_ns, cap * sizeof *p);
        if (!p)
            return;
        r->lat_ns = p;
        r->cap_lat = cap;
    }
    r->lat_ns[r->n_lat++] = (uint64_t)(seconds * 1e9);
}

/* Every batch of the call is back: judge the request, start the next. */
static void maybe_end(run *r, stream *s)
{
    if (!s->call || s->sending || s->receiving || s->start_pending || s->status_pending)
        return;
    if (s->status != GRPC_STATUS_OK) {
        char why[200], *d = grpc_slice_to_c_string(s->details);
        snprintf(why, sizeof why, "status %d: %s", (int)s->status, d);
        gpr_free(d);
        fail(r, s, why);
    } else if (!request_echoed(s)) {
        fail(r, s, "the request phase was not answered in full (destination, echoed body)");
    } else if (!r->o->request_only
               && !(s->resp_headers == 1 && s->resp_end && s->resp_echo == s->conv->sse_bytes)) {
        fail(r, s, "the response phase was not echoed in full");
    }
    double t = now_s();
    if (t >= r->measure_from && t < r->measure_to) {
        if (s->bad)
            r->errors++;
        else {
            r->done++;
            add_latency(r, s->t_decided - s->t_last_chunk);
        }
    }
    grpc_slice_unref(s->details);
    grpc_metadata_array_destroy(&s->initial);
    grpc_metadata_array_destroy(&s->trailing);
    grpc_call_unref(s->call);
    s->call = NULL;
    if (r->stopping)
        return;
    if (r->o->rate > 0)
        r->idle[r->n_idle++] = s;
    else
        start_call(r, s);
}

/* --rate: starts the requests whose time has come, on idle streams; a
 * start that finds none is late (the offered rate was not kept). */
static void start_due(run *r, double t)
{
    while (!r->stopping && t >= r->next_start) {
        if (!r->n_idle) {
            if (t - r->next_start > 0.001 && r->late_at != r->next_start) {
                r->late++; /* once per start */
                r->late_at = r->next_start;
            }
            return;
        }
        start_call(r, r->idle[--r->n_idle]);
        r->next_start += 1 / r->o->rate;
    }
}

static void sent(run *r, stream *s, int ok)
{
    s->sending = 0;
    if (s->out) {
        grpc_byte_buffer_destroy(s->out);
        s->out = NULL;
        if (ok && ++s->sent == s->conv->n_req && !s->decided)
            s->t_last_chunk = now_s();
    }
    if (!ok)
        fail(r, s, "a send failed (the stream broke)");
    else
        start_send(r, s);
}

static void answered(run *r, stream *s, const epp_answer *a)
{
    switch (a->kind) {
    case EPP_A_REQ_HEADERS:
        if (s->decided || !a->has_destination)
            fail(r, s, "request headers answered twice, or without a destination");
        s->decided = 1;
        s->t_decided = now_s();
        if (s->sent < s->conv->n_req - 1)
            fail(r, s, "the destination came before the whole body was sent");
        break;
    case EPP_A_REQ_BODY:
        if (!s->decided || s->req_end)
            fail(r, s, "a request body chunk before the destination, or after the end");
        s->req_echo += a->body_len;
        s->req_end = a->end;
        break;
    case EPP_A_RESP_HEADERS:
        s->resp_headers++;
        break;
    case EPP_A_RESP_BODY:
        s->resp_echo += a->body_len;
        s->resp_end = a->end;
        break;
    case EPP_A_IMMEDIATE: {
        char why[64];
        snprintf(why, sizeof why, "immediate response %u", a->status);
        r->immediate++;
        fail(r, s, why);
        break;
    }
    default:
        fail(r, s, "an answer that is no ProcessingResponse we know");
    }
}

static void received(run *r, stream *s)
{
    s->receiving = 0;
    if (!s->in)
        return; /* the server ended the stream */
    grpc_byte_buffer_reader rd;
    epp_answer a;
    if (grpc_byte_buffer_reader_init(&rd, s->in)) {
        grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
        epp_answer_read(GRPC_SLICE_START_PTR(all), GRPC_SLICE_LENGTH(all), &a);
        grpc_slice_unref(all);
        grpc_byte_buffer_reader_destroy(&rd);
        answered(r, s, &a);
    } else {
        fail(r, s, "an unreadable message");
    }
    grpc_byte_buffer_destroy(s->in);
    s->in = NULL;
    if (s->bad)
        grpc_call_cancel(s->call, NULL);
    start_recv(s);
    start_send(r, s); /* the response phase may start now */
}

static void on_event(run *r, grpc_event ev)
{
    stream *s = (stream *)((uintptr_t)ev.tag & ~(uintptr_t)3);
    switch ((int)((uintptr_t)ev.tag & 3)) {
    case K_START:
        s->start_pending = 0;
        break;
    case K_SEND:
        sent(r, s, ev.success);
        break;
    case K_RECV:
        received(r, s);
        break;
    case K_STATUS:
        s->status_pending = 0;
        break;
    }
    maybe_end(r, s);
}

/* ---- CPU accounting ------------------------------------------------------ */

/* utime+stime of process pid, in seconds; -1 when unreadable. */
static double proc_cpu(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6
           + (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double quantile_us(run *r, double q)
{
    if (!r->n_lat)
        return 0;
    size_t i = (size_t)(q * (double)r->n_lat);
    return (double)r->lat_ns[i < r->n_lat ? i : r->n_lat - 1] / 1e3;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cacheroute-epp-load [options]\n"
            "  --target ADDR        the ext_proc server (default 127.0.0.1:9002)\n"
            "  --streams N          concurrent streams (default 64)\n"
            "  --body-bytes N       chat body length (default 1024)\n"
            "  --chunk-bytes N      request body chunks, at most (default 16384)\n"
            "  --sse-chunks N       SSE token chunks before the usage chunk (default 8)\n"
            "  --conversations N    distinct chat bodies, in turn (default 16, <= %d)\n"
            "  --seconds S          measured seconds (default 10)\n"
            "  --warmup S           seconds before the measure (default 2)\n"
            "  --request-only       half-close after the request phase's echo\n"
            "  --rate R             start R requests/s (open loop, at most --streams\n"
            "                       in flight; default 0: closed loop)\n"
            "  --server-pid PID     report this process's CPU time per request\n",
            MAX_CONVS);
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.target = "127.0.0.1:9002", .streams = 64, .convs = 16, .sse_chunks = 8,
                .body_bytes = 1024, .chunk_bytes = 16384, .seconds = 10, .warmup = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--request-only")) {
            o->request_only = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "cacheroute-epp-load: unknown argument or no value: %s\n", a);
            return -1;
        }
        const char *v = argv[++i];
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        int num_ok = end != v && !*end && !errno && d >= 0;
        if (!strcmp(a, "--target"))
            o->target = v;
        else if (!num_ok) {
            fprintf(stderr, "cacheroute-epp-load: %s wants a number, got '%s'\n", a, v);
            return -1;
        } else if (!strcmp(a, "--streams") && d >= 1 && d <= 10000)
            o->streams = (unsigned)d;
        else if (!strcmp(a, "--body-bytes") && d >= 64 && d <= 16e6)
            o->body_bytes = (size_t)d;
        else if (!strcmp(a, "--chunk-bytes") && d >= 1 && d <= 4e6)
            o->chunk_bytes = (size_t)d;
        else if (!strcmp(a, "--sse-chunks") && d <= 1000)
            o->sse_chunks = (unsigned)d;
        else if (!strcmp(a, "--conversations") && d >= 1 && d <= MAX_CONVS)
            o->convs = (unsigned)d;
        else if (!strcmp(a, "--seconds") && d > 0)
            o->seconds = d;
        else if (!strcmp(a, "--warmup"))
            o->warmup = d;
        else if (!strcmp(a, "--rate"))
            o->rate = d;
        else if (!strcmp(a, "--server-pid") && d >= 1)
            o->server_pid = (long)d;
        else {
            fprintf(stderr, "cacheroute-epp-load: %s %s: unknown or out of range\n", a, v);
            return -1;
        }
    }
    return 0;
}

/* Waits (at most 10 s) for the channel to connect. */
static int connect_channel(run *r)
{
    double until = now_s() + 10;
    grpc_connectivity_state st;
    while ((st = grpc_channel_check_connectivity_state(r->channel, 1)) != GRPC_CHANNEL_READY) {
        if (now_s() > until)
            return -1;
        gpr_timespec d = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(200, GPR_TIMESPAN));
        grpc_channel_watch_connectivity_state(r->channel, st, d, r->cq, NULL);
        grpc_completion_queue_next(r->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    grpc_init();
    run r = {.o = &o};
    epp_conv_opts co = {.body_bytes = o.body_bytes, .chunk_bytes = o.chunk_bytes,
                        .sse_chunks = o.sse_chunks};
    for (unsigned i = 0; i < o.convs; i++)
        if (epp_conv_make(&r.convs[i], i, &co)) {
            fprintf(stderr, "cacheroute-epp-load: out of memory\n");
            return 1;
        }
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    r.channel = grpc_channel_create(o.target, creds, NULL);
    grpc_channel_credentials_release(creds);
    r.cq = grpc_completion_queue_create_for_next(NULL);
    if (connect_channel(&r)) {
        fprintf(stderr, "cacheroute-epp-load: cannot connect to %s\n", o.target);
        return 1;
    }
    r.streams = calloc(o.streams, sizeof *r.streams);
    r.idle = calloc(o.streams, sizeof *r.idle);
    if (!r.streams || !r.idle)
        return 1;
    double t0 = now_s();
    r.measure_from = t0 + o.warmup;
    r.measure_to = r.measure_from + o.seconds;
    r.next_start = t0;
    for (unsigned i = 0; i < o.streams; i++) {
        if (o.rate > 0)
            r.idle[r.n_idle++] = &r.streams[o.streams - 1 - i];
        else
            start_call(&r, &r.streams[i]);
    }

    int measuring = 0;
    double srv0 = 0, srv1 = 0, me0 = 0, me1 = 0;
    unsigned live = o.streams;
    while (live) {
        double wait = 0.05, t = now_s();
        if (o.rate > 0) {
            start_due(&r, t);
            if (r.n_idle && r.next_start - t < wait)
                wait = r.next_start > t ? r.next_start - t : 0;
        }
        grpc_event ev = grpc_completion_queue_next(
            r.cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos((int64_t)(wait * 1e9), GPR_TIMESPAN)),
            NULL);
        t = now_s();
        if (!measuring && t >= r.measure_from) {
            measuring = 1;
            srv0 = o.server_pid ? proc_cpu(o.server_pid) : 0;
            me0 = self_cpu();
        }
        if (measuring == 1 && t >= r.measure_to) {
            measuring = 2;
            srv1 = o.server_pid ? proc_cpu(o.server_pid) : 0;
            me1 = self_cpu();
            r.stopping = 1; /* the requests in flight end as they would */
        }
        if (measuring == 2 && t >= r.measure_to + 10) { /* but not forever */
            measuring = 3;
            for (unsigned i = 0; i < o.streams; i++)
                if (r.streams[i].call)
                    grpc_call_cancel(r.streams[i].call, NULL);
        }
        if (ev.type == GRPC_OP_COMPLETE && ev.tag)
            on_event(&r, ev);
        if (o.rate > 0)
            start_due(&r, t);
        if (r.stopping) {
            live = 0;
            for (unsigned i = 0; i < o.streams; i++)
                live += r.streams[i].call != NULL;
        }
    }

    qsort(r.lat_ns, r.n_lat, sizeof *r.lat_ns, cmp_u64);
    double rps = (double)r.done / o.seconds;
    double srv_cpu = srv1 - srv0;
    printf("target=%s streams=%u body_bytes=%zu chunk_bytes=%zu sse_chunks=%u phase=%s "
           "seconds=%.1f rate=%.0f late=%llu requests=%llu errors=%llu immediate=%llu rps=%.1f "
           "decision_p50_us=%.1f decision_p99_us=%.1f server_cpu_s=%.2f "
           "server_cpu_us_per_req=%.1f server_cpu_pct=%.1f driver_cpu_pct=%.1f\n",
           o.target, o.streams, r.convs[0].body_bytes, o.chunk_bytes, o.sse_chunks,
           o.request_only ? "request" : "full", o.seconds, o.rate, (unsigned long long)r.late,
           (unsigned long long)r.done,
           (unsigned long long)r.errors, (unsigned long long)r.immediate, rps,
           quantile_us(&r, 0.50), quantile_us(&r, 0.99), o.server_pid ? srv_cpu : -1.0,
           o.server_pid && r.done ? srv_cpu * 1e6 / (double)r.done : -1.0,
           o.server_pid ? 100 * srv_cpu / o.seconds : -1.0, 100 * (me1 - me0) / o.seconds);
    if (r.errors)
        fprintf(stderr, "cacheroute-epp-load: %llu requests failed; the first: %s\n",
                (unsigned long long)r.errors, r.first_error);

    free(r.streams);
    free(r.idle);
    free(r.lat_ns);
    grpc_channel_destroy(r.channel);
    grpc_completion_queue_shutdown(r.cq);
    while (grpc_completion_queue_next(r.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type
           != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(r.cq);
    for (unsigned i = 0; i < o.convs; i++)
        epp_conv_free(&r.convs[i]);
    grpc_shutdown();
    return r.errors || !r.done ? 1 : 0;
}
