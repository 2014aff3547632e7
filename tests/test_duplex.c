/* The duplex call kind (server/grpc/duplex.h) over loopback, with a test
 * session in place of the picker and gRPC core's own client: replies not
 * yet sent are bounded (a client that does not read stops being read
 * from, and then gets every reply in order), a failed step ends the stream
 * INVALID_ARGUMENT naming the message, the session's close runs
 * exactly once whether the client half-closes, cancels or the server
 * shuts down, and a session answers later from another thread by a wake
 * (cr_duplex_wake), in the stream's order. */
#include <grpc/grpc.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cunit_main.h"
#include "duplex.h"
#include "rpc.h"

#define METHOD "/cacheroute.test.Duplex/Go"
#define REPLY_BYTES (256u << 10)

/* The test session: a message is {k, fill}: k replies of REPLY_BYTES,
 * each filled with fill + its index; k 255 fails the step, 254 finishes,
 * 253 answers nothing until a wake, which answers one reply of 0xab. */
static atomic_int opened, closed_ok, closed_broken, steps, wakes;
static _Atomic(cr_duplex_call *) last_opened;

typedef struct session {
    int pending; /* a 253 not yet answered */
} session;

static void *t_open(void *ctx, uint64_t caller, double now, cr_duplex_call *self)
{
    (void)ctx, (void)caller, (void)now;
    atomic_fetch_add(&opened, 1);
    atomic_store(&last_opened, self);
    return calloc(1, sizeof(session));
}

static cr_duplex_next t_step(void *arg, const uint8_t *msg, size_t len, double now,
                             cr_duplex_out *out, char *why, size_t why_len)
{
    session *ss = arg;
    (void)now;
    if (!msg) { /* a wake */
        atomic_fetch_add(&wakes, 1);
        if (ss->pending) {
            ss->pending = 0;
            uint8_t *r = malloc(REPLY_BYTES);
            memset(r, 0xab, REPLY_BYTES);
            cr_duplex_put(out, r, REPLY_BYTES);
        }
        return CR_DUPLEX_MORE;
    }
    atomic_fetch_add(&steps, 1);
    if (len == 2 && msg[0] == 253) {
        ss->pending = 1;
        return CR_DUPLEX_MORE;
    }
    if (len != 2 || msg[0] == 255) {
        snprintf(why, why_len, "no such message");
        return CR_DUPLEX_FAILED;
    }
    if (msg[0] == 254)
        return CR_DUPLEX_FINISHED;
    for (int i = 0; i < msg[0]; i++) {
        uint8_t *r = malloc(REPLY_BYTES);
        memset(r, msg[1] + i, REPLY_BYTES);
        cr_duplex_put(out, r, REPLY_BYTES);
    }
    return CR_DUPLEX_MORE;
}

static void t_close(void *session, cr_duplex_end how, double now)
{
    (void)now;
    free(session);
    atomic_fetch_add(how == CR_DUPLEX_CLOSED ? &closed_ok : &closed_broken, 1);
}

/* 4 replies or 1 MiB unsent at most: four of REPLY_BYTES. */
static cr_duplex_ops ops = {t_open, t_step, t_close, NULL, NULL, 4, 1u << 20};

static cr_rpc *server;
static grpc_channel *channel;
static grpc_completion_queue *cq;

static void sleep_ms(int ms) { nanosleep(&(struct timespec){0, ms * 1000000L}, NULL); }

static gpr_timespec in_s(int s)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(s, GPR_TIMESPAN));
}

static void start_server(void)
{
    static const cr_method_spec specs[] = {
        {METHOD, &cr_duplex_kind, 0, NULL, &ops, CR_ACCESS_OPEN, NULL, NULL}};
    cr_rpc_options opt = {.listen = "127.0.0.1:0", .threads = 2, .max_message_bytes = 4 << 20};
    cr_error err;
    atomic_store(&opened, 0);
    atomic_store(&closed_ok, 0);
    atomic_store(&closed_broken, 0);
    atomic_store(&steps, 0);
    atomic_store(&wakes, 0);
    server = cr_rpc_start(&opt, specs, 1, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(server);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", cr_rpc_port(server));
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    channel = grpc_channel_create(target, creds, NULL);
    grpc_channel_credentials_release(creds);
    cq = grpc_completion_queue_create_for_pluck(NULL);
}

static void stop_server(void)
{
    long stuck = 0;
    cr_rpc_shutdown(server, 1, 0.5, &stuck);
    CU_ASSERT_EQUAL(stuck, 0);
    cr_rpc_free(server);
    grpc_channel_destroy(channel);
    grpc_completion_queue_shutdown(cq); /* every batch was plucked: nothing to drain */
    grpc_completion_queue_destroy(cq);
}

/* One batch, waited for; 1 when it succeeded. */
static int batch(grpc_call *call, grpc_op *ops_, size_t n, void *tag)
{
    CU_ASSERT_EQUAL_FATAL(grpc_call_start_batch(call, ops_, n, tag, NULL), GRPC_CALL_OK);
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, in_s(10), NULL);
    CU_ASSERT_EQUAL_FATAL(ev.type, GRPC_OP_COMPLETE);
    return ev.success;
}

