/* The KV-event address template (discover.h): one rule for every source. */
#include <string.h>

#include "discover.h"

cr_status cr_discover_kv_address(const char *tmpl, const char *ip, char *out, size_t len,
                                 cr_error *err)
{
    static const char mark[] = "{ip}";
    size_t cap = len - 1 < CR_ENDPOINT_ADDRESS_MAX ? len - 1 : CR_ENDPOINT_ADDRESS_MAX;
    size_t at = 0, iplen = strlen(ip);
    int v6 = strchr(ip, ':') != NULL, named = 0;
    out[0] = '\0';
    if (!*tmpl)
        return CR_OK;
    for (const char *p = tmpl; *p;) {
        const char *put = p;
        size_t n = 1;
        if (strncmp(p, mark, sizeof mark - 1) == 0) {
            put = ip;
            n = iplen;
            named = 1;
        } else if (*p == '{' || *p == '}' || *p < 0x21 || *p > 0x7e) {
            return cr_fail(err, CR_EINVAL,
                           "--kv-events-template may hold only printable ASCII and {ip}, got "
                           "\"%s\"",
                           tmpl);
        }
        if (at + n + 2 * (put == ip && v6) > cap)
            return cr_fail(err, CR_EINVAL,
                           "--kv-events-template \"%s\" gives more than %zu bytes for %s", tmpl,
                           cap, ip);
        if (put == ip && v6)
            out[at++] = '[';
        memcpy(out + at, put, n);
        at += n;
        if (put == ip && v6)
            out[at++] = ']';
        p += put == ip ? sizeof mark - 1 : 1;
    }
    out[at] = '\0';
    if (!named) {
        out[0] = '\0';
        return cr_fail(err, CR_EINVAL,
                       "--kv-events-template must name the endpoint's {ip} (tcp://{ip}:5557), "
                       "got \"%s\"",
                       tmpl);
    }
    return CR_OK;
}
