/* Injection decision: flags and model resolution, hand-computed decisions,
 * monotonicity properties over random requests, reservations, input errors,
 * the no-driver path, concurrent callers (run under TSan in CI), online
 * calibration against a synthetic GPU, and --model-config. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cunit_main.h"
#include "inject.h"

#define BOGUS_CUDA "libcuda-does-not-exist.so.1"

static int close_rel(double got, double want)
{
    return got == want || fabs(got - want) <= 1e-9 * fabs(want);
}

static void set_flags(cr_inject_config *cfg, const char *const *kv, size_t n)
{
    cr_error err;
    for (size_t i = 0; i + 1 < n; i += 2) {
        cr_status st = cr_inject_config_set(cfg, kv[i], kv[i + 1], &err);
        CU_ASSERT_EQUAL_FATAL(st, CR_OK);
    }
}

/* The model the hand-computed cases use: a = 10 ms, b = 0.1 ms/token,
 * c = 1e-5 ms/token^2; 125000 B/token; 10 Gb/s at efficiency 0.8 = 1e9 B/s,
 * so 0.125 ms per token (0.0125 at 100 Gb/s); h2d 25 GB/s = 0.005 ms per
 * token plus 2 ms; margin 100 ms, penalty 0.5. */
/* clang-format off */
static const char *const HAND_FLAGS[] = {
    "--prefill-coeffs", "10,0.1,0.00001", "--kv-bytes-per-token", "125000",
    "--link-gbps",      "10",             "--link-efficiency",    "0.8",
    "--h2d-gbps",       "25",             "--load-fixed-ms",      "2",
    "--kv-source",      "fast=100,1",     "--kv-source",          "far=100,500",
};
/* clang-format on */

static cr_injector *injector_with(const char *const *flags, size_t n)
{
    cr_inject_config cfg;
    cr_error err;
    cr_inject_config_default(&cfg);
    set_flags(&cfg, flags, n);
    cr_injector *inj = cr_injector_new(&cfg, &err);
    cr_inject_config_clear(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inj);
    return inj;
}

static cr_injector *hand_injector(void)
{
    return injector_with(HAND_FLAGS, sizeof HAND_FLAGS / sizeof HAND_FLAGS[0]);
}

/* The links cr_inject_select should find for the hand config's sources. */
static cr_inject_link hand_link(const char *name, double wait_ms)
{
    if (strcmp(name, "fast") == 0)
        return (cr_inject_link){100, 1, wait_ms};
    if (strcmp(name, "far") == 0)
        return (cr_inject_link){100, 500, wait_ms};
    return (cr_inject_link){10, CR_INJECT_DEFAULT_RTT_MS, wait_ms};
}

/* ---- flags and model resolution ----------------------------------------- */

static void test_defaults_resolve(void)
{
    cr_inject_config cfg;
    cr_inject_model m;
    cr_error err;
    cr_inject_config_default(&cfg);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &m, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(m.source, "prefill=default kv_bytes=default link=default h2d=default "
                                     "margin=default penalty=default");
    /* peak * mfu = 312e12 * 0.5 = 1.56e14 FLOP/s.
     * b = 2 * 8.03e9 / 1.56e14 s = 1.0294871794871795e-4 s = 0.10294871794871795 ms
     * c = 2 * 32 * 4096 / 1.56e14 s = 1.6804102564102564e-9 s = 1.68041...e-6 ms
     * kv = 2 * 32 * 8 * 128 * 2 / 1 = 131072 B */
    CU_ASSERT(close_rel(m.prefill.fixed_ms, 10));
    CU_ASSERT(close_rel(m.prefill.ms_per_token, 0.10294871794871795));
    CU_ASSERT(close_rel(m.prefill.ms_per_token2, 1.6804102564102564e-6));
    CU_ASSERT(close_rel(m.peak_tflops, 312));
    CU_ASSERT_EQUAL(m.kv_bytes_per_token, 131072);
    CU_ASSERT_EQUAL(m.link_gbps, 10);
    CU_ASSERT_EQUAL(m.link_rtt_ms, 0.2);
    CU_ASSERT_EQUAL(m.link_efficiency, 0.825);
    CU_ASSERT_EQUAL(m.load.h2d_gbps, 25);
    CU_ASSERT_EQUAL(m.load.fixed_ms, 2);
    CU_ASSERT_EQUAL(m.decision_margin_ms, 100);
    CU_ASSERT_EQUAL(m.link_queue_penalty, 0.5);
    CU_ASSERT_EQUAL(cr_inject_model_resolve(&cfg, NULL, 1, &m, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..0, got 1");
}

static void test_flags_resolve(void)
{
    /* clang-format off */
    static const char *const flags[] = {
        "--model-layers", "80",   "--model-kv-heads", "8",    "--model-head-dim",      "128",
        "--kv-dtype-bytes", "2",  "--tensor-parallel", "4",   "--peak-tflops",         "1000",
        "--link-gbps",    "40",   "--h2d-gbps",       "50",   "--decision-margin-ms",  "0",
        "--link-queue-penalty", "2", "--model-params-b", "70", "--model-d-model",      "8192",
        "--mfu",          "0.4",
    };
    /* clang-format on */
    cr_inject_config cfg;
    cr_inject_model m;
    cr_error err;
    cr_inject_config_default(&cfg);
    set_flags(&cfg, flags, sizeof flags / sizeof flags[0]);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &m, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(m.source, "prefill=flag kv_bytes=model-shape link=flag h2d=flag "
                                     "margin=flag penalty=flag");
    /* kv = 2 * 80 * 8 * 128 * 2 / 4 = 81920 B. peak * mfu = 4e14:
     * b = 1.4e11 / 4e14 s = 0.35 ms; c = 2 * 80 * 8192 / 4e14 s = 3.2768e-6 ms */
    CU_ASSERT_EQUAL(m.kv_bytes_per_token, 81920);
    CU_ASSERT(close_rel(m.prefill.ms_per_token, 0.35));
    CU_ASSERT(close_rel(m.prefill.ms_per_token2, 3.2768e-6));
    CU_ASSERT_EQUAL(m.link_gbps, 40);
    CU_ASSERT_EQUAL(m.load.h2d_gbps, 50);
    CU_ASSERT_EQUAL(m.decision_margin_ms, 0);
    CU_ASSERT_EQUAL(m.link_queue_penalty, 2);
    set_flags(&cfg, HAND_FLAGS, 4);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &m, &err), CR_OK);
    CU_ASSERT(strncmp(m.source, "prefill=fitted kv_bytes=flag ", 29) == 0);
    CU_ASSERT_EQUAL(m.prefill.fixed_ms, 10);
    CU_ASSERT_EQUAL(m.prefill.ms_per_token, 0.1);
    CU_ASSERT_EQUAL(m.prefill.ms_per_token2, 0.00001);
    CU_ASSERT_EQUAL(m.peak_tflops, 0);
    CU_ASSERT_EQUAL(m.kv_bytes_per_token, 125000);
    cr_inject_config_clear(&cfg);
}

/* Two GPUs: one with a known peak (1000 TFLOPS for round numbers) and a
 * measured h2d, one of unknown architecture; NICs with the fastest up one
 * an RDMA port. */
/* clang-format off */
static const cr_gpu_info PROBED_GPUS[2] = {
    {.index = 0, .sm_count = 132, .cc_major = 9, .h2d_gbps = 50, .peak_tflops = 1000,
     .arch_known = 1},
    {.index = 1, .sm_count = 142, .cc_major = 8, .cc_minor = 9},
};
static const cr_nic_info PROBED_NICS[3] = {
    {.name = "eth0", .speed_gbps = 25, .up = 1},
    {.name = "eth1", .speed_gbps = 400, .up = 0},
    {.name = "rdma:mlx5_0/1", .speed_gbps = 200, .up = 1, .is_rdma = 1},
};
static const cr_node_snapshot PROBED = {
    .cuda_available = 1, .n_gpus = 2, .gpus = PROBED_GPUS, .n_nics = 3, .nics = PROBED_NICS,
};
/* clang-format on */

