/* The scraper (scrape.h): one ticker thread, one libcurl multi handle. A
 * round GETs every ACTIVE endpoint's /metrics at once, each within the
 * timeout and the body bound, and hands each parsed load to the core.
 *
 * A slot (shard) keeps its easy handle and body buffer between rounds, so
 * that the multi handle's connection cache keeps each engine's connection
 * open (a scrape every 100 ms would otherwise open as many); a buffer past
 * KEEP_BYTES is freed after its round, so that the memory held stays near
 * the engines' usual body sizes rather than the bound. */
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scrape.h"

#define KEEP_BYTES (256u << 10) /* a body buffer kept between rounds, at most */
#define URL_MAX (CR_ENDPOINT_ADDRESS_MAX + 1100) /* scheme, address, port, --scrape-path */
#define POLL_MS 50 /* a stop cuts a round short within this */

typedef struct slot {
    CURL *easy;
    char *body;
    size_t len, cap;
    uint64_t max;            /* --scrape-max-bytes */
    int too_big;             /* the body passed the bound: aborted */
    char url[URL_MAX];
    char id[CR_ENDPOINT_ID_MAX + 1];
    uint64_t unreported;     /* failures since the last report */
    double reported_s;       /* cr_mono_s of the last report; 0 = never */
    char error[CURL_ERROR_SIZE];
} slot;

struct cr_scraper {
    cr_scrape_config cfg;
    char path[1025];
    cr_core *core;
    cr_scrape_hooks hooks;
    CURLM *multi;
    struct curl_slist *accept; /* the request's Accept header */
    cr_ticker *ticker;
    atomic_int stopping;
    slot *slots; /* CR_SCRAPE_MAX_ENDPOINTS */
    _Atomic uint64_t rounds, ok, failed[CR_SCRAPE_N_REASONS];
    _Atomic double last_round_s;
};

static const char *const REASONS[CR_SCRAPE_N_REASONS] = {"connect", "timeout", "too_big",
                                                         "status",  "parse",   "refused"};

const char *cr_scrape_reason_name(cr_scrape_reason r)
{
    return (unsigned)r < CR_SCRAPE_N_REASONS ? REASONS[r] : "unknown";
}

/* curl's write callback: the body into the slot, until the bound. */
static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    slot *sl = ctx;
    size_t bytes = size * n;
    if (sl->len + bytes > sl->max) {
        sl->too_big = 1;
        return 0; /* CURLE_WRITE_ERROR: the transfer ends */
    }
    if (sl->len + bytes > sl->cap) {
        size_t cap = sl->cap ? sl->cap : 16384;
        while (cap < sl->len + bytes)
            cap *= 2;
        char *grown = realloc(sl->body, cap);
        if (!grown)
            return 0;
        sl->body = grown;
        sl->cap = cap;
    }
    memcpy(sl->body + sl->len, data, bytes);
    sl->len += bytes;
    return bytes;
}

/* The easy handle's settings that never change. */
static CURL *new_easy(const cr_scraper *s)
{
    CURL *e = curl_easy_init();
    if (!e)
        return NULL;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*"); /* the engines are the pod's own network */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->accept);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    return e;
}

/* Counts one failure of slot sl (shard) and reports it when its shard's
 * report is due. */
static void failed(cr_scraper *s, slot *sl, uint32_t shard, cr_scrape_reason why,
                   const char *detail)
{
    atomic_fetch_add(&s->failed[why], 1);
    sl->unreported++;
    double now = cr_mono_s();
    if (!s->hooks.report || (sl->reported_s && now - sl->reported_s < CR_SCRAPE_LOG_S))
        return;
    cr_scrape_report r = {shard, sl->id, sl->url, why, detail, sl->unreported};
    s->hooks.report(s->hooks.ctx, &r);
    sl->reported_s = now;
    sl->unreported = 0;
}

/* Why a finished transfer of slot sl failed (CR_SCRAPE_N_REASONS: it did
 * not), in words into why (size bytes) when it did. */
