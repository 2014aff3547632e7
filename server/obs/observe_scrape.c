/* The engines' /metrics scraper: a log line per shard's failures (the
 * scraper already limits them to one a minute a shard), and its counters
 * at scrape time. */
#include <stdio.h>

#include "log.h"
#include "observe.h"

static void report(void *ctx, const cr_scrape_report *r)
{
    (void)ctx;
    cr_log(CR_LOG_WARN, "engine scrape failed: the shard's load falls back to our own view",
           json_pack("{s:i,s:s,s:s,s:s,s:s,s:I}", "shard", (int)r->shard, "id", r->id, "url",
                     r->url, "reason", cr_scrape_reason_name(r->reason), "detail", r->detail,
                     "failures", (json_int_t)r->count));
}

void cr_observe_block_size(void *ctx, uint32_t shard, uint32_t block_size, uint32_t block_tokens)
{
    (void)ctx;
    cr_log(CR_LOG_WARN, "engine KV block size differs from --block-tokens",
           json_pack("{s:i,s:i,s:i}", "shard", (int)shard, "block_size", (int)block_size,
                     "block_tokens", (int)block_tokens));
}

cr_scrape_hooks cr_observe_scrape_hooks(cr_observer *o)
{
    return (cr_scrape_hooks){.report = report, .ctx = o};
}

#define ROW(field, name, type, help) CR_OBSERVE_ROW(cr_scrape_stats, field, name, type, help)
static const cr_observe_row rows[] = {
    ROW(rounds, "cacheroute_engine_scrape_rounds_total", "counter",
        "Rounds of scrapes of every active endpoint's /metrics (--scrape-interval)."),
    ROW(ok, "cacheroute_engine_scrapes_total", "counter",
        "Engine /metrics scraped, read and handed to the route rule."),
    ROW(last_round_s, "cacheroute_engine_scrape_round_seconds", "gauge",
        "How long the last round of scrapes took, seconds."),
};

void cr_observe_scrape_gauges(cr_scraper *s, cr_page *p)
{
    cr_scrape_stats st;
    cr_scrape_stats_read(s, &st);
    cr_observe_rows(p, rows, CR_OBSERVE_N(rows), &st);
    const char *name = "cacheroute_engine_scrape_failures_total";
    cr_page_family(p, name, "counter",
                   "Engine /metrics scrapes that failed, by reason: connect, timeout, too_big "
                   "(past --scrape-max-bytes), status (not 200), parse, refused (by the core).");
    for (int r = 0; r < CR_SCRAPE_N_REASONS; r++) {
        char label[48];
        snprintf(label, sizeof label, "reason=\"%s\"", cr_scrape_reason_name(r));
        cr_page_sample(p, name, label, (double)st.failed[r]);
    }
}
