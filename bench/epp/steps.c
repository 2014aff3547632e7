/* cacheroute-epp-steps: the endpoint picker's own CPU time per request, by
 * step, with no gRPC: what epp_bench.sh's server CPU per request is made
 * of besides the transport (bench/README.md, "EPP: requests through the
 * picker, against a no-op ext_proc").
 *
 * A core with 8 endpoints on the defaults and a picker as the sidecar
 * makes one (estimate tokens, full duplex, 2 fallbacks, owner header
 * x-session-id); each request is the load driver's own messages
 * (load_msgs.c: the same conversations, chunks and SSE answer) stepped
 * through cr_epp_stream_step in order, the responses freed, the stream
 * closed. Each step's time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
 * around it, so other programs on a shared machine slow it only through
 * the caches.
 *
 * With --request-only (last) the stream closes after the request phase,
 * as the driver's --request-only run does.
 *
 *   cacheroute-epp-steps [--body-bytes N] [--requests N] [--conversations N] [--request-only] */
#include <grpc/grpc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "epp.h"
#include "load_msgs.h"

enum { S_OPEN, S_HEADERS, S_CHUNK, S_DECIDE, S_RESP_HEADERS, S_RESP_BODY, S_CLOSE, N_STEPS };
static const char *const step_name[N_STEPS] = {
    "open", "request headers", "body chunks but the last", "last body chunk (decision)",
    "response headers", "response body chunks", "close (outcome)"};

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static cr_epp_out out; /* large: not on the stack */

/* Steps one message; exits on anything but CR_EPP_MORE. */
static void step(cr_epp_stream *s, grpc_slice m, double *acc)
{
    cr_error err = {0};
    double t0 = thread_cpu();
    cr_epp_next n = cr_epp_stream_step(s, GRPC_SLICE_START_PTR(m), GRPC_SLICE_LENGTH(m), mono(),
                                       &out, &err);
    cr_epp_out_clear(&out);
    *acc += thread_cpu() - t0;
    if (n != CR_EPP_MORE) {
        fprintf(stderr, "cacheroute-epp-steps: a step answered %d: %s\n", (int)n, err.msg);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    size_t body_bytes = 225280;
    unsigned requests = 2000, convs = 16;
    int request_only = argc > 1 && !strcmp(argv[argc - 1], "--request-only");
    argc -= request_only;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--body-bytes"))
            body_bytes = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--requests"))
            requests = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--conversations"))
            convs = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--body-bytes N] [--requests N] [--conversations N]\n", argv[0]);
            return 2;
        }
    }
    if (argc % 2 == 0 || !requests || !convs || convs > 64 || body_bytes < 64) {
        fprintf(stderr, "usage: %s [--body-bytes N] [--requests N] [--conversations 1..64]\n", argv[0]);
        return 2;
    }
    grpc_init();
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cr_error err = {0};
    cr_core *core = cr_core_new(&cfg, NULL, NULL, &err);
    if (!core) {
        fprintf(stderr, "core: %s\n", err.msg);
        return 1;
    }
    char ids[8][16], addrs[8][32];
    cr_endpoint_spec eps[8];
    for (int i = 0; i < 8; i++) {
        snprintf(ids[i], sizeof ids[i], "engine-%d", i);
        snprintf(addrs[i], sizeof addrs[i], "10.0.0.%d:8000", i + 1);
        eps[i] = (cr_endpoint_spec){.id = ids[i], .address = addrs[i], .weight = 1};
    }
    if (cr_core_set_endpoints(core, eps, 8, NULL, &err) != CR_OK) {
        fprintf(stderr, "endpoints: %s\n", err.msg);
        return 1;
    }
    cr_epp_config ec = {.fallbacks = 2, .owner_header = "x-session-id",
                        .max_body_bytes = 4u << 20, .tokens = CR_EPP_TOKENS_ESTIMATE,
                        .tokenize_timeout_s = 0.05, .body_mode = CR_EPP_FULL_DUPLEX,
                        .block_tokens = cfg.route.block_tokens, .max_hashes = 65536,
                        .max_requests = 10000, .max_buffered_bytes = 1ull << 32};
    cr_epp *e = cr_epp_new(&ec, core, &err);
    if (!e) {
        fprintf(stderr, "picker: %s\n", err.msg);
        return 1;
    }
    epp_conv conv[64];
    epp_conv_opts co = {.body_bytes = body_bytes, .chunk_bytes = 16384, .sse_chunks = 8};
    for (unsigned i = 0; i < convs; i++)
        if (epp_conv_make(&conv[i], i, &co))
            return 1;

    double acc[N_STEPS] = {0}, *decide = malloc(requests * sizeof *decide);
    if (!decide)
        return 1;
    unsigned warm = requests / 10;
    for (unsigned r = 0; r < warm + requests; r++) {
        const epp_conv *c = &conv[r % convs];
        double a[N_STEPS] = {0}, t0 = thread_cpu();
        cr_epp_stream *s = cr_epp_stream_open(e, 0, mono());
        a[S_OPEN] = thread_cpu() - t0;
        if (!s)
            return 1;
        for (size_t k = 0; k < c->n_req; k++)
            step(s, c->req[k], &a[k == 0 ? S_HEADERS : k + 1 < c->n_req ? S_CHUNK : S_DECIDE]);
        for (size_t k = 0; k < (request_only ? 0 : c->n_resp); k++)
            step(s, c->resp[k], &a[k == 0 ? S_RESP_HEADERS : S_RESP_BODY]);
        t0 = thread_cpu();
        cr_epp_stream_close(s, CR_EPP_END_CLOSED, mono());
        a[S_CLOSE] = thread_cpu() - t0;
        if (r < warm)
            continue;
        for (int k = 0; k < N_STEPS; k++)
            acc[k] += a[k];
        decide[r - warm] = a[S_DECIDE];
    }
    cr_epp_stats st;
    cr_epp_stats_read(e, &st);
    qsort(decide, requests, sizeof *decide, cmp_double);
    double total = 0;
    printf("cacheroute-epp-steps: body %zu B (%zu request messages, %zu response), %u requests "
           "after %u warm-up, %u conversations; routed %llu\n",
           conv[0].body_bytes, conv[0].n_req, conv[0].n_resp, requests, warm, convs,
           (unsigned long long)st.routed);
    for (int k = 0; k < N_STEPS; k++) {
        printf("  %-28s %9.1f us/request\n", step_name[k], acc[k] * 1e6 / requests);
        total += acc[k];
    }
    printf("  %-28s %9.1f us/request\n", "all", total * 1e6 / requests);
    printf("  decision step p50 %.1f us, p99 %.1f us\n", decide[requests / 2] * 1e6,
           decide[(size_t)(0.99 * requests)] * 1e6);
    for (unsigned i = 0; i < convs; i++)
        epp_conv_free(&conv[i]);
    free(decide);
    cr_epp_free(e);
    cr_core_free(core);
    grpc_shutdown();
    return 0;
}
