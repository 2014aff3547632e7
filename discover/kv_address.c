/* cr_discover_kv_address: a KV-event address template filled with an IP. */
#include <string.h>

#include "discover.h"

cr_status cr_discover_kv_address(const char *template, const char *ip, char *out, size_t cap,
                                 cr_error *err)
{
    size_t n = 0;
    int v6 = strchr(ip, ':') != NULL;
    for (const char *p = template ? template : ""; *p;) {
        const char *put = p;
        size_t len = 1;
        if (!strncmp(p, "{ip}", 4)) {
            put = ip;
            len = strlen(ip);
            p += 4;
        } else {
            p++;
        }
        if (n + len + 2 * (put == ip && v6) >= cap)
            return cr_fail(err, CR_EINVAL, "the KV-event address is longer than %zu bytes",
                           cap - 1);
        if (put == ip && v6)
            out[n++] = '[';
        memcpy(out + n, put, len);
        n += len;
        if (put == ip && v6)
            out[n++] = ']';
    }
    if (cap)
        out[n] = '\0';
    return CR_OK;
}
