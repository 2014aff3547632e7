/* The engine mode's /tokenize client (epp/tokenize.h) against a loopback
 * HTTP server of the test's own: one thread on 127.0.0.1, an ephemeral
 * port, one connection at a time, answering as the test says (it models
 * vLLM's /tokenize: POST a JSON body, answer {"tokens": [...]}). Covers a
 * good reply (and the request forwarded), a reply slower than the timeout,
 * a 500, garbage, a reply over CR_TOKENIZE_MAX_REPLY_BYTES, and the cache
 * (the server counts calls) with its bound, and four threads at once. No
 * speed is measured: the slow case only checks the call gives up within
 * its timeout and a generous slack. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "cunit_main.h"
#include "tokenize.h"

typedef enum answer { GOOD, SLOW, FAIL_500, GARBAGE, HUGE } answer;

static struct server {
    int fd;
    char address[64];
    pthread_t thread;
    pthread_mutex_t mu;
    answer answer; /* what the next request gets */
    int calls;
    char last[4096]; /* the last request's body (its start) */
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void send_all(int c, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(c, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

static void respond(int c, int status, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, strlen(body));
    send_all(c, head, (size_t)n);
    send_all(c, body, strlen(body));
}

/* Reads one request (headers, then Content-Length bytes); 0 on EOF. */
static int read_request(int c, char *body, size_t cap)
{
    static char buf[1 << 20];
    size_t len = 0;
    char *end = NULL;
    while (!end) {
        ssize_t k = recv(c, buf + len, sizeof buf - 1 - len, 0);
        if (k <= 0)
            return 0;
        len += (size_t)k;
        buf[len] = 0;
        end = strstr(buf, "\r\n\r\n");
    }
    size_t want = 0;
    for (char *h = buf; h && h < end; h = strstr(h, "\r\n"), h = h ? h + 2 : NULL)
        if (strncasecmp(h, "content-length:", 15) == 0)
            want = strtoul(h + 15, NULL, 10);
    size_t have = len - (size_t)(end + 4 - buf);
    while (have < want) {
        ssize_t k = recv(c, buf + len, sizeof buf - 1 - len, 0);
        if (k <= 0)
            return 0;
        len += (size_t)k;
        have += (size_t)k;
    }
    size_t n = want < cap - 1 ? want : cap - 1;
    memcpy(body, end + 4, n);
    body[n] = 0;
    return 1;
}

static void *serve(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(srv.fd, NULL, NULL);
        if (c < 0)
            return NULL; /* the listening socket was shut down */
        char body[4096];
        if (!read_request(c, body, sizeof body)) {
            close(c);
            continue;
        }
        pthread_mutex_lock(&srv.mu);
        answer a = srv.answer;
        srv.calls++;
        memcpy(srv.last, body, sizeof body);
        pthread_mutex_unlock(&srv.mu);
        if (a == GOOD) {
            respond(c, 200, "{\"count\":4,\"max_model_len\":8192,\"tokens\":[1,2,3,4000000000]}");
        } else if (a == SLOW) { /* until the client gives up (or 10 s) */
            struct pollfd p = {c, POLLIN, 0};
            poll(&p, 1, 10000);
            respond(c, 200, "{\"tokens\":[1]}");
        } else if (a == FAIL_500) {
            respond(c, 500, "{\"error\":\"boom\"}");
        } else if (a == GARBAGE) {
            respond(c, 200, "{\"tokens\": [1, 2,");
        } else { /* HUGE: more than the client takes */
            char head[256];
            size_t total = CR_TOKENIZE_MAX_REPLY_BYTES + (1u << 20);
            int n = snprintf(head, sizeof head,
                             "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                             total);
            send_all(c, head, (size_t)n);
            static char chunk[1 << 16];
            memset(chunk, ' ', sizeof chunk);
            for (size_t sent = 0; sent < total; sent += sizeof chunk)
                send_all(c, chunk, sizeof chunk);
        }
        close(c);
    }
}

static void server_start(void)
{
    srv.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (srv.fd < 0 || bind(srv.fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(srv.fd, 16) != 0 || getsockname(srv.fd, (struct sockaddr *)&a, &len) != 0 ||
        pthread_create(&srv.thread, NULL, serve, NULL) != 0) {
        perror("the test's HTTP server");
        exit(2);
    }
    snprintf(srv.address, sizeof srv.address, "127.0.0.1:%u", ntohs(a.sin_port));
}

static void server_stop(void)
{
    shutdown(srv.fd, SHUT_RDWR); /* accept() returns */
    pthread_join(srv.thread, NULL);
    close(srv.fd);
}

static void answer_with(answer a)
{
    pthread_mutex_lock(&srv.mu);
    srv.answer = a;
    pthread_mutex_unlock(&srv.mu);
}

static int calls(void)
{
    pthread_mutex_lock(&srv.mu);
    int n = srv.calls;
    pthread_mutex_unlock(&srv.mu);
    return n;
}

/* r and the body of a chat request for model */
static void chat(cr_openai_request *r, char *body, size_t cap, const char *model)
{
    snprintf(body, cap,
             "{\"model\":\"%s\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\xa9\"}]}",
             model);
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_openai_parse(CR_OPENAI_CHAT, (uint8_t *)body, strlen(body), r, &err),
                          CR_OK);
}

static cr_status tokenize(cr_tokenizer *t, const cr_openai_request *r, const char *body,
                          uint32_t **ids, size_t *n, cr_error *err)
{
    return cr_tokenize(t, srv.address, r, (const uint8_t *)body, strlen(body), ids, n, err);
}

static void test_good_and_cached(void)
{
    cr_tokenizer *t = cr_tokenizer_new(5.0); /* generous: a loaded machine still answers */
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    cr_openai_request r;
    char body[256];
    chat(&r, body, sizeof body, "llama");
    uint32_t *ids;
    size_t n;
    cr_error err;
    answer_with(GOOD);
    int before = calls();
    CU_ASSERT_EQUAL_FATAL(tokenize(t, &r, body, &ids, &n, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    CU_ASSERT_EQUAL(ids[0], 1);
    CU_ASSERT_EQUAL(ids[3], 4000000000u);
    free(ids);
    CU_ASSERT_EQUAL(calls(), before + 1);
    pthread_mutex_lock(&srv.mu);
    CU_ASSERT_STRING_EQUAL(srv.last,
                           "{\"model\":\"llama\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\xa9\"}]}");
    pthread_mutex_unlock(&srv.mu);

    /* the same prompt again: from the cache, the server not asked */
    CU_ASSERT_EQUAL_FATAL(tokenize(t, &r, body, &ids, &n, &err), CR_OK);
    CU_ASSERT_EQUAL(n, 4);
    CU_ASSERT_EQUAL(ids[3], 4000000000u);
    free(ids);
    CU_ASSERT_EQUAL(calls(), before + 1);
    uint64_t hits, failures;
    cr_tokenizer_counts(t, &hits, &failures);
    CU_ASSERT_EQUAL(hits, 1);
    CU_ASSERT_EQUAL(failures, 0);
    cr_openai_request_free(&r);

    /* another model, same messages: asked again */
    chat(&r, body, sizeof body, "mistral");
    CU_ASSERT_EQUAL(tokenize(t, &r, body, &ids, &n, &err), CR_OK);
    free(ids);
    CU_ASSERT_EQUAL(calls(), before + 2);
    cr_openai_request_free(&r);

    /* a completion's prompt is forwarded as "prompt" */
    const char *comp = "{\"model\":\"m\",\"prompt\":[\"ab\",\"c\"],\"max_tokens\":3}";
    CU_ASSERT_EQUAL_FATAL(
        cr_openai_parse(CR_OPENAI_COMPLETION, (const uint8_t *)comp, strlen(comp), &r, &err), CR_OK);
    CU_ASSERT_EQUAL(tokenize(t, &r, comp, &ids, &n, &err), CR_OK);
    free(ids);
    pthread_mutex_lock(&srv.mu);
    CU_ASSERT_STRING_EQUAL(srv.last, "{\"model\":\"m\",\"prompt\":[\"ab\",\"c\"]}");
    pthread_mutex_unlock(&srv.mu);
    cr_openai_request_free(&r);
    cr_tokenizer_free(t);
}

/* Each failure: CR_EINVAL, no ids, the message saying why, counted, and
 * nothing cached (the next good answer is asked for). */
static void check_failure(cr_tokenizer *t, answer a, const char *says)
{
    cr_openai_request r;
    char body[256];
    chat(&r, body, sizeof body, "failing");
    uint32_t *ids = (uint32_t *)1;
    size_t n = 7;
    cr_error err = {{0}};
    uint64_t hits, failures, failures_after;
    cr_tokenizer_counts(t, &hits, &failures);
    answer_with(a);
    double t0 = cr_mono_s();
    CU_ASSERT_EQUAL(tokenize(t, &r, body, &ids, &n, &err), CR_EINVAL);
    double took = cr_mono_s() - t0;
    CU_ASSERT_PTR_NULL(ids);
    CU_ASSERT_EQUAL(n, 0);
    if (!strstr(err.msg, says)) {
        fprintf(stderr, "\ngot \"%s\", want it to say \"%s\"\n", err.msg, says);
        CU_FAIL("wrong message");
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, srv.address));
    cr_tokenizer_counts(t, &hits, &failures_after);
    CU_ASSERT_EQUAL(failures_after, failures + 1);
    if (a == SLOW) /* gave up at its timeout (0.2 s), not the server's 10 s */
        CU_ASSERT(took < 0.2 + 3.0);
    cr_openai_request_free(&r);
}

static void test_failures(void)
{
    cr_tokenizer *t = cr_tokenizer_new(5.0), *quick = cr_tokenizer_new(0.2);
    CU_ASSERT_FATAL(t && quick);
    check_failure(t, FAIL_500, "answered status 500");
    check_failure(t, GARBAGE, "answered no JSON");
    check_failure(t, HUGE, "answered over 33554432 bytes");
    check_failure(quick, SLOW, "timed out after 200 ms");
    /* nothing failed was cached: the same prompt is asked for again */
    cr_openai_request r;
    char body[256];
    uint32_t *ids;
    size_t n;
    cr_error err;
    chat(&r, body, sizeof body, "failing");
    answer_with(GOOD);
    int before = calls();
    CU_ASSERT_EQUAL(tokenize(t, &r, body, &ids, &n, &err), CR_OK);
    CU_ASSERT_EQUAL(calls(), before + 1);
    free(ids);
    cr_openai_request_free(&r);
    cr_tokenizer_free(t);
    cr_tokenizer_free(quick);
}

/* More prompts than the cache keeps: the oldest goes, the newest stays. */
static void test_cache_bound(void)
{
    cr_tokenizer *t = cr_tokenizer_new(5.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    answer_with(GOOD);
    cr_openai_request r;
    char body[256], model[32];
    uint32_t *ids;
    size_t n;
    cr_error err;
    int before = calls(), failed = 0;
    for (int i = 0; i <= CR_TOKENIZE_CACHE_ENTRIES; i++) {
        snprintf(model, sizeof model, "m%d", i);
        chat(&r, body, sizeof body, model);
        failed += tokenize(t, &r, body, &ids, &n, &err) != CR_OK;
        free(ids);
        cr_openai_request_free(&r);
    }
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT_EQUAL(calls(), before + CR_TOKENIZE_CACHE_ENTRIES + 1);
    const char *again[] = {"m4096", "m0"}; /* the newest: a hit; the first: evicted */
    for (int i = 0; i < 2; i++) {
        chat(&r, body, sizeof body, again[i]);
        CU_ASSERT_EQUAL(tokenize(t, &r, body, &ids, &n, &err), CR_OK);
        free(ids);
        cr_openai_request_free(&r);
    }
    CU_ASSERT_EQUAL(calls(), before + CR_TOKENIZE_CACHE_ENTRIES + 2);
    uint64_t hits, failures;
    cr_tokenizer_counts(t, &hits, &failures);
    CU_ASSERT_EQUAL(hits, 1);
    cr_tokenizer_free(t);
}

/* Four threads on one tokenizer, five prompts between them: every call
 * answered, each from the server or the cache (for TSan). */
#define THREADS 4
#define CALLS 25

static void *caller(void *arg)
{
    cr_tokenizer *t = arg;
    int bad = 0;
    for (int i = 0; i < CALLS; i++) {
        cr_openai_request r;
        char body[256];
        uint32_t *ids;
        size_t n;
        cr_error err;
        snprintf(body, sizeof body,
                 "{\"model\":\"shared%d\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 i % 5); /* no CUnit assertion off the main thread: CUnit is not thread-safe */
        if (cr_openai_parse(CR_OPENAI_CHAT, (uint8_t *)body, strlen(body), &r, &err) != CR_OK) {
            bad++;
            continue;
        }
        bad += tokenize(t, &r, body, &ids, &n, &err) != CR_OK || n != 4;
        free(ids);
        cr_openai_request_free(&r);
    }
    return (void *)(intptr_t)bad;
}

static void test_threads(void)
{
    cr_tokenizer *t = cr_tokenizer_new(10.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    answer_with(GOOD);
    int before = calls();
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, caller, t) == 0);
    for (int i = 0; i < THREADS; i++) {
        void *bad;
        pthread_join(th[i], &bad);
        CU_ASSERT_EQUAL((intptr_t)bad, 0);
    }
    uint64_t hits, failures;
    cr_tokenizer_counts(t, &hits, &failures);
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT(calls() - before >= 5);
    CU_ASSERT_EQUAL(hits + (uint64_t)(calls() - before), THREADS * CALLS);
    cr_tokenizer_free(t);
}

static const cr_test_case tokenize_tests[] = {
    {"a good reply, forwarded request, cache hit", test_good_and_cached},
    {"500, garbage, too large, too slow", test_failures},
    {"the cache keeps the newest 4,096", test_cache_bound},
    {"four threads, one tokenizer", test_threads},
    {NULL, NULL}};

static const cr_test_suite suites[] = {{"tokenize", tokenize_tests}};

int main(void)
{
    server_start();
    int rc = cr_run_suites(suites, 1);
    server_stop();
    return rc;
}
