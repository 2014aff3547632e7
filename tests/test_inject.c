/* Injection decision: flags and model resolution, hand-computed decisions,
 * monotonicity properties over random requests, reservations, input errors,
 * the no-driver path, and concurrent callers (run under TSan in CI). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static cr_injector *hand_injector(void)
{
    cr_inject_config cfg;
    cr_error err;
    cr_inject_config_default(&cfg);
    set_flags(&cfg, HAND_FLAGS, sizeof HAND_FLAGS / sizeof HAND_FLAGS[0]);
    cr_injector *inj = cr_injector_new(&cfg, &err);
    cr_inject_config_clear(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inj);
    return inj;
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
    CU_ASSERT(close_rel(m.prefill_fixed_ms, 10));
    CU_ASSERT(close_rel(m.prefill_ms_per_token, 0.10294871794871795));
    CU_ASSERT(close_rel(m.prefill_ms_per_token2, 1.6804102564102564e-6));
    CU_ASSERT(close_rel(m.peak_tflops, 312));
    CU_ASSERT_EQUAL(m.kv_bytes_per_token, 131072);
    CU_ASSERT_EQUAL(m.link_gbps, 10);
    CU_ASSERT_EQUAL(m.link_rtt_ms, 0.2);
    CU_ASSERT_EQUAL(m.link_efficiency, 0.825);
    CU_ASSERT_EQUAL(m.h2d_gbps, 25);
    CU_ASSERT_EQUAL(m.load_fixed_ms, 2);
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
    CU_ASSERT(close_rel(m.prefill_ms_per_token, 0.35));
    CU_ASSERT(close_rel(m.prefill_ms_per_token2, 3.2768e-6));
    CU_ASSERT_EQUAL(m.link_gbps, 40);
    CU_ASSERT_EQUAL(m.h2d_gbps, 50);
    CU_ASSERT_EQUAL(m.decision_margin_ms, 0);
    CU_ASSERT_EQUAL(m.link_queue_penalty, 2);
    set_flags(&cfg, HAND_FLAGS, 4);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, NULL, 0, &m, &err), CR_OK);
    CU_ASSERT(strncmp(m.source, "prefill=fitted kv_bytes=flag ", 29) == 0);
    CU_ASSERT_EQUAL(m.prefill_fixed_ms, 10);
    CU_ASSERT_EQUAL(m.prefill_ms_per_token, 0.1);
    CU_ASSERT_EQUAL(m.prefill_ms_per_token2, 0.00001);
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
    CU_ASSERT(close_rel(m.prefill_ms_per_token, 0.03212));
    CU_ASSERT(close_rel(m.prefill_ms_per_token2, 5.24288e-7));
    CU_ASSERT_EQUAL(m.link_gbps, 200);
    CU_ASSERT_EQUAL(m.h2d_gbps, 50);
    /* GPU 1: unknown arch and no h2d; the flags are the fallback. */
    cr_error e2;
    CU_ASSERT_EQUAL(cr_inject_config_set(&cfg, "--peak-tflops", "500", &e2), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_inject_model_resolve(&cfg, &PROBED, 1, &m, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(m.source, "prefill=flag kv_bytes=default link=nic h2d=default "
                                     "margin=default penalty=default");
    CU_ASSERT(close_rel(m.prefill_ms_per_token, 0.06424));
    CU_ASSERT_EQUAL(cr_inject_model_resolve(&cfg, &PROBED, 2, &m, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "gpu must be in 0..1, got 2");
}

static void test_flag_values(void)
{
    cr_kv_source_spec s;
    double c[3];
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_inject_parse_kv_source("a=b=25,0.5", &s, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(s.name, "a=b");
    CU_ASSERT_EQUAL(s.gbps, 25);
    CU_ASSERT_EQUAL(s.rtt_ms, 0.5);
    CU_ASSERT_EQUAL_FATAL(cr_inject_parse_kv_source("pool-1=40", &s, &err), CR_OK);
    CU_ASSERT_EQUAL(s.rtt_ms, CR_INJECT_DEFAULT_RTT_MS);
    CU_ASSERT_EQUAL_FATAL(cr_inject_parse_prefill_coeffs("1.5,0,2e-6", c, &err), CR_OK);
    CU_ASSERT(c[0] == 1.5 && c[1] == 0 && c[2] == 2e-6);
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

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static double uniform(double lo, double hi)
{
    rng_state += 0x9e3779b97f4a7c15ull;
    return lo + (hi - lo) * (double)(cr_mix64(rng_state) >> 11) * 0x1p-53;
}

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
    cr_injector *inj = hand_injector();
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
    cr_prober *p = cr_prober_start(&pc, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const cr_node_snapshot *s = cr_prober_acquire(p);
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
    cr_prober_stop(p);
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
    {NULL, NULL},
};

static const cr_test_suite suites[] = {
    {"model", model_tests},
    {"decide", decide_tests},
    {"timeline", timeline_tests},
};
CR_TEST_MAIN(suites)
