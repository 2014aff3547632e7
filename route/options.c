/* The route rule's option rows: each setting's flag, default, bounds and
 * help, once. */
#include <stddef.h>

#include "route.h"

#define AT(field) offsetof(cr_route_config, field)

static const char *const ROUTE_BY[] = {"plan", "bounded", "live", "ttft", NULL}; /* cr_route_by's */
static const char *const OFF_ON[] = {"off", "on", NULL};

static const cr_option ROWS[] = {
    {.name = "route-by", .key = "route_by", .type = CR_OPT_CHOICE, .offset = AT(by),
     .def_text = "ttft", .choices = ROUTE_BY,
     .help = "RecordArrival's and Route's rule: plan (the preferred shard, else owner mod R), "
             "bounded (affinity unless the shard's outstanding work exceeds --load-bound x the "
             "mean, then the session's next shard, then its ring), live (least outstanding "
             "work) or ttft (the least predicted queue wait + --miss-weight x prefill, from "
             "the prefix index and the calibrated model)"},
    {.name = "load-bound", .key = "load_bound", .type = CR_OPT_DOUBLE, .offset = AT(load_bound),
     .def = 1.25, .min = 1, .max = 100,
     .help = "--route-by bounded: a shard takes a route while its outstanding work is at "
             "most this times the mean"},
    {.name = "inflight-ttl", .key = "inflight_ttl_s", .type = CR_OPT_DOUBLE,
     .offset = AT(inflight_ttl_s), .def = 60, .min = 0, .max = 86400, .flags = CR_OPT_MIN_OPEN,
     .help = "--route-by bounded, live or ttft: seconds after which a route's work counts as "
             "done when no ReportOutcome released it"},
    {.name = "inflight-max", .key = "inflight_max", .type = CR_OPT_U64,
     .offset = AT(inflight_max), .def = 100000, .min = 1, .max = CR_ROUTE_MAX_INFLIGHT,
     .help = "--route-by bounded, live or ttft: outstanding routes tracked at most (56 B "
             "each, allocated up front; ttft 16 B more for its sessions), the oldest counted "
             "as done first"},
    {.name = "inflight-per-caller", .key = "inflight_per_caller", .type = CR_OPT_U64,
     .offset = AT(inflight_per_caller), .def = 0, .min = 0, .max = CR_ROUTE_MAX_INFLIGHT,
     .help = "once authorization is on: outstanding routes one client identity may hold; "
             "past it its routes are answered and add no work (0 = a quarter of "
             "--inflight-max)"},
    {.name = "block-tokens", .key = "block_tokens", .type = CR_OPT_U32,
     .offset = AT(block_tokens), .def = 16, .min = 1, .max = 1u << 20,
     .help = "Route: the tokens each block hash stands for (the engine's KV block size)"},
    {.name = "index-blocks", .key = "index_blocks", .type = CR_OPT_U32,
     .offset = AT(index_blocks), .def = 131072, .min = 1, .max = CR_ROUTE_MAX_INDEX_BLOCKS,
     .help = "Route: the blocks the prefix index keeps per shard (set it to a shard's KV "
             "cache in blocks); at most 36 B each, allocated as blocks come"},
    {.name = "max-route-hashes", .key = "max_route_hashes", .type = CR_OPT_U32,
     .offset = AT(max_hashes), .def = 8192, .min = 1, .max = CR_ROUTE_MAX_HASHES,
     .help = "Route: block hashes one request may carry (more is INVALID_ARGUMENT)"},
    {.name = "miss-weight", .key = "miss_weight", .type = CR_OPT_DOUBLE,
     .offset = AT(miss_weight), .def = 32, .min = 1, .max = 1000,
     .help = "--route-by ttft: how many times a request's predicted prefill counts against "
             "its predicted queue wait (1: its own TTFT; more: the work a miss adds for the "
             "requests behind it), for a prefix of its own; less for one many share"},
    {.name = "route-planned", .key = "route_planned", .type = CR_OPT_CHOICE,
     .offset = AT(planned), .def_text = "off", .choices = OFF_ON,
     .help = "--route-by ttft: on sends an owner the plan admits to the least predicted "
             "TTFT among its planned shards only"},
    {.name = "scrape-interval", .key = "scrape_interval_s", .type = CR_OPT_DOUBLE,
     .offset = AT(scrape_interval_s), .def = 0.1, .min = 0, .max = 3600,
     .help = "seconds between scrapes of every active endpoint's engine /metrics (vLLM's, "
             "SGLang's queue, KV cache, blocks, LoRA adapters), counted from the end of the "
             "last round; --route-by ttft ignores an engine's load older than twice this "
             "(docs/routing.md, \"Engine load\"); 0 = off"},
};

const cr_option_table cr_route_options = CR_OPTION_TABLE("", ROWS);
