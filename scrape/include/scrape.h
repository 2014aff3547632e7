/* cacheroute scrape: the engines' own load, read from their /metrics. The
 * route rule predicts a shard's queue from the routes it made; an engine
 * that other traffic also reaches holds more than that, and what the
 * engine says of itself is how the rule sees it (route.h, "The engines'
 * own load"; docs/routing.md, "Engine load").
 *
 * Two parts:
 *   parse.c    the Prometheus text exposition format 0.0.4, read for the
 *              few families the rule uses. Debian 12 packages no C parser
 *              of it (prometheus-cpp is C++, and a client, not a parser),
 *              so this reads every line's syntax and keeps only the
 *              families of cr_scrape_engines' rows. Pure, allocation free.
 *   scraper.c  one thread (libcurl multi) that GETs each ACTIVE
 *              endpoint's /metrics every --scrape-interval and hands each
 *              parsed load to the core (cr_core_engine_load). Never on a
 *              request's path: a slow or garbage /metrics costs a failed
 *              scrape, counted, and nothing else.
 */
#ifndef CR_SCRAPE_H
#define CR_SCRAPE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "core.h"
#include "options.h"

/* ---- the names (parse.c) --------------------------------------------------
 *
 * One row per engine: the metric names it exposes for each field of
 * cr_engine_load (NULL: it has none). A new engine is one more row. */
typedef struct cr_scrape_names {
    const char *engine;       /* "vllm", "sglang": for docs and logs */
    const char *waiting;      /* requests queued (a gauge) */
    const char *running;      /* requests running (a gauge) */
    const char *kv_usage;     /* KV cache in use, 0..1 (a gauge) */
    const char *kv_usage_old; /* an older name of kv_usage, read only without it */
    const char *cache_config; /* info: labels block_size, num_gpu_blocks */
    const char *lora;         /* info: labels running_lora_adapters, waiting_lora_adapters
                               * (comma-separated names), max_lora; the value a time */
} cr_scrape_names;

extern const cr_scrape_names cr_scrape_engines[];
extern const size_t cr_scrape_n_engines;

#define CR_SCRAPE_LINE_MAX 65536 /* bytes of one line, '\n' excluded */
#define CR_SCRAPE_LABELS_MAX 64  /* labels on one sample */
#define CR_SCRAPE_VALUE_MAX 4096 /* bytes of a label value the parser keeps (unescaped) */

/* Reads len bytes of a /metrics body (the text format 0.0.4; a last line
 * without its '\n' is taken) into *out: every line must be a comment
 * (# HELP, # TYPE or any other), blank, or a sample `name{labels} value
 * [timestamp]` with names, label escapes (\\ \" \n) and numbers (NaN,
 * +Inf, -Inf included) as the format has them. Only the samples of
 * cr_scrape_engines' families are kept:
 *   waiting, running   summed over their label sets (an engine may expose
 *                      one per model_name, or per data-parallel engine)
 *   kv_usage           the mean over its label sets (a fraction), above 1
 *                      read as 1
 *   cache_config       block_size (every label set must agree) and
 *                      num_gpu_blocks (summed)
 *   lora               of the sample with the latest value (vLLM keeps one
 *                      a change, its value the time): max_lora and the
 *                      running and waiting adapters, deduplicated, at most
 *                      CR_ENGINE_LORA_MAX (a longer name is left out)
 * Fields not reported are NAN (counts) or 0 (sizes); at_s is left 0.
 * CR_EINVAL with err naming the line and why ("line 12: label value not
 * closed") for a syntax error, a line past CR_SCRAPE_LINE_MAX, a NUL byte,
 * a used family's sample that is negative or not finite, or a used label
 * value past CR_SCRAPE_VALUE_MAX; and ("no engine metrics: ...") for a body
 * that names none of the families. *out is then all unreported. Pure: no
 * allocation, at most a few KiB of stack. */
cr_status cr_scrape_parse(const char *body, size_t len, cr_engine_load *out, cr_error *err);

/* ---- the settings (options.c) ---------------------------------------------- */

typedef struct cr_scrape_config {
    /* --scrape-interval; 0 = off. Not a row of cr_scrape_options: the
     * route rule's (route.h, cr_route_config's scrape_interval_s), which
     * judges a load stale by it; the caller copies it here. */
    double interval_s;
    double timeout_s;  /* --scrape-timeout, one endpoint's GET; 0 = the interval */
    char *path;        /* --scrape-path, starts with '/' */
    uint32_t port;     /* --scrape-port; 0 = the endpoint address's own */
    uint64_t max_bytes; /* --scrape-max-bytes, one body */
} cr_scrape_config;

