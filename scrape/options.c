/* The scraper's settings (option rows, group "scrape"; --scrape-interval
 * is the route rule's row, which reads it too) and where a scrape goes: an
 * endpoint's address made the URL of its /metrics. */
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

int cr_scrape_url(const char *address, uint32_t port, const char *path, char *buf, size_t size)
{
    const char *scheme = "http://";
    if (!strncmp(address, "http://", 7)) {
        address += 7;
    } else if (!strncmp(address, "https://", 8)) {
        scheme = "https://";
        address += 8;
    }
    size_t authority = strcspn(address, "/?#");
    size_t host = authority;
    const char *colon = memchr(address, ':', authority);
    if (address[0] == '[') { /* [v6] or [v6]:port */
        const char *close = memchr(address, ']', authority);
        if (!close)
            return -1;
        host = (size_t)(close + 1 - address);
    } else if (colon) {
        host = (size_t)(colon - address);
    }
    if (!host)
        return -1;
    char port_text[16] = "";
    if (port)
        snprintf(port_text, sizeof port_text, ":%u", port);
    int n = port ? snprintf(buf, size, "%s%.*s%s%s", scheme, (int)host, address, port_text, path)
                 : snprintf(buf, size, "%s%.*s%s", scheme, (int)authority, address, path);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}
