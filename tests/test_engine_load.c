/* The engines' own load (route.h, "The engines' own load";
 * docs/routing.md, "Engine load") on the core, in virtual time, with the
 * prefill model of test_ttft.c (1 ms a prompt token, nothing fixed), so
 * each prediction is worked out in the case: a scraped queue of requests
 * the router did not send moves a prefix off its shard, the router's own
 * requests are not counted twice; a load past two scrape intervals is
 * ignored and counted once; gpu_blocks bounds a shard's prefix index
 * (converted by block_size, at most --index-blocks) and a block size
 * other than --block-tokens is reported once; an adapter's request
 * prefers a shard that has it loaded or a free slot; a bad load is
 * refused naming its field, nothing kept; a scraper thread and routing
 * threads at once (the TSan pass). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "core_config.h"
#include "cunit_main.h"
#include "route.h"

#define SHARDS 4
#define BT 16 /* --block-tokens */

typedef struct fixture {
    double t; /* the core's clock, seconds */
    cr_core *core;
    int mismatches;                  /* hooks.block_size calls */
    uint32_t mismatch_shard, mismatch_size;
} fixture;

static double now_of(void *ctx) { return ((fixture *)ctx)->t; }

static void on_block_size(void *ctx, uint32_t shard, uint32_t block_size, uint32_t block_tokens)
{
    fixture *f = ctx;
    f->mismatches++;
    f->mismatch_shard = shard;
    f->mismatch_size = block_size;
    CU_ASSERT_EQUAL(block_tokens, BT);
}

/* 4 shards, ttft with miss weight 2, index_blocks per shard, the model
 * above, --scrape-interval interval_s. */
static void open_core(fixture *f, uint32_t index_blocks, double interval_s)
{
    memset(f, 0, sizeof *f);
    cr_core_config cfg;
    cr_test_core_config(&cfg, SHARDS);
    cfg.route.by = CR_ROUTE_TTFT;
    cfg.route.miss_weight = 2;
    cfg.route.block_tokens = BT;
    cfg.route.index_blocks = index_blocks;
    cfg.route.scrape_interval_s = interval_s;
    cfg.inject.prefill_coeffs = (cr_prefill_cost){.fixed_ms = 0, .ms_per_token = 1};
    cfg.inject.set |= CR_INJECT_SET_PREFILL_COEFFS;
    cfg.inject.calibrate = 0;
    cr_core_hooks hooks = {.block_size = on_block_size, .ctx = f};
    cr_clock_source clock = {now_of, f};
    cr_error err;
    f->core = cr_core_new(&cfg, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

static void run_of(uint64_t *h, uint32_t n, uint64_t base)
{
    for (uint32_t i = 0; i < n; i++)
        h[i] = base + i;
}

/* One Route: n hashes (none: prompt_tokens 100), owner (< 0: none),
 * namespace space (NULL: none). */
static cr_route_answer route_in(fixture *f, const uint64_t *h, uint32_t n, int64_t owner,
                                const char *space)
{
    cr_route_request q = {.has_owner = owner >= 0, .owner = owner, .hashes = h, .n_hashes = n,
                            .prompt_tokens = n ? 0 : 100, .space = space,
                            .space_len = space ? strlen(space) : 0};
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_route(f->core, &q, 1, &a, NULL, &err), CR_OK);
    return a;
}

static const char *why(const cr_route_answer *a) { return cr_route_reason_name(a->reason); }

/* A load scraped now: waiting and running requests, nothing else said. */
static cr_engine_load load_of(const fixture *f, double waiting, double running)
{
    return (cr_engine_load){.at_s = f->t, .waiting = waiting, .running = running,
                            .kv_usage = NAN};
}

static void give(fixture *f, uint32_t shard, const cr_engine_load *l)
{
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_engine_load(f->core, shard, l, &err), CR_OK);
}

static cr_route_stats stats(fixture *f)
{
    cr_route_stats st;
    cr_core_route_stats_read(f->core, &st, NULL, 0);
    return st;
}