static cr_scrape_reason transfer_failure(const slot *sl, CURLcode rc, char *why, size_t size)
{
    long status = 0;
    curl_easy_getinfo(sl->easy, CURLINFO_RESPONSE_CODE, &status);
    const char *words = sl->error[0] ? sl->error : curl_easy_strerror(rc);
    cr_scrape_reason r = CR_SCRAPE_N_REASONS;
    if (sl->too_big || rc == CURLE_FILESIZE_EXCEEDED) {
        r = CR_SCRAPE_TOO_BIG;
        words = "body past --scrape-max-bytes";
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        r = CR_SCRAPE_TIMEOUT;
    } else if (rc != CURLE_OK) {
        r = CR_SCRAPE_CONNECT;
    } else if (status != 200) {
        snprintf(why, size, "HTTP status %ld", status);
        return CR_SCRAPE_STATUS;
    }
    snprintf(why, size, "%s", words);
    return r;
}

/* A finished transfer of slot shard: its load to the core, or a failure. */
static void finished(cr_scraper *s, uint32_t shard, CURLcode rc)
{
    slot *sl = &s->slots[shard];
    char why[CURL_ERROR_SIZE];
    cr_scrape_reason r = transfer_failure(sl, rc, why, sizeof why);
    cr_engine_load load;
    cr_error err;
    if (r != CR_SCRAPE_N_REASONS) {
        failed(s, sl, shard, r, why);
    } else if (cr_scrape_parse(sl->body, sl->len, &load, &err) != CR_OK) {
        failed(s, sl, shard, CR_SCRAPE_PARSE, err.msg);
    } else if (load.at_s = cr_core_now(s->core),
               cr_core_engine_load(s->core, shard, &load, &err) != CR_OK) {
        failed(s, sl, shard, CR_SCRAPE_REFUSED, err.msg);
    } else {
        atomic_fetch_add(&s->ok, 1);
    }
}

/* Readies slot shard's transfer to url; 0, -1 when curl cannot, -2 for an
 * address that names a host rather than an IP (cr_scrape_names_ip). */
static int prepare(cr_scraper *s, uint32_t shard, const cr_endpoint *ep)
{
    slot *sl = &s->slots[shard];
    if (!sl->easy && !(sl->easy = new_easy(s)))
        return -1;
    if (cr_scrape_url(ep->address, s->cfg.port, s->path, sl->url, sizeof sl->url) != 0)
        return -1;
    memcpy(sl->id, ep->id, sizeof sl->id);
    if (!cr_scrape_names_ip(ep->address))
        return -2;
    sl->len = 0;
    sl->too_big = 0;
    sl->error[0] = '\0';
    long timeout_ms = lround(cr_scrape_timeout(&s->cfg) * 1e3);
    sl->max = s->cfg.max_bytes;
    curl_easy_setopt(sl->easy, CURLOPT_URL, sl->url);
    curl_easy_setopt(sl->easy, CURLOPT_WRITEDATA, sl);
    curl_easy_setopt(sl->easy, CURLOPT_PRIVATE, (void *)(uintptr_t)shard);
    curl_easy_setopt(sl->easy, CURLOPT_ERRORBUFFER, sl->error);
    curl_easy_setopt(sl->easy, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(sl->easy, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(sl->easy, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)s->cfg.max_bytes);
    return curl_multi_add_handle(s->multi, sl->easy) == CURLM_OK ? 0 : -1;
}

/* Drives the round's transfers until all are done or a stop. */
static void drive(cr_scraper *s)
{
    int running = 1;
    while (running && !atomic_load(&s->stopping)) {
        if (curl_multi_perform(s->multi, &running) != CURLM_OK)
            break;
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(s->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            void *shard;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &shard);
            CURLcode rc = m->data.result;
            curl_multi_remove_handle(s->multi, m->easy_handle);
            finished(s, (uint32_t)(uintptr_t)shard, rc);
        }
        if (running)
            curl_multi_poll(s->multi, NULL, 0, POLL_MS, NULL);
    }
}

