/* --endpoints-file (endpoints_file.h): one reader, the poller's thread
 * and SIGHUP's, serialized by a lock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "endpoints_file.h"
#include "epp.h"
#include "log.h"

struct cr_endpoints_watch {
    char *path;
    int ip_ports; /* --epp-listen: addresses must be ip:port */
    cr_core *core;
    pthread_mutex_t lock; /* one read at a time; guards seen and the counts */
    struct stat seen;     /* the file as last read */
    int have_seen;
    uint64_t refused, applied;
    double refused_at;      /* cr_mono_s of the last read, when it was refused; 0 */
    char said[CR_ERRLEN];   /* the last refusal logged; "" since a read applied */
    cr_ticker *poller;
};

/* w locked: reads and applies the file; CR_OK or the error in *err. */
static cr_status read_apply(cr_endpoints_watch *w, cr_error *err)
{
    cr_endpoint_spec *v;
    size_t n;
    cr_core_members_event ev;
    cr_status st = cr_endpoints_read_file(w->path, &v, &n, err);
    if (st == CR_OK && w->ip_ports)
        st = cr_endpoints_check_ip_ports(w->path, v, n, err);
    if (st == CR_OK)
        st = cr_core_set_endpoints(w->core, v, n, &ev, err);
    free(v);
    if (st == CR_OK) {
        w->applied++;
        w->refused_at = 0;
        w->said[0] = '\0';
    } else {
        w->refused++;
        w->refused_at = cr_mono_s();
    }
    return st;
}

/* w locked: re-reads when forced, when the file's identity changed, and
 * every CR_ENDPOINTS_FILE_RETRY_S while the last read was refused (what
 * refused it may have passed: a permission fixed, a rewrite the identity
 * missed). A refusal is logged when forced or when its reason is new. */
static void check(cr_endpoints_watch *w, int force)
{
    struct stat now;
    int there = stat(w->path, &now) == 0;
    int same = there && w->have_seen && now.st_dev == w->seen.st_dev &&
               now.st_ino == w->seen.st_ino && now.st_size == w->seen.st_size &&
               now.st_mtim.tv_sec == w->seen.st_mtim.tv_sec &&
               now.st_mtim.tv_nsec == w->seen.st_mtim.tv_nsec;
    int retry = w->refused_at > 0 && cr_mono_s() - w->refused_at >= CR_ENDPOINTS_FILE_RETRY_S;
    if (!force && !retry && (same || (!there && !w->have_seen)))
        return;
    w->seen = now;
    w->have_seen = there;
    cr_error err;
    if (read_apply(w, &err) == CR_OK || (!force && strcmp(err.msg, w->said) == 0))
        return;
    snprintf(w->said, sizeof w->said, "%s", err.msg);
    cr_log(CR_LOG_WARN, "endpoints file refused, the set stays",
           json_pack("{s:s,s:s}", "path", w->path, "error", err.msg));
}

static void poll_tick(void *ctx, cr_ticker *t)
{
    (void)t;
    cr_endpoints_watch *w = ctx;
    pthread_mutex_lock(&w->lock);
    check(w, 0);
    pthread_mutex_unlock(&w->lock);
}

cr_endpoints_watch *cr_endpoints_watch_start(const char *path, int ip_ports, cr_core *core,
                                             cr_error *err)
{
    cr_endpoints_watch *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        cr_fail(err, CR_ENOMEM, "out of memory for --endpoints-file");
        return NULL;
    }
    w->core = core;
    w->ip_ports = ip_ports;
    pthread_mutex_init(&w->lock, NULL);
    w->have_seen = stat(path, &w->seen) == 0;
    if (read_apply(w, err) != CR_OK ||
        !(w->poller = cr_ticker_start(CR_ENDPOINTS_FILE_POLL_S, poll_tick, w, err))) {
        cr_endpoints_watch_stop(w);
        return NULL;
    }
    return w;
}

void cr_endpoints_watch_reload(cr_endpoints_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    check(w, 1);
    pthread_mutex_unlock(&w->lock);
}

void cr_endpoints_watch_counts(cr_endpoints_watch *w, uint64_t *refused, uint64_t *applied)
{
    *refused = *applied = 0;
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    *refused = w->refused;
    *applied = w->applied;
    pthread_mutex_unlock(&w->lock);
}

void cr_endpoints_watch_stop(cr_endpoints_watch *w)
{
    if (!w)
        return;
    cr_ticker_stop(w->poller);
    pthread_mutex_destroy(&w->lock);
    free(w->path);
    free(w);
}

cr_status cr_endpoints_check_ip_ports(const char *path, const cr_endpoint_spec *v, size_t n,
                                      cr_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (!cr_epp_is_ip_port(v[i].address))
            return cr_fail(err, CR_EINVAL,
                           "--endpoints-file %s: endpoints[%zu] (id \"%s\"): address must be "
                           "ip:port (IPv4 a.b.c.d:port or [v6]:port) with --epp-listen, the "
                           "gateway sends requests there; got \"%s\"",
                           path, i, v[i].id, v[i].address);
    return CR_OK;
}
