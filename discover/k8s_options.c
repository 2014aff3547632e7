/* --endpoints-k8s-pool and its companions: the option rows, and the API
 * server's URL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"

/* A Kubernetes name part: 1..253 of [a-z0-9.-] (RFC 1123 subdomain). */
static int k8s_name(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789.-", s[i]) || !s[i])
            return 0;
    return 1;
}

static cr_status valid_pool(const char *value, cr_error *err)
{
    const char *slash = strchr(value, '/');
    if (!*value ||
        (slash && k8s_name(value, (size_t)(slash - value)) && k8s_name(slash + 1, strlen(slash + 1))))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--endpoints-k8s-pool must be NAMESPACE/NAME (lower-case Kubernetes names) "
                   "or empty, got \"%s\"",
                   value);
}

static cr_status valid_api(const char *value, cr_error *err)
{
    if (!*value || !strncmp(value, "https://", 8))
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "--k8s-api must be an https:// URL or empty, got \"%s\"",
                   value);
}

/* "" or a template holding {ip} (one address for every engine would be no
 * engine's), at most an address's bytes with the longest IP in its place. */
static cr_status valid_template(const char *value, cr_error *err)
{
    char out[CR_ENDPOINT_ADDRESS_MAX + 1];
    if (!*value || (strstr(value, "{ip}") &&
                    cr_discover_kv_address(value, "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
                                           out, sizeof out, err) == CR_OK))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--kv-events-template must hold {ip} and give at most %d bytes with an IP "
                   "in its place, or be empty, got \"%s\"",
                   CR_ENDPOINT_ADDRESS_MAX, value);
}

#define AT(field) offsetof(cr_k8s_config, field)
#define SA "/var/run/secrets/kubernetes.io/serviceaccount/"

static const cr_option ROWS[] = {
    {.name = "endpoints-k8s-pool", .key = "endpoints_k8s_pool", .type = CR_OPT_STRING,
     .offset = AT(pool), .def_text = "", .valid = valid_pool,
     .help = "Kubernetes discovery: the InferencePool (inference.networking.k8s.io/v1) "
             "NAMESPACE/NAME whose selected pods, one endpoint a pod and target port, are "
             "listed and watched into the endpoint set (ready: active, terminating: draining, "
             "not ready: down); not with --endpoints-file; empty = off"},
    {.name = "k8s-api", .key = "k8s_api", .type = CR_OPT_STRING, .offset = AT(api),
     .def_text = "", .valid = valid_api,
     .help = "the Kubernetes API server's URL; empty = "
             "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (in-cluster)"},
    {.name = "k8s-token-file", .key = "k8s_token_file", .type = CR_OPT_STRING,
     .offset = AT(token_file), .def_text = SA "token",
     .help = "the bearer token for the API server, re-read for each request (it rotates)"},
    {.name = "k8s-ca-file", .key = "k8s_ca_file", .type = CR_OPT_STRING, .offset = AT(ca_file),
     .def_text = SA "ca.crt", .help = "PEM CA bundle the API server's certificate must verify "
                                      "against"},
    {.name = "kv-events-template", .key = "kv_events_template", .type = CR_OPT_STRING,
     .offset = AT(kv_events_template), .def_text = "", .valid = valid_template,
     .help = "a discovered endpoint's KV-event address, {ip} its IP (tcp://{ip}:5557); a "
             "pod's cacheroute.io/kv-events annotation overrides it; empty = none"},
};

const cr_option_table cr_k8s_options = CR_OPTION_TABLE("", ROWS);

cr_status cr_k8s_api_url(const cr_k8s_config *c, char *out, size_t cap, cr_error *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    int n;
    if (c->api && *c->api)
        n = snprintf(out, cap, "%s", c->api);
    else if (host && *host && port && *port)
        n = snprintf(out, cap, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host,
                     port);
    else
        return cr_fail(err, CR_EINVAL,
                       "--endpoints-k8s-pool needs --k8s-api or KUBERNETES_SERVICE_HOST and "
                       "KUBERNETES_SERVICE_PORT");
    if (n < 0 || (size_t)n >= cap)
        return cr_fail(err, CR_EINVAL, "the Kubernetes API URL is longer than %zu bytes",
                       cap - 1);
    while (n > 0 && out[n - 1] == '/')
        out[--n] = '\0';
    return CR_OK;
}