static grpc_call *open_call(void)
{
    grpc_slice method = grpc_slice_from_static_string(METHOD);
    grpc_call *call = grpc_channel_create_call(channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method,
                                               NULL, in_s(20), NULL);
    grpc_metadata_array md;
    grpc_metadata_array_init(&md);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    batch(call, &op, 1, (void *)1);
    memset(&op, 0, sizeof op); /* the server's, sent with its first read */
    op.op = GRPC_OP_RECV_INITIAL_METADATA;
    op.data.recv_initial_metadata.recv_initial_metadata = &md;
    batch(call, &op, 1, (void *)1);
    grpc_metadata_array_destroy(&md);
    return call;
}

static void send_msg(grpc_call *call, uint8_t k, uint8_t fill)
{
    uint8_t m[2] = {k, fill};
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)m, 2);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    batch(call, &op, 1, (void *)2);
    grpc_byte_buffer_destroy(bb);
}

/* The next reply's length and first byte; -1 when the stream ended. */
static long recv_msg(grpc_call *call, int *first)
{
    grpc_byte_buffer *bb = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    batch(call, &op, 1, (void *)3);
    if (!bb)
        return -1;
    grpc_byte_buffer_reader r;
    grpc_byte_buffer_reader_init(&r, bb);
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    long len = (long)GRPC_SLICE_LENGTH(all);
    *first = len ? GRPC_SLICE_START_PTR(all)[0] : -1;
    grpc_slice_unref(all);
    grpc_byte_buffer_destroy(bb);
    return len;
}

/* Half-closes (when half_close) and returns the status, its details in
 * text. */
