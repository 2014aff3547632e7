/* The EPP's JSON library, chosen by measurement (issue 31): json-c, jansson
 * and cJSON (Debian 12's libjson-c-dev 0.16, libjansson-dev 2.14,
 * libcjson-dev 1.7.15) each parse OpenAI chat bodies of 1 KB, 32 KB and
 * 220 KB (many messages; contents with escapes, \u escapes and raw
 * non-ASCII UTF-8) and walk to what the picker reads (model,
 * messages[].role and .content, user, stream, max_tokens), then free the
 * tree. json-c and jansson share symbol names (json_object_get, ...), so
 * each library gets its own program built from this file (EPP_JSON_LIB 1
 * json-c, 2 jansson, 3 cJSON: epp_json_jsonc, epp_json_jansson,
 * epp_json_cjson). One sample is one body's parse + walk + free; each
 * program also times, interleaved sample by sample with its library, a
 * pass over the body that checks UTF-8 and nesting depth (what a library
 * that checks neither itself would need first), which doubles as the
 * control for a shared machine's noise between the programs. Last, each
 * says how its library answers invalid UTF-8 and deep nesting.
 *
 * usage: epp_json_<lib> [--iters N (samples at 220 KB; 7x at 32 KB, 100x at 1 KB)=500] */
#if EPP_JSON_LIB == 1
#include <json.h>
#elif EPP_JSON_LIB == 2
#include <jansson.h>
#elif EPP_JSON_LIB == 3
#include <cJSON.h>
#else
#error "EPP_JSON_LIB must be 1 (json-c), 2 (jansson) or 3 (cJSON)"
#endif
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "openai.h"

#define DEPTH CR_OPENAI_MAX_DEPTH

/* ---- bodies ------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            exit(1);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* Words of a chat: plain, JSON-escaped, \u-escaped and raw UTF-8 (2, 3 and
 * 4 byte sequences), as JSON string text. */
static const char *const WORDS[] = {
    "the", "cache", "prefix", "router", "model", "answer", "tokens", "function",
    "return", "value", "\\\"quoted\\\"", "line\\n", "tab\\t", "C:\\\\path", "caf\\u00e9",
    "café", "naïve", "日本語", "Ελληνικά", "🙂", "{\\\"k\\\": [1, 2]}", "résumé", "int",
    "x = y + 1;", "// comment", "<b>bold</b>", "self.assertEqual(a, b)", "€100",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

static uint64_t rng = 42;
static uint32_t rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng >> 33) % n;
}

/* A chat body of about target bytes: a system message, then user and
 * assistant turns of 40..1,500 bytes each. */
static buf chat_body(size_t target)
{
    static const char *const roles[] = {"user", "assistant"};
    buf b = {0};
    puts_(&b, "{\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"messages\":[");
    puts_(&b, "{\"role\":\"system\",\"content\":\"You are a helpful assistant.\\nAnswer briefly.\"}");
    for (int turn = 0; b.len + 120 < target; turn++) {
        puts_(&b, ",{\"role\":\"");
        puts_(&b, roles[turn % 2]);
        puts_(&b, "\",\"content\":\"");
        size_t want = 40 + rnd(1460), start = b.len;
        while (b.len - start < want && b.len + 100 < target) {
            puts_(&b, WORDS[rnd(N_WORDS)]);
            puts_(&b, " ");
        }
        puts_(&b, "\"}");
    }
    puts_(&b, "],\"user\":\"user-1234\",\"stream\":true,\"max_tokens\":512}");
    return b;
}

/* ---- one parse + walk per library ---------------------------------------- */

/* Each returns the bytes of the strings walked (so nothing is optimized
 * away), or (size_t)-1 when the body was refused. */

#if EPP_JSON_LIB == 1
#define LIB_NAME "json-c"
static size_t walk_lib(const char *s, size_t n)
{
    struct json_tokener *tok = json_tokener_new_ex(DEPTH);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, s, (int)n);
    int bad = json_tokener_get_error(tok) != json_tokener_success;
    json_tokener_free(tok);
    if (bad || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return (size_t)-1;
    }
    size_t sum = 0;
    json_object *v, *msgs;
    if (json_object_object_get_ex(root, "model", &v))
        sum += (size_t)json_object_get_string_len(v);
    if (json_object_object_get_ex(root, "user", &v))
        sum += (size_t)json_object_get_string_len(v);
    if (json_object_object_get_ex(root, "stream", &v))
        sum += (size_t)json_object_get_boolean(v);
    if (json_object_object_get_ex(root, "max_tokens", &v))
        sum += (size_t)json_object_get_int64(v);
    if (json_object_object_get_ex(root, "messages", &msgs)) {
        size_t m = json_object_array_length(msgs);
        for (size_t i = 0; i < m; i++) {
            json_object *msg = json_object_array_get_idx(msgs, i);
            if (json_object_object_get_ex(msg, "role", &v))
                sum += (size_t)json_object_get_string_len(v);
            if (json_object_object_get_ex(msg, "content", &v))
                sum += (size_t)json_object_get_string_len(v);
        }
    }
    json_object_put(root);
    return sum;
}

#elif EPP_JSON_LIB == 2
#define LIB_NAME "jansson"
static size_t walk_lib(const char *s, size_t n)
{
    json_error_t e;
    json_t *root = json_loadb(s, n, 0, &e);
    if (!json_is_object(root)) {
        json_decref(root);
        return (size_t)-1;
    }
    size_t sum = json_string_length(json_object_get(root, "model")) +
                 json_string_length(json_object_get(root, "user")) +
                 (size_t)json_is_true(json_object_get(root, "stream")) +
                 (size_t)json_integer_value(json_object_get(root, "max_tokens"));
    json_t *msgs = json_object_get(root, "messages");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *msg = json_array_get(msgs, i);
        sum += json_string_length(json_object_get(msg, "role")) +
               json_string_length(json_object_get(msg, "content"));
    }
    json_decref(root);
    return sum;
}