static void test_probe_resolve(void)
{
    cr_inject_config cfg;
    cr_inject_model m;
    cr_error err;
    cr_inject_config_default(&cfg);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, &PROBED, 0, &m, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(m.source, "prefill=probe kv_bytes=default link=nic h2d=probe "
                                     "margin=default penalty=default");
    /* peak * mfu = 5e14: b = 1.606e10 / 5e14 s = 0.03212 ms;
     * c = 262144 / 5e14 s = 5.24288e-7 ms */
    CU_ASSERT(close_rel(m.prefill.ms_per_token, 0.03212));
    CU_ASSERT(close_rel(m.prefill.ms_per_token2, 5.24288e-7));
    CU_ASSERT_EQUAL(m.link_gbps, 200);
    CU_ASSERT_EQUAL(m.load.h2d_gbps, 50);
    /* GPU 1: unknown arch and no h2d; the flags are the fallback. */
    cr_error e2;
    CU_ASSERT_EQUAL(cr_inject_config_set(&cfg, "--peak-tflops", "500", &e2), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, &PROBED, 1, &m, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(m.source, "prefill=flag kv_bytes=default link=nic h2d=default "
                                     "margin=default penalty=default");
    CU_ASSERT(close_rel(m.prefill.ms_per_token, 0.06424));
    CU_ASSERT_EQUAL(cr_inject_model_resolve(&cfg, &PROBED, 2, &m, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..1, got 2");
}

static void test_flag_values(void)
{
    cr_kv_source_spec s;
    cr_prefill_cost c;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_inject_parse_kv_source("a=b=25,0.5", &s, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(s.name, "a=b");
    CU_ASSERT_EQUAL(s.gbps, 25);
    CU_ASSERT_EQUAL(s.rtt_ms, 0.5);
    CU_ASSERT_EQUAL_FATAL(cr_inject_parse_kv_source("pool-1=40", &s, &err), CR_OK);
    CU_ASSERT_EQUAL(s.rtt_ms, CR_INJECT_DEFAULT_RTT_MS);
    CU_ASSERT_EQUAL_FATAL(cr_inject_parse_prefill_coeffs("1.5,0,2e-6", &c, &err), CR_OK);
    CU_ASSERT(c.fixed_ms == 1.5 && c.ms_per_token == 0 && c.ms_per_token2 == 2e-6);
}

static void test_flag_errors(void)
{
    char long_name[160];
    memset(long_name, 'n', 129);
    strcpy(long_name + 129, "=10");
    const struct {
        const char *flag, *value, *msg;
    } bad[] = {
        {"--mfu", "0", "--mfu must be in (0, 1], got \"0\""},
        {"--mfu", "1.5", "--mfu"},
        {"--link-gbps", "-1", "--link-gbps must be finite and > 0, got \"-1\""},
        {"--link-gbps", "nan", "--link-gbps"},
        {"--h2d-gbps", "inf", "--h2d-gbps"},
        {"--peak-tflops", "", "--peak-tflops"},
        {"--model-layers", "0", "--model-layers must be an integer in 1..1000000"},
        {"--model-layers", "2.5", "--model-layers"},
        {"--model-layers", "-3", "--model-layers"},
        {"--tensor-parallel", "99999999999999999999", "--tensor-parallel"},
        {"--decision-margin-ms", "-1", "--decision-margin-ms"},
        {"--kv-bytes-per-token", "0", "--kv-bytes-per-token"},
        {"--prefill-coeffs", "1,2", "--prefill-coeffs expects a,b,c"},
        {"--prefill-coeffs", "1,,2", "--prefill-coeffs"},
        {"--prefill-coeffs", "1,2,3,", "--prefill-coeffs"},
        {"--prefill-coeffs", "1,2,-3", "--prefill-coeffs"},
        {"--kv-source", "noequals", "--kv-source expects NAME=GBPS[,RTT_MS]"},
        {"--kv-source", "=10", "--kv-source name must be 1..128 bytes, got 0"},
        {"--kv-source", long_name, "--kv-source name must be 1..128 bytes, got 129"},
        {"--kv-source", "a=0", "--kv-source a needs GBPS finite > 0"},
        {"--kv-source", "a=10,-1", "--kv-source a"},
        {"--kv-source", "a=10,1,2", "--kv-source"},
        {"--kv-source", "dup=5", "--kv-source dup given twice"},
        {"--no-such-flag", "1", "unknown flag --no-such-flag"},
        {"--calibrate", "maybe", "--calibrate must be one of off, on, got \"maybe\""},
        {"--calibration-half-life", "0", "--calibration-half-life must be an integer in 1.."},
        {"--calibration-min-samples", "2", "--calibration-min-samples must be an integer in 3.."},
        {"--model-config", "/nonexistent/config.json", "--model-config /nonexistent/config.json"},
    };
    cr_inject_config cfg;
    cr_error err;
    cr_inject_config_default(&cfg);
    CU_ASSERT_EQUAL_FATAL(cr_inject_config_set(&cfg, "--kv-source", "dup=1", &err), CR_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        CU_ASSERT_EQUAL(cr_inject_config_set(&cfg, bad[i].flag, bad[i].value, &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i].msg));
    }
    CU_ASSERT_EQUAL(cfg.n_kv_sources, 1);
    CU_ASSERT_EQUAL(cfg.set, 0); /* failed sets mark nothing */
    /* Filled in directly: the check names the flag too. */
    cfg.mfu = 2;
    CU_ASSERT_PTR_NULL(cr_injector_new(&cfg, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "--mfu must be in (0, 1], got 2");
    cr_inject_config_clear(&cfg);
    CU_ASSERT_PTR_NULL(cfg.kv_sources);
}

/* ---- hand-computed decisions -------------------------------------------- */

typedef struct hand_case {
    const char *what;
    uint32_t p, k;
    cr_kv_source src[3];
    size_t n_src;
    double w;
    double lw[3]; /* link waits; cases with any are decide-only */
    cr_inject_mode mode;
    const char *source, *reason;
    double text_total, kv_total, kv_transfer, kv_load, kv_prefill, saving;
} hand_case;

/* L = P + K. text = W + 10 + 0.1 L + 1e-5 L^2.
 * kv = max(W, Lw + rtt + C * per-token transfer) + 2 + 0.005 C
 *      + 10 + 0.1 (L - C) + 1e-5 (L^2 - C^2). */
/* clang-format off */
static const hand_case HAND[] = {
    /* L = 1000: text = 50 + 10 + 100 + 10 = 170. */
    {"no knowledge", 1000, 0, {{"s1", 0}}, 1, 50, {0}, CR_INJECT_TEXT, "", "no_knowledge",
     170, 0, 0, 0, 0, 0},
    /* L = 2000: text = 10 + 200 + 40 = 250; no source holds anything. */
    {"nothing cached", 1000, 1000, {{"s1", 0}}, 1, 0, {0}, CR_INJECT_TEXT, "", "no_kv_available",
     250, 0, 0, 0, 0, 0},
    /* L = 10000: text = 10 + 1000 + 1000 = 2010. C = 9000 at 10 Gb/s:
     * transfer 0.2 + 1125 = 1125.2, load 2 + 45 = 47,
     * prefill 10 + 100 + 1e-5 (1e8 - 8.1e7) = 300; kv = 1472.2;
     * 1472.2 + 100 < 2010; saving 537.8. */
    {"kv faster", 1000, 9000, {{"s1", 9000}}, 1, 0, {0}, CR_INJECT_KV_CACHE, "s1", "kv_faster",
     2010, 1472.2, 1125.2, 47, 300, 537.8},
    /* W = 2000 hides the 1125.2 transfer: text 4010, kv 2000 + 347 = 2347. */
    {"kv hidden by queue", 1000, 9000, {{"s1", 9000}}, 1, 2000, {0}, CR_INJECT_KV_CACHE, "s1",
     "kv_hidden_by_queue", 4010, 2347, 1125.2, 47, 300, 1663},
    /* L = 2000, C = 1000: transfer 0.2 + 125 = 125.2, load 7,
     * prefill 10 + 100 + 30 = 140; kv = 272.2 > text 250: saving 22.2. */
    {"text faster", 1000, 1000, {{"s1", 1000}}, 1, 0, {0}, CR_INJECT_TEXT, "s1", "text_faster",
     250, 272.2, 125.2, 7, 140, 22.2},
    /* L = 5000: text = 10 + 500 + 250 = 760. C = 4000: transfer 500.2,
     * load 22, prefill 10 + 100 + 90 = 200; kv = 722.2 is faster, but not
     * by the margin: text, saving 722.2 - 760 = -37.8. */
    {"within the margin", 1000, 4000, {{"s1", 4000}}, 1, 0, {0}, CR_INJECT_TEXT, "s1",
     "text_faster", 760, 722.2, 500.2, 22, 200, -37.8},
    /* Equal scores (1472.2): the bytewise smaller name wins. */
    {"tie by name", 1000, 9000, {{"s2", 9000}, {"s1", 9000}}, 2, 0, {0}, CR_INJECT_KV_CACHE, "s1",
     "kv_faster", 2010, 1472.2, 1125.2, 47, 300, 537.8},
    /* fast = 100 Gb/s, rtt 1: transfer 1 + 112.5 = 113.5; kv 460.5. */
    {"per-source bandwidth", 1000, 9000, {{"s1", 9000}, {"fast", 9000}}, 2, 0, {0},
     CR_INJECT_KV_CACHE, "fast", "kv_faster", 2010, 460.5, 113.5, 47, 300, 1549.5},
    /* far = 100 Gb/s, rtt 500: transfer 612.5, kv 959.5, beats s1's 1472.2 */
    {"per-source rtt", 1000, 9000, {{"far", 9000}, {"s1", 9000}}, 2, 0, {0}, CR_INJECT_KV_CACHE,
     "far", "kv_faster", 2010, 959.5, 612.5, 47, 300, 1050.5},
    /* ... but loses to fast, same bandwidth, by rtt alone. */
    {"rtt decides", 1000, 9000, {{"far", 9000}, {"fast", 9000}}, 2, 0, {0}, CR_INJECT_KV_CACHE,
     "fast", "kv_faster", 2010, 460.5, 113.5, 47, 300, 1549.5},
    /* Fewer cached tokens elsewhere: fast C = 4000: transfer 1 + 50 = 51,
     * load 22, prefill 10 + 600 + 840 = 1450: kv 1523 > s1's 1472.2. */
    {"more cached wins", 1000, 9000, {{"fast", 4000}, {"s1", 9000}}, 2, 0, {0},
     CR_INJECT_KV_CACHE, "s1", "kv_faster", 2010, 1472.2, 1125.2, 47, 300, 537.8},
    /* Lw = 1000 on s1: kv = 2125.2 + 347 = 2472.2, score + 500 penalty +
     * 100 margin > 2010: text; idle it would win. saving 462.2. */
    {"link congested", 1000, 9000, {{"s1", 9000}}, 1, 0, {1000}, CR_INJECT_TEXT, "s1",
     "link_congested", 2010, 2472.2, 1125.2, 47, 300, 462.2},
    /* s1 congested as above, fast idle: fast wins at 460.5. */
    {"congestion avoided", 1000, 9000, {{"s1", 9000}, {"fast", 9000}}, 2, 0, {1000, 0},
     CR_INJECT_KV_CACHE, "fast", "kv_faster", 2010, 460.5, 113.5, 47, 300, 1549.5},
};
/* clang-format on */

static void check_hand(const hand_case *c, const cr_inject_response *r)
{
    CU_ASSERT_EQUAL(r->mode, c->mode);
    CU_ASSERT_STRING_EQUAL(r->source, c->source);
    CU_ASSERT_STRING_EQUAL(cr_inject_reason_name(r->reason), c->reason);
    CU_ASSERT_EQUAL(r->has_kv, c->source[0] != '\0');
    CU_ASSERT(close_rel(r->text.total_ms, c->text_total));
    CU_ASSERT(close_rel(r->text.queue_wait_ms, c->w));
    CU_ASSERT(close_rel(r->kv.total_ms, c->kv_total));
    CU_ASSERT(close_rel(r->kv.transfer_ms, c->kv_transfer));
    CU_ASSERT(close_rel(r->kv.load_ms, c->kv_load));
    CU_ASSERT(close_rel(r->kv.prefill_ms, c->kv_prefill));
    CU_ASSERT(close_rel(r->saving_ms, c->saving));
    if (strcmp(r->source, c->source) != 0 || !close_rel(r->saving_ms, c->saving))
        fprintf(stderr, "\n  case '%s': got %s %s saving %.17g\n", c->what, r->source, cr_inject_reason_name(r->reason),
                r->saving_ms);
}

static void test_hand_cases(void)
{
    cr_injector *inj = hand_injector();
    cr_inject_model m;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_injector_model(inj, NULL, 0, &m, &err), CR_OK);
    for (size_t i = 0; i < sizeof HAND / sizeof HAND[0]; i++) {
        const hand_case *c = &HAND[i];
        cr_inject_request req = {.prompt_tokens = c->p,
                                 .knowledge_tokens = c->k,
                                 .sources = c->src,
                                 .n_sources = c->n_src,
                                 .has_queue_wait = 1,
                                 .queue_wait_ms = c->w,
                                 .dry_run = 1};
        cr_inject_link links[3];
        int has_link_wait = 0;
        for (size_t j = 0; j < c->n_src; j++) {
            links[j] = hand_link(c->src[j].name, c->lw[j]);
            has_link_wait |= c->lw[j] > 0;
        }
        cr_inject_response r;
        cr_inject_decide(&m, &req, c->w, links, &r);
        check_hand(c, &r);
        if (has_link_wait)
            continue;
        /* Idle links: select must find the same links by name. */
        CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, NULL, &req, 0, &r, &err), CR_OK);
        check_hand(c, &r);
    }
    CU_ASSERT_EQUAL(cr_injector_tracked_links(inj), 0);
    cr_injector_free(inj);
}

/* ---- properties over random requests ------------------------------------ */

/* A seeded PRNG (splitmix64); each calibration test has its own. */
typedef struct rng {
    uint64_t state;
} rng;

static double rng_uniform(rng *r, double lo, double hi)
{
    r->state += 0x9e3779b97f4a7c15ull;
    return lo + (hi - lo) * (double)(cr_mix64(r->state) >> 11) * 0x1p-53;
}

static rng shared_rng = {0x243f6a8885a308d3ull};

static double uniform(double lo, double hi) { return rng_uniform(&shared_rng, lo, hi); }

typedef struct random_case {
    cr_kv_source src[4];
    cr_inject_link links[4];
    cr_inject_request req;
    double w;
} random_case;

static const char *const NAMES[4] = {"fast", "far", "s1", "s2"};

static void random_request(random_case *rc)
{
    memset(rc, 0, sizeof *rc);
    rc->req.prompt_tokens = (uint32_t)uniform(0, 20000);
    rc->req.knowledge_tokens = (uint32_t)uniform(1, 30000);
    rc->req.n_sources = (size_t)uniform(1, 4.999);
    for (size_t i = 0; i < rc->req.n_sources; i++) {
        rc->src[i].name = NAMES[i];
        rc->src[i].cached_tokens = (uint32_t)uniform(0, rc->req.knowledge_tokens + 0.999);
        rc->links[i] = (cr_inject_link){uniform(1, 400), uniform(0, 5), uniform(0, 500)};
    }
    rc->req.sources = rc->src;
    rc->w = uniform(0, 3000);
}

static int decides_kv(const cr_inject_model *m, const random_case *rc)
{
    cr_inject_response r;
    cr_inject_decide(m, &rc->req, rc->w, rc->links, &r);
    return r.mode == CR_INJECT_KV_CACHE;
}

static void check_properties(const cr_inject_model *m, int *n_kv, int *n_text)
{
    random_case rc, more;
    random_request(&rc);
    int kv = decides_kv(m, &rc);
    *n_kv += kv;
    *n_text += !kv;
    more = rc;
    more.req.sources = more.src;
    if (kv) {
        for (size_t i = 0; i < more.req.n_sources; i++)
            more.links[i].gbps *= uniform(1, 10);
        CU_ASSERT(decides_kv(m, &more)); /* more bandwidth */
        more = rc;
        more.req.sources = more.src;
        more.w += uniform(0, 5000);
        CU_ASSERT(decides_kv(m, &more)); /* a longer queue */
        more.w = rc.w;
        more.req.knowledge_tokens += (uint32_t)uniform(1, 50000);
        CU_ASSERT(decides_kv(m, &more)); /* more knowledge, same cached */
    } else {
        size_t i = (size_t)uniform(0, (double)more.req.n_sources - 0.001);
        more.links[i].wait_ms += uniform(0, 3000);
        CU_ASSERT(!decides_kv(m, &more)); /* a longer link wait */
    }
}

static void test_properties(void)
{
    cr_inject_config cfg;
    cr_inject_model models[2];
    cr_error err;
    cr_inject_config_default(&cfg);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &models[0], &err), CR_OK);
    set_flags(&cfg, HAND_FLAGS, 12);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &models[1], &err), CR_OK);
    cr_inject_config_clear(&cfg);
    int n_kv = 0, n_text = 0;
    for (int i = 0; i < 20000; i++)
        check_properties(&models[i & 1], &n_kv, &n_text);
    /* Neither branch may be vacuous. */
    CU_ASSERT(n_kv > 2000);
    CU_ASSERT(n_text > 2000);
}