/* One round: every ACTIVE endpoint of the core's current set. */
static void round_once(void *ctx, cr_ticker *t)
{
    (void)t;
    cr_scraper *s = ctx;
    const cr_endpoints *set = cr_core_endpoints(s->core);
    if (!set)
        return;
    double start = cr_mono_s();
    uint32_t n = set->n_slots < CR_SCRAPE_MAX_ENDPOINTS ? set->n_slots : CR_SCRAPE_MAX_ENDPOINTS;
    for (uint32_t i = 0; i < n; i++) {
        int rc = set->slot[i].state == CR_ENDPOINT_ACTIVE ? prepare(s, i, &set->slot[i]) : 0;
        if (rc != 0)
            failed(s, &s->slots[i], i, CR_SCRAPE_CONNECT,
                   rc == -2 ? "the address names a host: only ip:port addresses are scraped"
                            : "cannot make the request");
    }
    cr_endpoints_release(set);
    drive(s);
    for (uint32_t i = 0; i < CR_SCRAPE_MAX_ENDPOINTS; i++) {
        slot *sl = &s->slots[i];
        if (sl->easy)
            curl_multi_remove_handle(s->multi, sl->easy); /* a stop's abandoned ones */
        if (sl->cap > KEEP_BYTES) {
            free(sl->body);
            sl->body = NULL;
            sl->cap = sl->len = 0;
        }
    }
    atomic_fetch_add(&s->rounds, 1);
    atomic_store(&s->last_round_s, cr_mono_s() - start);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_started = CURLE_FAILED_INIT;
static void curl_start(void) { curl_started = curl_global_init(CURL_GLOBAL_DEFAULT); }

static void free_scraper(cr_scraper *s)
{
    for (uint32_t i = 0; s->slots && i < CR_SCRAPE_MAX_ENDPOINTS; i++) {
        if (s->slots[i].easy)
            curl_easy_cleanup(s->slots[i].easy);
        free(s->slots[i].body);
    }
    free(s->slots);
    curl_slist_free_all(s->accept);
    if (s->multi)
        curl_multi_cleanup(s->multi);
    free(s);
}

cr_scraper *cr_scrape_start(const cr_scrape_config *cfg, cr_core *core,
                            const cr_scrape_hooks *hooks, cr_error *err)
{
    if (cfg->interval_s <= 0)
        return NULL;
    pthread_once(&curl_once, curl_start);
    if (curl_started != CURLE_OK) {
        cr_fail(err, CR_EINVAL, "scrape: libcurl cannot start");
        return NULL;
    }
    cr_scraper *s = calloc(1, sizeof *s);
    if (!s || !(s->slots = calloc(CR_SCRAPE_MAX_ENDPOINTS, sizeof *s->slots)) ||
        !(s->multi = curl_multi_init()) ||
        /* the text format 0.0.4, not OpenMetrics, which prometheus_client
         * serves to a scraper that asks for it */
        !(s->accept = curl_slist_append(NULL, "Accept: text/plain;version=0.0.4"))) {
        if (s)
            free_scraper(s);
        cr_fail(err, CR_ENOMEM, "scrape: out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    snprintf(s->path, sizeof s->path, "%s", cfg->path ? cfg->path : "/metrics");
    s->cfg.path = s->path;
    s->core = core;
    if (hooks)
        s->hooks = *hooks;
    if (!(s->ticker = cr_ticker_start(cfg->interval_s, round_once, s, err))) {
        free_scraper(s);
        return NULL;
    }
    return s;
}

void cr_scrape_stop(cr_scraper *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1);
    curl_multi_wakeup(s->multi);
    cr_ticker_stop(s->ticker);
    free_scraper(s);
}

void cr_scrape_stats_read(cr_scraper *s, cr_scrape_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    out->rounds = atomic_load(&s->rounds);
    out->ok = atomic_load(&s->ok);
    for (int r = 0; r < CR_SCRAPE_N_REASONS; r++)
        out->failed[r] = atomic_load(&s->failed[r]);
    out->last_round_s = atomic_load(&s->last_round_s);
}