static grpc_status_code finish(grpc_call *call, int half_close, char *text, size_t len)
{
    grpc_metadata_array trailers;
    grpc_metadata_array_init(&trailers);
    grpc_status_code status;
    grpc_slice details;
    grpc_op ops_[2];
    size_t n = 0;
    memset(ops_, 0, sizeof ops_);
    if (half_close)
        ops_[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops_[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops_[n].data.recv_status_on_client.trailing_metadata = &trailers;
    ops_[n].data.recv_status_on_client.status = &status;
    ops_[n++].data.recv_status_on_client.status_details = &details;
    batch(call, ops_, n, (void *)4);
    snprintf(text, len, "%.*s", (int)GRPC_SLICE_LENGTH(details),
             (const char *)GRPC_SLICE_START_PTR(details));
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&trailers);
    return status;
}

/* The stream's close has run (it runs once the last batch completed). */
static int wait_closed(int n)
{
    for (int i = 0; i < 500 && atomic_load(&closed_ok) + atomic_load(&closed_broken) < n; i++)
        sleep_ms(10);
    return atomic_load(&closed_ok) + atomic_load(&closed_broken);
}

/* Ends call (half-closing it first when half_close) with status, its
 * session closed once as closed counts (closed_ok or closed_broken); the
 * server stopped. */
static void end_as(grpc_call *call, int half_close, grpc_status_code status, atomic_int *closed)
{
    char text[256];
    CU_ASSERT_EQUAL(finish(call, half_close, text, sizeof text), status);
    grpc_call_unref(call);
    CU_ASSERT_EQUAL(wait_closed(1), 1);
    CU_ASSERT_EQUAL(atomic_load(closed), 1);
    stop_server();
}

static void test_bounded_then_all_in_order(void)
{
    start_server();
    grpc_call *call = open_call();
    /* 32 messages of 2 replies each, 16 MiB in all, none read: the server
     * stops reading once 4 replies wait to be sent. */
    for (int m = 0; m < 32; m++)
        send_msg(call, 2, (uint8_t)(m * 2));
    sleep_ms(300);
    int stepped = atomic_load(&steps);
    /* 10 here: 4 replies queued, and the rest in gRPC's buffers and
     * HTTP/2 windows (about 4 MiB), then flow control holds the client. */
    CU_ASSERT(stepped >= 2 && stepped <= 16);
    for (int m = 0; m < 32; m++)
        for (int i = 0; i < 2; i++) {
            int first;
            CU_ASSERT_EQUAL(recv_msg(call, &first), (long)REPLY_BYTES);
            CU_ASSERT_EQUAL(first, (m * 2 + i) & 0xff);
        }
    CU_ASSERT_EQUAL(atomic_load(&steps), 32);
    end_as(call, 1, GRPC_STATUS_OK, &closed_ok);
}

static void test_failed_step_names_message(void)
{
    start_server();
    grpc_call *call = open_call();
    send_msg(call, 0, 0);
    send_msg(call, 255, 0);
    char text[256];
    CU_ASSERT_EQUAL(finish(call, 0, text, sizeof text), GRPC_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_STRING_EQUAL(text, "message 1: no such message");
    grpc_call_unref(call);
    CU_ASSERT_EQUAL(wait_closed(1), 1);
    CU_ASSERT_EQUAL(atomic_load(&closed_ok), 1);
    stop_server();
}

static void test_cancel_closes_once_broken(void)
{
    start_server();
    grpc_call *call = open_call();
    send_msg(call, 1, 7);
    sleep_ms(100);
    grpc_call_cancel(call, NULL);
    end_as(call, 0, GRPC_STATUS_CANCELLED, &closed_broken);
}

static void test_shutdown_ends_unavailable(void)
{
    start_server();
    grpc_call *call = open_call();
    send_msg(call, 0, 0);
    sleep_ms(100);
    long stuck = 0;
    cr_rpc_shutdown(server, 1, 0.5, &stuck);
    CU_ASSERT_EQUAL(stuck, 0);
    char text[256];
    CU_ASSERT_EQUAL(finish(call, 0, text, sizeof text), GRPC_STATUS_UNAVAILABLE);
    grpc_call_unref(call);
    CU_ASSERT_EQUAL(atomic_load(&opened), 1);
    CU_ASSERT_EQUAL(atomic_load(&closed_broken), 1);
    cr_rpc_free(server);
    grpc_channel_destroy(channel);
    grpc_completion_queue_shutdown(cq); /* every batch was plucked: nothing to drain */
    grpc_completion_queue_destroy(cq);
}

/* A message answered later: nothing until the wake from this thread, then
 * its reply, before the reply of a message sent after it; wakes asked
 * together are one or two steps, never a second reply. */
static void test_wake_answers_later(void)
{
    start_server();
    grpc_call *call = open_call();
    send_msg(call, 253, 0);
    sleep_ms(100);
    CU_ASSERT_EQUAL(atomic_load(&steps), 1);
    cr_duplex_call *self = atomic_load(&last_opened);
    CU_ASSERT_PTR_NOT_NULL_FATAL(self);
    cr_duplex_wake(self); /* the stream is open: its close waits for this test's finish */
    cr_duplex_wake(self);
    int first;
    CU_ASSERT_EQUAL(recv_msg(call, &first), (long)REPLY_BYTES);
    CU_ASSERT_EQUAL(first, 0xab);
    send_msg(call, 1, 5);
    CU_ASSERT_EQUAL(recv_msg(call, &first), (long)REPLY_BYTES);
    CU_ASSERT_EQUAL(first, 5);
    int w = atomic_load(&wakes);
    CU_ASSERT(w >= 1 && w <= 2);
    end_as(call, 1, GRPC_STATUS_OK, &closed_ok);
}

static const cr_test_case duplex_tests[] = {
    {"bounded, then every reply in order", test_bounded_then_all_in_order},
    {"a failed step names its message", test_failed_step_names_message},
    {"a cancel closes the session once, broken", test_cancel_closes_once_broken},
    {"shutdown ends an open stream UNAVAILABLE", test_shutdown_ends_unavailable},
    {"a wake answers later, in order", test_wake_answers_later},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"duplex", duplex_tests}};

int main(void)
{
    grpc_init();
    int rc = cr_run_suites(suites, 1);
    grpc_shutdown();
    return rc;
}