static int same_cost(const cr_cost_breakdown *a, const cr_cost_breakdown *b)
{
    return a->queue_wait_ms == b->queue_wait_ms && a->prefill_ms == b->prefill_ms &&
           a->link_wait_ms == b->link_wait_ms && a->transfer_ms == b->transfer_ms &&
           a->load_ms == b->load_ms && a->total_ms == b->total_ms;
}

static int same_response(const cr_inject_response *a, const cr_inject_response *b)
{
    return a->mode == b->mode && a->source_index == b->source_index &&
           strcmp(a->source, b->source) == 0 && a->has_kv == b->has_kv &&
           same_cost(&a->text, &b->text) && same_cost(&a->kv, &b->kv) &&
           a->saving_ms == b->saving_ms && a->reason == b->reason;
}

/* select with an explicit queue wait and idle links is decide on the links
 * the config names. */
static void test_select_matches_decide(void)
{
    cr_injector *inj = hand_injector();
    cr_inject_model m;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_injector_model(inj, NULL, 0, &m, &err), CR_OK);
    for (int i = 0; i < 2000; i++) {
        random_case rc;
        random_request(&rc);
        for (size_t j = 0; j < rc.req.n_sources; j++)
            rc.links[j] = hand_link(rc.src[j].name, 0);
        rc.req.has_queue_wait = 1;
        rc.req.queue_wait_ms = rc.w;
        rc.req.dry_run = 1;
        cr_inject_response a, b;
        cr_inject_decide(&m, &rc.req, rc.w, rc.links, &a);
        CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, NULL, &rc.req, 0, &b, &err), CR_OK);
        CU_ASSERT(same_response(&a, &b));
    }
    cr_injector_free(inj);
}

/* ---- reservations --------------------------------------------------------- */

static cr_inject_response select_ok(cr_injector *inj, const cr_inject_request *req, double now)
{
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, NULL, req, now, &r, &err), CR_OK);
    return r;
}

static void test_gpu_reservations(void)
{
    /* The "text faster" case: text alone (250 vs 272.2), 250 ms of GPU. */
    static const cr_kv_source src[] = {{"s1", 1000}};
    cr_inject_request req = {.prompt_tokens = 1000,
                             .knowledge_tokens = 1000,
                             .sources = src,
                             .n_sources = 1,
                             .dry_run = 1};
    cr_injector *inj = hand_injector();
    CU_ASSERT_EQUAL(select_ok(inj, &req, 0).text.queue_wait_ms, 0);
    CU_ASSERT_EQUAL(select_ok(inj, &req, 0).text.queue_wait_ms, 0); /* dry runs reserve nothing */
    req.dry_run = 0;
    cr_inject_response first = select_ok(inj, &req, 0);
    cr_inject_response second = select_ok(inj, &req, 0);
    CU_ASSERT_EQUAL(first.mode, CR_INJECT_TEXT);
    CU_ASSERT_EQUAL(first.text.queue_wait_ms, 0);
    /* The second sees the first's 250 ms: text 500, while KV's 125.2 ms
     * transfer hides behind the queue: 250 + 7 + 140 = 397, + 100 < 500. */
    CU_ASSERT(close_rel(second.text.queue_wait_ms, 250));
    CU_ASSERT(close_rel(second.text.total_ms, 500));
    CU_ASSERT(close_rel(second.kv.total_ms, 397));
    CU_ASSERT_EQUAL(second.mode, CR_INJECT_KV_CACHE);
    CU_ASSERT_STRING_EQUAL(cr_inject_reason_name(second.reason), "kv_hidden_by_queue");
    /* It reserved its own 140 ms prefill: the GPU is busy until 390. */
    req.dry_run = 1;
    CU_ASSERT(close_rel(select_ok(inj, &req, 100).text.queue_wait_ms, 290));
    CU_ASSERT_EQUAL(select_ok(inj, &req, 390).text.queue_wait_ms, 0); /* expired */
    /* A given queue_wait_ms wins over the timeline. */
    req.has_queue_wait = 1;
    req.queue_wait_ms = 7;
    CU_ASSERT_EQUAL(select_ok(inj, &req, 100).text.queue_wait_ms, 7);
    /* Each GPU keeps its own timeline. */
    cr_error err;
    cr_inject_response r;
    req.has_queue_wait = 0;
    req.gpu = 1;
    CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, &PROBED, &req, 100, &r, &err), CR_OK);
    CU_ASSERT_EQUAL(r.text.queue_wait_ms, 0);
    cr_injector_free(inj);
}

static void test_link_reservations(void)
{
    /* The "kv faster" case: KV from s1, reserving 300 ms of GPU and
     * 1125 ms of link (transfer 1125.2 less the 0.2 rtt). */
    static const cr_kv_source src[] = {{"s1", 9000}, {"s2", 9000}};
    cr_inject_request req = {
        .prompt_tokens = 1000, .knowledge_tokens = 9000, .sources = src, .n_sources = 1};
    cr_injector *inj = hand_injector();
    cr_inject_response r = select_ok(inj, &req, 0);
    CU_ASSERT_EQUAL(r.mode, CR_INJECT_KV_CACHE);
    CU_ASSERT_EQUAL(cr_injector_tracked_links(inj), 1);
    /* W = 300, Lw = 1125: kv = max(300, 2250.2) + 347 = 2597.2, score
     * + 562.5 + 100 > text 300 + 2010 = 2310; idle, 1472.2 + 100 < 2310. */
    req.dry_run = 1;
    r = select_ok(inj, &req, 0);
    CU_ASSERT(close_rel(r.kv.queue_wait_ms, 300));
    CU_ASSERT(close_rel(r.kv.link_wait_ms, 1125));
    CU_ASSERT(close_rel(r.kv.total_ms, 2597.2));
    CU_ASSERT_STRING_EQUAL(cr_inject_reason_name(r.reason), "link_congested");
    CU_ASSERT(close_rel(r.saving_ms, 287.2));
    /* At 600: W = 0, Lw = 525: kv = 1650.2 + 347 = 1997.2; + 262.5 + 100
     * > 2010: still congested. After 1125 the link is free again. */
    r = select_ok(inj, &req, 600);
    CU_ASSERT(close_rel(r.kv.link_wait_ms, 525));
    CU_ASSERT_STRING_EQUAL(cr_inject_reason_name(r.reason), "link_congested");
    r = select_ok(inj, &req, 1126);
    CU_ASSERT_EQUAL(r.kv.link_wait_ms, 0);
    CU_ASSERT_STRING_EQUAL(cr_inject_reason_name(r.reason), "kv_faster");
    /* Another source's link is its own: s2 is idle at 0 and wins. */
    req.n_sources = 2;
    r = select_ok(inj, &req, 0);
    CU_ASSERT_STRING_EQUAL(r.source, "s2");
    CU_ASSERT_EQUAL(r.kv.link_wait_ms, 0);
    /* Transfers queue on a link: with W = 5000 given, s1 is hidden by the
     * queue even behind its 1125 ms, and its link is then busy to 2250. */
    req.n_sources = 1;
    req.dry_run = 0;
    req.has_queue_wait = 1;
    req.queue_wait_ms = 5000;
    CU_ASSERT_STRING_EQUAL(cr_inject_reason_name(select_ok(inj, &req, 0).reason),
                           "kv_hidden_by_queue");
    req.dry_run = 1;
    CU_ASSERT(close_rel(select_ok(inj, &req, 0).kv.link_wait_ms, 2250));
    cr_injector_free(inj);
}

