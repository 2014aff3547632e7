/* Kubernetes discovery's readers (discover/k8s_pods.c) on the API
 * server's shapes (Kubernetes v1.30's core/v1 Pod, PodList and watch
 * events; GIE v1's InferencePool): the pool's selector and ports and their
 * refusals, a list, each watch event (ADDED, MODIFIED, DELETED, BOOKMARK,
 * ERROR 410 and others, garbage), the endpoints they make (states, ids
 * with several ports, IPv6, the annotation over the template, pods left
 * out; the template from --kv-events-template or a pod's annotation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "k8s_internal.h"

#define POOL(spec) "{\"apiVersion\":\"inference.networking.k8s.io/v1\",\"kind\":\"InferencePool\"," \
                   "\"metadata\":{\"name\":\"p\"},\"spec\":" spec "}"

static void test_pool(void)
{
    k8s_pool p;
    cr_error err;
    CU_ASSERT_EQUAL(k8s_pool_parse(POOL("{\"selector\":{\"matchLabels\":{\"app\":\"vllm\","
                                        "\"tier\":\"gpu\"}},\"targetPorts\":[{\"number\":8000},"
                                        "{\"number\":8001}]}"),
                                   &p, &err),
                    CR_OK);
    CU_ASSERT_STRING_EQUAL(p.selector, "app=vllm,tier=gpu");
    CU_ASSERT_EQUAL(p.n_ports, 2);
    CU_ASSERT_EQUAL(p.ports[1], 8001);
    CU_ASSERT_EQUAL(k8s_pool_parse(POOL("{\"selector\":{},\"targetPorts\":[{\"number\":1}]}"), &p,
                                   &err),
                    CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "matchLabels"));
    CU_ASSERT_EQUAL(k8s_pool_parse(POOL("{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},"
                                        "\"targetPorts\":[{\"number\":70000}]}"),
                                   &p, &err),
                    CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "targetPorts[0].number"));
    CU_ASSERT_EQUAL(k8s_pool_parse(POOL("{\"selector\":{\"matchLabels\":{\"a\":\"b\"}},"
                                        "\"targetPorts\":[]}"),
                                   &p, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(k8s_pool_parse("not json", &p, &err), CR_EINVAL);
}

/* A Pod as the API server writes it. */
static char *pod(char *buf, const char *name, const char *ip, const char *ready, const char *extra)
{
    sprintf(buf,
            "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\","
            "\"resourceVersion\":\"%s-rv\"%s},\"status\":{\"phase\":\"Running\",\"podIP\":\"%s\","
            "\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"},{\"type\":\"Ready\","
            "\"status\":\"%s\"}]}}",
            name, name, extra, ip, ready);
    return buf;
}

static k8s_pods new_pods(void)
{
    k8s_pods p = {.v = malloc(CR_K8S_MAX_PODS * sizeof(k8s_pod))};
    CU_ASSERT_PTR_NOT_NULL_FATAL(p.v);
    return p;
}

static void test_list_and_events(void)
{
    k8s_pods p = new_pods();
    cr_error err;
    char a[1024], b[1024], line[4096];
    snprintf(line, sizeof line,
             "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"42\"},"
             "\"items\":[%s,%s]}",
             pod(a, "vllm-0", "10.0.0.1", "True", ""), pod(b, "vllm-1", "10.0.0.2", "False", ""));
    CU_ASSERT_EQUAL_FATAL(k8s_pods_list(&p, line, &err), CR_OK);
    CU_ASSERT_EQUAL(p.n, 2);
    CU_ASSERT_STRING_EQUAL(p.rv, "42");
    CU_ASSERT_TRUE(p.v[0].ready);
    CU_ASSERT_FALSE(p.v[1].ready);
    CU_ASSERT_EQUAL(k8s_pods_list(&p, "{\"items\":[]}", &err), CR_EINVAL); /* no version */
    CU_ASSERT_EQUAL(p.n, 2);

    snprintf(line, sizeof line, "{\"type\":\"ADDED\",\"object\":%s}",
             pod(a, "vllm-2", "10.0.0.3", "True", ""));
    CU_ASSERT_EQUAL(k8s_pods_event(&p, line, &err), K8S_EVENT_CHANGED);
    CU_ASSERT_EQUAL(p.n, 3);
    CU_ASSERT_STRING_EQUAL(p.rv, "vllm-2-rv");
    snprintf(line, sizeof line, "{\"type\":\"MODIFIED\",\"object\":%s}",
             pod(a, "vllm-0", "10.0.0.1", "True",
                 ",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\""));
    CU_ASSERT_EQUAL(k8s_pods_event(&p, line, &err), K8S_EVENT_CHANGED);
    CU_ASSERT_EQUAL(p.n, 3);
    CU_ASSERT_TRUE(p.v[0].deleting);
    snprintf(line, sizeof line, "{\"type\":\"DELETED\",\"object\":%s}",
             pod(a, "vllm-1", "10.0.0.2", "False", ""));
    CU_ASSERT_EQUAL(k8s_pods_event(&p, line, &err), K8S_EVENT_CHANGED);
    CU_ASSERT_EQUAL(p.n, 2);

    CU_ASSERT_EQUAL(k8s_pods_event(&p, "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\","
                                       "\"metadata\":{\"resourceVersion\":\"99\"}}}",
                                   &err),
                    K8S_EVENT_BOOKMARK);
    CU_ASSERT_STRING_EQUAL(p.rv, "99");
    CU_ASSERT_EQUAL(k8s_pods_event(&p, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                                       "\"status\":\"Failure\",\"reason\":\"Expired\","
                                       "\"message\":\"too old\",\"code\":410}}",
                                   &err),
                    K8S_EVENT_GONE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "Expired: too old"));
    CU_ASSERT_EQUAL(k8s_pods_event(&p, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                                       "\"code\":500}}",
                                   &err),
                    K8S_EVENT_ERROR);
    CU_ASSERT_EQUAL(k8s_pods_event(&p, "{\"type\":\"ADDED\",\"object\":{}}", &err),
                    K8S_EVENT_ERROR);
    CU_ASSERT_EQUAL(k8s_pods_event(&p, "{\"type\":\"NEW\",\"object\":{}}", &err),
                    K8S_EVENT_ERROR);
    CU_ASSERT_EQUAL(k8s_pods_event(&p, "{\"type\":\"ADD", &err), K8S_EVENT_ERROR);
    CU_ASSERT_EQUAL(p.n, 2);
    CU_ASSERT_STRING_EQUAL(p.rv, "99");
    free(p.v);
}