static void test_foreign_requests_move_a_prefix(void)
{
    fixture f;
    open_core(&f, 1000, 0.1);
    uint64_t h[8];
    run_of(h, 8, 100);
    cr_route_answer a = route_in(&f, h, 8, -1, NULL); /* 128 ms anywhere: a foreign one's */
    uint32_t home = a.shard;
    f.t = 10; /* its prefill is long done; its outcome has not come */
    /* 2 requests there, 1 of them the router's: 1 foreign, 128 ms, less
     * than 2 x 128 ms of prefill elsewhere */
    cr_engine_load l = load_of(&f, 1, 1);
    give(&f, home, &l);
    cr_route_answer b = route_in(&f, h, 8, -1, NULL);
    CU_ASSERT_EQUAL(b.shard, home);
    CU_ASSERT_STRING_EQUAL(why(&b), "prefix");
    CU_ASSERT_DOUBLE_EQUAL(b.queue_wait_ms, 128, 1e-9);
    /* b was all cached, but a foreign request lands on any shard: it would
     * have cost (0 + 3 x 128) / 4 = 96 ms, the mean 128 + (96 - 128) / 64
     * = 127.5 ms; 7 requests, 2 the router's: 5 x 127.5 ms outweighs the
     * 256 ms a miss costs elsewhere */
    f.t = 10.05;
    l = load_of(&f, 6, 1);
    give(&f, home, &l);
    cr_route_answer c = route_in(&f, h, 8, -1, NULL);
    CU_ASSERT_NOT_EQUAL(c.shard, home);
    CU_ASSERT_STRING_EQUAL(why(&c), "spill");
    CU_ASSERT_DOUBLE_EQUAL(c.queue_wait_ms, 0, 1e-9);
    /* the engine counting only the router's requests: nothing foreign */
    l = load_of(&f, 0, 2);
    give(&f, home, &l);
    cr_route_answer d = route_in(&f, h, 8, -1, NULL);
    CU_ASSERT_EQUAL(d.shard, home);
    CU_ASSERT_DOUBLE_EQUAL(d.queue_wait_ms, 0, 1e-9);
    /* a count not reported (NAN) is 0; both not reported: no queue said */
    l = load_of(&f, NAN, NAN);
    give(&f, home, &l);
    CU_ASSERT_EQUAL(route_in(&f, h, 8, -1, NULL).shard, home);
    CU_ASSERT_EQUAL(stats(&f).engine_loads, 4);
    CU_ASSERT_EQUAL(stats(&f).engine_stale, 0);
    cr_core_free(f.core);
}

/* The engine scraped at at_s cannot have counted a route made after it. */
static void test_routes_after_the_scrape_are_not_ours_then(void)
{
    fixture f;
    open_core(&f, 1000, 10); /* fresh for 20 s */
    uint64_t h[8];
    run_of(h, 8, 100);
    uint32_t home = route_in(&f, h, 8, -1, NULL).shard; /* 128 ms */
    f.t = 10;
    CU_ASSERT_EQUAL(route_in(&f, h, 8, -1, NULL).shard, home); /* all cached: 0 ms */
    /* scraped at 5 s, 2 requests: the first route's and 1 foreign (the
     * second, made after, is not among them), priced as the routes'
     * prompts would cost on a shard picked blind: 128 ms, then (0 + 3 x
     * 128) / 4 = 96 ms for the second, though it cost 0 where it went:
     * 128 + (96 - 128) / 64 */
    cr_engine_load l = load_of(&f, 0, 2);
    l.at_s = 5;
    give(&f, home, &l);
    cr_route_answer a = route_in(&f, h, 8, -1, NULL);
    CU_ASSERT_EQUAL(a.shard, home);
    CU_ASSERT_DOUBLE_EQUAL(a.queue_wait_ms, 127.5, 1e-9);
    cr_core_free(f.core);
}

static void test_stale_load_is_ignored_and_counted(void)
{
    fixture f;
    open_core(&f, 1000, 0.5); /* stale past 1 s */
    uint64_t h[8];
    run_of(h, 8, 100);
    uint32_t home = route_in(&f, h, 8, -1, NULL).shard;
    f.t = 10;
    cr_engine_load l = load_of(&f, 20, 1);
    give(&f, home, &l);
    f.t = 10.9;
    CU_ASSERT_NOT_EQUAL(route_in(&f, h, 8, -1, NULL).shard, home); /* fresh: it spills */
    CU_ASSERT_EQUAL(stats(&f).engine_stale, 0);
    f.t = 11.1;
    cr_route_answer a = route_in(&f, h, 8, -1, NULL);
    CU_ASSERT_EQUAL(a.shard, home); /* stale: the router's own view alone */
    CU_ASSERT_DOUBLE_EQUAL(a.queue_wait_ms, 0, 1e-9);
    f.t = 12;
    CU_ASSERT_EQUAL(route_in(&f, h, 8, -1, NULL).shard, home);
    CU_ASSERT_EQUAL(stats(&f).engine_stale, 1); /* once per load */
    l = load_of(&f, 20, 1); /* the next scrape: seen again */
    give(&f, home, &l);
    CU_ASSERT_NOT_EQUAL(route_in(&f, h, 8, -1, NULL).shard, home);
    /* a load scraped long ago is stale from its first route */
    l.at_s = 5;
    give(&f, home, &l);
    CU_ASSERT_EQUAL(route_in(&f, h, 8, -1, NULL).shard, home);
    CU_ASSERT_EQUAL(stats(&f).engine_stale, 2);
    CU_ASSERT_EQUAL(stats(&f).engine_loads, 3);
    cr_core_free(f.core);
}