static void test_link_table_bound(void)
{
    char names[CR_INJECT_MAX_LINKS + 1][16];
    cr_kv_source src = {NULL, 9000};
    cr_inject_request req = {.prompt_tokens = 1000,
                             .knowledge_tokens = 9000,
                             .sources = &src,
                             .n_sources = 1,
                             .has_queue_wait = 1,
                             .queue_wait_ms = 0};
    /* 4097 decisions' GPU prefills stack past the default 600 s horizon:
     * not what this test is about. */
    const char *flags[sizeof HAND_FLAGS / sizeof HAND_FLAGS[0] + 2];
    memcpy(flags, HAND_FLAGS, sizeof HAND_FLAGS);
    flags[sizeof HAND_FLAGS / sizeof HAND_FLAGS[0]] = "--reservation-horizon-s";
    flags[sizeof HAND_FLAGS / sizeof HAND_FLAGS[0] + 1] = "86400";
    cr_injector *inj = injector_with(flags, sizeof flags / sizeof flags[0]);
    /* Each name's link is busy for 1125 ms from now = i / 1000 ms. */
    for (int i = 0; i <= CR_INJECT_MAX_LINKS; i++) {
        snprintf(names[i], sizeof names[i], "src-%d", i);
        src.name = names[i];
        CU_ASSERT_EQUAL(select_ok(inj, &req, i / 1000.0).mode, CR_INJECT_KV_CACHE);
    }
    /* Full, nothing expired: the soonest to free (src-0) made room. */
    CU_ASSERT_EQUAL(cr_injector_tracked_links(inj), CR_INJECT_MAX_LINKS);
    req.dry_run = 1;
    src.name = names[0];
    CU_ASSERT_EQUAL(select_ok(inj, &req, 5).kv.link_wait_ms, 0);
    src.name = names[1];
    CU_ASSERT(close_rel(select_ok(inj, &req, 5).kv.link_wait_ms, 0.001 + 1125 - 5));
    src.name = names[CR_INJECT_MAX_LINKS];
    CU_ASSERT(close_rel(select_ok(inj, &req, 5).kv.link_wait_ms, 4.096 + 1125 - 5));
    /* Much later every entry has expired: one new name sweeps them all. */
    req.dry_run = 0;
    src.name = "late";
    select_ok(inj, &req, 1e7);
    CU_ASSERT_EQUAL(cr_injector_tracked_links(inj), 1);
    cr_injector_free(inj);
}

/* ---- input errors ---------------------------------------------------------- */

static char long_name[CR_INJECT_NAME_MAX + 2];
static cr_kv_source many[CR_INJECT_MAX_SOURCES + 1];

/* One source over each limit's worth: 129-byte name, 65 sources. */
static void fill_limits(void)
{
    memset(long_name, 'x', CR_INJECT_NAME_MAX + 1);
    for (size_t i = 0; i < CR_INJECT_MAX_SOURCES + 1; i++)
        many[i] = (cr_kv_source){"s1", 1};
}

static void test_bad_requests(void)
{
    fill_limits();
    const cr_kv_source over[] = {{"s1", 800}, {"s2", 900}};
    const cr_kv_source empty[] = {{"", 1}};
    const cr_kv_source null_name[] = {{NULL, 1}};
    const cr_kv_source too_long[] = {{long_name, 1}};
    const cr_inject_request ok = {.prompt_tokens = 100, .knowledge_tokens = 800};
    const struct {
        cr_inject_request req;
        const char *msg;
    } bad[] = {
        {{.knowledge_tokens = 800, .sources = over, .n_sources = 2},
         "sources[1].cached_tokens 900 exceeds knowledge_tokens 800"},
        {{.knowledge_tokens = 800, .has_queue_wait = 1, .queue_wait_ms = -1},
         "queue_wait_ms must be finite and >= 0, got -1"},
        {{.knowledge_tokens = 800, .has_queue_wait = 1, .queue_wait_ms = NAN}, "queue_wait_ms"},
        {{.knowledge_tokens = 800, .has_queue_wait = 1, .queue_wait_ms = INFINITY},
         "queue_wait_ms"},
        {{.knowledge_tokens = 800, .gpu = 1}, "gpu must be in 0..0, got 1"},
        {{.knowledge_tokens = 800, .sources = many, .n_sources = CR_INJECT_MAX_SOURCES + 1},
         "sources has 65 entries, at most 64 allowed"},
        {{.knowledge_tokens = 800, .sources = empty, .n_sources = 1},
         "sources[0].name must be 1..128 bytes, got 0"},
        {{.knowledge_tokens = 800, .sources = null_name, .n_sources = 1}, "sources[0].name"},
        {{.knowledge_tokens = 800, .sources = too_long, .n_sources = 1},
         "sources[0].name must be 1..128 bytes, got 129"},
        {{.prompt_tokens = 5000000, .knowledge_tokens = 5000001},
         "prompt_tokens + knowledge_tokens must be <= 10000000, got 10000001"},
    };
    cr_injector *inj = hand_injector();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_inject_response r;
        cr_error err = {{0}};
        CU_ASSERT_EQUAL(cr_inject_select(inj, NULL, &bad[i].req, 0, &r, &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i].msg));
    }
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL(cr_inject_select(inj, NULL, &ok, NAN, &r, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "now_ms"));
    /* Nothing was reserved: an idle GPU and no links. */
    r = select_ok(inj, &ok, 0);
    CU_ASSERT_EQUAL(r.text.queue_wait_ms, 0);
    CU_ASSERT_EQUAL(cr_injector_tracked_links(inj), 0);
    cr_injector_free(inj);
}

/* The limits themselves are fine. */
static void test_request_limits(void)
{
    cr_injector *inj = hand_injector();
    cr_inject_response r;
    cr_error err;
    fill_limits();
    long_name[CR_INJECT_NAME_MAX] = '\0';
    many[0].name = long_name;
    cr_inject_request edge = {.prompt_tokens = 5000000,
                              .knowledge_tokens = 5000000,
                              .sources = many,
                              .n_sources = CR_INJECT_MAX_SOURCES,
                              .dry_run = 1};
    CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, NULL, &edge, 0, &r, &err), CR_OK);
    /* 64 equal scores: "s1" sorts before "xxx...", and the first "s1" wins. */
    CU_ASSERT_EQUAL(r.source_index, 1);
    CU_ASSERT_STRING_EQUAL(r.source, "s1");
    cr_injector_free(inj);
}

/* ---- the no-driver node ----------------------------------------------------- */

