/* The engines' /metrics bodies read (scrape/parse.c): vLLM's and SGLang's
 * as they serve them (names and label shapes from vLLM's v1 loggers.py
 * and SGLang's collector.py and production_metrics.md), the text format's
 * corners (escapes, NaN and Inf, timestamps, comments), and refusals that
 * name their line; then the URL an endpoint's address makes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "scrape.h"

/* A vLLM 0.10 body, two data-parallel engines, one model, trimmed of the
 * histograms but for one. */
static const char VLLM[] =
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 3.0\n"
    "vllm:num_requests_running{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 2.0\n"
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 7.0\n"
    "vllm:num_requests_waiting{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.0\n"
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.5\n"
    "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.25\n"
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",calculate_kv_scales=\"False\","
    "cpu_offload_gb=\"0\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization="
    "\"0.9\",is_attention_free=\"False\",num_cpu_blocks=\"None\",num_gpu_blocks=\"27153\","
    "num_gpu_blocks_override=\"None\",prefix_caching_hash_algo=\"sha256\",sliding_window="
    "\"None\",swap_space=\"4\",swap_space_bytes=\"4294967296\"} 1.0\n"
    "vllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"27000\"} 1.0\n"
    "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
    "# TYPE vllm:lora_requests_info gauge\n"
    "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"sql-lora\","
    "waiting_lora_adapters=\"\"} 1.7330e+09\n"
    "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"sql-lora,chat-lora\","
    "waiting_lora_adapters=\"chat-lora,tone\"} 1.7331e+09\n"
    "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
    "# TYPE vllm:prompt_tokens_total counter\n"
    "vllm:prompt_tokens_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} "
    "1.234e+06\n"
    "# TYPE vllm:time_to_first_token_seconds histogram\n"
    "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 12.0\n"
    "vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} NaN\n"
    "python_gc_objects_collected_total{generation=\"0\"} 4321.0\n";

/* SGLang's, as production_metrics.md shows it, one model. */
static const char SGLANG[] =
    "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
    "# TYPE sglang:prompt_tokens_total counter\n"
    "sglang:prompt_tokens_total{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 8.128902e+06\n"
    "# HELP sglang:num_running_reqs The number of running requests.\n"
    "# TYPE sglang:num_running_reqs gauge\n"
    "sglang:num_running_reqs{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 12.0\n"
    "# HELP sglang:token_usage The token usage.\n"
    "# TYPE sglang:token_usage gauge\n"
    "sglang:token_usage{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.28\n"
    "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
    "# TYPE sglang:num_queue_reqs gauge\n"
    "sglang:num_queue_reqs{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 4.0\n";

static cr_status parse(const char *body, cr_engine_load *out, cr_error *err)
{
    return cr_scrape_parse(body, strlen(body), out, err);
}

static void test_vllm(void)
{
    cr_engine_load l;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(parse(VLLM, &l, &err), CR_OK);
    CU_ASSERT_EQUAL(l.waiting, 7.0); /* summed over the engines */
    CU_ASSERT_EQUAL(l.running, 5.0);
    CU_ASSERT_DOUBLE_EQUAL(l.kv_usage, 0.375, 1e-12); /* their mean */
    CU_ASSERT_EQUAL(l.block_size, 16);
    CU_ASSERT_EQUAL(l.gpu_blocks, 54153);
    /* the latest lora sample, running then waiting, each once */
    CU_ASSERT_EQUAL(l.max_lora, 4);
    CU_ASSERT_EQUAL_FATAL(l.n_lora, 3);
    CU_ASSERT_STRING_EQUAL(l.lora[0], "sql-lora");
    CU_ASSERT_STRING_EQUAL(l.lora[1], "chat-lora");
    CU_ASSERT_STRING_EQUAL(l.lora[2], "tone");
    CU_ASSERT_EQUAL(l.at_s, 0);
}

