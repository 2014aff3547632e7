/* Metrics registry and exposition text: counters, cumulative histogram
 * buckets, label escaping, scrape-time samples, concurrent updates. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "metrics.h"

static const char *const paths[] = {"/cacheroute.v1.CacheRoute/Plan",
                                    "/cacheroute.v1.CacheRoute/RecordArrival"};

static char *render(cr_metrics *m, cr_metrics_sample_fn fn, void *ctx)
{
    size_t len;
    char *text = cr_metrics_render(m, fn, ctx, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_EQUAL(strlen(text), len);
    return text;
}

static void assert_line(const char *text, const char *line)
{
    char want[512];
    snprintf(want, sizeof want, "\n%s\n", line);
    if (!strstr(text, want))
        fprintf(stderr, "\nmissing line: %s\n", line);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
}

static void test_rpc_counters_and_histogram(void)
{
    cr_metrics *m = cr_metrics_new(paths, 2);
    cr_metrics_rpc(m, 1, 0, 0.00007);  /* bucket le=0.0001 */
    cr_metrics_rpc(m, 1, 0, 0.003);    /* le=0.005 */
    cr_metrics_rpc(m, 1, 3, 20.0);     /* +Inf, INVALID_ARGUMENT */
    cr_metrics_rpc(m, 7, 0, 1.0);      /* unknown method index: ignored */
    char *t = render(m, NULL, NULL);
    const char *lbl = "service=\"cacheroute.v1.CacheRoute\",method=\"RecordArrival\"";
    char line[400];
    snprintf(line, sizeof line, "cacheroute_rpc_requests_total{%s,code=\"OK\"} 2", lbl);
    assert_line(t, line);
    snprintf(line, sizeof line, "cacheroute_rpc_requests_total{%s,code=\"INVALID_ARGUMENT\"} 1",
             lbl);
    assert_line(t, line);
    /* Codes never seen are left out, except OK. */
    CU_ASSERT_PTR_NULL(strstr(t, "method=\"Plan\",code=\"INVALID_ARGUMENT\""));
    assert_line(t, "cacheroute_rpc_requests_total{service=\"cacheroute.v1.CacheRoute\","
                   "method=\"Plan\",code=\"OK\"} 0");
    snprintf(line, sizeof line, "cacheroute_rpc_duration_seconds_bucket{%s,le=\"5e-05\"} 0", lbl);
    assert_line(t, line);
    snprintf(line, sizeof line, "cacheroute_rpc_duration_seconds_bucket{%s,le=\"0.0001\"} 1", lbl);
    assert_line(t, line);
    snprintf(line, sizeof line, "cacheroute_rpc_duration_seconds_bucket{%s,le=\"0.005\"} 2", lbl);
    assert_line(t, line);
    snprintf(line, sizeof line, "cacheroute_rpc_duration_seconds_bucket{%s,le=\"10\"} 2", lbl);
    assert_line(t, line);
    snprintf(line, sizeof line, "cacheroute_rpc_duration_seconds_bucket{%s,le=\"+Inf\"} 3", lbl);
    assert_line(t, line);
    snprintf(line, sizeof line, "cacheroute_rpc_duration_seconds_count{%s} 3", lbl);
    assert_line(t, line);
    snprintf(line, sizeof line, "cacheroute_rpc_duration_seconds_sum{%s} %.17g", lbl,
             0.00007 + 0.003 + 20.0);
    assert_line(t, line);
    assert_line(t, "# TYPE cacheroute_rpc_duration_seconds histogram");
    free(t);
    cr_metrics_free(m);
}