static void test_gpu_blocks_size_the_index(void)
{
    fixture f;
    open_core(&f, 1000, 0.1);
    uint64_t h[8];
    run_of(h, 8, 100);
    uint32_t home = route_in(&f, h, 8, -1, NULL).shard;
    CU_ASSERT_EQUAL(stats(&f).index_blocks, 8);
    /* 2 engine blocks of 32 tokens: 4 of the index's 16; the prefix's
     * tail goes first, as the CLOCK ages it */
    cr_engine_load l = load_of(&f, NAN, NAN);
    l.gpu_blocks = 2;
    l.block_size = 2 * BT;
    give(&f, home, &l);
    CU_ASSERT_EQUAL(stats(&f).index_blocks, 4);
    CU_ASSERT_EQUAL(f.mismatches, 1);
    CU_ASSERT_EQUAL(f.mismatch_shard, home);
    CU_ASSERT_EQUAL(f.mismatch_size, 2 * BT);
    f.t = 10;
    cr_route_answer a = route_in(&f, h, 8, -1, NULL);
    CU_ASSERT_EQUAL(a.shard, home);
    CU_ASSERT_EQUAL(a.cached_tokens, 4 * BT);
    CU_ASSERT_EQUAL(stats(&f).index_blocks, 4); /* sent again: still 4 kept */
    /* reported once per shard; the count of shards in the stats */
    give(&f, home, &l);
    CU_ASSERT_EQUAL(f.mismatches, 1);
    CU_ASSERT_EQUAL(stats(&f).engine_block_mismatch, 1);
    /* more than --index-blocks: --index-blocks; block size agreeing */
    l.gpu_blocks = 1u << 30;
    l.block_size = BT;
    give(&f, home, &l);
    uint64_t long_run[64];
    run_of(long_run, 64, 5000);
    f.t = 20;
    cr_route_answer b = route_in(&f, long_run, 64, -1, NULL);
    f.t = 30;
    cr_route_answer c = route_in(&f, long_run, 64, -1, NULL);
    CU_ASSERT_EQUAL(c.shard, b.shard);
    CU_ASSERT_EQUAL(c.cached_tokens, 64 * BT);
    CU_ASSERT_EQUAL(f.mismatches, 1);
    cr_core_free(f.core);
}

/* endpoints e<id> for ids[0..n), at 10.0.0.<id>:8000. */
static void set_endpoints(fixture *f, const int *ids, size_t n)
{
    char id[8][8], addr[8][24];
    cr_endpoint_spec v[8];
    for (size_t i = 0; i < n; i++) {
        snprintf(id[i], sizeof id[i], "e%d", ids[i]);
        snprintf(addr[i], sizeof addr[i], "10.0.0.%d:8000", ids[i]);
        v[i] = (cr_endpoint_spec){.id = id[i], .address = addr[i]};
    }
    cr_core_members_event ev;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_set_endpoints(f->core, v, n, &ev, &err), CR_OK);
}

/* A Route of n hashes to shard only. */
static cr_route_answer route_to(fixture *f, const uint64_t *h, uint32_t n, uint32_t only)
{
    cr_route_request q = {.hashes = h, .n_hashes = n, .only = &only, .n_only = 1};
    cr_route_answer a;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_route(f->core, &q, 1, &a, NULL, &err), CR_OK);
    return a;
}