static void test_sglang(void)
{
    cr_engine_load l;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(parse(SGLANG, &l, &err), CR_OK);
    CU_ASSERT_EQUAL(l.waiting, 4.0);
    CU_ASSERT_EQUAL(l.running, 12.0);
    CU_ASSERT_DOUBLE_EQUAL(l.kv_usage, 0.28, 1e-12);
    CU_ASSERT_EQUAL(l.block_size, 0);
    CU_ASSERT_EQUAL(l.gpu_blocks, 0);
    CU_ASSERT_EQUAL(l.n_lora, 0);
    CU_ASSERT_EQUAL(l.max_lora, 0);
}

/* Older vLLM: gpu_cache_usage_perc, used only without the newer name;
 * what a body leaves out stays unreported. */
static void test_old_names_and_unreported(void)
{
    cr_engine_load l;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(parse("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n", &l, &err),
                          CR_OK);
    CU_ASSERT_DOUBLE_EQUAL(l.kv_usage, 0.75, 1e-12);
    CU_ASSERT(isnan(l.waiting) && isnan(l.running));
    CU_ASSERT_EQUAL_FATAL(parse("vllm:gpu_cache_usage_perc 0.75\n"
                                "vllm:kv_cache_usage_perc 0.5\n",
                                &l, &err),
                          CR_OK);
    CU_ASSERT_DOUBLE_EQUAL(l.kv_usage, 0.5, 1e-12);
    /* above 1 read as 1; a count with no labels at all; a timestamp */
    CU_ASSERT_EQUAL_FATAL(parse("vllm:kv_cache_usage_perc 1.5\n"
                                "vllm:num_requests_waiting 2 1733000000000\n"
                                "vllm:num_requests_waiting{} 1e0\n",
                                &l, &err),
                          CR_OK);
    CU_ASSERT_EQUAL(l.kv_usage, 1.0);
    CU_ASSERT_EQUAL(l.waiting, 3.0);
    CU_ASSERT(isnan(l.running));
}

/* The format's corners: escapes in label values (kept in adapter names),
 * blanks, a trailing comma, CRLF, no last newline, NaN and Inf in families
 * not used, comments of any kind. */
static void test_format_corners(void)
{
    cr_engine_load l;
    cr_error err;
    const char *body =
        "# a comment that is neither HELP nor TYPE\n"
        "\n"
        "   \t\n"
        "other{path=\"C:\\\\dir\",msg=\"say \\\"hi\\\"\\n\"} +Inf\r\n"
        "other_too -Inf\n"
        "nan_one Nan\n"
        "vllm:lora_requests_info { max_lora = \"2\" , running_lora_adapters=\"a\\\\b, c\\\"d \","
        "} 5\r\n"
        "vllm:num_requests_running\t4";
    CU_ASSERT_EQUAL_FATAL(parse(body, &l, &err), CR_OK);
    CU_ASSERT_EQUAL(l.running, 4.0);
    CU_ASSERT_EQUAL(l.max_lora, 2);
    CU_ASSERT_EQUAL_FATAL(l.n_lora, 2);
    CU_ASSERT_STRING_EQUAL(l.lora[0], "a\\b");
    CU_ASSERT_STRING_EQUAL(l.lora[1], "c\"d");
}

/* LoRA names: past CR_ENGINE_LORA_MAX or too long are left out. */
static void test_lora_bounds(void)
{
    char body[4096] = "vllm:lora_requests_info{max_lora=\"32\",running_lora_adapters=\"";
    char name[80];
    memset(name, 'x', 70);
    name[70] = '\0';
    strcat(body, name); /* 70 bytes: too long */
    for (int i = 0; i < 20; i++) {
        char one[16];
        snprintf(one, sizeof one, ",a%d", i);
        strcat(body, one);
    }
    strcat(body, "\"} 1\n");
    cr_engine_load l;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(parse(body, &l, &err), CR_OK);
    CU_ASSERT_EQUAL(l.max_lora, 32);
    CU_ASSERT_EQUAL_FATAL(l.n_lora, CR_ENGINE_LORA_MAX);
    CU_ASSERT_STRING_EQUAL(l.lora[0], "a0");
    CU_ASSERT_STRING_EQUAL(l.lora[15], "a15");
}

