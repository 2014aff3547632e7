/* The route rule's figures at scrape time (cr_core_route_stats_read):
 * routes by reason, outstanding work, the prefix index, and how far its
 * hit predictions were from what engines reported, with and without KV
 * events. */
#include <stdio.h>

#include "observe.h"

static void routes_by_reason(const cr_route_stats *st, cr_page *p)
{
    const char *name = "cacheroute_routes_placed_total";
    char label[48];
    cr_page_family(p, name, "counter",
                   "Requests placed one at a time (Route; RecordArrival under --route-by ttft), "
                   "by reason.");
    for (int w = 0; w < CR_ROUTE_N_WHY; w++) {
        snprintf(label, sizeof label, "reason=\"%s\"", cr_route_reason_name((cr_route_reason)w));
        cr_page_sample(p, name, label, (double)st->placed[w]);
    }
}

/* One family, a sample for shards with KV events and one for those without. */
static void by_events(cr_page *p, const char *name, const char *help, const double v[2])
{
    cr_page_family(p, name, "counter", help);
    cr_page_sample(p, name, "kv_events=\"no\"", v[0]);
    cr_page_sample(p, name, "kv_events=\"yes\"", v[1]);
}

/* Each shard's outstanding work: its predicted queue. At most
 * CR_ROUTE_INDEX_MAX_SHARDS samples, so a scrape stays small. */
static void work_by_shard(const cr_route_stats *st, const double *work, cr_page *p)
{
    const char *name = "cacheroute_route_outstanding_work";
    cr_page_family(p, name, "gauge",
                   "Outstanding work routed to the shard: predicted prefill ms under --route-by "
                   "ttft, the arrivals' weights under bounded and live.");
    for (uint32_t s = 0; s < st->n_shards && s < CR_ROUTE_INDEX_MAX_SHARDS; s++)
        cr_observe_shard(p, name, s, work[s]);
}

#define ROW(field, name, type, help) CR_OBSERVE_ROW(cr_route_stats, field, name, type, help)
static const cr_observe_row route_rows[] = {
    ROW(outstanding, "cacheroute_route_outstanding", "gauge",
        "Routes whose predicted work is still counted against their shard."),
    ROW(refused, "cacheroute_route_refused_total", "counter",
        "Routes answered whose work was not counted: their client identity at "
        "--inflight-per-caller, or the oldest route at --inflight-max another "
        "identity's."),
    ROW(index_blocks, "cacheroute_route_index_blocks", "gauge",
        "Blocks the prefix index holds over all shards."),
    ROW(index_cpu_blocks, "cacheroute_route_index_cpu_blocks", "gauge",
        "Blocks the CPU tier's index holds over all shards (KV events with "
        "medium CPU: engines' offloaded blocks)."),
    ROW(index_bytes, "cacheroute_route_index_bytes", "gauge",
        "Memory of the prefix index now (both tiers)."),
    ROW(engine_loads, "cacheroute_route_engine_loads_total", "counter",
        "Engines' scraped loads the route rule took (docs/routing.md, \"Engine load\")."),
    ROW(engine_stale, "cacheroute_route_engine_loads_stale_total", "counter",
        "Engines' loads a route found older than 2 x --scrape-interval and ignored from "
        "then on (the shard weighed by cacheroute's own view), once per load."),
    ROW(engine_block_mismatch, "cacheroute_route_engine_block_size_mismatch_total", "counter",
        "Engines whose KV block size disagreed with --block-tokens, once per engine in "
        "its slot (each logged)."),
};
#undef ROW

void cr_observe_route_gauges(cr_core *core, cr_page *p)
{
    cr_route_stats st;
    double work[CR_ROUTE_INDEX_MAX_SHARDS];
    cr_core_route_stats_read(core, &st, work, CR_ROUTE_INDEX_MAX_SHARDS);
    routes_by_reason(&st, p);
    work_by_shard(&st, work, p);
    cr_observe_rows(p, route_rows, CR_OBSERVE_N(route_rows), &st);
    double checked[2] = {(double)st.hit_checked[0], (double)st.hit_checked[1]};
    by_events(p, "cacheroute_route_hit_predictions_checked_total",
              "Outcomes with cached_tokens for a Route with a request_id, by whether its "
              "shard's engine had sent KV events.", checked);
    by_events(p, "cacheroute_route_hit_prediction_error_tokens_total",
              "Sum of |reported - predicted| cached tokens over those outcomes (divided by "
              "the checked count: the mean error).", st.hit_error_tokens);
}