static void test_new_engine_in_a_slot_starts_afresh(void)
{
    fixture f;
    open_core(&f, 1000, 1000);
    set_endpoints(&f, (const int[]){0, 1, 2, 3}, 4);
    uint64_t h[8];
    run_of(h, 8, 100);
    route_to(&f, h, 8, 2); /* a foreign request: 128 ms */
    cr_engine_load l = load_of(&f, 10, 0);
    l.gpu_blocks = 2;
    l.block_size = 2 * BT;
    give(&f, 2, &l);
    f.t = 10;
    cr_route_answer a = route_to(&f, h, 8, 2);
    CU_ASSERT_EQUAL(a.cached_tokens, 4 * BT);
    CU_ASSERT_TRUE(a.queue_wait_ms > 1000); /* 9 foreign */
    /* e2 leaves, e4 takes its slot after its quarantine: what the router
     * kept of e2 goes */
    set_endpoints(&f, (const int[]){0, 1, 3}, 3);
    f.t += CR_ENDPOINTS_REUSE_S + 1;
    set_endpoints(&f, (const int[]){0, 1, 3, 4}, 4);
    cr_route_answer b = route_to(&f, h, 8, 2);
    CU_ASSERT_EQUAL(b.shard, 2);
    CU_ASSERT_EQUAL(b.cached_tokens, 0);
    CU_ASSERT_DOUBLE_EQUAL(b.queue_wait_ms, 0, 1e-9);
    f.t += 10;
    CU_ASSERT_EQUAL(route_to(&f, h, 8, 2).cached_tokens, 8 * BT); /* --index-blocks again */
    give(&f, 2, &l); /* e4 disagrees too: reported for it */
    CU_ASSERT_EQUAL(f.mismatches, 2);
    cr_core_free(f.core);
}

/* shard's load: adapters names[0..n), slots max. */
static void give_lora(fixture *f, uint32_t shard, uint32_t max, const char *const *names,
                      uint32_t n)
{
    cr_engine_load l = load_of(f, 0, 0);
    l.max_lora = max;
    l.n_lora = n;
    for (uint32_t i = 0; i < n; i++)
        snprintf(l.lora[i], sizeof l.lora[i], "%s", names[i]);
    give(f, shard, &l);
}

/* Where 64 new owners' requests in space go (no session: no shard holds
 * more of them), 1 s apart (every queue empty): a bit per shard taken. */
static unsigned shards_taken(fixture *f, const char *space)
{
    static int64_t owners; /* never one twice */
    unsigned taken = 0;
    for (int i = 0; i < 64; i++) {
        f->t += 1;
        taken |= 1u << route_in(f, NULL, 0, ++owners, space).shard;
    }
    return taken;
}

static void test_adapter_prefers_loaded_or_free_slot(void)
{
    fixture f;
    open_core(&f, 1000, 1000); /* loads stay fresh for the whole case */
    unsigned spread = shards_taken(&f, "a"); /* no loads: by home alone */
    CU_ASSERT_EQUAL(spread, 0xf);
    static const char *const A[] = {"a"}, *const B[] = {"b"}, *const C[] = {"c"},
                             *const D[] = {"d"};
    give_lora(&f, 0, 1, A, 1);
    give_lora(&f, 1, 1, B, 1);
    give_lora(&f, 2, 1, C, 1);
    give_lora(&f, 3, 2, D, 1); /* a free slot */
    CU_ASSERT_EQUAL(shards_taken(&f, "a"), 1u << 0 | 1u << 3);
    /* the adapter is the namespace up to its 0x1f (a cache salt after) */
    CU_ASSERT_EQUAL(shards_taken(&f, "c\x1fsalt"), 1u << 2 | 1u << 3);
    /* an adapter no engine lists (or a base model's name): by home alone */
    CU_ASSERT_EQUAL(shards_taken(&f, "llama"), 0xf);
    CU_ASSERT_EQUAL(shards_taken(&f, NULL), 0xf);
    cr_core_free(f.core);
    /* stale loads say nothing of adapters */
    open_core(&f, 1000, 0.1);
    give_lora(&f, 0, 1, A, 1);
    give_lora(&f, 1, 1, B, 1);
    give_lora(&f, 2, 1, C, 1);
    give_lora(&f, 3, 1, D, 1);
    CU_ASSERT_EQUAL(shards_taken(&f, "a"), 0xf);
    CU_ASSERT_EQUAL(stats(&f).engine_stale, 4);
    cr_core_free(f.core);
}

/* l refused with a message naming field; nothing kept. */
static void refused(fixture *f, uint32_t shard, const cr_engine_load *l, const char *field)
{
    cr_error err = {{0}};
    CU_ASSERT_EQUAL(cr_core_engine_load(f->core, shard, l, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, field));
    if (!strstr(err.msg, field))
        fprintf(stderr, "expected %s in: %s\n", field, err.msg);
}

