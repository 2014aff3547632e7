/* GET /metrics over libmicrohttpd, on its own thread. */
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_internal.h"

struct cr_metrics_http {
    struct MHD_Daemon *daemon;
    cr_metrics *m;
    cr_metrics_sample_fn sample;
    void *ctx;
    int port;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type",
                            code == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8"
                                                : "text/plain; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)state;
    cr_metrics_http *h = cls;
    static char not_found[] = "not found: metrics are at /metrics\n";
    static char not_allowed[] = "method not allowed\n";
    static char failed[] = "cannot render metrics\n";
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, not_allowed, strlen(not_allowed),
                     MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics"))
        return reply(conn, MHD_HTTP_NOT_FOUND, not_found, strlen(not_found),
                     MHD_RESPMEM_PERSISTENT);
    size_t len;
    char *body = cr_metrics_render(h->m, h->sample, h->ctx, &len);
    if (!body)
        return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, failed, strlen(failed),
                     MHD_RESPMEM_PERSISTENT);
    return reply(conn, MHD_HTTP_OK, body, len, MHD_RESPMEM_MUST_FREE);
}

/* "host:port" or "[v6]:port" -> a socket address. */
static int resolve(const char *listen, struct addrinfo **out)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || !colon[1])
        return -1;
    size_t hl = (size_t)(colon - listen);
    if (hl >= 2 && listen[0] == '[' && listen[hl - 1] == ']')
        snprintf(host, sizeof host, "%.*s", (int)hl - 2, listen + 1);
    else
        snprintf(host, sizeof host, "%.*s", (int)hl, listen);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    return getaddrinfo(*host ? host : NULL, colon + 1, &hints, out) == 0 ? 0 : -1;
}

int cr_metrics_serve(cr_metrics *m, const char *listen, const cr_metrics_http_limits *limits,
                     cr_metrics_sample_fn sample, void *ctx, cr_error *err)
{
    static const cr_metrics_http_limits defaults = {30, 64, 0};
    const cr_metrics_http_limits *l = limits ? limits : &defaults;
    struct addrinfo *ai = NULL;
    cr_metrics_http *h = calloc(1, sizeof *h);
    if (!h || resolve(listen, &ai) != 0) {
        cr_fail(err, CR_EINVAL, "--metrics-listen: must be host:port, got '%s'", listen);
        free(h);
        return -1;
    }
    *h = (cr_metrics_http){NULL, m, sample, ctx, 0};
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* One polling thread serves every connection (a slow one holds a slot,
     * never the thread); the limits bound the slots, per address too. */
    struct MHD_OptionItem opts[5] = {{MHD_OPTION_SOCK_ADDR, 0, ai->ai_addr}};
    size_t n = 1;
    if (l->timeout_s)
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, l->timeout_s, NULL};
    if (l->max_connections)
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, l->max_connections, NULL};
    if (l->per_ip_connections)
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                            l->per_ip_connections, NULL};
    opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, answer, h, MHD_OPTION_ARRAY, opts,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        cr_fail(err, CR_EINVAL, "--metrics-listen: cannot listen on '%s' (bad address, or in use)",
                listen);
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : 0;
    *cr_metrics_http_slot(m) = h;
    return 0;
}

void cr_metrics_stop(cr_metrics *m)
{
    cr_metrics_http **slot = cr_metrics_http_slot(m);
    if (!*slot)
        return;
    MHD_stop_daemon((*slot)->daemon);
    free(*slot);
    *slot = NULL;
}

int cr_metrics_port(const cr_metrics *m)
{
    cr_metrics_http *h = *cr_metrics_http_slot((cr_metrics *)m);
    return h ? h->port : 0;
}