static void test_no_driver_defaults(void)
{
    cr_probe_config pc;
    cr_probe_config_default(&pc);
    pc.cuda_library = BOGUS_CUDA;
    pc.sysfs_root = "/nonexistent/cacheroute-sysfs";
    pc.nic_sample_s = 0;
    pc.interval_s = 0;
    cr_error err;
    cr_probe *p = cr_probe_start(&pc, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const cr_node_snapshot *s = cr_probe_acquire(p);
    CU_ASSERT_EQUAL(s->cuda_available, 0);
    CU_ASSERT(strlen(s->reason) > 0);
    CU_ASSERT_EQUAL(s->n_gpus, 0);
    CU_ASSERT_EQUAL(s->n_nics, 0);
    cr_inject_config cfg;
    cr_inject_config_default(&cfg);
    cr_injector *inj = cr_injector_new(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inj);
    cr_inject_model m;
    CU_ASSERT_EQUAL_FATAL(cr_injector_model(inj, s, 0, &m, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(m.source, "prefill=default kv_bytes=default link=default h2d=default "
                                     "margin=default penalty=default");
    CU_ASSERT(close_rel(m.peak_tflops, 312));
    const cr_inject_request req = {.prompt_tokens = 10, .knowledge_tokens = 10, .gpu = 1};
    cr_inject_response r;
    CU_ASSERT_EQUAL(cr_inject_select(inj, s, &req, 0, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..0, got 1");
    cr_injector_free(inj);
    cr_node_snapshot_release(s);
    cr_probe_stop(p);
}

/* ---- concurrency ------------------------------------------------------------ */

#define TEXT_THREADS 6
#define TEXT_CALLS 300
#define KV_THREADS 3

typedef struct worker {
    cr_injector *inj;
    int id;
    double waits[TEXT_CALLS];
} worker;

/* K = 0 on GPU 0, prefill 2 + 1 * 100 = 102 ms: each call must see a
 * distinct queue position, 0, 102, 204, ... in some order. */
static void *text_worker(void *arg)
{
    worker *w = arg;
    const cr_inject_request req = {.prompt_tokens = 100};
    for (int i = 0; i < TEXT_CALLS; i++) {
        cr_inject_response r;
        cr_error err;
        if (cr_inject_select(w->inj, &PROBED, &req, 0, &r, &err) != CR_OK)
            w->waits[i] = -1;
        else
            w->waits[i] = r.text.queue_wait_ms;
    }
    return NULL;
}

/* KV traffic on GPU 1 over a small set of names: link table churn. Text
 * costs 2 + 10000 ms there, so KV wins and reserves links. */
static void *kv_worker(void *arg)
{
    worker *w = arg;
    char name[16];
    for (int i = 0; i < 2000; i++) {
        snprintf(name, sizeof name, "pool-%d", (i * 7 + w->id) % 50);
        cr_kv_source src = {name, 9000};
        cr_inject_request req = {.prompt_tokens = 1000,
                                 .knowledge_tokens = 9000,
                                 .sources = &src,
                                 .n_sources = 1,
                                 .gpu = 1,
                                 .dry_run = i % 3 == 0};
        cr_inject_response r;
        cr_error err;
        CU_ASSERT_EQUAL(cr_inject_select(w->inj, &PROBED, &req, i, &r, &err), CR_OK);
    }
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_concurrent_select(void)
{
    static const char *const flags[] = {"--prefill-coeffs", "2,1,0"};
    static worker workers[TEXT_THREADS + KV_THREADS];
    static double all[TEXT_THREADS * TEXT_CALLS];
    cr_inject_config cfg;
    cr_error err;
    cr_inject_config_default(&cfg);
    set_flags(&cfg, flags, 2);
    cfg.reservation_horizon_s = 86400; /* the workers stack far past the default */
    cr_injector *inj = cr_injector_new(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inj);
    pthread_t th[TEXT_THREADS + KV_THREADS];
    for (int t = 0; t < TEXT_THREADS + KV_THREADS; t++) {
        workers[t].inj = inj;
        workers[t].id = t;
        pthread_create(&th[t], NULL, t < TEXT_THREADS ? text_worker : kv_worker, &workers[t]);
    }
    for (int t = 0; t < TEXT_THREADS + KV_THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < TEXT_THREADS; t++)
        memcpy(all + (size_t)t * TEXT_CALLS, workers[t].waits, sizeof workers[t].waits);
    qsort(all, (size_t)TEXT_THREADS * TEXT_CALLS, sizeof all[0], by_value);
    for (int i = 0; i < TEXT_THREADS * TEXT_CALLS; i++)
        CU_ASSERT_EQUAL(all[i], 102.0 * i);
    size_t tracked = cr_injector_tracked_links(inj);
    CU_ASSERT(tracked >= 1 && tracked <= 50);
    cr_injector_free(inj);
}

/* ---- calibration ------------------------------------------------------------ */

/* A standard normal deviate (Box-Muller), clipped to +-4 so that 5% noise
 * keeps every time positive. */
static double rng_normal(rng *r)
{
    double u = rng_uniform(r, 0x1p-53, 1), v = rng_uniform(r, 0, 1);
    return fmax(-4, fmin(4, sqrt(-2 * log(u)) * cos(2 * M_PI * v)));
}

/* Prefill coefficients (ms, ms/token, ms/token^2), and how a GPU spends
 * time given them: the model's formula, or a concave one. */
typedef struct coeffs {
    double a, b, c;
} coeffs;

typedef double (*prefill_fn)(const coeffs *k, double s, double l);

static double quadratic_ms(const coeffs *k, double s, double l)
{
    return k->a + k->b * (l - s) + k->c * (l * l - s * s);
}

static double concave_ms(const coeffs *k, double s, double l) { return k->a + k->b * sqrt(l - s); }

static coeffs model_coeffs(const cr_inject_model *m)
{
    return (coeffs){m->prefill.fixed_ms, m->prefill.ms_per_token, m->prefill.ms_per_token2};
}

static coeffs fitted_coeffs(cr_injector *inj, uint32_t gpu)
{
    cr_inject_calibration cal;
    cr_injector_calibration(inj, gpu, &cal);
    return (coeffs){cal.prefill.fixed_ms, cal.prefill.ms_per_token, cal.prefill.ms_per_token2};
}

static cr_inject_model model_of(cr_injector *inj)
{
    cr_inject_model m;
    cr_error err;
    CU_ASSERT_EQUAL(cr_injector_model(inj, NULL, 0, &m, &err), CR_OK);
    return m;
}

static void observe_ok(cr_injector *inj, const cr_inject_observation *o)
{
    cr_error err;
    CU_ASSERT_EQUAL(cr_injector_observe(inj, o, &err), CR_OK);
}

/* What an engine reports: half text requests (s = 0), half KV ones with a
 * cached prefix; L in 500..32000. */
static void random_span(rng *r, double *s, double *l)
{
    *l = floor(rng_uniform(r, 500, 32000));
    *s = rng_uniform(r, 0, 1) < 0.5 ? 0 : floor(rng_uniform(r, 0, 0.9 * *l));
}

/* n prefills on GPU 0 from a GPU spending fn(t), with 5% multiplicative
 * noise. */
static void feed_prefills(cr_injector *inj, rng *r, prefill_fn fn, const coeffs *t, int n)
{
    for (int i = 0; i < n; i++) {
        double s, l;
        random_span(r, &s, &l);
        cr_inject_observation o = {.has_prefill = 1, .prefill_from = s, .prefill_to = l};
        o.prefill_ms = fn(t, s, l) * (1 + 0.05 * rng_normal(r));
        observe_ok(inj, &o);
    }
}

/* MAPE of k against the noiseless truth t on 1000 held-out requests (their
 * own seed: never fed to a fit). */
static double holdout_mape(const coeffs *k, const coeffs *t)
{
    rng r = {42};
    double sum = 0;
    for (int i = 0; i < 1000; i++) {
        double s, l;
        random_span(&r, &s, &l);
        double want = quadratic_ms(t, s, l);
        sum += fabs(quadratic_ms(k, s, l) - want) / want;
    }
    return sum / 1000;
}

/* The default model with the true GPU's prefill coefficients. */
static cr_inject_model with_prefill(const cr_inject_model *m, const coeffs *t)
{
    cr_inject_model out = *m;
    out.prefill.fixed_ms = t->a;
    out.prefill.ms_per_token = t->b;
    out.prefill.ms_per_token2 = t->c;
    return out;
}

/* Decisions over random KV requests on the default 10 Gb/s link: the ones
 * where the truth and the default model disagree must follow the truth once
 * calibrated. */
static void check_flips(cr_injector *inj, const cr_inject_model *prior, const coeffs *t)
{
    cr_inject_model truth = with_prefill(prior, t);
    const cr_inject_link link = {10, CR_INJECT_DEFAULT_RTT_MS, 0};
    rng r = {7};
    int n = 2000, flips = 0, flipped = 0, agree = 0;
    for (int i = 0; i < n; i++) {
        cr_kv_source src = {"s1", 0};
        cr_inject_request req = {.prompt_tokens = (uint32_t)rng_uniform(&r, 0, 4000),
                                 .knowledge_tokens = (uint32_t)rng_uniform(&r, 1000, 30000),
                                 .sources = &src,
                                 .n_sources = 1,
                                 .has_queue_wait = 1,
                                 .queue_wait_ms = rng_uniform(&r, 0, 1000),
                                 .dry_run = 1};
        src.cached_tokens = (uint32_t)(req.knowledge_tokens * rng_uniform(&r, 0.5, 1));
        cr_inject_response want, before, got = select_ok(inj, &req, 0);
        cr_inject_decide(&truth, &req, req.queue_wait_ms, &link, &want);
        cr_inject_decide(prior, &req, req.queue_wait_ms, &link, &before);
        agree += got.mode == want.mode;
        flips += before.mode != want.mode;
        flipped += before.mode != want.mode && got.mode == want.mode;
    }
    printf("\n    decisions: %d of %d should flip, %d did; %d of %d agree with the truth\n  ", flips, n,
           flipped, agree, n);
    CU_ASSERT(flips >= 100);
    CU_ASSERT(flipped >= 0.95 * flips);
    CU_ASSERT(agree >= 0.98 * n);
}

/* The synthetic GPU: b 3x and c 2x the default model's. */
static void test_calibration_converges(void)
{
    cr_injector *inj = injector_with(NULL, 0);
    cr_inject_model prior = model_of(inj);
    coeffs p = model_coeffs(&prior), t = {p.a, 3 * p.b, 2 * p.c};
    rng r = {1};
    feed_prefills(inj, &r, quadratic_ms, &t, 200);
    cr_inject_calibration cal;
    cr_injector_calibration(inj, 0, &cal);
    CU_ASSERT_EQUAL(cal.samples, 200);
    CU_ASSERT(cal.adopted);
    CU_ASSERT(cal.mape_fit < cal.mape_prior);
    cr_inject_model m = model_of(inj);
    coeffs k = model_coeffs(&m);
    double before = holdout_mape(&p, &t), after = holdout_mape(&k, &t);
    printf("\n    held-out prefill MAPE after 200 outcomes: default model %.1f%%, calibrated "
           "%.2f%%\n    fit a=%.4g b=%.4g c=%.4g, truth a=%.4g b=%.4g c=%.4g\n  ",
           100 * before, 100 * after, k.a, k.b, k.c, t.a, t.b, t.c);
    CU_ASSERT(after <= 0.05);
    CU_ASSERT(before > 0.3);
    char want[CR_INJECT_SOURCE_LEN];
    snprintf(want, sizeof want,
             "prefill=fitted(n=200,mape=%.1f%%) kv_bytes=default link=default h2d=default "
             "margin=default penalty=default",
             100 * cal.mape_fit);
    CU_ASSERT_STRING_EQUAL(m.source, want);
    CU_ASSERT_EQUAL(m.peak_tflops, 0);
    check_flips(inj, &prior, &t);
    cr_injector_free(inj);
}

/* A concave truth makes least squares want c < 0, a truth without a fixed
 * part makes noise push a below 0: the fit stays at or above 0 throughout. */
static void test_calibration_nonnegative(void)
{
    static const coeffs concave = {5, 40, 0}, no_fixed = {0, 0.3, 3e-6};
    const struct {
        prefill_fn fn;
        const coeffs *t;
    } cases[] = {{concave_ms, &concave}, {quadratic_ms, &no_fixed}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_injector *inj = injector_with(NULL, 0);
        rng r = {11};
        int negative = 0, at_zero = 0;
        for (int n = 0; n < 300; n++) {
            feed_prefills(inj, &r, cases[i].fn, cases[i].t, 1);
            coeffs k = fitted_coeffs(inj, 0);
            negative += k.a < 0 || k.b < 0 || k.c < 0;
            at_zero += k.a == 0 || k.c == 0;
        }
        CU_ASSERT_EQUAL(negative, 0);
        CU_ASSERT(at_zero > 0); /* the bound did bind */
        if (i == 0)
            CU_ASSERT_EQUAL(fitted_coeffs(inj, 0).c, 0);
        cr_injector_free(inj);
    }
}

/* Held-out error of the fit against the new truth, `after` samples after
 * the default GPU turned into the 3x b, 2x c one. */
static double error_after_step(const char *half_life, int after)
{
    const char *const flags[] = {"--calibration-half-life", half_life};
    cr_injector *inj = injector_with(flags, 2);
    cr_inject_model prior = model_of(inj);
    coeffs p = model_coeffs(&prior), t = {p.a, 3 * p.b, 2 * p.c};
    rng r = {3};
    feed_prefills(inj, &r, quadratic_ms, &p, 400);
    feed_prefills(inj, &r, quadratic_ms, &t, after);
    coeffs k = fitted_coeffs(inj, 0);
    cr_injector_free(inj);
    return holdout_mape(&k, &t);
}

/* inject.h's figure: after a 3x step, within 5% in 5 half-lives (the 400
 * old samples then weigh 2^-5). */
static void test_calibration_forgetting(void)
{
    double early = error_after_step("50", 10), tracked = error_after_step("50", 250);
    double stiff = error_after_step("1000000", 250);
    printf("\n    after a step: half-life 50, 10 samples %.1f%%, 250 samples %.2f%%; "
           "half-life 10^6, 250 samples %.1f%%\n  ",
           100 * early, 100 * tracked, 100 * stiff);
    CU_ASSERT(early > 0.1);
    CU_ASSERT(tracked <= 0.05);
    CU_ASSERT(stiff > 0.1);
}

/* One request shape cannot tell a from b from c: the prior stays, although
 * the fit predicts that one shape better. */
static void test_calibration_degenerate(void)
{
    cr_injector *inj = injector_with(NULL, 0);
    cr_inject_model prior = model_of(inj);
    coeffs p = model_coeffs(&prior), t = {p.a, 3 * p.b, 2 * p.c};
    rng r = {5};
    for (int i = 0; i < 100; i++) {
        cr_inject_observation o = {.has_prefill = 1, .prefill_to = 4000};
        o.prefill_ms = quadratic_ms(&t, 0, 4000) * (1 + 0.05 * rng_normal(&r));
        observe_ok(inj, &o);
    }
    cr_inject_calibration cal;
    cr_injector_calibration(inj, 0, &cal);
    CU_ASSERT_EQUAL(cal.samples, 100);
    CU_ASSERT(cal.mape_fit < cal.mape_prior);
    CU_ASSERT_FALSE(cal.adopted);
    cr_inject_model m = model_of(inj);
    CU_ASSERT_STRING_EQUAL(m.source, prior.source);
    CU_ASSERT(m.prefill.fixed_ms == p.a && m.prefill.ms_per_token == p.b &&
              m.prefill.ms_per_token2 == p.c);
    cr_injector_free(inj);
}

static void test_calibration_off(void)
{
    static const char *const flags[] = {"--calibrate", "off"};
    cr_injector *inj = injector_with(flags, 2);
    cr_inject_model prior = model_of(inj);
    coeffs p = model_coeffs(&prior), t = {p.a, 3 * p.b, 2 * p.c};
    rng r = {1};
    feed_prefills(inj, &r, quadratic_ms, &t, 200);
    observe_ok(inj, &(cr_inject_observation){.has_queue_wait = 1, .queue_wait_ms = 1000,
                                              .has_load = 1, .load_bytes = 1e6, .load_ms = 9,
                                              .has_transfer = 1, .source = "s1",
                                              .transfer_bytes = 1e6, .transfer_ms = 9});
    cr_inject_calibration cal;
    cr_injector_calibration(inj, 0, &cal);
    CU_ASSERT_EQUAL(cal.samples, 0);
    CU_ASSERT_EQUAL(cal.h2d.samples, 0);
    cr_inject_model m = model_of(inj);
    CU_ASSERT_STRING_EQUAL(m.source, prior.source);
    CU_ASSERT_EQUAL(m.prefill.ms_per_token, p.b);
    const cr_inject_request req = {.prompt_tokens = 100, .dry_run = 1};
    CU_ASSERT_EQUAL(select_ok(inj, &req, 0).text.queue_wait_ms, 0);
    CU_ASSERT_EQUAL(cr_injector_tracked_links(inj), 0);
    cr_injector_free(inj);
}

/* Sizes log-uniform in lo..hi bytes. */
static double random_bytes(rng *r, double lo, double hi)
{
    return floor(exp(rng_uniform(r, log(lo), log(hi))));
}

/* s1 is configured at 10 Gb/s with 0.2 ms; it really gives 40 Gb/s
 * (efficiency included) after 2 ms. */
static void test_link_calibration(void)
{
    static const char *const flags[] = {"--kv-source", "s1=10,0.2"};
    cr_injector *inj = injector_with(flags, 2);
    rng r = {9};
    for (int i = 0; i < 200; i++) {
        cr_inject_observation o = {.now_ms = i, .has_transfer = 1, .source = "s1"};
        o.transfer_bytes = random_bytes(&r, 1e4, 1e9);
        o.transfer_ms = (2 + o.transfer_bytes * 8 / 40e6) * (1 + 0.05 * rng_normal(&r));
        observe_ok(inj, &o);
    }
    cr_inject_line_calibration lc;
    CU_ASSERT_FATAL(cr_injector_link_calibration(inj, "s1", &lc));
    printf("\n    link after 200 transfers: %.2f Gb/s (truth 40), rtt %.3f ms (truth 2)\n  ", lc.gbps,
           lc.fixed_ms);
    CU_ASSERT_EQUAL(lc.samples, 200);
    CU_ASSERT(lc.adopted);
    CU_ASSERT(fabs(lc.gbps / 40 - 1) < 0.05);
    CU_ASSERT(fabs(lc.fixed_ms / 2 - 1) < 0.1);
    /* Decisions price s1 as measured; s2 keeps the configured default. */
    static const cr_kv_source src[] = {{"s1", 9000}, {"s2", 9000}};
    cr_inject_request req = {.prompt_tokens = 1000,
                             .knowledge_tokens = 9000,
                             .sources = src,
                             .n_sources = 1,
                             .dry_run = 1};
    double want = 2 + 9000 * 131072.0 * 8 / 40e6;
    CU_ASSERT(fabs(select_ok(inj, &req, 0).kv.transfer_ms / want - 1) < 0.05);
    req.sources = src + 1;
    CU_ASSERT(close_rel(select_ok(inj, &req, 0).kv.transfer_ms,
                        0.2 + 9000 * 131072.0 * 8 / (10 * 0.825 * 1e6)));
    CU_ASSERT_FALSE(cr_injector_link_calibration(inj, "s2", &lc));
    cr_injector_free(inj);
}

/* The GPU loads at 12 GB/s after 5 ms, not the configured 25 after 2. */
static void test_h2d_calibration(void)
{
    cr_injector *inj = injector_with(NULL, 0);
    rng r = {13};
    for (int i = 0; i < 200; i++) {
        cr_inject_observation o = {.has_load = 1};
        o.load_bytes = random_bytes(&r, 1e5, 1e10);
        o.load_ms = (5 + o.load_bytes / 12e6) * (1 + 0.05 * rng_normal(&r));
        observe_ok(inj, &o);
    }
    cr_inject_calibration cal;
    cr_injector_calibration(inj, 0, &cal);
    printf("\n    h2d after 200 loads: %.2f GB/s (truth 12), fixed %.3f ms (truth 5)\n  ",
           cal.h2d.gbps, cal.h2d.fixed_ms);
    CU_ASSERT_EQUAL(cal.samples, 0);
    CU_ASSERT_EQUAL(cal.h2d.samples, 200);
    CU_ASSERT(cal.h2d.adopted);
    CU_ASSERT(fabs(cal.h2d.gbps / 12 - 1) < 0.05);
    CU_ASSERT(fabs(cal.h2d.fixed_ms / 5 - 1) < 0.1);
    cr_inject_model m = model_of(inj);
    CU_ASSERT_EQUAL(m.load.h2d_gbps, cal.h2d.gbps);
    CU_ASSERT_EQUAL(m.load.fixed_ms, cal.h2d.fixed_ms);
    CU_ASSERT_STRING_EQUAL(m.source, "prefill=default kv_bytes=default link=default h2d=fitted "
                                     "margin=default penalty=default");
    cr_injector_free(inj);
}

/* The hand model: a K = 0 request of 1000 tokens prefills in 120 ms. */
static void test_gpu_timeline_corrections(void)
{
    cr_injector *inj = hand_injector();
    const cr_inject_request text = {.prompt_tokens = 1000};
    const cr_inject_request peek = {.prompt_tokens = 1000, .dry_run = 1};
    for (int i = 0; i < 3; i++)
        select_ok(inj, &text, 0); /* busy until 360 */
    CU_ASSERT(close_rel(select_ok(inj, &peek, 120).text.queue_wait_ms, 240));
    /* The first ended at 120 after 200 ms, not 120: the two behind it start
     * 80 ms later; a quicker one moves them earlier. */
    cr_inject_observation o = {.now_ms = 120, .has_prefill = 1, .prefill_to = 1000};
    o.prefill_ms = 200;
    observe_ok(inj, &o);
    CU_ASSERT(close_rel(select_ok(inj, &peek, 120).text.queue_wait_ms, 320));
    o.prefill_ms = 20;
    observe_ok(inj, &o);
    CU_ASSERT(close_rel(select_ok(inj, &peek, 120).text.queue_wait_ms, 220));
    /* Never to before now: 10000 tokens predicted at 2010 ms took 10. */
    o.prefill_to = 10000;
    o.prefill_ms = 10;
    observe_ok(inj, &o);
    CU_ASSERT_EQUAL(select_ok(inj, &peek, 120).text.queue_wait_ms, 0);
    /* With nothing pending there is nothing to move. */
    o.now_ms = 1000;
    o.prefill_ms = 5000;
    observe_ok(inj, &o);
    CU_ASSERT_EQUAL(select_ok(inj, &peek, 1000).text.queue_wait_ms, 0);
    /* A measured queue wait is the engine's queue: the timeline takes it,
     * and the prefill reported with it moves nothing more. */
    o.has_queue_wait = 1;
    o.queue_wait_ms = 700;
    observe_ok(inj, &o);
    CU_ASSERT(close_rel(select_ok(inj, &peek, 1000).text.queue_wait_ms, 700));
    CU_ASSERT(close_rel(select_ok(inj, &peek, 1100).text.queue_wait_ms, 600));
    o.now_ms = 1100;
    o.queue_wait_ms = 0;
    observe_ok(inj, &o);
    CU_ASSERT_EQUAL(select_ok(inj, &peek, 1100).text.queue_wait_ms, 0);
    cr_injector_free(inj);
}

/* The "kv faster" case reserves 1125 ms of s1's link (10 Gb/s at 0.8, rtt
 * 0.2: 1.125e9 bytes are predicted at 1125.2 ms). */
static void test_link_timeline_corrections(void)
{
    static const cr_kv_source src[] = {{"s1", 9000}};
    cr_inject_request req = {.prompt_tokens = 1000,
                             .knowledge_tokens = 9000,
                             .sources = src,
                             .n_sources = 1,
                             .has_queue_wait = 1};
    cr_injector *inj = hand_injector();
    CU_ASSERT_EQUAL(select_ok(inj, &req, 0).mode, CR_INJECT_KV_CACHE);
    req.dry_run = 1;
    CU_ASSERT(close_rel(select_ok(inj, &req, 100).kv.link_wait_ms, 1025));
    /* Its ack came at 100 after 2000 ms: what is queued behind it waits 874.8 ms more. */
    cr_inject_observation o = {.now_ms = 100, .has_transfer = 1, .source = "s1",
                               .transfer_bytes = 1.125e9, .transfer_ms = 2000};
    observe_ok(inj, &o);
    CU_ASSERT(close_rel(select_ok(inj, &req, 100).kv.link_wait_ms, 1899.8));
    o.transfer_ms = 125.2;
    observe_ok(inj, &o);
    CU_ASSERT(close_rel(select_ok(inj, &req, 100).kv.link_wait_ms, 899.8));
    cr_injector_free(inj);
}

static void test_observe_errors(void)
{
    cr_injector *inj = hand_injector();
    cr_inject_observation o = {.gpu = CR_PROBE_MAX_GPUS, .has_queue_wait = 1, .queue_wait_ms = 5};
    cr_error err;
    CU_ASSERT_EQUAL(cr_injector_observe(inj, &o, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..63, got 64");
    o.gpu = 0;
    o.now_ms = NAN;
    CU_ASSERT_EQUAL(cr_injector_observe(inj, &o, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "now_ms must be finite, got nan");
    const cr_inject_request peek = {.prompt_tokens = 1000, .dry_run = 1};
    CU_ASSERT_EQUAL(select_ok(inj, &peek, 0).text.queue_wait_ms, 0); /* nothing applied */
    /* Parts without a positive time or a usable name feed nothing. */
    fill_limits();
    const char *const names[] = {NULL, "", long_name};
    for (size_t i = 0; i < 3; i++)
        observe_ok(inj, &(cr_inject_observation){.has_transfer = 1, .source = names[i],
                                                  .transfer_bytes = 10, .transfer_ms = 5});
    observe_ok(inj, &(cr_inject_observation){.has_transfer = 1, .source = "s1",
                                              .transfer_bytes = 10, .transfer_ms = 0});
    observe_ok(inj, &(cr_inject_observation){.has_prefill = 1, .prefill_to = 10, .has_load = 1});
    CU_ASSERT_EQUAL(cr_injector_tracked_links(inj), 0);
    cr_inject_calibration cal;
    cr_injector_calibration(inj, 0, &cal);
    CU_ASSERT_EQUAL(cal.samples + cal.h2d.samples, 0);
    cal.samples = 7;
    cr_injector_calibration(inj, CR_PROBE_MAX_GPUS, &cal);
    CU_ASSERT_EQUAL(cal.samples, 0);
    cr_injector_free(inj);
}

typedef struct observer {
    cr_injector *inj;
    uint32_t gpu;
    int failures;
} observer;

#define OBSERVE_CALLS 3000

/* Every part at once, on the kv workers' source names. */
static void *observe_worker(void *arg)
{
    observer *w = arg;
    rng r = {100 + w->gpu};
    char name[16];
    for (int i = 0; i < OBSERVE_CALLS; i++) {
        double s, l;
        random_span(&r, &s, &l);
        snprintf(name, sizeof name, "pool-%d", i % 10);
        cr_inject_observation o = {.gpu = w->gpu, .now_ms = i, .has_prefill = 1,
                                   .prefill_from = s, .prefill_to = l,
                                   .prefill_ms = 10 + 0.3 * (l - s), .has_transfer = 1,
                                   .source = name, .transfer_bytes = 1e6 * (1 + i % 7),
                                   .transfer_ms = 2 + i % 7, .has_load = 1, .load_bytes = 1e6,
                                   .load_ms = 2.5, .has_queue_wait = i % 5 == 0};
        cr_error err;
        w->failures += cr_injector_observe(w->inj, &o, &err) != CR_OK;
    }
    return NULL;
}

static void test_concurrent_observe(void)
{
    static worker selectors[KV_THREADS];
    observer observers[4];
    pthread_t th[4 + KV_THREADS];
    static const char *const far[] = {"--reservation-horizon-s", "86400"}; /* they stack */
    cr_injector *inj = injector_with(far, 2);
    for (uint32_t t = 0; t < 4; t++) {
        observers[t] = (observer){inj, t, 0};
        pthread_create(&th[t], NULL, observe_worker, &observers[t]);
    }
    for (int t = 0; t < KV_THREADS; t++) {
        selectors[t].inj = inj;
        selectors[t].id = t;
        pthread_create(&th[4 + t], NULL, kv_worker, &selectors[t]);
    }
    for (int t = 0; t < 4 + KV_THREADS; t++)
        pthread_join(th[t], NULL);
    uint64_t transfers = 0;
    for (uint32_t t = 0; t < 4; t++) {
        cr_inject_calibration cal;
        cr_injector_calibration(inj, t, &cal);
        CU_ASSERT_EQUAL(observers[t].failures, 0);
        CU_ASSERT_EQUAL(cal.samples, OBSERVE_CALLS);
        CU_ASSERT_EQUAL(cal.h2d.samples, OBSERVE_CALLS);
    }
    for (int i = 0; i < 10; i++) {
        char name[16];
        cr_inject_line_calibration lc;
        snprintf(name, sizeof name, "pool-%d", i);
        CU_ASSERT(cr_injector_link_calibration(inj, name, &lc));
        transfers += lc.samples;
    }
    CU_ASSERT_EQUAL(transfers, 4 * OBSERVE_CALLS);
    cr_injector_free(inj);
}

/* ---- --model-config ------------------------------------------------------------ */

/* tests/fixtures/model-configs/name, found from this file's own path. */
static void fixture(const char *name, char *buf, size_t len)
{
    const char *slash = strrchr(__FILE__, '/');
    int dir = slash ? (int)(slash - __FILE__) : 1;
    snprintf(buf, len, "%.*s/fixtures/model-configs/%s", dir, slash ? __FILE__ : ".", name);
}

/* The figures tests/fixtures/model-configs/README.md gives. */
static const struct {
    const char *file;
    double kv_bytes, total, active;
    uint32_t layers, heads, kv_heads, hidden, experts, per_token;
} FIXTURES[] = {
    {"Llama-3.1-8B.json", 131072, 8030261248.0, 6979588096.0, 32, 32, 8, 4096, 1, 1},
    {"Llama-3.1-70B.json", 327680, 70553706496.0, 68452360192.0, 80, 64, 8, 8192, 1, 1},
    {"Mixtral-8x7B.json", 131072, 46702792704.0, 12617781248.0, 32, 32, 8, 4096, 8, 2},
};

static void test_model_config_fixtures(void)
{
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        char path[1024];
        cr_model_shape s;
        cr_error err;
        fixture(FIXTURES[i].file, path, sizeof path);
        CU_ASSERT_EQUAL_FATAL(cr_inject_read_model_config(path, &s, &err), CR_OK);
        CU_ASSERT_EQUAL(s.kv_bytes_per_token, FIXTURES[i].kv_bytes);
        CU_ASSERT_EQUAL(s.params_total, FIXTURES[i].total);
        CU_ASSERT_EQUAL(s.params_active, FIXTURES[i].active);
        CU_ASSERT(s.layers == FIXTURES[i].layers && s.heads == FIXTURES[i].heads &&
                  s.kv_heads == FIXTURES[i].kv_heads && s.hidden_size == FIXTURES[i].hidden);
        CU_ASSERT(s.experts == FIXTURES[i].experts &&
                  s.experts_per_token == FIXTURES[i].per_token);
        CU_ASSERT(s.head_dim == 128 && s.dtype_bytes == 2 && !s.tied_embeddings);
        /* Through the flag: b from the active count, at 312 TFLOPS x 0.5. */
        cr_inject_config cfg;
        cr_inject_model m;
        cr_inject_config_default(&cfg);
        CU_ASSERT_EQUAL_FATAL(cr_inject_config_set(&cfg, "--model-config", path, &err), CR_OK);
        CU_ASSERT_STRING_EQUAL(cfg.model_config, path);
        CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &m, &err), CR_OK);
        CU_ASSERT_STRING_EQUAL(m.source, "prefill=default kv_bytes=model-config link=default "
                                         "h2d=default margin=default penalty=default");
        CU_ASSERT_EQUAL(m.kv_bytes_per_token, FIXTURES[i].kv_bytes);
        CU_ASSERT(close_rel(m.prefill.ms_per_token, 2 * FIXTURES[i].active / 1.56e14 * 1e3));
        CU_ASSERT(close_rel(m.prefill.ms_per_token2,
                            2.0 * FIXTURES[i].layers * FIXTURES[i].hidden / 1.56e14 * 1e3));
        cr_inject_config_clear(&cfg);
        CU_ASSERT_PTR_NULL(cfg.model_config);
    }
}

/* Explicit flags win whichever comes first; a second file replaces the
 * first's fields but not the flags'. */
static void test_model_config_flags_win(void)
{
    char path70[1024], mixtral[1024];
    fixture("Llama-3.1-70B.json", path70, sizeof path70);
    fixture("Mixtral-8x7B.json", mixtral, sizeof mixtral);
    const char *const before[] = {"--model-layers", "40", "--model-params-b", "70",
                                  "--model-config", path70};
    const char *const after[] = {"--model-config", path70, "--model-layers", "40",
                                 "--model-params-b", "70"};
    const char *const *orders[] = {before, after};
    for (int k = 0; k < 2; k++) {
        cr_inject_config cfg;
        cr_inject_model m;
        cr_error err;
        cr_inject_config_default(&cfg);
        set_flags(&cfg, orders[k], 6);
        CU_ASSERT(cfg.model_layers == 40 && cfg.model_params_b == 70);
        CU_ASSERT(cfg.model_kv_heads == 8 && cfg.model_head_dim == 128 &&
                  cfg.kv_dtype_bytes == 2 && cfg.model_d_model == 8192);
        CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &m, &err), CR_OK);
        CU_ASSERT_EQUAL(m.kv_bytes_per_token, 2 * 40 * 8 * 128 * 2);
        CU_ASSERT(strstr(m.source, " kv_bytes=model-config ") != NULL);
        set_flags(&cfg, (const char *const[]){"--model-config", mixtral}, 2);
        CU_ASSERT(cfg.model_layers == 40 && cfg.model_params_b == 70);
        CU_ASSERT_EQUAL(cfg.model_d_model, 4096);
        set_flags(&cfg, (const char *const[]){"--kv-bytes-per-token", "1000"}, 2);
        CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &m, &err), CR_OK);
        CU_ASSERT(strncmp(m.source, "prefill=default kv_bytes=flag ", 30) == 0);
        cr_inject_config_clear(&cfg);
    }
}

#define BASE_KEYS                                                                                 \
    "\"num_hidden_layers\": 32, \"hidden_size\": 4096, \"num_attention_heads\": 32, "             \
    "\"intermediate_size\": 14336, \"vocab_size\": 128256"

static void write_file(char *path, const char *text)
{
    strcpy(path, "/tmp/test_inject_config_XXXXXX");
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
}

static void test_model_config_errors(void)
{
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {NULL, ": cannot read: No such file or directory"},
        {"not json", ": not JSON: "},
        {"[1]", ": not a JSON object"},
        {"{\"num_hidden_layers\": 32}", ": hidden_size is missing"},
        {"{\"num_hidden_layers\": \"32\"}",
         ": num_hidden_layers must be an integer in 1..1000000, got \"32\""},
        {"{\"num_hidden_layers\": 0}", ": num_hidden_layers must be an integer"},
        {"{" BASE_KEYS "}", ": torch_dtype is missing"},
        {"{" BASE_KEYS ", \"torch_dtype\": \"int8\"}", ": torch_dtype must be \"bfloat16\""},
        {"{" BASE_KEYS ", \"dtype\": 16}", ": dtype must be"},
        {"{" BASE_KEYS ", \"dtype\": \"float32\", \"tie_word_embeddings\": 1}",
         ": tie_word_embeddings must be true or false, got 1"},
        {"{" BASE_KEYS ", \"dtype\": \"float32\", \"num_local_experts\": 8}",
         ": num_experts_per_tok is missing"},
        {"{" BASE_KEYS ", \"dtype\": \"float32\", \"num_experts\": 60}",
         ": num_experts: only Mixtral's"},
        {"{" BASE_KEYS ", \"dtype\": \"float32\", \"num_key_value_heads\": 64}",
         ": num_key_value_heads must be at most num_attention_heads 32, got 64"},
        {"{\"num_hidden_layers\": 2, \"hidden_size\": 4097, \"num_attention_heads\": 32, "
         "\"intermediate_size\": 1, \"vocab_size\": 1, \"torch_dtype\": \"float16\"}",
         ": head_dim is missing and hidden_size 4097 is not a multiple of num_attention_heads 32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[64] = "/nonexistent/cacheroute/config.json", want[256];
        if (bad[i].json)
            write_file(path, bad[i].json);
        cr_inject_config cfg;
        cr_error err = {{0}};
        cr_inject_config_default(&cfg);
        CU_ASSERT_EQUAL(cr_inject_config_set(&cfg, "--model-config", path, &err), CR_EINVAL);
        snprintf(want, sizeof want, "--model-config %s%s", path, bad[i].msg);
        CU_ASSERT(strncmp(err.msg, want, strlen(want)) == 0);
        if (strncmp(err.msg, want, strlen(want)) != 0)
            fprintf(stderr, "\n  want '%s...', got '%s'\n", want, err.msg);
        CU_ASSERT(cfg.set == 0 && cfg.model_config == NULL && cfg.model_layers == 32);
        cr_inject_config_clear(&cfg);
        if (bad[i].json)
            unlink(path);
    }
    /* The optional keys' defaults: no GQA, head_dim = hidden / heads. */
    char path[64];
    cr_model_shape s;
    cr_error err;
    write_file(path, "{" BASE_KEYS ", \"dtype\": \"float32\", \"head_dim\": null}");
    CU_ASSERT_EQUAL(cr_inject_read_model_config(path, &s, &err), CR_OK);
    CU_ASSERT(s.kv_heads == 32 && s.head_dim == 128 && s.dtype_bytes == 4);
    CU_ASSERT_EQUAL(s.kv_bytes_per_token, 2.0 * 32 * 32 * 128 * 4);
    unlink(path);
}

/* The hand model with tight caps: at most 1000 ms reserved per decision,
 * timelines at most 2 s ahead. Text prefills: 3000 tokens 400 ms, 5000
 * tokens 760 ms, 10000 tokens 2010 ms. */
static cr_injector *capped_injector(void)
{
    static const char *flags[sizeof HAND_FLAGS / sizeof HAND_FLAGS[0] + 4];
    size_t n = sizeof HAND_FLAGS / sizeof HAND_FLAGS[0];
    memcpy(flags, HAND_FLAGS, sizeof HAND_FLAGS);
    flags[n] = "--max-reservation-ms";
    flags[n + 1] = "1000";
    flags[n + 2] = "--reservation-horizon-s";
    flags[n + 3] = "2";
    return injector_with(flags, n + 4);
}

static double gpu_wait(cr_injector *inj, uint32_t gpu, double now)
{
    cr_inject_request probe = {.prompt_tokens = 1, .gpu = gpu, .dry_run = 1};
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, &PROBED, &probe, now, &r, &err), CR_OK);
    return r.text.queue_wait_ms;
}

