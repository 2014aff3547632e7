/* The discovery sources' rows (discover.h). */
#include <stddef.h>
#include <string.h>

#include "discover.h"

#define AT(field) offsetof(cr_discover_config, field)

static cr_status valid_template(const char *value, cr_error *err)
{
    char out[CR_ENDPOINT_ADDRESS_MAX + 1];
    /* the longest address an endpoint can have: a full IPv6 one */
    return cr_discover_kv_address(value, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", out,
                                  sizeof out, err);
}

static cr_status valid_dns(const char *value, cr_error *err)
{
    char name[CR_DNS_NAME_MAX + 1];
    uint16_t port;
    return *value ? cr_dns_target_parse(value, name, &port, err) : CR_OK;
}

static cr_status valid_dns_server(const char *value, cr_error *err)
{
    if (!*value || cr_dns_is_ip_port(value))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--dns-server must be IP:PORT (a.b.c.d:port or [v6]:port) or empty, got "
                   "\"%s\"",
                   value);
}

static cr_status valid_pool(const char *value, cr_error *err)
{
    return cr_k8s_pool_check(value, err);
}

static cr_status valid_api(const char *value, cr_error *err)
{
    if (!*value || !strncmp(value, "https://", 8))
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "--k8s-api must be an https:// URL or empty, got \"%s\"",
                   value);
}

#define SA "/var/run/secrets/kubernetes.io/serviceaccount/"

static const cr_option ROWS[] = {
    {.name = "kv-events-template", .key = "kv_events_template", .type = CR_OPT_STRING,
     .offset = AT(kv_events_template), .def_text = "", .valid = valid_template,
     .help = "a discovered endpoint's KV-event address, {ip} its IP ([v6] in brackets): "
             "tcp://{ip}:5557 (a pod's cacheroute.io/kv-events annotation wins); empty = none"},
    /* ---- DNS ---- */
    {.name = "endpoints-dns", .key = "endpoints_dns", .type = CR_OPT_STRING,
     .offset = AT(endpoints_dns), .def_text = "", .valid = valid_dns,
     .help = "NAME:PORT of a headless Service: each A and AAAA address of NAME is an "
             "endpoint ip:port, resolved every --dns-interval; empty = off"},
    {.name = "dns-interval", .key = "dns_interval_s", .type = CR_OPT_DOUBLE,
     .offset = AT(dns_interval_s), .def = 5, .min = 0.01, .max = 3600,
     .help = "seconds between --endpoints-dns resolutions"},
    {.name = "dns-server", .key = "dns_server", .type = CR_OPT_STRING,
     .offset = AT(dns_server), .def_text = "", .valid = valid_dns_server,
     .help = "the DNS server --endpoints-dns asks, IP:PORT; empty = /etc/resolv.conf's"},
    /* ---- Kubernetes ---- */
    {.name = "endpoints-k8s-pool", .key = "endpoints_k8s_pool", .type = CR_OPT_STRING,
     .offset = AT(endpoints_k8s_pool), .def_text = "", .valid = valid_pool,
     .help = "Kubernetes discovery: the InferencePool (inference.networking.k8s.io/v1) "
             "NAMESPACE/NAME whose selected pods, one endpoint a pod and target port, are "
             "listed and watched into the endpoint set (ready: active, terminating: draining, "
             "not ready: down); empty = off"},
    {.name = "k8s-api", .key = "k8s_api", .type = CR_OPT_STRING, .offset = AT(k8s_api),
     .def_text = "", .valid = valid_api,
     .help = "the Kubernetes API server's URL; empty = "
             "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (in-cluster)"},
    {.name = "k8s-token-file", .key = "k8s_token_file", .type = CR_OPT_STRING,
     .offset = AT(k8s_token_file), .def_text = SA "token",
     .help = "the bearer token for the API server, re-read for each request (it rotates)"},
    {.name = "k8s-ca-file", .key = "k8s_ca_file", .type = CR_OPT_STRING,
     .offset = AT(k8s_ca_file), .def_text = SA "ca.crt",
     .help = "PEM CA bundle the API server's certificate must verify against"},
};

size_t cr_discover_sources(const cr_discover_config *c, const char **names, size_t max)
{
    size_t n = 0;
    if (*c->endpoints_dns && n < max)
        names[n++] = "--endpoints-dns";
    if (*c->endpoints_k8s_pool && n < max)
        names[n++] = "--endpoints-k8s-pool";
    return n;
}

static cr_status check(const void *cfg, cr_error *err)
{
    const cr_discover_config *c = cfg;
    const char *names[4];
    cr_status st = cr_options_check(&cr_discover_options, cfg, NULL, err);
    if (st == CR_OK && *c->kv_events_template && cr_discover_sources(c, names, 4) == 0)
        st = cr_fail(err, CR_EINVAL,
                     "--kv-events-template needs a discovery source (--endpoints-dns, "
                     "--endpoints-k8s-pool); an "
                     "endpoints file names each endpoint's kv_events");
    return st;
}

const cr_option_table cr_discover_options = CR_OPTION_TABLE_HOOKED("", ROWS, NULL, check);
