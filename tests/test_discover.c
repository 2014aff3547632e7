/* discover.h's pure parts: the KV-event address template, --endpoints-dns
 * and --dns-server values, the addresses' order and text, the specs they
 * become, and the rows' rule across flags. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "discover.h"

static void test_template(void)
{
    char out[CR_ENDPOINT_ADDRESS_MAX + 1];
    cr_error err;
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://{ip}:5557", "10.0.0.5", out, sizeof out, &err),
                    CR_OK);
    CU_ASSERT_STRING_EQUAL(out, "tcp://10.0.0.5:5557");
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://{ip}:5557", "fd00::5", out, sizeof out, &err),
                    CR_OK);
    CU_ASSERT_STRING_EQUAL(out, "tcp://[fd00::5]:5557");
    CU_ASSERT_EQUAL(cr_discover_kv_address("{ip}/{ip}", "1.2.3.4", out, sizeof out, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(out, "1.2.3.4/1.2.3.4");
    CU_ASSERT_EQUAL(cr_discover_kv_address("", "1.2.3.4", out, sizeof out, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(out, "");
}

static void test_template_refused(void)
{
    char out[CR_ENDPOINT_ADDRESS_MAX + 1], small[18], big[400];
    cr_error err;
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://x:5557", "1.2.3.4", out, sizeof out, &err),
                    CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "must name the endpoint's {ip}"));
    CU_ASSERT_STRING_EQUAL(out, "");
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://{host}:1", "1.2.3.4", out, sizeof out, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://{ip} :1", "1.2.3.4", out, sizeof out, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://{ip}\xc3\xa9", "1.2.3.4", out, sizeof out,
                                           &err),
                    CR_EINVAL);
    /* too long for out, then for an endpoint's address */
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://{ip}:5557", "1.2.3.4", small, sizeof small,
                                           &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(cr_discover_kv_address("tcp://{ip}:555", "1.2.3.4", small, sizeof small, &err),
                    CR_OK);
    CU_ASSERT_STRING_EQUAL(small, "tcp://1.2.3.4:555");
    memset(big, 'a', sizeof big);
    memcpy(big, "{ip}", 4);
    big[CR_ENDPOINT_ADDRESS_MAX - 2] = '\0'; /* 250 bytes and a 7-byte IPv4: 257 */
    CU_ASSERT_EQUAL(cr_discover_kv_address(big, "1.2.3.4", out, sizeof out, &err), CR_EINVAL);
    big[CR_ENDPOINT_ADDRESS_MAX - 3] = '\0'; /* 256 exactly */
    CU_ASSERT_EQUAL(cr_discover_kv_address(big, "1.2.3.4", out, sizeof out, &err), CR_OK);
    CU_ASSERT_EQUAL(strlen(out), CR_ENDPOINT_ADDRESS_MAX);
}

static void test_target(void)
{
    char name[CR_DNS_NAME_MAX + 1], longest[CR_DNS_NAME_MAX + 8];
    uint16_t port = 0;
    cr_error err;
    CU_ASSERT_EQUAL(cr_dns_target_parse("vllm.default.svc.cluster.local:8000", name, &port, &err),
                    CR_OK);
    CU_ASSERT_STRING_EQUAL(name, "vllm.default.svc.cluster.local");
    CU_ASSERT_EQUAL(port, 8000);
    static const char *const bad[] = {"vllm",      "vllm:",    ":80",   "vllm:0",
                                      "vllm:65536", "vllm:+80", "v m:80", "vllm:80x",
                                      "[::1]:80",  "vllm: 80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(cr_dns_target_parse(bad[i], name, &port, &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--endpoints-dns must be NAME:PORT"));
    }
    memset(longest, 'a', CR_DNS_NAME_MAX);
    strcpy(longest + CR_DNS_NAME_MAX, ":1");
    CU_ASSERT_EQUAL(cr_dns_target_parse(longest, name, &port, &err), CR_OK);
    CU_ASSERT_EQUAL(strlen(name), CR_DNS_NAME_MAX);
    memset(longest, 'a', CR_DNS_NAME_MAX + 1);
    strcpy(longest + CR_DNS_NAME_MAX + 1, ":1");
    CU_ASSERT_EQUAL(cr_dns_target_parse(longest, name, &port, &err), CR_EINVAL);
}

