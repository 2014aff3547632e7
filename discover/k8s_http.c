/* The Kubernetes watcher's HTTP client: libcurl, one easy handle (the
 * connection kept), the bearer token re-read for each request, answers
 * and watch lines bounded before they are kept. */
#include <curl/curl.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"

#define TOKEN_MAX 65536 /* bytes of a token file (a projected token is ~1 KB) */
#define CONNECT_S 10

/* Where the answer goes while it arrives. */
typedef struct sink {
    CURL *curl;
    char *buf;
    size_t len, room, max;
    k8s_line_fn line; /* NULL: keep it all */
    void *ctx;
    int too_long, ended; /* ended: line asked to stop */
} sink;

static int keep(sink *s, const char *data, size_t n)
{
    if (s->len + n > s->max) {
        s->too_long = 1;
        return -1;
    }
    if (s->len + n + 1 > s->room) {
        size_t room = s->room ? s->room : 16384;
        while (room < s->len + n + 1)
            room *= 2;
        char *b = realloc(s->buf, room);
        if (!b)
            return -1;
        s->buf = b;
        s->room = room;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return 0;
}

/* Each complete line handed on; the rest kept for the next bytes. */
static int lines(sink *s)
{
    size_t from = 0;
    char *nl;
    while (!s->ended && (nl = memchr(s->buf + from, '\n', s->len - from))) {
        *nl = '\0';
        size_t n = (size_t)(nl - (s->buf + from));
        if (n && s->line(s->ctx, s->buf + from, n))
            s->ended = 1;
        from += n + 1;
    }
    memmove(s->buf, s->buf + from, s->len - from);
    s->len -= from;
    if (s->room)
        s->buf[s->len] = '\0';
    return s->ended ? -1 : 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ctx)
{
    sink *s = ctx;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
    if (keep(s, data, n) != 0)
        return 0;
    if (s->line && status == 200 && lines(s) != 0)
        return 0;
    return n;
}

/* The end of a 200 answer's headers opens a watch: line hears of it. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *ctx)
{
    sink *s = ctx;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
    if (s->line && status == 200 && n <= 2 && (data[0] == '\r' || data[0] == '\n') &&
        s->line(s->ctx, NULL, 0))
        s->ended = 1;
    return s->ended ? 0 : n;
}

static int on_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    return atomic_load((atomic_int *)ctx) != 0;
}

/* "Authorization: Bearer TOKEN" from the token file, trimmed. */
static struct curl_slist *auth_headers(const char *token_file, cr_error *err)
{
    char *tok;
    size_t len;
    if (cr_file_read(token_file, token_file, TOKEN_MAX, &tok, &len, err) != CR_OK)
        return NULL;
    while (len && isspace((unsigned char)tok[len - 1]))
        tok[--len] = '\0';
    char *line = malloc(len + 32);
    struct curl_slist *h = NULL;
    if (line) {
        snprintf(line, len + 32, "Authorization: Bearer %s", tok);
        h = curl_slist_append(NULL, line);
        struct curl_slist *h2 = h ? curl_slist_append(h, "Accept: application/json") : NULL;
        if (!h2) {
            curl_slist_free_all(h);
            h = NULL;
        }
    }
    free(line);
    free(tok);
    if (!h)
        cr_fail(err, CR_ENOMEM, "out of memory for a Kubernetes request");
    return h;
}

cr_status k8s_http_get(k8s_http *h, const char *path, long timeout_s, k8s_line_fn line,
                       void *ctx, char **body, long *status, cr_error *err)
{
    *body = NULL;
    *status = 0;
    if (!h->curl && !(h->curl = curl_easy_init()))
        return cr_fail(err, CR_ENOMEM, "cannot make a curl handle");
    struct curl_slist *hdr = auth_headers(h->token_file, err);
    if (!hdr)
        return CR_EINVAL;
    size_t urlen = strlen(h->base) + strlen(path) + 1;
    char *url = malloc(urlen);
    if (!url) {
        curl_slist_free_all(hdr);
        return cr_fail(err, CR_ENOMEM, "out of memory for a Kubernetes request");
    }
    snprintf(url, urlen, "%s%s", h->base, path);
    CURL *c = h->curl;
    sink s = {.curl = c, .max = line ? CR_K8S_MAX_LINE : CR_K8S_MAX_BODY, .line = line,
              .ctx = ctx};
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_S);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, h->stop);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hdr);
    cr_status st = CR_OK;
    if (s.too_long)
        st = cr_fail(err, CR_EINVAL, "GET %s: %s longer than %zu bytes", path,
                     line ? "a watch event" : "the answer", s.max);
    else if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && s.ended))
        st = cr_fail(err, CR_EINVAL, "GET %s: %s", path, curl_easy_strerror(rc));
    free(url);
    if (st == CR_OK && (!line || *status != 200) && !s.buf && keep(&s, "", 0) != 0)
        st = cr_fail(err, CR_ENOMEM, "out of memory for a Kubernetes answer");
    if (st == CR_OK && (!line || *status != 200))
        *body = s.buf;
    else
        free(s.buf);
    return st;
}

cr_status k8s_http_escape(k8s_http *h, const char *value, char *out, size_t cap, cr_error *err)
{
    if (!h->curl && !(h->curl = curl_easy_init()))
        return cr_fail(err, CR_ENOMEM, "cannot make a curl handle");
    char *e = curl_easy_escape(h->curl, value, 0);
    int fits = e && strlen(e) < cap;
    if (fits)
        memcpy(out, e, strlen(e) + 1);
    curl_free(e);
    return fits ? CR_OK : cr_fail(err, CR_EINVAL, "the pool's selector is too long");
}