static void test_planner_and_injection(void)
{
    cr_metrics *m = cr_metrics_new(paths, 2);
    cr_metrics_arrivals(m, 1000);
    cr_metrics_arrivals(m, 5);
    cr_metrics_plan(m, 0.2, 1);
    cr_metrics_plan(m, 0.1, 0);
    cr_metrics_injection(m, CR_REASON_KV_FASTER, 0.9, 0.3);
    cr_metrics_injection(m, CR_REASON_NO_KV_AVAILABLE, 0.5, -1);
    cr_metrics_injection(m, CR_INJECT_N_REASONS, 0.5, -1); /* histograms only */
    char *t = render(m, NULL, NULL);
    assert_line(t, "cacheroute_arrivals_recorded_total 1005");
    assert_line(t, "cacheroute_plans_total 2");
    assert_line(t, "cacheroute_plans_installed_total 1");
    assert_line(t, "cacheroute_plan_duration_seconds_count 2");
    assert_line(t, "cacheroute_injection_decisions_total{mode=\"kv_cache\",reason=\"kv_faster\"} 1");
    assert_line(t,
                "cacheroute_injection_decisions_total{mode=\"text\",reason=\"no_kv_available\"} 1");
    assert_line(t, "cacheroute_injection_decisions_total{mode=\"text\",reason=\"text_faster\"} 0");
    /* Impossible pairs have no series. */
    CU_ASSERT_PTR_NULL(strstr(t, "mode=\"text\",reason=\"kv_faster\""));
    assert_line(t, "cacheroute_injection_predicted_seconds_count{path=\"text\"} 3");
    assert_line(t, "cacheroute_injection_predicted_seconds_count{path=\"kv_cache\"} 1");
    assert_line(t, "cacheroute_injection_predicted_seconds_bucket{path=\"kv_cache\",le=\"0.25\"} 0");
    assert_line(t, "cacheroute_injection_predicted_seconds_bucket{path=\"kv_cache\",le=\"0.5\"} 1");
    free(t);
    cr_metrics_free(m);
}

static void sample(void *ctx, cr_page *p)
{
    char label[128];
    cr_page_family(p, "x_gauge", "gauge", (const char *)ctx);
    cr_page_label(label, sizeof label, "nic", "eth\"0\\\n");
    cr_page_sample(p, "x_gauge", label, 1.0 / 0.0);
}

static void test_samples_and_escaping(void)
{
    cr_metrics *m = cr_metrics_new(paths, 2);
    char *t = render(m, sample, "help text");
    assert_line(t, "# HELP x_gauge help text");
    assert_line(t, "x_gauge{nic=\"eth\\\"0\\\\\\n\"} +Inf");
    free(t);
    cr_metrics_free(m);
}

/* The serving certificate's notAfter: no family without TLS, then the
 * exact Unix seconds last set (a rotation moves it). */
static void test_tls_expiry_gauge(void)
{
    cr_metrics *m = cr_metrics_new(paths, 2);
    char *t = render(m, NULL, NULL);
    CU_ASSERT_PTR_NULL(strstr(t, "cacheroute_tls_cert_expiry_timestamp_seconds"));
    free(t);
    cr_metrics_tls_expiry(m, 1798761600);
    cr_metrics_tls_expiry(m, 1893456000);
    t = render(m, NULL, NULL);
    assert_line(t, "# TYPE cacheroute_tls_cert_expiry_timestamp_seconds gauge");
    assert_line(t, "cacheroute_tls_cert_expiry_timestamp_seconds 1893456000");
    free(t);
    cr_metrics_free(m);
}

static cr_metrics *shared;

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        cr_metrics_rpc(shared, (size_t)(i & 1), 0, 0.001);
        cr_metrics_arrivals(shared, 1);
    }
    return NULL;
}

static void test_concurrent_updates(void)
{
    shared = cr_metrics_new(paths, 2);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, hammer, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    char *t = render(shared, NULL, NULL);
    assert_line(t, "cacheroute_arrivals_recorded_total 80000");
    assert_line(t, "cacheroute_rpc_duration_seconds_count{service=\"cacheroute.v1.CacheRoute\","
                   "method=\"Plan\"} 40000");
    /* 40000 additions of 0.001 in any order stay within rounding of 40. */
    const char *sum = strstr(t, "cacheroute_rpc_duration_seconds_sum{service=\"cacheroute.v1."
                                "CacheRoute\",method=\"Plan\"} ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(sum);
    CU_ASSERT_DOUBLE_EQUAL(strtod(strchr(sum, '}') + 2, NULL), 40.0, 1e-6);
    free(t);
    cr_metrics_free(shared);
}

static const cr_test_case metrics_tests[] = {
    {"rpc counters and histogram", test_rpc_counters_and_histogram},
    {"planner and injection", test_planner_and_injection},
    {"samples and escaping", test_samples_and_escaping},
    {"tls expiry gauge", test_tls_expiry_gauge},
    {"concurrent updates", test_concurrent_updates},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"metrics", metrics_tests}};
CR_TEST_MAIN(suites)