static void test_ip_port(void)
{
    CU_ASSERT_TRUE(cr_dns_is_ip_port("127.0.0.1:53"));
    CU_ASSERT_TRUE(cr_dns_is_ip_port("[::1]:5353"));
    CU_ASSERT_TRUE(cr_dns_is_ip_port("[fd00::5]:65535"));
    static const char *const bad[] = {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0",
                                      "localhost:53", "::1:53", "[::1]53", "[::1]:",
                                      "[1.2.3.4]:53", "1.2.3.4:53:53", "[::1]:70000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_FALSE(cr_dns_is_ip_port(bad[i]));
}

static cr_dns_addr v4(const char *text)
{
    cr_dns_addr a = {0};
    inet_pton(AF_INET, text, a.bytes);
    return a;
}

static cr_dns_addr v6(const char *text)
{
    cr_dns_addr a = {.v6 = 1};
    inet_pton(AF_INET6, text, a.bytes);
    return a;
}

/* Whatever order the answer gives, the same sorted set, repeats once. */
static void test_sort(void)
{
    cr_dns_addr v[] = {v6("fd00::2"), v4("10.0.0.10"), v4("10.0.0.9"), v6("fd00::1"),
                       v4("10.0.0.9"), v4("9.255.0.1")};
    size_t n = cr_dns_addrs_sort(v, sizeof v / sizeof v[0]);
    static const char *const want[] = {"9.255.0.1", "10.0.0.9", "10.0.0.10", "fd00::1",
                                       "fd00::2"};
    CU_ASSERT_EQUAL_FATAL(n, 5);
    for (size_t i = 0; i < n; i++) {
        char text[64];
        cr_dns_ip_text(&v[i], text, sizeof text);
        CU_ASSERT_STRING_EQUAL(text, want[i]);
    }
    CU_ASSERT_EQUAL(cr_dns_addrs_sort(v, 0), 0);
}

static void test_specs(void)
{
    cr_dns_addr v[] = {v4("10.0.0.5"), v6("fd00::5")};
    cr_error err;
    cr_endpoint_spec *s = cr_dns_specs(v, 2, 8000, "tcp://{ip}:5557", &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_STRING_EQUAL(s[0].id, "10.0.0.5:8000");
    CU_ASSERT_STRING_EQUAL(s[0].address, "10.0.0.5:8000");
    CU_ASSERT_STRING_EQUAL(s[0].kv_events, "tcp://10.0.0.5:5557");
    CU_ASSERT_STRING_EQUAL(s[1].id, "[fd00::5]:8000");
    CU_ASSERT_STRING_EQUAL(s[1].kv_events, "tcp://[fd00::5]:5557");
    CU_ASSERT_EQUAL(s[1].stated, 0);
    CU_ASSERT_EQUAL(s[1].weight, 0);
    CU_ASSERT_EQUAL(cr_endpoints_check(s, 2, &err), CR_OK);
    free(s);
    s = cr_dns_specs(v, 2, 1, "", &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_STRING_EQUAL(s[1].id, "[fd00::5]:1");
    CU_ASSERT_STRING_EQUAL(s[1].kv_events, "");
    free(s);
    CU_ASSERT_PTR_NULL(cr_dns_specs(v, 2, 1, "tcp://nowhere", &err));
}

/* The rows: each value's check names its flag; the template wants a
 * source. */
static void test_rows(void)
{
    cr_discover_config c;
    cr_error err;
    const char *names[4];
    cr_options_defaults(&cr_discover_options, &c);
    CU_ASSERT_EQUAL(c.dns_interval_s, 5);
    CU_ASSERT_EQUAL(cr_discover_sources(&c, names, 4), 0);
    CU_ASSERT_EQUAL(cr_discover_options.check(&c, &err), CR_OK);
    c.kv_events_template = "tcp://{ip}:5557";
    CU_ASSERT_EQUAL(cr_discover_options.check(&c, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--kv-events-template needs a discovery source"));
    c.endpoints_dns = "vllm:8000";
    CU_ASSERT_EQUAL(cr_discover_sources(&c, names, 4), 1);
    CU_ASSERT_STRING_EQUAL(names[0], "--endpoints-dns");
    CU_ASSERT_EQUAL(cr_discover_options.check(&c, &err), CR_OK);
    static const char *const bad[][2] = {{"endpoints-dns", "vllm"},
                                         {"dns-server", "localhost:53"},
                                         {"kv-events-template", "tcp://x:1"},
                                         {"dns-interval", "0"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const cr_option *o =
            cr_option_find(&cr_discover_options, bad[i][0], strlen(bad[i][0]));
        CU_ASSERT_PTR_NOT_NULL_FATAL(o);
        CU_ASSERT_EQUAL(cr_option_set(&cr_discover_options, o, &c, bad[i][1], &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i][0]));
    }
}

static const cr_test_case template_tests[] = {
    {"the KV-event address template", test_template},
    {"templates refused", test_template_refused},
    {NULL, NULL},
};

static const cr_test_case dns_tests[] = {
    {"--endpoints-dns NAME:PORT", test_target},
    {"--dns-server IP:PORT", test_ip_port},
    {"addresses sorted, repeats dropped", test_sort},
    {"addresses as specs", test_specs},
    {"the rows", test_rows},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"discover", template_tests}, {"discover_dns", dns_tests}};
CR_TEST_MAIN(suites)