/* Refused bodies: err names the line and why; the load is unreported. */
static void refused(const char *body, size_t len, const char *words)
{
    cr_engine_load l;
    cr_error err;
    l.waiting = 1;
    CU_ASSERT_EQUAL(cr_scrape_parse(body, len, &l, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, words));
    if (!strstr(err.msg, words))
        fprintf(stderr, "\n  expected \"%s\" in \"%s\"\n", words, err.msg);
    CU_ASSERT(isnan(l.waiting) && isnan(l.running) && isnan(l.kv_usage) && !l.block_size &&
              !l.gpu_blocks && !l.n_lora);
}
#define REFUSED(body, words) refused(body, sizeof body - 1, words)

static void test_garbage(void)
{
    REFUSED("", "no engine metrics");
    REFUSED("# only comments\nother 1\n", "no engine metrics: none of vLLM's or SGLang's "
                                          "families in 2 lines");
    REFUSED("<html><body>Not Found</body></html>\n", "line 1: a metric name expected");
    REFUSED("{\"waiting\": 3}\n", "line 1: a metric name expected");
    REFUSED("vllm:num_requests_waiting 1\nfoo bar\n", "line 2: the value is not a number");
    REFUSED("vllm:num_requests_waiting\n", "line 1: a value expected after the name");
    REFUSED("foo{a=\"x} 1\n", "line 1: label value not closed");
    REFUSED("foo{a=\"\\x\"} 1\n", "line 1: a label value escapes only");
    REFUSED("foo{a=x} 1\n", "line 1: a quoted label value expected");
    REFUSED("foo{a\"x\"} 1\n", "line 1: '=' expected");
    REFUSED("foo{a=\"x\" b=\"y\"} 1\n", "line 1: ',' or '}' expected");
    REFUSED("foo{1a=\"x\"} 1\n", "line 1: a label name expected");
    REFUSED("foo 1 2 3\n", "line 1: text after the timestamp");
    REFUSED("foo 1 1.5\n", "line 1: the timestamp is not an integer");
    REFUSED("foo nan(1)\n", "line 1: the value is not a number");
    REFUSED("x 1\nfoo 1\0\n", "line 2: a NUL byte");
    /* a used family's count must be a count */
    REFUSED("vllm:num_requests_waiting NaN\n", "line 1: a load must be finite");
    REFUSED("sglang:num_queue_reqs +Inf\n", "line 1: a load must be finite");
    REFUSED("vllm:num_requests_running -1\n", "line 1: a load must be finite and not negative");
    REFUSED("vllm:num_requests_running 1e308\nvllm:num_requests_running 1e308\n",
            "the running requests add up past a double");
    REFUSED("vllm:cache_config_info{block_size=\"16\"} 1\n"
            "vllm:cache_config_info{block_size=\"32\"} 1\n",
            "line 2: block_size differs");
    REFUSED("vllm:cache_config_info{num_gpu_blocks=\"-3\"} 1\n",
            "line 1: num_gpu_blocks must be a decimal");
    REFUSED("vllm:num_requests_waiting 1\nvllm:lora_requests_info{max_lora=\"many\"} 1\n",
            "line 2: max_lora must be a decimal");
}

/* A line past CR_SCRAPE_LINE_MAX, a label set past CR_SCRAPE_LABELS_MAX, a
 * used label's value past CR_SCRAPE_VALUE_MAX. */
