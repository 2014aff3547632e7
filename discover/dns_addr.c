/* --endpoints-dns' pure parts (discover.h): the flag's values, the
 * addresses' order and text, and the specs they become. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"

/* "1".."65535" in full: 1 with *port, else 0. */
static int parse_port(const char *s, uint16_t *port)
{
    int64_t v;
    if (strspn(s, "0123456789") != strlen(s) || cr_parse_i64(s, &v) != 0 || v < 1 ||
        v > 65535)
        return 0;
    *port = (uint16_t)v;
    return 1;
}

cr_status cr_dns_target_parse(const char *value, char *name, uint16_t *port, cr_error *err)
{
    const char *colon = strrchr(value, ':');
    size_t n = colon ? (size_t)(colon - value) : 0;
    if (!colon || n == 0 || n > CR_DNS_NAME_MAX ||
        strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != n ||
        !parse_port(colon + 1, port))
        return cr_fail(err, CR_EINVAL,
                       "--endpoints-dns must be NAME:PORT (NAME 1..%d bytes of letters, digits, "
                       "'-', '_' and '.'; PORT 1..65535) or empty, got \"%s\"",
                       CR_DNS_NAME_MAX, value);
    memcpy(name, value, n);
    name[n] = '\0';
    return CR_OK;
}

int cr_dns_is_ip_port(const char *value)
{
    char host[INET6_ADDRSTRLEN + 1];
    uint8_t bytes[16];
    uint16_t port;
    const char *colon;
    size_t n;
    int v6 = value[0] == '[';
    if (v6) {
        const char *close = strchr(value, ']');
        if (!close || close[1] != ':')
            return 0;
        colon = close + 1;
        value++;
        n = (size_t)(close - value);
    } else {
        if (!(colon = strchr(value, ':')))
            return 0;
        n = (size_t)(colon - value);
    }
    if (n == 0 || n >= sizeof host)
        return 0;
    memcpy(host, value, n);
    host[n] = '\0';
    return inet_pton(v6 ? AF_INET6 : AF_INET, host, bytes) == 1 && parse_port(colon + 1, &port);
}

static int addr_cmp(const void *a, const void *b)
{
    const cr_dns_addr *x = a, *y = b;
    if (x->v6 != y->v6)
        return x->v6 < y->v6 ? -1 : 1;
    return memcmp(x->bytes, y->bytes, x->v6 ? 16 : 4);
}

size_t cr_dns_addrs_sort(cr_dns_addr *v, size_t n)
{
    size_t kept = 0;
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, addr_cmp);
    for (size_t i = 1; i < n; i++)
        if (addr_cmp(&v[kept], &v[i]) != 0)
            v[++kept] = v[i];
    return kept + 1;
}

void cr_dns_ip_text(const cr_dns_addr *a, char *out, size_t len)
{
    if (!inet_ntop(a->v6 ? AF_INET6 : AF_INET, a->bytes, out, (socklen_t)len) && len)
        out[0] = '\0';
}

/* The bytes one spec's strings take, NULs included: the id, which is also
 * the address, and its kv_events. */
#define SPEC_TEXT (INET6_ADDRSTRLEN + 9 + CR_ENDPOINT_ADDRESS_MAX + 1)

cr_endpoint_spec *cr_dns_specs(const cr_dns_addr *v, size_t n, uint16_t port, const char *tmpl,
                               cr_error *err)
{
    cr_endpoint_spec *specs = calloc(1, n * (sizeof *specs + SPEC_TEXT) + 1);
    if (!specs) {
        cr_fail(err, CR_ENOMEM, "out of memory for %zu endpoints of --endpoints-dns", n);
        return NULL;
    }
    char *text = (char *)(specs + n);
    for (size_t i = 0; i < n; i++) {
        char ip[INET6_ADDRSTRLEN];
        char *id = text + i * SPEC_TEXT, *kv = id + INET6_ADDRSTRLEN + 9;
        cr_dns_ip_text(&v[i], ip, sizeof ip);
        snprintf(id, INET6_ADDRSTRLEN + 9, v[i].v6 ? "[%s]:%u" : "%s:%u", ip, (unsigned)port);
        if (cr_discover_kv_address(tmpl, ip, kv, CR_ENDPOINT_ADDRESS_MAX + 1, err) != CR_OK) {
            free(specs);
            return NULL;
        }
        specs[i] = (cr_endpoint_spec){.id = id, .address = id, .kv_events = kv};
    }
    return specs;
}
