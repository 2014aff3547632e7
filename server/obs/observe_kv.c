/* The KV-event subscriber's reports: log lines (the subscriber already
 * limits drops to one report a minute a shard), and its figures by shard at
 * scrape time. */
#include <stddef.h>

#include "log.h"
#include "observe.h"

static void report(void *ctx, const cr_kv_report *r)
{
    (void)ctx;
    switch (r->kind) {
    case CR_KV_REPORT_DROPPED:
        cr_log(CR_LOG_WARN, "kv events dropped",
               json_pack("{s:i,s:I,s:s}", "shard", (int)r->shard, "dropped",
                         (json_int_t)r->count, "reason", r->detail));
        break;
    case CR_KV_REPORT_REPLAYED:
        cr_log(CR_LOG_INFO, "kv events replayed",
               json_pack("{s:i,s:I,s:I,s:I}", "shard", (int)r->shard, "batches",
                         (json_int_t)r->count, "first_seq", (json_int_t)r->first, "last_seq",
                         (json_int_t)r->last));
        break;
    case CR_KV_REPORT_SUBSCRIBED:
    case CR_KV_REPORT_UNSUBSCRIBED:
        cr_log(CR_LOG_INFO, r->kind == CR_KV_REPORT_SUBSCRIBED ? "kv events subscribed"
                                                               : "kv events unsubscribed",
               json_pack("{s:i,s:I,s:s}", "shard", (int)r->shard, "rank", (json_int_t)r->first,
                         "endpoint", r->detail));
        break;
    case CR_KV_REPORT_REFUSED:
        cr_log(CR_LOG_WARN, "kv events links not opened",
               json_pack("{s:I,s:s}", "links", (json_int_t)r->count, "reason", r->detail));
        break;
    default:
        cr_log(CR_LOG_WARN, "kv events view reset: the shard's index is emptied",
               json_pack("{s:i,s:s}", "shard", (int)r->shard, "reason", r->detail));
    }
}

cr_kv_hooks cr_observe_kv_hooks(cr_observer *o)
{
    return (cr_kv_hooks){.report = report, .ctx = o};
}

/* One family, a sample a shard: the field at offset of each cr_kv_stats. */
static void by_shard(cr_page *p, const cr_kv_stats *st, size_t n, const char *name,
                     const char *type, const char *help, size_t offset)
{
    cr_page_family(p, name, type, help);
    for (size_t i = 0; i < n; i++)
        cr_observe_shard(p, name, st[i].shard,
                         (double)*(const uint64_t *)((const char *)&st[i] + offset));
}

void cr_observe_kv_gauges(cr_kv_subscriber *kv, cr_page *p)
{
    static const struct {
        const char *name, *help;
        size_t offset;
    } COUNTERS[] = {
        {"cacheroute_kv_event_batches_total",
         "KV-event messages received live from the shard's engine, applied or dropped.",
         offsetof(cr_kv_stats, batches)},
        {"cacheroute_kv_events_applied_total",
         "KV events (stored, removed, cleared) applied to the shard's prefix index.",
         offsetof(cr_kv_stats, applied)},
        {"cacheroute_kv_events_dropped_total",
         "KV-event messages dropped whole: malformed, or refused by the index.",
         offsetof(cr_kv_stats, dropped)},
        {"cacheroute_kv_replayed_batches_total",
         "KV-event batches applied from the engine's replay socket to fill seq gaps.",
         offsetof(cr_kv_stats, replayed)},
        {"cacheroute_kv_gaps_total", "Gaps in the shard's KV-event seq, replayed or not.",
         offsetof(cr_kv_stats, gaps)},
        {"cacheroute_kv_resets_total",
         "Times the shard's index was emptied: a gap no replay covered, a publisher "
         "restart, or a dropped link.",
         offsetof(cr_kv_stats, resets)},
        {"cacheroute_kv_reconnects_total",
         "Times the shard's link to its engine dropped (a frame over "
         "--kv-events-max-frame-bytes, the engine gone) and was re-opened.",
         offsetof(cr_kv_stats, reconnects)},
    };
    cr_kv_stats st[CR_KV_MAX_LINKS]; /* a link a shard at most */
    size_t n = cr_kv_stats_read(kv, st, CR_KV_MAX_LINKS);
    if (n == 0)
        return; /* no family while nothing is subscribed */
    for (size_t k = 0; k < sizeof COUNTERS / sizeof COUNTERS[0]; k++)
        by_shard(p, st, n, COUNTERS[k].name, "counter", COUNTERS[k].help, COUNTERS[k].offset);
    const char *age = "cacheroute_kv_last_event_age_seconds";
    double now = cr_mono_s();
    cr_page_family(p, age, "gauge",
                   "Seconds since the shard's last KV-event batch was applied; -1 before the "
                   "first.");
    for (size_t i = 0; i < n; i++)
        cr_observe_shard(p, age, st[i].shard,
                         st[i].last_event_s < 0 ? -1 : now - st[i].last_event_s);
}
