/* The closed loop in virtual time: decision receipts (kept, evicted,
 * replaced, looked up), outcome batches (checked whole, then matched,
 * calibrated, counted), served hit tokens split by admitted and shard,
 * prediction errors and regret, the receipted hook, the store's memory at
 * its bound, and one threaded case. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core.h"
#include "cunit_main.h"

typedef struct vclock {
    double t; /* seconds */
} vclock;

static double vclock_now(void *ctx) { return ((vclock *)ctx)->t; }

typedef struct seen {
    int receipts, outcomes;
    cr_receipt last;
} seen;

static void on_receipt(void *ctx, const cr_receipt *r)
{
    seen *s = ctx;
    if (r->outcomes)
        s->outcomes++;
    else
        s->receipts++;
    s->last = *r;
}

typedef struct fixture {
    vclock clock;
    seen seen;
    cr_core *core;
} fixture;

/* The defaults with a probe that finds nothing (one GPU, the default
 * model), no replanner, and receipts kept. */
static void quiet_config(cr_core_config *cfg, uint64_t receipts)
{
    cr_core_config_default(cfg);
    cr_core_quiet_probe(&cfg->probe);
    cfg->route.by = CR_ROUTE_PLAN; /* served hits by the table's shard */
    cfg->replan_interval_s = 0;
    cfg->receipts = receipts;
}

/* 8 shards, virtual time; two KV sources: "fast" (400 Gb/s) makes KV win,
 * "slow" (0.1 Gb/s) loses. */
static void fixture_open(fixture *f, uint64_t receipts)
{
    memset(f, 0, sizeof *f);
    cr_core_config cfg;
    quiet_config(&cfg, receipts);
    cfg.planner = (cr_planner_config){8, 50, 200};
    cr_error err;
    CU_ASSERT_EQUAL(cr_inject_config_set(&cfg.inject, "--kv-source", "fast=400,0.1", &err), CR_OK);
    CU_ASSERT_EQUAL(cr_inject_config_set(&cfg.inject, "--kv-source", "slow=0.1,0.1", &err), CR_OK);
    cr_core_hooks hooks = {.receipted = on_receipt, .ctx = &f->seen};
    cr_clock_source clock = {vclock_now, &f->clock};
    f->core = cr_core_new(&cfg, &hooks, &clock, &err);
    cr_inject_config_clear(&cfg.inject);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

static void fixture_close(fixture *f) { cr_core_free(f->core); }

/* A selection of P 100 + K 8000 tokens, all cached at source (NULL = no
 * sources), with queue wait W 5 ms given. */
static cr_inject_response select_at(fixture *f, const char *id, const char *source, int dry_run)
{
    cr_kv_source src = {source, 8000};
    cr_inject_request req = {.prompt_tokens = 100, .knowledge_tokens = 8000,
                             .sources = source ? &src : NULL, .n_sources = source ? 1 : 0,
                             .has_queue_wait = 1, .queue_wait_ms = 5, .dry_run = dry_run};
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_select(f->core, id, &req, &r, &err), CR_OK);
    return r;
}

static cr_loop_stats loop_stats(fixture *f)
{
    cr_loop_stats st;
    cr_core_loop_stats_read(f->core, &st, NULL, 0, NULL, 0);
    return st;
}

static int has_receipt(fixture *f, const char *id)
{
    cr_receipt r;
    return cr_core_decision(f->core, id, &r);
}