static void test_reservation_caps(void)
{
    cr_injector *inj = capped_injector();
    cr_inject_request big = {.prompt_tokens = 10000};
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL(cr_inject_select(inj, NULL, &big, 0, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "prompt_tokens 10000 + knowledge_tokens 0 would reserve 2010 "
                                    "ms of prefill on GPU 0, over --max-reservation-ms 1000; "
                                    "nothing reserved");
    CU_ASSERT_EQUAL(gpu_wait(inj, 0, 0), 0);
    big.dry_run = 1; /* a dry run reserves nothing, so it is answered */
    CU_ASSERT(close_rel(select_ok(inj, &big, 0).text.prefill_ms, 2010));
    /* A KV transfer is capped the same: 100000 tokens from "fast" take
     * 1 + 1250 ms, of which 1250 on the link. */
    static const cr_kv_source fast[] = {{"fast", 100000}};
    cr_inject_request kv = {.prompt_tokens = 10, .knowledge_tokens = 100000, .sources = fast,
                            .n_sources = 1};
    CU_ASSERT_EQUAL(cr_inject_select(inj, NULL, &kv, 0, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "prompt_tokens 10 + knowledge_tokens 100000 would reserve "
                                    "1250 ms of link transfer from fast, over "
                                    "--max-reservation-ms 1000; nothing reserved");
    kv.dry_run = 1;
    CU_ASSERT_EQUAL(select_ok(inj, &kv, 0).kv.link_wait_ms, 0);
    /* The horizon: two 760 ms prefills fit in 2 s, a third does not, until
     * time passes. */
    cr_inject_request mid = {.prompt_tokens = 5000};
    select_ok(inj, &mid, 0);
    select_ok(inj, &mid, 0);
    CU_ASSERT_EQUAL(cr_inject_select(inj, NULL, &mid, 0, &r, &err), CR_ENOMEM);
    CU_ASSERT_STRING_EQUAL(err.msg, "reserved prefill on GPU 0 would reach 2.3 s ahead, past "
                                    "--reservation-horizon-s 2; nothing reserved (retry later, "
                                    "or ClearReservations)");
    CU_ASSERT(close_rel(gpu_wait(inj, 0, 0), 1520));
    select_ok(inj, &mid, 1000);
    CU_ASSERT(close_rel(gpu_wait(inj, 0, 1000), 1280));
    /* A link's likewise: 60000 tokens from "fast" are 750 ms on the link
     * (on GPU 1, whose queue stays short). */
    static const cr_kv_source fast60[] = {{"fast", 60000}};
    cr_inject_request link = {.prompt_tokens = 10, .knowledge_tokens = 60000, .sources = fast60,
                              .n_sources = 1, .gpu = 1};
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL(cr_inject_select(inj, &PROBED, &link, 0, &r, &err), CR_OK);
    CU_ASSERT_EQUAL(r.mode, CR_INJECT_KV_CACHE);
    CU_ASSERT_EQUAL(cr_inject_select(inj, &PROBED, &link, 0, &r, &err), CR_ENOMEM);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "reserved link transfer from fast would reach 2."));
    cr_injector_free(inj);
}