#else
#define LIB_NAME "cJSON"
static size_t walk_lib(const char *s, size_t n)
{
    cJSON *root = cJSON_ParseWithLength(s, n);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return (size_t)-1;
    }
    size_t sum = 0;
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (cJSON_IsString(v))
        sum += strlen(v->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(root, "user");
    if (cJSON_IsString(v))
        sum += strlen(v->valuestring);
    sum += (size_t)cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "stream"));
    v = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    if (cJSON_IsNumber(v))
        sum += (size_t)v->valuedouble;
    cJSON *msg;
    cJSON_ArrayForEach(msg, cJSON_GetObjectItemCaseSensitive(root, "messages"))
    {
        v = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (cJSON_IsString(v))
            sum += strlen(v->valuestring);
        v = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (cJSON_IsString(v))
            sum += strlen(v->valuestring);
    }
    cJSON_Delete(root);
    return sum;
}
#endif

/* What a library that checks neither UTF-8 nor depth itself needs first:
 * the picker's own pass (cr_openai_check: RFC 3629's well-formed
 * sequences; brackets outside strings at most 64 deep; ASCII string runs
 * eight bytes at a time). Returns 0, or (size_t)-1 when refused. */
static size_t walk_scan(const char *s, size_t n)
{
    cr_error err;
    return cr_openai_check((const uint8_t *)s, n, &err) == CR_OK ? 0 : (size_t)-1;
}

typedef size_t (*walker)(const char *, size_t);
static const struct {
    const char *name;
    walker fn;
} LIBS[] = {
    {LIB_NAME, walk_lib},
    {"scan (UTF-8 + depth)", walk_scan},
};
#define N_LIBS (sizeof LIBS / sizeof LIBS[0])

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(size_t target, uint64_t iters)
{
    buf b = chat_body(target);
    double *t[N_LIBS];
    for (size_t l = 0; l < N_LIBS; l++) {
        t[l] = malloc(iters * sizeof(double));
        if (!t[l] || LIBS[l].fn(b.p, b.len) == (size_t)-1) {
            fprintf(stderr, "%s refused the %zu-byte body\n", LIBS[l].name, b.len);
            exit(1);
        }
    }
    volatile size_t sink = 0;
    for (uint64_t i = 0; i < iters; i++)
        for (size_t l = 0; l < N_LIBS; l++) {
            double t0 = bench_now();
            sink += LIBS[l].fn(b.p, b.len);
            t[l][i] = (bench_now() - t0) * 1e6;
        }
    (void)sink;
    for (size_t l = 0; l < N_LIBS; l++) {
        qsort(t[l], iters, sizeof(double), cmp_double);
        printf("| %zu | %s | %.1f | %.1f | %.0f |\n", b.len, LIBS[l].name, t[l][iters / 2],
               t[l][iters * 99 / 100], (double)b.len / t[l][iters / 2]);
        free(t[l]);
    }
    free(b.p);
}

/* ---- refusals ------------------------------------------------------------ */

static void refusals(void)
{
    static const struct {
        const char *what, *body;
    } bad[] = {
        {"byte 0xff in a string", "{\"model\":\"m\xff\"}"},
        {"overlong '/' (C0 AF)", "{\"model\":\"m\xc0\xaf\"}"},
        {"UTF-16 surrogate (ED A0 80)", "{\"model\":\"m\xed\xa0\x80\"}"},
        {"truncated sequence (E6 97)", "{\"model\":\"m\xe6\x97\"}"},
        {"lone \\ud800 escape", "{\"model\":\"m\\ud800\"}"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        printf("| %s |", bad[i].what);
        for (size_t l = 0; l < N_LIBS; l++)
            printf(" %s |", LIBS[l].fn(bad[i].body, strlen(bad[i].body)) == (size_t)-1
                                ? "refused"
                                : "accepted");
        printf("\n");
    }
    for (size_t deep = DEPTH; deep <= 100000; deep = deep == DEPTH ? DEPTH + 1 : deep == DEPTH + 1 ? 1000 : deep * 10) {
        /* {"m": then deep - 1 arrays, closed: an object deep levels deep */
        size_t len = 5 + 2 * (deep - 1) + 1;
        char *s = malloc(len);
        memcpy(s, "{\"m\":", 5);
        memset(s + 5, '[', deep - 1);
        memset(s + 5 + deep - 1, ']', deep - 1);
        s[len - 1] = '}';
        printf("| an object %zu deep |", deep);
        for (size_t l = 0; l < N_LIBS; l++) {
            double t0 = bench_now();
            int refused = LIBS[l].fn(s, len) == (size_t)-1;
            printf(" %s in %.0f us |", refused ? "refused" : "ACCEPTED", (bench_now() - t0) * 1e6);
        }
        printf("\n");
        free(s);
    }
}

int main(int argc, char **argv)
{
    uint64_t iters = bench_flag(argc, argv, "--iters", 500);
    printf("| body bytes | library | median us | p99 us | MB/s (median) |\n|---|---|---|---|---|\n");
    measure(1024, iters * 100);
    measure(32 * 1024, iters * 7);
    measure(220 * 1024, iters);
    printf("\n| input |");
    for (size_t l = 0; l < N_LIBS; l++)
        printf(" %s |", LIBS[l].name);
    printf("\n|---|---|---|\n");
    refusals();
    return 0;
}