static void test_bad_load_refused_naming_the_field(void)
{
    fixture f;
    open_core(&f, 1000, 0.1);
    uint64_t h[8];
    run_of(h, 8, 100);
    uint32_t home = route_in(&f, h, 8, -1, NULL).shard;
    f.t = 10;
    cr_engine_load good = load_of(&f, 50, 1), l;
    refused(&f, SHARDS, &good, "shard must be below the 4 shards, got 4");
    l = good, l.waiting = -1;
    refused(&f, home, &l, "waiting");
    l = good, l.running = INFINITY;
    refused(&f, home, &l, "running");
    l = good, l.at_s = NAN;
    refused(&f, home, &l, "at_s");
    l = good, l.kv_usage = 1.5;
    refused(&f, home, &l, "kv_usage");
    l = good, l.block_size = CR_CORE_MAX_BLOCK_TOKENS + 1;
    refused(&f, home, &l, "block_size");
    l = good, l.n_lora = CR_ENGINE_LORA_MAX + 1;
    refused(&f, home, &l, "n_lora");
    l = good, l.n_lora = 1;
    memset(l.lora[0], 'x', sizeof l.lora[0]);
    refused(&f, home, &l, "lora[0]");
    /* nothing kept: the prefix stays, nothing counted */
    CU_ASSERT_EQUAL(route_in(&f, h, 8, -1, NULL).shard, home);
    CU_ASSERT_EQUAL(stats(&f).engine_loads, 0);
    CU_ASSERT_EQUAL(f.mismatches, 0);
    cr_core_free(f.core);
}

/* The scraper's thread gives loads while routing threads route; the clock
 * stands still (it is read by all). */
typedef struct worker {
    fixture *f;
    uint32_t id;
} worker;

static void *routes_many(void *arg)
{
    worker *w = arg;
    uint64_t h[8];
    for (int i = 0; i < 2000; i++) {
        run_of(h, 8, 100 + (uint64_t)(i % 50) * 16);
        cr_route_request q = {.hashes = h, .n_hashes = 8, .space = i % 3 ? "a" : "b",
                                .space_len = 1};
        cr_route_answer a;
        cr_error err;
        CU_ASSERT_EQUAL(cr_core_route(w->f->core, &q, 1, &a, NULL, &err), CR_OK);
    }
    return NULL;
}

static void *scrapes_many(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 2000; i++) {
        cr_engine_load l = load_of(w->f, i % 7, 1);
        l.gpu_blocks = 16 + (uint64_t)(i % 64);
        l.block_size = BT;
        l.max_lora = 1;
        l.n_lora = 1;
        snprintf(l.lora[0], sizeof l.lora[0], "%s", i % 2 ? "a" : "b");
        cr_error err;
        CU_ASSERT_EQUAL(cr_core_engine_load(w->f->core, (uint32_t)i % SHARDS, &l, &err), CR_OK);
    }
    return NULL;
}

static void test_scraper_and_routes_at_once(void)
{
    fixture f;
    open_core(&f, 1000, 1000);
    f.t = 1;
    pthread_t t[3];
    worker w[3] = {{&f, 0}, {&f, 1}, {&f, 2}};
    pthread_create(&t[0], NULL, scrapes_many, &w[0]);
    pthread_create(&t[1], NULL, routes_many, &w[1]);
    pthread_create(&t[2], NULL, routes_many, &w[2]);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    cr_route_stats st = stats(&f);
    CU_ASSERT_EQUAL(st.engine_loads, 2000);
    CU_ASSERT_TRUE(st.index_blocks <= SHARDS * (16 + 63));
    cr_core_free(f.core);
}

static const cr_test_case TESTS[] = {
    {"foreign requests move a prefix", test_foreign_requests_move_a_prefix},
    {"routes after the scrape are not ours then",
     test_routes_after_the_scrape_are_not_ours_then},
    {"stale load is ignored and counted", test_stale_load_is_ignored_and_counted},
    {"gpu_blocks size the index", test_gpu_blocks_size_the_index},
    {"adapter prefers loaded or free slot", test_adapter_prefers_loaded_or_free_slot},
    {"bad load refused naming the field", test_bad_load_refused_naming_the_field},
    {"new engine in a slot starts afresh", test_new_engine_in_a_slot_starts_afresh},
    {"scraper and routes at once", test_scraper_and_routes_at_once},
    {NULL, NULL},
};

static const cr_test_suite SUITES[] = {{"engine_load", TESTS}};

CR_TEST_MAIN(SUITES)
