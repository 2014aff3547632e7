/* The discovery sources' rows (discover.h). */
#include <stddef.h>

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

static const cr_option ROWS[] = {
    {.name = "kv-events-template", .key = "kv_events_template", .type = CR_OPT_STRING,
     .offset = AT(kv_events_template), .def_text = "", .valid = valid_template,
     .help = "a discovered endpoint's KV-event address, {ip} its IP ([v6] in brackets): "
             "tcp://{ip}:5557; empty = none"},
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
};

size_t cr_discover_sources(const cr_discover_config *c, const char **names, size_t max)
{
    size_t n = 0;
    if (*c->endpoints_dns && n < max)
        names[n++] = "--endpoints-dns";
    return n;
}

static cr_status check(const void *cfg, cr_error *err)
{
    const cr_discover_config *c = cfg;
    const char *names[4];
    cr_status st = cr_options_check(&cr_discover_options, cfg, NULL, err);
    if (st == CR_OK && *c->kv_events_template && cr_discover_sources(c, names, 4) == 0)
        st = cr_fail(err, CR_EINVAL,
                     "--kv-events-template needs a discovery source (--endpoints-dns); an "
                     "endpoints file names each endpoint's kv_events");
    return st;
}

const cr_option_table cr_discover_options = CR_OPTION_TABLE_HOOKED("", ROWS, NULL, check);