static void test_huge(void)
{
    size_t n = CR_SCRAPE_LINE_MAX + 100;
    char *body = malloc(n + 64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    int at = snprintf(body, 64, "vllm:num_requests_waiting 1\nfoo{a=\"");
    memset(body + at, 'y', n);
    strcpy(body + at + n, "\"} 1\n");
    refused(body, strlen(body), "line 2: longer than 65536 bytes");

    /* a long value of a label not used is fine, within the line */
    at = snprintf(body, 64, "vllm:num_requests_waiting 1\nfoo{a=\"");
    memset(body + at, 'y', 60000);
    strcpy(body + at + 60000, "\"} 1\n");
    cr_engine_load l;
    cr_error err;
    CU_ASSERT_EQUAL(cr_scrape_parse(body, strlen(body), &l, &err), CR_OK);
    /* ... but not of one used */
    at = snprintf(body, 64, "vllm:lora_requests_info{running_lora_adapters=\"");
    memset(body + at, 'y', 5000);
    strcpy(body + at + 5000, "\"} 1\n");
    refused(body, strlen(body), "line 1: a label value longer than 4095 bytes");

    at = snprintf(body, 64, "vllm:num_requests_waiting{");
    for (int i = 0; i <= CR_SCRAPE_LABELS_MAX; i++)
        at += snprintf(body + at, 32, "l%d=\"v\",", i);
    strcpy(body + at, "} 1\n");
    refused(body, strlen(body), "line 1: more labels than 64");
    free(body);
}

/* The names table: each row's engine named, its used families distinct. */
static void test_names_table(void)
{
    CU_ASSERT_EQUAL(cr_scrape_n_engines, 2);
    CU_ASSERT_STRING_EQUAL(cr_scrape_engines[0].engine, "vllm");
    CU_ASSERT_STRING_EQUAL(cr_scrape_engines[1].engine, "sglang");
    for (size_t r = 0; r < cr_scrape_n_engines; r++)
        CU_ASSERT(cr_scrape_engines[r].waiting && cr_scrape_engines[r].running);
}

static void url(const char *address, uint32_t port, const char *want)
{
    char buf[512];
    int rc = cr_scrape_url(address, port, "/metrics", buf, sizeof buf);
    if (!want) {
        CU_ASSERT_EQUAL(rc, -1);
        return;
    }
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(buf, want);
}

static void test_urls(void)
{
    url("10.0.0.5:8000", 0, "http://10.0.0.5:8000/metrics");
    url("10.0.0.5:8000", 9100, "http://10.0.0.5:9100/metrics");
    url("[fd00::5]:8000", 0, "http://[fd00::5]:8000/metrics");
    url("[fd00::5]:8000", 9100, "http://[fd00::5]:9100/metrics");
    url("http://10.0.0.6:8000/v1", 0, "http://10.0.0.6:8000/metrics");
    url("https://vllm-0.vllm:8443/v1", 0, "https://vllm-0.vllm:8443/metrics");
    url("vllm-0", 0, "http://vllm-0/metrics");
    url("vllm-0", 8000, "http://vllm-0:8000/metrics");
    url(":8000", 0, NULL);
    url("http:///x", 0, NULL);
    url("[fd00::5", 0, NULL);
    char small[16];
    CU_ASSERT_EQUAL(cr_scrape_url("10.0.0.5:8000", 0, "/metrics", small, sizeof small), -1);
}

/* Only IP literals are scraped: a host name would start libcurl's resolver
 * thread (cr_scrape_names_ip). */
static void test_names_ip(void)
{
    static const char *const ip[] = {"10.0.0.5:8000", "10.0.0.5", "[fd00::5]:8000",
                                      "http://10.0.0.6:8000/v1", "https://[::1]:8443"};
    static const char *const name[] = {"vllm-0:8000", "localhost:8000", "vllm-0",
                                        "https://vllm-0.vllm:8443/v1", ":8000", "[fd00::5",
                                        "[]:80", "10.0.0.300:80", "[vllm]:80"};
    for (size_t i = 0; i < sizeof ip / sizeof ip[0]; i++)
        CU_ASSERT_EQUAL(cr_scrape_names_ip(ip[i]), 1);
    for (size_t i = 0; i < sizeof name / sizeof name[0]; i++)
        CU_ASSERT_EQUAL(cr_scrape_names_ip(name[i]), 0);
}

static const cr_test_case parse_tests[] = {
    {"vLLM's body", test_vllm},
    {"SGLang's body", test_sglang},
    {"older names, unreported fields", test_old_names_and_unreported},
    {"the format's corners", test_format_corners},
    {"LoRA adapters' bounds", test_lora_bounds},
    {"garbage refused, by line", test_garbage},
    {"huge lines and label sets", test_huge},
    {"the names table", test_names_table},
    {NULL, NULL},
};

static const cr_test_case url_tests[] = {
    {"an endpoint's /metrics URL", test_urls},
    {"only IP literals are scraped", test_names_ip},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"scrape_parse", parse_tests}, {"scrape_url", url_tests}};
CR_TEST_MAIN(suites)
