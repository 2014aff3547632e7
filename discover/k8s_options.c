/* --endpoints-k8s-pool's value, and the API server's URL. */
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
        if (!s[i] || !strchr("abcdefghijklmnopqrstuvwxyz0123456789.-", s[i]))
            return 0;
    return 1;
}

cr_status cr_k8s_pool_check(const char *value, cr_error *err)
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

cr_status cr_k8s_api_url(const cr_discover_config *c, char *out, size_t cap, cr_error *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    int n;
    if (c->k8s_api && *c->k8s_api)
        n = snprintf(out, cap, "%s", c->k8s_api);
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