/* The rows (group "scrape"): --scrape-timeout (0: the interval),
 * --scrape-path ("/metrics"), --scrape-port (0), --scrape-max-bytes
 * (1 MiB). */
extern const cr_option_table cr_scrape_options;

/* The timeout a scrape gets: timeout_s, or the interval when 0. Pure. */
double cr_scrape_timeout(const cr_scrape_config *cfg);

/* The URL of an endpoint's /metrics into buf (size bytes): address is
 * ip:port, [v6]:port, host, or a URL (http:// or https://, its path
 * dropped); port, when not 0, replaces the address's; path is appended.
 * -1 when it does not fit or the address has no host. Pure. */
int cr_scrape_url(const char *address, uint32_t port, const char *path, char *buf, size_t size);

/* 1 when address (as cr_scrape_url reads it) names an IPv4 or [IPv6]
 * literal, 0 for a host name or no host. Only such addresses are scraped:
 * a host name would have libcurl's threaded resolver look it up, and a
 * scrape abandoned mid-lookup (its timeout, a stop) leaves that thread
 * unjoined, a thread's stack lost a round (TSan's thread leak). Pure. */
int cr_scrape_names_ip(const char *address);

/* ---- the scraper (scraper.c) ------------------------------------------------- */

/* Why a scrape failed. */
typedef enum cr_scrape_reason {
    CR_SCRAPE_CONNECT, /* no answer: refused, reset, any transport error, or an
                        * address naming a host (only IP literals are scraped:
                        * libcurl's resolver would leave a thread per
                        * abandoned lookup) */
    CR_SCRAPE_TIMEOUT, /* no whole answer within the timeout */
    CR_SCRAPE_TOO_BIG, /* a body past --scrape-max-bytes: aborted */
    CR_SCRAPE_STATUS,  /* an HTTP status other than 200 */
    CR_SCRAPE_PARSE,   /* a body cr_scrape_parse refuses */
    CR_SCRAPE_REFUSED, /* a load the core refused (cr_core_engine_load) */
    CR_SCRAPE_N_REASONS
} cr_scrape_reason;

/* "connect", "timeout", "too_big", "status", "parse", "refused": stable
 * names (metrics, logs). */
const char *cr_scrape_reason_name(cr_scrape_reason r);

#define CR_SCRAPE_LOG_S 60.0 /* a shard's failures reported at most this often */
#define CR_SCRAPE_MAX_ENDPOINTS CR_ENDPOINTS_MAX

/* A failed scrape, for logs: called on the scraper's thread, at most once
 * a CR_SCRAPE_LOG_S per shard (count: its failures since the last
 * report); must not block. */
typedef struct cr_scrape_report {
    uint32_t shard;
    const char *id, *url; /* valid for the call */
    cr_scrape_reason reason;
    const char *detail;   /* curl's or the parser's words */
    uint64_t count;
} cr_scrape_report;

typedef struct cr_scrape_hooks {
    void (*report)(void *ctx, const cr_scrape_report *r);
    void *ctx;
} cr_scrape_hooks;

typedef struct cr_scraper cr_scraper;

/* Starts the thread: every interval (counted from the end of the last
 * round, so a slow round never piles up), one GET per ACTIVE endpoint of
 * cr_core_endpoints, all at once, each within the timeout and max_bytes;
 * each parsed load stamped cr_core_now and given to
 * cr_core_engine_load. NULL with no error when the interval is 0 (off);
 * NULL with err when curl or the thread cannot start. cfg is copied;
 * core and hooks->ctx must outlive the scraper; hooks may be NULL. */
cr_scraper *cr_scrape_start(const cr_scrape_config *cfg, cr_core *core,
                            const cr_scrape_hooks *hooks, cr_error *err);

/* Stops the thread (a round in progress is cut short: its transfers are
 * abandoned), frees. NULL ignored. Call before freeing the core. */
void cr_scrape_stop(cr_scraper *s);

/* Figures since start. */
typedef struct cr_scrape_stats {
    uint64_t rounds;                        /* rounds run */
    uint64_t ok;                            /* loads handed to the core */
    uint64_t failed[CR_SCRAPE_N_REASONS];   /* by reason */
    double last_round_s;                    /* the last round's length, seconds */
} cr_scrape_stats;

/* Copies the figures; zeros for NULL. Thread-safe. */
void cr_scrape_stats_read(cr_scraper *s, cr_scrape_stats *out);

#endif
