/* The scraper's settings (option rows, group "scrape"; --scrape-interval
 * is the route rule's row, which reads it too) and where a scrape goes: an
 * endpoint's address made the URL of its /metrics. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "scrape.h"

static cr_status valid_path(const char *value, cr_error *err)
{
    if (value[0] == '/' && strspn(value, "/-._~%!$&'()*+,;=:@?abcdefghijklmnopqrstuvwxyz"
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == strlen(value))
        return CR_OK;
    return cr_fail(err, CR_EINVAL,
                   "--scrape-path must be a URL path starting with '/', got \"%s\"", value);
}

#define AT(field) offsetof(cr_scrape_config, field)

static const cr_option ROWS[] = {
    {.name = "scrape-timeout", .key = "timeout_s", .type = CR_OPT_DOUBLE, .offset = AT(timeout_s),
     .def = 0, .min = 0, .max = 60,
     .help = "seconds one endpoint's scrape may take (connect included); 0 = --scrape-interval"},
    {.name = "scrape-path", .key = "path", .type = CR_OPT_STRING, .offset = AT(path),
     .def_text = "/metrics", .min = 1, .max = 1024, .valid = valid_path,
     .help = "the engines' metrics path, appended to each endpoint's ip:port"},
    {.name = "scrape-port", .key = "port", .type = CR_OPT_U32, .offset = AT(port), .def = 0,
     .min = 0, .max = 65535,
     .help = "the port scraped on each endpoint's host, when the engines serve /metrics on "
             "another port than their address's; 0 = the address's"},
    {.name = "scrape-max-bytes", .key = "max_bytes", .type = CR_OPT_U64, .offset = AT(max_bytes),
     .def = 1048576, .min = 1024, .max = 67108864,
     .help = "largest /metrics body read, bytes; past it the scrape is aborted and counted "
             "(too_big)"},
};

const cr_option_table cr_scrape_options = CR_OPTION_TABLE("scrape", ROWS);

double cr_scrape_timeout(const cr_scrape_config *cfg)
{
    return cfg->timeout_s > 0 ? cfg->timeout_s : cfg->interval_s;
}

/* An address's parts: its scheme ("http://" when it has none), where its
 * authority starts (*address moved past the scheme) and the bytes of the
 * authority and of its host ([v6] with its brackets); -1 without a host. */
static int split(const char **address, const char **scheme, size_t *authority, size_t *host)
{
    const char *a = *address;
    *scheme = "http://";
    if (!strncmp(a, "http://", 7)) {
        a += 7;
    } else if (!strncmp(a, "https://", 8)) {
        *scheme = "https://";
        a += 8;
    }
    *authority = strcspn(a, "/?#");
    *host = *authority;
    const char *colon = memchr(a, ':', *authority);
    if (a[0] == '[') { /* [v6] or [v6]:port */
        const char *close = memchr(a, ']', *authority);
        if (!close)
            return -1;
        *host = (size_t)(close + 1 - a);
    } else if (colon) {
        *host = (size_t)(colon - a);
    }
    *address = a;
    return *host ? 0 : -1;
}

int cr_scrape_names_ip(const char *address)
{
    const char *scheme;
    size_t authority, host;
    char text[INET6_ADDRSTRLEN];
    if (split(&address, &scheme, &authority, &host) != 0)
        return 0;
    int v6 = address[0] == '[';
    size_t n = v6 ? host - 2 : host;
    if (n == 0 || n >= sizeof text)
        return 0;
    memcpy(text, address + v6, n);
    text[n] = '\0';
    unsigned char bytes[16];
    return inet_pton(v6 ? AF_INET6 : AF_INET, text, bytes) == 1;
}

int cr_scrape_url(const char *address, uint32_t port, const char *path, char *buf, size_t size)
{
    const char *scheme;
    size_t authority, host;
    if (split(&address, &scheme, &authority, &host) != 0)
        return -1;
    char port_text[16] = "";
    if (port)
        snprintf(port_text, sizeof port_text, ":%u", port);
    int n = port ? snprintf(buf, size, "%s%.*s%s%s", scheme, (int)host, address, port_text, path)
                 : snprintf(buf, size, "%s%.*s%s", scheme, (int)authority, address, path);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}