static void test_receipts_only_for_real_selects_with_ids(void)
{
    fixture f;
    fixture_open(&f, 100);
    f.clock.t = 7;
    select_at(&f, NULL, "fast", 0);
    select_at(&f, "", "fast", 0);
    select_at(&f, "dry", "fast", 1);
    CU_ASSERT_EQUAL(loop_stats(&f).receipts_made, 0);
    CU_ASSERT_EQUAL(f.seen.receipts, 0);
    CU_ASSERT_FALSE(has_receipt(&f, "dry"));

    cr_inject_response got = select_at(&f, "req-1", "fast", 0);
    CU_ASSERT_EQUAL(got.mode, CR_INJECT_KV_CACHE);
    cr_receipt r;
    CU_ASSERT_EQUAL_FATAL(cr_core_decision(f.core, "req-1", &r), 1);
    CU_ASSERT_STRING_EQUAL(r.request_id, "req-1");
    CU_ASSERT_EQUAL(r.seq, 1);
    CU_ASSERT_EQUAL(r.decided_at_s, 7);
    CU_ASSERT(r.prompt_tokens == 100 && r.knowledge_tokens == 8000 && r.gpu == 0);
    CU_ASSERT(r.has_queue_wait && r.queue_wait_ms == 5);
    CU_ASSERT(r.n_sources == 1 && r.cached_tokens == 8000);
    CU_ASSERT_STRING_EQUAL(r.decision.source, "fast");
    CU_ASSERT_EQUAL(memcmp(&r.decision, &got, sizeof got), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.model.source, "prefill="));
    CU_ASSERT(r.model.prefill.ms_per_token > 0 && r.model.kv_bytes_per_token == 131072);
    CU_ASSERT_EQUAL(r.outcomes, 0);
    CU_ASSERT_EQUAL(f.seen.receipts, 1);
    CU_ASSERT_STRING_EQUAL(f.seen.last.request_id, "req-1");

    /* Lookups that find nothing. */
    CU_ASSERT_FALSE(cr_core_decision(f.core, "req-2", &r));
    CU_ASSERT_FALSE(cr_core_decision(f.core, "", &r));
    CU_ASSERT_FALSE(cr_core_decision(f.core, NULL, &r));
    /* An id over the bound: refused before anything is reserved or kept. */
    char long_id[CR_LOOP_REQUEST_ID_MAX + 2];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    cr_inject_request req = {.prompt_tokens = 10, .dry_run = 1};
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_select(f.core, NULL, &req, &got, &err), CR_OK);
    double queued = got.text.queue_wait_ms;
    req.dry_run = 0;
    CU_ASSERT_EQUAL(cr_core_select(f.core, long_id, &req, &got, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "request_id must be at most 128 bytes, got 129");
    CU_ASSERT_EQUAL(cr_core_select(f.core, NULL, &req, &got, &err), CR_OK);
    CU_ASSERT_EQUAL(got.text.queue_wait_ms, queued); /* the refused one reserved nothing */
    CU_ASSERT_EQUAL(loop_stats(&f).receipts_made, 1);
    fixture_close(&f);

    /* --receipts 0: none kept, none found. */
    fixture_open(&f, 0);
    select_at(&f, "req-1", "fast", 0);
    CU_ASSERT_FALSE(has_receipt(&f, "req-1"));
    cr_loop_stats st = loop_stats(&f);
    CU_ASSERT(st.receipts_made == 0 && st.receipt_bytes == 0 && st.receipts_capacity == 0);
    fixture_close(&f);
}

