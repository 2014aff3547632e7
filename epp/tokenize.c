/* The engine mode's tokenizer (tokenize.h): vLLM's /tokenize over libcurl.
 *
 * The request forwards the body's own "messages" (or "prompt") as cJSON
 * reads and prints it, with the model; that printed request is also the
 * cache's key (XXH3-128 and its length), so equal prompts to different
 * models never share token ids. The cache is a ring of recent prompts,
 * the oldest evicted first, bounded in entries and in token bytes, behind
 * one mutex with the pool of easy handles (kept so that connections to the
 * engines stay open between calls). */
#include <cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tokenize.h"

#define POOL 16                 /* idle easy handles kept */
#define BUCKETS 8192            /* hash heads, a power of 2 >= the entries */
#define NONE UINT32_MAX

typedef struct entry {
    XXH128_hash_t key;
    size_t len; /* the printed request's bytes: part of the key */
    uint32_t *ids;
    size_t n;   /* 0 with ids NULL: a free slot */
    uint32_t next; /* the bucket's next entry, NONE at the end */
} entry;

struct cr_tokenizer {
    long timeout_ms;
    pthread_mutex_t mu;
    entry entries[CR_TOKENIZE_CACHE_ENTRIES];
    uint32_t heads[BUCKETS];
    uint32_t oldest; /* the ring's next slot to fill */
    size_t bytes;    /* the cached ids' bytes */
    CURL *idle[POOL];
    int n_idle;
    uint64_t hits, failures;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_started = CURLE_FAILED_INIT;
static void curl_start(void) { curl_started = curl_global_init(CURL_GLOBAL_DEFAULT); }

cr_tokenizer *cr_tokenizer_new(double timeout_s)
{
    pthread_once(&curl_once, curl_start);
    if (curl_started != CURLE_OK)
        return NULL;
    cr_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->timeout_ms = timeout_s * 1e3 >= 1 ? (long)(timeout_s * 1e3) : 1;
    pthread_mutex_init(&t->mu, NULL);
    for (size_t i = 0; i < BUCKETS; i++)
        t->heads[i] = NONE;
    return t;
}

void cr_tokenizer_free(cr_tokenizer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < CR_TOKENIZE_CACHE_ENTRIES; i++)
        free(t->entries[i].ids);
    for (int i = 0; i < t->n_idle; i++)
        curl_easy_cleanup(t->idle[i]);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void cr_tokenizer_counts(cr_tokenizer *t, uint64_t *hits, uint64_t *failures)
{
    pthread_mutex_lock(&t->mu);
    *hits = t->hits;
    *failures = t->failures;
    pthread_mutex_unlock(&t->mu);
}

/* ---- the cache (under mu) ------------------------------------------------ */

static uint32_t *bucket(cr_tokenizer *t, XXH128_hash_t key)
{
    return &t->heads[key.low64 & (BUCKETS - 1)];
}

static entry *find(cr_tokenizer *t, XXH128_hash_t key, size_t len)
{
    for (uint32_t e = *bucket(t, key); e != NONE; e = t->entries[e].next) {
        entry *x = &t->entries[e];
        if (XXH128_isEqual(x->key, key) && x->len == len)
            return x;
    }
    return NULL;
}

static void evict(cr_tokenizer *t, uint32_t e)
{
    entry *x = &t->entries[e];
    uint32_t *at = bucket(t, x->key);
    while (*at != e)
        at = &t->entries[*at].next;
    *at = x->next;
    t->bytes -= x->n * sizeof *x->ids;
    free(x->ids);
    memset(x, 0, sizeof *x);
}

/* Keeps ids (taken over: freed when not kept) under key. */
static void remember(cr_tokenizer *t, XXH128_hash_t key, size_t len, uint32_t *ids, size_t n)
{
    size_t need = n * sizeof *ids;
    if (!n || need > CR_TOKENIZE_CACHE_BYTES || find(t, key, len)) {
        free(ids);
        return;
    }
    for (;;) { /* the oldest go first, until the slot and the bytes are free */
        if (t->entries[t->oldest].ids)
            evict(t, t->oldest);
        if (t->bytes + need <= CR_TOKENIZE_CACHE_BYTES)
            break;
        t->oldest = (t->oldest + 1) % CR_TOKENIZE_CACHE_ENTRIES;
    }
    entry *x = &t->entries[t->oldest];
    *x = (entry){key, len, ids, n, *bucket(t, key)};
    *bucket(t, key) = t->oldest;
    t->bytes += need;
    t->oldest = (t->oldest + 1) % CR_TOKENIZE_CACHE_ENTRIES;
}

/* A copy of the cached ids of key, or 0. */
static int recall(cr_tokenizer *t, XXH128_hash_t key, size_t len, uint32_t **ids, size_t *n,
                  cr_status *st, cr_error *err)
{
    pthread_mutex_lock(&t->mu);
    entry *x = find(t, key, len);
    if (x) {
        *ids = malloc(x->n * sizeof **ids);
        *st = *ids ? CR_OK : cr_fail(err, CR_ENOMEM, "out of memory for %zu token ids", x->n);
        if (*ids) {
            memcpy(*ids, x->ids, x->n * sizeof **ids);
            *n = x->n;
            t->hits++;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return x != NULL;
}

/* ---- the request and its reply ------------------------------------------- */

/* {"model": ..., "messages" or "prompt": the body's own} printed, or NULL. */
static char *request_of(const cr_openai_request *r, const uint8_t *body, size_t len,
                        cr_error *err)
{
    const char *field = r->kind == CR_OPENAI_CHAT ? "messages" : "prompt";
    if (cr_openai_check(body, len, err) != CR_OK) /* the parser then recurses at most 64 deep */
        return NULL;
    cJSON *root = cJSON_ParseWithLength((const char *)body, len);
    cJSON *prompt = cJSON_DetachItemFromObjectCaseSensitive(root, field);
    cJSON *req = cJSON_CreateObject();
    char *out = NULL;
    if (prompt && req && cJSON_AddStringToObject(req, "model", r->model)) {
        cJSON_AddItemToObject(req, field, prompt);
        prompt = NULL;
        out = cJSON_PrintUnformatted(req);
    }
    if (!out)
        cr_fail(err, CR_EINVAL, "the body has no %s to tokenize, or memory ran out", field);
    cJSON_Delete(prompt);
    cJSON_Delete(req);
    cJSON_Delete(root);
    return out;
}

typedef struct reply {
    char *data;
    size_t len, cap;
    int too_large;
} reply;

static size_t gather(char *data, size_t size, size_t n, void *ctx)
{
    reply *r = ctx;
    size_t k = size * n;
    if (r->len + k > CR_TOKENIZE_MAX_REPLY_BYTES) {
        r->too_large = 1;
        return 0; /* libcurl stops with CURLE_WRITE_ERROR */
    }
    if (r->len + k + 1 > r->cap) {
        size_t cap = (r->len + k + 1) * 2;
        char *p = realloc(r->data, cap);
        if (!p)
            return 0;
        r->data = p;
        r->cap = cap;
    }
    memcpy(r->data + r->len, data, k);
    r->len += k;
    return k;
}

/* The ids of address's reply {"tokens": [...]}. */
static cr_status ids_of(const reply *rep, const char *address, uint32_t **ids, size_t *n,
                        cr_error *err)
{
    cr_error why;
    cJSON *root = NULL;
    if (cr_openai_check((const uint8_t *)rep->data, rep->len, &why) == CR_OK) /* bounded depth */
        root = cJSON_ParseWithLength(rep->data, rep->len);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *v;
    cr_status st = CR_OK;
    size_t k = 0, count = (size_t)cJSON_GetArraySize(tokens);
    if (!root) {
        st = cr_fail(err, CR_EINVAL, "tokenize at %s answered no JSON", address);
    } else if (!cJSON_IsArray(tokens) || !count) {
        st = cr_fail(err, CR_EINVAL, "tokenize at %s answered no \"tokens\" list", address);
    } else if (!(*ids = malloc(count * sizeof **ids))) {
        st = cr_fail(err, CR_ENOMEM, "out of memory for %zu token ids", count);
    } else {
        cJSON_ArrayForEach(v, tokens)
        {
            double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
            if (!(d >= 0 && d <= 4294967295.0 && d == (double)(uint32_t)d)) {
                st = cr_fail(err, CR_EINVAL, "tokenize at %s answered tokens[%zu], no token id",
                             address, k);
                free(*ids);
                *ids = NULL;
                break;
            }
            (*ids)[k++] = (uint32_t)d;
        }
        *n = k;
    }
    cJSON_Delete(root);
    return st;
}

static CURL *take_handle(cr_tokenizer *t)
{
    pthread_mutex_lock(&t->mu);
    CURL *c = t->n_idle ? t->idle[--t->n_idle] : NULL;
    pthread_mutex_unlock(&t->mu);
    return c ? c : curl_easy_init();
}

static void give_handle(cr_tokenizer *t, CURL *c)
{
    curl_easy_reset(c); /* options go, the connection stays */
    pthread_mutex_lock(&t->mu);
    if (t->n_idle < POOL) {
        t->idle[t->n_idle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    if (c)
        curl_easy_cleanup(c);
}

/* POSTs req to address's /tokenize: CR_OK with the reply, or why not. */
static cr_status post(cr_tokenizer *t, const char *address, const char *req, reply *rep,
                      cr_error *err)
{
    char url[512];
    if ((size_t)snprintf(url, sizeof url, "http://%s/tokenize", address) >= sizeof url)
        return cr_fail(err, CR_EINVAL, "the endpoint address is over %zu bytes", sizeof url - 32);
    CURL *c = take_handle(t);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *h2 = headers ? curl_slist_append(headers, "Expect:") : NULL;
    if (!c || !h2) {
        curl_slist_free_all(headers);
        if (c)
            curl_easy_cleanup(c);
        return cr_fail(err, CR_ENOMEM, "out of memory for a /tokenize call");
    }
    headers = h2;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, t->timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, req);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(req));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gather);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, rep);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    give_handle(t, c);
    if (rep->too_large)
        return cr_fail(err, CR_EINVAL, "tokenize at %s answered over %u bytes", address,
                       CR_TOKENIZE_MAX_REPLY_BYTES);
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return cr_fail(err, CR_EINVAL, "tokenize at %s timed out after %ld ms", address,
                       t->timeout_ms);
    if (rc != CURLE_OK)
        return cr_fail(err, CR_EINVAL, "tokenize at %s failed: %s", address,
                       curl_easy_strerror(rc));
    if (status != 200)
        return cr_fail(err, CR_EINVAL, "tokenize at %s answered status %ld", address, status);
    return CR_OK;
}

cr_status cr_tokenize(cr_tokenizer *t, const char *address, const cr_openai_request *r,
                      const uint8_t *body, size_t len, uint32_t **ids, size_t *n,
                      cr_error *err)
{
    *ids = NULL;
    *n = 0;
    cr_status st = CR_EINVAL;
    char *req = request_of(r, body, len, err);
    if (req) {
        size_t req_len = strlen(req);
        XXH128_hash_t key = XXH3_128bits(req, req_len);
        if (!recall(t, key, req_len, ids, n, &st, err)) {
            reply rep = {0};
            st = post(t, address, req, &rep, err);
            if (st == CR_OK)
                st = ids_of(&rep, address, ids, n, err);
            free(rep.data);
            uint32_t *kept = st == CR_OK ? malloc(*n * sizeof *kept) : NULL;
            if (kept)
                memcpy(kept, *ids, *n * sizeof *kept);
            pthread_mutex_lock(&t->mu);
            if (kept)
                remember(t, key, req_len, kept, *n);
            pthread_mutex_unlock(&t->mu);
        }
        cJSON_free(req);
    }
    if (st != CR_OK) {
        pthread_mutex_lock(&t->mu);
        t->failures++;
        pthread_mutex_unlock(&t->mu);
    }
    return st;
}
