/* --state-backend: redis://HOST:PORT[/DB] or unix:PATH[?db=N]. */
#include <stdio.h>
#include <string.h>

#include "replica.h"

#define MAX_DB 2147483647

static cr_status bad(const char *url, const char *why, cr_error *err)
{
    return cr_fail(err, CR_EINVAL,
                   "--state-backend must be redis://HOST:PORT[/DB] or unix:PATH[?db=N] (%s), "
                   "got \"%.160s\"",
                   why, url);
}

/* s[0..len) as an integer in lo..hi; -1 when it is not. */
static long number(const char *s, size_t len, long lo, long hi)
{
    char buf[24];
    int64_t v;
    if (len == 0 || len >= sizeof buf || strspn(s, "0123456789") < len)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (cr_parse_i64(buf, &v) != 0 || v < lo || v > hi)
        return -1;
    return (long)v;
}

static cr_status parse_unix(const char *url, cr_replica_url *out, cr_error *err)
{
    const char *path = url + 5, *q = strchr(path, '?');
    size_t len = q ? (size_t)(q - path) : strlen(path);
    if (len == 0)
        return bad(url, "the path is empty", err);
    if (len >= sizeof out->path)
        return bad(url, "the path is over 107 bytes", err);
    memcpy(out->path, path, len);
    out->path[len] = '\0';
    out->is_unix = 1;
    if (!q)
        return CR_OK;
    if (strncmp(q, "?db=", 4) != 0 || (out->db = (int)number(q + 4, strlen(q + 4), 0, MAX_DB)) < 0)
        return bad(url, "the query must be ?db=N with N in 0..2147483647", err);
    return CR_OK;
}

static cr_status parse_tcp(const char *url, cr_replica_url *out, cr_error *err)
{
    const char *host = url + 8, *slash = strchr(host, '/');
    size_t hp = slash ? (size_t)(slash - host) : strlen(host);
    const char *colon = memchr(host, ':', hp);
    if (!colon)
        return bad(url, "the port is missing", err);
    size_t hl = (size_t)(colon - host);
    if (hl == 0 || hl >= sizeof out->host)
        return bad(url, "the host must be 1..255 bytes", err);
    if (memchr(host, '@', hp) || memchr(host, '[', hp))
        return bad(url, "no user, password or IPv6 literal", err);
    memcpy(out->host, host, hl);
    out->host[hl] = '\0';
    if ((out->port = (int)number(colon + 1, hp - hl - 1, 1, 65535)) < 0)
        return bad(url, "the port must be in 1..65535", err);
    if (slash && (out->db = (int)number(slash + 1, strlen(slash + 1), 0, MAX_DB)) < 0)
        return bad(url, "the database must be in 0..2147483647", err);
    return CR_OK;
}

cr_status cr_replica_parse_url(const char *url, cr_replica_url *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    if (!strncmp(url, "unix:", 5))
        return parse_unix(url, out, err);
    if (!strncmp(url, "redis://", 8))
        return parse_tcp(url, out, err);
    return bad(url, "unknown scheme", err);
}