static void test_eviction_oldest_first_and_replacement(void)
{
    fixture f;
    fixture_open(&f, 3);
    const char *ids[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        select_at(&f, ids[i], NULL, 0);
    CU_ASSERT_FALSE(has_receipt(&f, "a"));
    CU_ASSERT(has_receipt(&f, "b") && has_receipt(&f, "c") && has_receipt(&f, "d"));
    /* A repeated id replaces the older receipt at once... */
    f.clock.t = 1;
    select_at(&f, "c", "fast", 0);
    cr_receipt r;
    CU_ASSERT_EQUAL_FATAL(cr_core_decision(f.core, "c", &r), 1);
    CU_ASSERT(r.seq == 5 && r.decided_at_s == 1 && r.decision.mode == CR_INJECT_KV_CACHE);
    cr_loop_stats st = loop_stats(&f);
    CU_ASSERT_EQUAL(st.receipts_replaced, 1);
    /* ...and the ring goes on evicting in order: b went for the new c. */
    CU_ASSERT_FALSE(has_receipt(&f, "b"));
    CU_ASSERT_EQUAL(st.receipts, 2);
    select_at(&f, "e", NULL, 0); /* takes the old c's freed slot */
    select_at(&f, "f", NULL, 0); /* evicts d, the oldest */
    CU_ASSERT_FALSE(has_receipt(&f, "d"));
    CU_ASSERT(has_receipt(&f, "c") && has_receipt(&f, "e") && has_receipt(&f, "f"));
    st = loop_stats(&f);
    CU_ASSERT(st.receipts == 3 && st.receipts_capacity == 3 && st.receipts_made == 7);
    CU_ASSERT_EQUAL(st.receipts_evicted, 3); /* a, b, d */
    fixture_close(&f);
}

/* One outcome for id measuring the text path, with tokens. */
static cr_outcome text_outcome(const char *id)
{
    return (cr_outcome){.request_id = id,
                        .has = CR_OUT_QUEUE_WAIT | CR_OUT_PREFILL | CR_OUT_TTFT,
                        .queue_wait_ms = 6,
                        .prefill_ms = 50,
                        .ttft_ms = 60};
}

/* outcomes[3] of a batch made bad by bad(); nothing applied. */
static void expect_refused(fixture *f, void (*bad)(cr_outcome *), const char *msg)
{
    cr_outcome o[4] = {text_outcome("r"), text_outcome("r"), text_outcome("x"),
                       text_outcome("r")};
    bad(&o[3]);
    cr_loop_stats before = loop_stats(f), after;
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f->core, o, 4, &counts, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
    after = loop_stats(f);
    CU_ASSERT_EQUAL(memcmp(&before, &after, sizeof before), 0);
    CU_ASSERT_EQUAL(counts.accepted + counts.matched + counts.rejected, 0);
    cr_receipt r;
    CU_ASSERT(cr_core_decision(f->core, "r", &r) && r.outcomes == 0);
}

static char long_text[CR_INJECT_NAME_MAX + 2];

static void bad_id(cr_outcome *o) { o->request_id = long_text; }
static void bad_mode(cr_outcome *o) { o->mode = (cr_inject_mode)3; }
static void bad_source(cr_outcome *o) { o->source = long_text; }
static void bad_bits(cr_outcome *o) { o->has |= 1u << 20; }
static void bad_shard(cr_outcome *o)
{
    o->has |= CR_OUT_SHARD;
    o->shard = 8;
}
static void bad_cached(cr_outcome *o)
{
    o->has |= CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS;
    o->prompt_tokens = 10;
    o->cached_tokens = 11;
}
static void bad_wait(cr_outcome *o) { o->queue_wait_ms = NAN; }
static void bad_prefill(cr_outcome *o) { o->prefill_ms = -1; }
static void bad_span(cr_outcome *o)
{
    o->has |= CR_OUT_PREFILLED_FROM | CR_OUT_PREFILLED_TO;
    o->prefilled_from = 20;
    o->prefilled_to = 10;
}
static void bad_transfer(cr_outcome *o)
{
    o->has |= CR_OUT_TRANSFER_MS;
    o->transfer_ms = -0.5;
}
static void bad_load(cr_outcome *o)
{
    o->has |= CR_OUT_LOAD;
    o->load_ms = INFINITY;
}
static void bad_ttft(cr_outcome *o) { o->ttft_ms = -INFINITY; }
static void bad_gpu(cr_outcome *o)
{
    o->has |= CR_OUT_GPU;
    o->gpu = 1;
}

static void test_report_checks_whole_batch_first(void)
{
    fixture f;
    fixture_open(&f, 100);
    select_at(&f, "r", NULL, 0);
    memset(long_text, 'y', sizeof long_text - 1);
    static const struct {
        void (*bad)(cr_outcome *);
        const char *msg;
    } cases[] = {
        {bad_id, "outcomes[3].request_id must be at most 128 bytes, got 129"},
        {bad_mode, "outcomes[3].mode must be 0 (unset), 1 (text) or 2 (kv_cache), got 3"},
        {bad_source, "outcomes[3].source must be at most 128 bytes, got 129"},
        {bad_bits, "outcomes[3].has has unknown bits 0x100000"},
        {bad_shard, "outcomes[3].shard must be in 0..7, got 8"},
        {bad_cached, "outcomes[3].cached_tokens must be <= prompt_tokens (10), got 11"},
        {bad_wait, "outcomes[3].queue_wait_ms must be finite and >= 0, got nan"},
        {bad_prefill, "outcomes[3].prefill_ms must be finite and >= 0, got -1"},
        {bad_span, "outcomes[3].prefilled_from must be <= prefilled_to (10), got 20"},
        {bad_transfer, "outcomes[3].transfer_ms must be finite and >= 0, got -0.5"},
        {bad_load, "outcomes[3].load_ms must be finite and >= 0, got inf"},
        {bad_ttft, "outcomes[3].ttft_ms must be finite and >= 0, got -inf"},
        {bad_gpu, "outcomes[3].gpu must be in 0..0, got 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused(&f, cases[i].bad, cases[i].msg);
    /* A value without its has bit is not looked at. */
    cr_outcome o = {.request_id = "r", .prefill_ms = -1, .shard = 99};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    /* Too many at once; none is an empty batch. */
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, CR_LOOP_MAX_OUTCOMES + 1, &counts, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "outcomes must hold at most 10000 entries, got 10001");
    CU_ASSERT_EQUAL(cr_core_report(f.core, NULL, 0, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.accepted, 0);
    fixture_close(&f);
}

static void test_matched_unmatched_rejected(void)
{
    fixture f;
    fixture_open(&f, 100);
    select_at(&f, "known", NULL, 0);
    cr_outcome o[] = {
        text_outcome("known"),
        /* unknown, but a self-contained prefill: calibration takes it */
        {.request_id = "gone", .has = CR_OUT_PREFILL | CR_OUT_PREFILLED_FROM |
                                      CR_OUT_PREFILLED_TO,
         .prefill_ms = 30, .prefilled_from = 0, .prefilled_to = 300},
        /* no id, tokens only: served-hit accounting takes it */
        {.has = CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS, .prompt_tokens = 10},
        /* unknown, a prefill without its span, a transfer without bytes */
        {.request_id = "gone", .has = CR_OUT_PREFILL | CR_OUT_TRANSFER_MS, .prefill_ms = 30,
         .transfer_ms = 4},
        {.has = CR_OUT_TTFT | CR_OUT_OWNER, .ttft_ms = 9, .owner = 4},
    };
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_report(f.core, o, 5, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.accepted, 3);
    CU_ASSERT_EQUAL(counts.matched, 1);
    CU_ASSERT_EQUAL(counts.rejected, 2);
    CU_ASSERT_STRING_EQUAL(counts.first_rejection,
                           "outcomes[3]: no receipt for request_id \"gone\", nothing to "
                           "calibrate, no tokens");
    cr_loop_stats st = loop_stats(&f);
    CU_ASSERT(st.outcomes_accepted == 3 && st.outcomes_matched == 1 && st.outcomes_rejected == 2);
    CU_ASSERT_EQUAL(st.observations, 2); /* the matched one and the self-contained one */
    /* The same batch again: the receipt takes its second outcome. */
    CU_ASSERT_EQUAL(cr_core_report(f.core, o, 1, &counts, &err), CR_OK);
    cr_receipt r;
    CU_ASSERT(cr_core_decision(f.core, "known", &r) && r.outcomes == 2);
    fixture_close(&f);
}

static void test_term_errors_on_the_receipt(void)
{
    fixture f;
    fixture_open(&f, 100);
    cr_inject_response text = select_at(&f, "t", NULL, 0);
    cr_inject_response kv = select_at(&f, "k", "fast", 0);
    CU_ASSERT_EQUAL_FATAL(kv.mode, CR_INJECT_KV_CACHE);
    f.clock.t = 3;
    cr_outcome o[] = {
        text_outcome("t"),
        {.request_id = "k",
         .has = CR_OUT_QUEUE_WAIT | CR_OUT_PREFILL | CR_OUT_TRANSFER_MS | CR_OUT_LOAD |
                CR_OUT_TTFT,
         .queue_wait_ms = 0.5, .prefill_ms = 20, .transfer_ms = 30, .load_ms = 40,
         .ttft_ms = 100},
    };
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_report(f.core, o, 2, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.matched, 2);
    cr_receipt r;
    CU_ASSERT_EQUAL_FATAL(cr_core_decision(f.core, "t", &r), 1);
    CU_ASSERT(r.outcomes == 1 && r.reported_at_s == 3 && r.used == CR_INJECT_TEXT);
    unsigned text_terms = 1u << CR_TERM_QUEUE_WAIT | 1u << CR_TERM_PREFILL | 1u << CR_TERM_TOTAL;
    CU_ASSERT_EQUAL(r.error_has, text_terms);
    CU_ASSERT_DOUBLE_EQUAL(r.error_ms[CR_TERM_QUEUE_WAIT], 6 - text.text.queue_wait_ms, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.error_ms[CR_TERM_PREFILL], 50 - text.text.prefill_ms, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.error_ms[CR_TERM_TOTAL], 60 - text.text.total_ms, 1e-9);
    CU_ASSERT_EQUAL(r.measured_ms[CR_TERM_TOTAL], 60);
    CU_ASSERT_EQUAL_FATAL(cr_core_decision(f.core, "k", &r), 1);
    CU_ASSERT_EQUAL(r.error_has, (1u << CR_N_TERMS) - 1);
    CU_ASSERT_DOUBLE_EQUAL(r.error_ms[CR_TERM_TRANSFER], 30 - kv.kv.transfer_ms, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.error_ms[CR_TERM_LOAD], 40 - kv.kv.load_ms, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.error_ms[CR_TERM_TOTAL], 100 - kv.kv.total_ms, 1e-9);
    /* The rolling figures, at the instant reported (no decay yet). The
     * queue wait of 0.5 ms is below the 1 ms floor of the denominator. */
    cr_loop_stats st = loop_stats(&f);
    const cr_loop_error_stats *e = &st.errors[CR_PATH_KV][CR_TERM_QUEUE_WAIT];
    CU_ASSERT_EQUAL(e->samples, 1);
    CU_ASSERT_DOUBLE_EQUAL(e->ape, fabs(0.5 - kv.kv.queue_wait_ms) / 1.0, 1e-9);
    e = &st.errors[CR_PATH_TEXT][CR_TERM_PREFILL];
    CU_ASSERT_DOUBLE_EQUAL(e->ape, fabs(50 - text.text.prefill_ms) / 50, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e->bias_ms, 50 - text.text.prefill_ms, 1e-9);
    CU_ASSERT_EQUAL(st.errors[CR_PATH_TEXT][CR_TERM_TRANSFER].samples, 0);
    /* One half-life later the rolling mean of one sample is still itself. */
    f.clock.t = 3 + CR_LOOP_HALF_LIFE_S;
    st = loop_stats(&f);
    CU_ASSERT_DOUBLE_EQUAL(st.errors[CR_PATH_TEXT][CR_TERM_PREFILL].bias_ms,
                           50 - text.text.prefill_ms, 1e-9);
    /* An outcome saying KV was used where no KV path was priced: counted
     * on the receipt, no errors. */
    cr_outcome odd = text_outcome("t");
    odd.mode = CR_INJECT_KV_CACHE;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &odd, 1, &counts, &err), CR_OK);
    CU_ASSERT(cr_core_decision(f.core, "t", &r) && r.outcomes == 2 && r.error_has == 0);
    fixture_close(&f);
}

static cr_outcome tokens(int64_t owner, int has_owner, uint32_t shard, int has_shard,
                         uint32_t prompt, uint32_t cached)
{
    unsigned has = CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS;
    has |= has_owner ? CR_OUT_OWNER : 0;
    has |= has_shard ? CR_OUT_SHARD : 0;
    return (cr_outcome){.has = has, .owner = owner, .shard = shard, .prompt_tokens = prompt,
                        .cached_tokens = cached};
}

static void test_served_hits_by_admitted_and_shard(void)
{
    fixture f;
    fixture_open(&f, 100);
    /* 4 shards; owner 1 admitted, owner 3 not. */
    cr_session_rate rates[] = {{1, 10}, {2, 80}};
    cr_core_plan_request req = {
        .rates = rates, .n_rates = 2, .install = 1, .has_n_shards = 1, .n_shards = 4};
    cr_core_plan_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_plan(f.core, &req, &res, &err), CR_OK);
    uint32_t p1 = cr_table_find(res.table, 1)->preferred_shard;
    cr_core_plan_result_free(&res);
    uint32_t p3 = (uint32_t)(cr_mix64(3) % 4);
    cr_outcome o[] = {
        tokens(1, 1, 0, 0, 100, 80), /* admitted, its preferred shard */
        tokens(3, 1, 0, 0, 50, 10),  /* not admitted, its fallback shard */
        tokens(0, 0, 3, 1, 10, 0),   /* no owner: not admitted, shard given */
        tokens(0, 0, 0, 0, 40, 40),  /* neither: the totals only */
    };
    cr_outcome_counts counts;
    CU_ASSERT_EQUAL_FATAL(cr_core_report(f.core, o, 4, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.accepted, 4);
    cr_loop_shard_stats shards[8];
    cr_loop_stats st;
    cr_core_loop_stats_read(f.core, &st, shards, 8, NULL, 0);
    CU_ASSERT_EQUAL(st.served_tokens[1][1], 80);
    CU_ASSERT_EQUAL(st.served_tokens[1][0], 20);
    CU_ASSERT_EQUAL(st.served_tokens[0][1], 10 + 0 + 40);
    CU_ASSERT_EQUAL(st.served_tokens[0][0], 40 + 10 + 0);
    CU_ASSERT_DOUBLE_EQUAL(st.hit_ratio, 130.0 / 200, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(st.hit_ratio_admitted[1], 0.8, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(st.hit_ratio_admitted[0], 50.0 / 100, 1e-12);
    CU_ASSERT(st.n_shards <= 4);
    uint64_t prompt[4] = {0}, cached[4] = {0};
    prompt[p1] += 100, cached[p1] += 80;
    prompt[p3] += 50, cached[p3] += 10;
    prompt[3] += 10;
    for (uint32_t s = 0; s < st.n_shards; s++) {
        CU_ASSERT_EQUAL(shards[s].prompt_tokens, prompt[s]);
        CU_ASSERT_EQUAL(shards[s].cached_tokens, cached[s]);
    }
    /* The installed table's 4 shards bound a given shard now. */
    cr_outcome bad = tokens(0, 0, 4, 1, 1, 0);
    CU_ASSERT_EQUAL(cr_core_report(f.core, &bad, 1, &counts, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "outcomes[0].shard must be in 0..3, got 4");
    /* Rolling: after one half-life a new outcome weighs twice the old ones. */
    f.clock.t = CR_LOOP_HALF_LIFE_S;
    cr_outcome fresh = tokens(0, 0, 0, 0, 200, 200);
    CU_ASSERT_EQUAL(cr_core_report(f.core, &fresh, 1, &counts, &err), CR_OK);
    st = loop_stats(&f);
    CU_ASSERT_DOUBLE_EQUAL(st.hit_ratio, (130.0 / 2 + 200) / (200.0 / 2 + 200), 1e-12);
    CU_ASSERT_EQUAL(st.served_tokens[0][1], 250); /* counters never decay */
    fixture_close(&f);
}

/* prefill(0, L) of the receipt's own model (no fit adopted here). */
static double text_prefill(const cr_receipt *r, double s)
{
    double l = (double)r->prompt_tokens + r->knowledge_tokens;
    return r->model.prefill.fixed_ms + r->model.prefill.ms_per_token * (l - s) +
           r->model.prefill.ms_per_token2 * (l * l - s * s);
}

static void report_ttft(fixture *f, const char *id, double wait, double ttft)
{
    cr_outcome o = {.request_id = id, .has = CR_OUT_QUEUE_WAIT | CR_OUT_TTFT,
                    .queue_wait_ms = wait, .ttft_ms = ttft};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f->core, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(counts.matched, 1);
}

static void test_regret_both_ways(void)
{
    fixture f;
    fixture_open(&f, 100);
    CU_ASSERT_EQUAL_FATAL(select_at(&f, "kv", "fast", 0).mode, CR_INJECT_KV_CACHE);
    cr_inject_response slow = select_at(&f, "text", "slow", 0);
    CU_ASSERT_EQUAL_FATAL(slow.mode, CR_INJECT_TEXT);
    CU_ASSERT_EQUAL_FATAL(slow.has_kv, 1);
    select_at(&f, "fine", "fast", 0);
    cr_receipt kv, text;
    cr_core_decision(f.core, "kv", &kv);
    cr_core_decision(f.core, "text", &text);
    /* KV chosen, but it took longer than text would have with W = 2. */
    double text_cal = 2 + text_prefill(&kv, 0);
    report_ttft(&f, "kv", 2, text_cal + 25);
    /* Text chosen, and the slow KV path would have been faster still: the
     * transfer as predicted, the measured W. */
    double kv_cal = fmax(3, text.decision.kv.link_wait_ms + text.decision.kv.transfer_ms) +
                    text.decision.kv.load_ms + text_prefill(&text, 8000);
    report_ttft(&f, "text", 3, kv_cal + 7);
    /* KV chosen and faster than text: no regret. */
    report_ttft(&f, "fine", 0, 1);
    cr_loop_stats st = loop_stats(&f);
    CU_ASSERT_EQUAL(st.regrets[CR_PATH_KV], 1);
    CU_ASSERT_DOUBLE_EQUAL(st.regret_ms[CR_PATH_KV], 25, 1e-6);
    CU_ASSERT_EQUAL(st.regrets[CR_PATH_TEXT], 1);
    CU_ASSERT_DOUBLE_EQUAL(st.regret_ms[CR_PATH_TEXT], 7, 1e-6);
    /* The engine used the other path: says nothing about the choice. */
    cr_outcome o = {.request_id = "fine", .mode = CR_INJECT_TEXT, .has = CR_OUT_TTFT,
                    .ttft_ms = 1e6};
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(loop_stats(&f).regrets[CR_PATH_KV], 1);
    fixture_close(&f);
}

static void test_receipted_hook_for_decision_and_outcome(void)
{
    fixture f;
    fixture_open(&f, 100);
    select_at(&f, "h", "fast", 0);
    CU_ASSERT(f.seen.receipts == 1 && f.seen.outcomes == 0 && f.seen.last.outcomes == 0);
    f.clock.t = 2;
    cr_outcome o = text_outcome("h");
    o.mode = CR_INJECT_KV_CACHE;
    cr_outcome_counts counts;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_report(f.core, &o, 1, &counts, &err), CR_OK);
    CU_ASSERT_EQUAL(f.seen.outcomes, 1);
    CU_ASSERT_STRING_EQUAL(f.seen.last.request_id, "h");
    CU_ASSERT(f.seen.last.outcomes == 1 && f.seen.last.reported_at_s == 2);
    CU_ASSERT(f.seen.last.error_has & (1u << CR_TERM_PREFILL));
    /* Unmatched outcomes and refused batches fire nothing. */
    o.request_id = "nobody";
    cr_core_report(f.core, &o, 1, &counts, &err);
    o.prefill_ms = -1;
    cr_core_report(f.core, &o, 1, &counts, &err);
    CU_ASSERT(f.seen.receipts == 1 && f.seen.outcomes == 1);
    fixture_close(&f);
}

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* 1M decisions at --receipts 100000: the store's bytes stop at the bound
 * (the index and chunk table from the start, slots as filled) and the
 * process's peak RSS stays flat once it is full. */
static void test_store_memory_bounded(void)
{
    fixture f;
    fixture_open(&f, 100000);
    cr_inject_request req = {.prompt_tokens = 100};
    cr_inject_response r;
    cr_error err;
    char id[32];
    uint64_t full_bytes = 0;
    long full_rss = 0;
    int failed = 0;
    for (int i = 0; i < 1000000; i++) {
        snprintf(id, sizeof id, "request-%d", i);
        f.clock.t += 1; /* past the previous prefill: the queue stays empty */
        failed += cr_core_select(f.core, id, &req, &r, &err) != CR_OK;
        if (i == 100000 - 1) {
            full_bytes = loop_stats(&f).receipt_bytes;
            full_rss = max_rss_kb();
        }
    }
    CU_ASSERT_EQUAL(failed, 0);
    cr_loop_stats st = loop_stats(&f);
    CU_ASSERT_EQUAL(st.receipts, 100000);
    CU_ASSERT_EQUAL(st.receipts_evicted, 900000);
    CU_ASSERT_EQUAL(st.receipt_bytes, full_bytes);
    /* The stated budget: a slot (the receipt + 4 B of hash) and 5.3 B of
     * index per receipt, the index rounded up to a power of two (<= 5.3 B
     * more). */
    double per_receipt = (double)st.receipt_bytes / 100000;
    CU_ASSERT(per_receipt <= sizeof(cr_receipt) + 4 + 10.7 + 1);
    CU_ASSERT(max_rss_kb() - full_rss < 16 * 1024);
    printf("\n    store: %.1f B/receipt (sizeof cr_receipt %zu), peak RSS +%ld KiB after full\n",
           per_receipt, sizeof(cr_receipt), max_rss_kb() - full_rss);
    CU_ASSERT(has_receipt(&f, "request-999999") && !has_receipt(&f, "request-899999"));
    fixture_close(&f);
}

/* Selections, reports, lookups and stats racing on the real clock: every
 * outcome finds its receipt (the bound holds them all), and the counters
 * add up. */
enum { RACERS = 3, PER_RACER = 2000 };

typedef struct racer {
    cr_core *core;
    int id, failures;
} racer;

static void *race(void *arg)
{
    racer *a = arg;
    char id[32];
    cr_inject_request req = {.prompt_tokens = 10};
    for (int i = 0; i < PER_RACER; i++) {
        cr_inject_response r;
        cr_error err;
        snprintf(id, sizeof id, "%d-%d", a->id, i);
        a->failures += cr_core_select(a->core, id, &req, &r, &err) != CR_OK;
        cr_outcome o = text_outcome(id);
        cr_outcome_counts counts;
        a->failures += cr_core_report(a->core, &o, 1, &counts, &err) != CR_OK ||
                       counts.matched != 1;
        cr_receipt got;
        a->failures += !cr_core_decision(a->core, id, &got) || got.outcomes != 1;
        cr_loop_stats st;
        cr_core_loop_stats_read(a->core, &st, NULL, 0, NULL, 0);
    }
    return NULL;
}

static void test_concurrent_selects_and_reports(void)
{
    cr_core_config cfg;
    quiet_config(&cfg, RACERS * PER_RACER);
    cr_error err;
    cr_core *c = cr_core_new(&cfg, NULL, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    racer args[RACERS];
    pthread_t th[RACERS];
    for (int i = 0; i < RACERS; i++) {
        args[i] = (racer){c, i, 0};
        pthread_create(&th[i], NULL, race, &args[i]);
    }
    for (int i = 0; i < RACERS; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(args[i].failures, 0);
    }
    cr_loop_stats st;
    cr_core_loop_stats_read(c, &st, NULL, 0, NULL, 0);
    CU_ASSERT_EQUAL(st.receipts_made, RACERS * PER_RACER);
    CU_ASSERT_EQUAL(st.outcomes_matched, RACERS * PER_RACER);
    CU_ASSERT_EQUAL(st.errors[CR_PATH_TEXT][CR_TERM_PREFILL].samples, RACERS * PER_RACER);
    cr_core_free(c);
}

static const cr_test_case loop_tests[] = {
    {"receipts only for real selects with ids", test_receipts_only_for_real_selects_with_ids},
    {"eviction oldest first, replacement", test_eviction_oldest_first_and_replacement},
    {"report checks the whole batch first", test_report_checks_whole_batch_first},
    {"matched, unmatched, rejected", test_matched_unmatched_rejected},
    {"term errors on the receipt", test_term_errors_on_the_receipt},
    {"served hits by admitted and shard", test_served_hits_by_admitted_and_shard},
    {"regret both ways", test_regret_both_ways},
    {"receipted hook for decision and outcome", test_receipted_hook_for_decision_and_outcome},
    {"store memory bounded at 1M decisions", test_store_memory_bounded},
    {"concurrent selects and reports", test_concurrent_selects_and_reports},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"core loop", loop_tests}};
CR_TEST_MAIN(suites)