static void test_endpoints(void)
{
    k8s_pods p = new_pods();
    k8s_pool pool = {.selector = "app=v", .ports = {8000}, .n_ports = 1};
    cr_endpoint_spec *specs = malloc(CR_ENDPOINTS_MAX * sizeof *specs);
    k8s_endpoint *ep = malloc(CR_ENDPOINTS_MAX * sizeof *ep);
    size_t n, skipped;
    char longname[K8S_NAME_MAX + 1];
    memset(longname, 'x', 200);
    longname[200] = '\0';
    p.v[p.n++] = (k8s_pod){.name = "c", .ip = "10.0.0.3", .ready = 0};
    p.v[p.n++] = (k8s_pod){.name = "a", .ip = "10.0.0.1", .ready = 1};
    p.v[p.n++] = (k8s_pod){.name = "b", .ip = "fd00::2", .ready = 1, .deleting = 1,
                           .kv = "tcp://kv-b:7000"};
    p.v[p.n++] = (k8s_pod){.name = "pending", .ip = "", .ready = 0};
    p.v[p.n++] = (k8s_pod){.name = "done", .ip = "10.0.0.9", .ready = 0, .done = 1};
    p.v[p.n] = (k8s_pod){.ready = 1};
    memcpy(p.v[p.n].name, longname, 201);
    snprintf(p.v[p.n++].ip, K8S_IP_MAX + 1, "10.0.0.8");
    k8s_endpoints(&p, &pool, "tcp://{ip}:5557", specs, ep, &n, &skipped);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_EQUAL(skipped, 1); /* the long name */
    CU_ASSERT_STRING_EQUAL(specs[0].id, "a");
    CU_ASSERT_STRING_EQUAL(specs[0].address, "10.0.0.1:8000");
    CU_ASSERT_STRING_EQUAL(specs[0].kv_events, "tcp://10.0.0.1:5557");
    CU_ASSERT_EQUAL(specs[0].stated, 1);
    CU_ASSERT_EQUAL(specs[0].state, CR_ENDPOINT_ACTIVE);
    CU_ASSERT_STRING_EQUAL(specs[1].address, "[fd00::2]:8000");
    CU_ASSERT_STRING_EQUAL(specs[1].kv_events, "tcp://kv-b:7000");
    CU_ASSERT_EQUAL(specs[1].state, CR_ENDPOINT_DRAINING);
    CU_ASSERT_EQUAL(specs[2].state, CR_ENDPOINT_DOWN);
    cr_error err;
    CU_ASSERT_EQUAL(cr_endpoints_check(specs, n, &err), CR_OK);

    pool.ports[1] = 9000;
    pool.n_ports = 2;
    p.n = 1; /* c only */
    k8s_endpoints(&p, &pool, "", specs, ep, &n, &skipped);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(specs[0].id, "c:8000");
    CU_ASSERT_STRING_EQUAL(specs[1].id, "c:9000");
    CU_ASSERT_STRING_EQUAL(specs[1].address, "10.0.0.3:9000");
    CU_ASSERT_STRING_EQUAL(specs[1].kv_events, "");
    free(specs);
    free(ep);
    free(p.v);
}

static const cr_test_case pool_tests[] = {{"pool", test_pool}, {NULL, NULL}};
static const cr_test_case pod_tests[] = {{"list and events", test_list_and_events},
                                         {"endpoints", test_endpoints},
                                         {NULL, NULL}};
static const cr_test_suite suites[] = {{"k8s pool", pool_tests}, {"k8s pods", pod_tests}};
CR_TEST_MAIN(suites)