static void test_observations_keep_the_horizon(void)
{
    cr_injector *inj = capped_injector();
    cr_inject_observation o = {.gpu = 0, .now_ms = 10, .has_queue_wait = 1, .queue_wait_ms = 1e15};
    observe_ok(inj, &o);
    CU_ASSERT(close_rel(gpu_wait(inj, 0, 10), 2000));
    /* A wildly slow prefill shifts what is pending by its error, capped too. */
    o = (cr_inject_observation){.gpu = 0, .now_ms = 10, .has_prefill = 1, .prefill_from = 0,
                                .prefill_to = 100, .prefill_ms = 1e12};
    observe_ok(inj, &o);
    CU_ASSERT(gpu_wait(inj, 0, 10) <= 2000);
    cr_injector_free(inj);
}

static void test_clear_reservations(void)
{
    cr_injector *inj = hand_injector();
    cr_inject_request text = {.prompt_tokens = 3000};
    cr_inject_response r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, &PROBED, &text, 0, &r, &err), CR_OK);
    text.gpu = 1;
    CU_ASSERT_EQUAL_FATAL(cr_inject_select(inj, &PROBED, &text, 0, &r, &err), CR_OK);
    static const cr_kv_source fast[] = {{"fast", 9000}};
    cr_inject_request kv = {.prompt_tokens = 10, .knowledge_tokens = 9000, .sources = fast,
                            .n_sources = 1};
    CU_ASSERT_EQUAL(select_ok(inj, &kv, 0).mode, CR_INJECT_KV_CACHE);
    double gpu0 = gpu_wait(inj, 0, 100);
    cr_inject_cleared out;
    /* Bad filters clear nothing. */
    cr_inject_clear bad = {.has_gpu = 1, .gpu = 2};
    CU_ASSERT_EQUAL(cr_injector_clear(inj, &PROBED, &bad, 100, &out, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..1, got 2");
    cr_inject_clear too_long = {.source = long_name};
    fill_limits();
    CU_ASSERT_EQUAL(cr_injector_clear(inj, &PROBED, &too_long, 100, &out, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "source must be 1..128 bytes, got 129");
    CU_ASSERT_EQUAL(gpu_wait(inj, 0, 100), gpu0);
    /* GPU 1 alone: 400 ms reserved from 0, 300 left at 100. */
    cr_inject_clear one = {.has_gpu = 1, .gpu = 1};
    CU_ASSERT_EQUAL(cr_injector_clear(inj, &PROBED, &one, 100, &out, &err), CR_OK);
    CU_ASSERT_EQUAL(out.gpus, 1);
    CU_ASSERT_EQUAL(out.links, 0);
    CU_ASSERT(close_rel(out.ms, 300));
    CU_ASSERT_EQUAL(gpu_wait(inj, 1, 100), 0);
    CU_ASSERT_EQUAL(gpu_wait(inj, 0, 100), gpu0);
    /* The link alone, then everything that is left: GPU 0. */
    cr_inject_clear link = {.source = "fast"};
    CU_ASSERT_EQUAL(cr_injector_clear(inj, &PROBED, &link, 100, &out, &err), CR_OK);
    CU_ASSERT_EQUAL(out.gpus, 0);
    CU_ASSERT_EQUAL(out.links, 1);
    CU_ASSERT_EQUAL(select_ok(inj, &kv, 100).kv.link_wait_ms, 0);
    cr_inject_clear all = {0};
    CU_ASSERT_EQUAL(cr_injector_clear(inj, &PROBED, &all, 100, &out, &err), CR_OK);
    CU_ASSERT_EQUAL(out.gpus, 1);
    CU_ASSERT_EQUAL(out.links, 1); /* the KV decision just above reserved "fast" again */
    CU_ASSERT_EQUAL(gpu_wait(inj, 0, 100), 0);
    CU_ASSERT_EQUAL(cr_injector_clear(inj, &PROBED, &all, 100, &out, &err), CR_OK);
    CU_ASSERT_EQUAL(out.gpus + out.links, 0);
    CU_ASSERT_EQUAL(out.ms, 0);
    cr_injector_free(inj);
}

static const cr_test_case model_tests[] = {
    {"defaults", test_defaults_resolve},
    {"flags", test_flags_resolve},
    {"probed GPUs and NICs", test_probe_resolve},
    {"flag values", test_flag_values},
    {"flag errors name the flag", test_flag_errors},
    {"no driver: defaults", test_no_driver_defaults},
    {NULL, NULL},
};

static const cr_test_case decide_tests[] = {
    {"hand-computed cases", test_hand_cases},
    {"monotonicity properties", test_properties},
    {"select matches decide", test_select_matches_decide},
    {"bad requests", test_bad_requests},
    {"request limits", test_request_limits},
    {NULL, NULL},
};

static const cr_test_case timeline_tests[] = {
    {"GPU reservations", test_gpu_reservations},
    {"link reservations", test_link_reservations},
    {"link table bound", test_link_table_bound},
    {"concurrent select", test_concurrent_select},
    {"reservation caps", test_reservation_caps},
    {"observations keep the horizon", test_observations_keep_the_horizon},
    {"clear reservations", test_clear_reservations},
    {NULL, NULL},
};

static const cr_test_case calibration_tests[] = {
    {"converges on a synthetic GPU, decisions flip", test_calibration_converges},
    {"coefficients stay non-negative", test_calibration_nonnegative},
    {"forgetting follows a step change", test_calibration_forgetting},
    {"degenerate samples keep the prior", test_calibration_degenerate},
    {"--calibrate off ignores observations", test_calibration_off},
    {"link fit converges", test_link_calibration},
    {"h2d fit converges", test_h2d_calibration},
    {"GPU timeline corrections", test_gpu_timeline_corrections},
    {"link timeline corrections", test_link_timeline_corrections},
    {"observation errors", test_observe_errors},
    {"concurrent observe and select", test_concurrent_observe},
    {NULL, NULL},
};

static const cr_test_case model_config_tests[] = {
    {"fixture shapes and parameter counts", test_model_config_fixtures},
    {"flags win over the file", test_model_config_flags_win},
    {"errors name the file and the key", test_model_config_errors},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {
    {"model", model_tests},
    {"decide", decide_tests},
    {"timeline", timeline_tests},
    {"calibration", calibration_tests},
    {"model config", model_config_tests},
};
CR_TEST_MAIN(suites)
