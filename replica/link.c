/* One Redis connection that reconnects with exponential backoff (0.1 s
 * doubling to 2 s), AUTHs and SELECTs as configured; every command is
 * bounded by the timeout. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define BACKOFF_MIN_S 0.1
#define BACKOFF_MAX_S 2.0

static struct timeval tv_of(double s)
{
    return (struct timeval){(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
}

void cr_link_close(cr_link *l)
{
    if (l->ctx)
        redisFree(l->ctx);
    l->ctx = NULL;
}

void cr_link_fail(cr_link *l, const char *why)
{
    snprintf(l->why, sizeof l->why, "%s", why);
    cr_link_close(l);
    l->backoff = l->backoff ? l->backoff * 2 : BACKOFF_MIN_S;
    if (l->backoff > BACKOFF_MAX_S)
        l->backoff = BACKOFF_MAX_S;
    l->next_try = cr_mono_s() + l->backoff;
}

/* 0 when r is Redis's +OK; else the link fails with why "what: Redis's
 * error" (a failed link has already said why) and -1. */
static int status_ok(cr_link *l, redisReply *r, const char *what)
{
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r && !ok) {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why, "%s: %.180s", what, r->str ? r->str : "refused");
        cr_link_fail(l, why);
    }
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* AUTH from the password file, read afresh for each connection so that a
 * rotated Secret is used at the next one; its bytes are wiped at once (the
 * copy in hiredis's output buffer is beyond our reach). */
static int authenticate(cr_link *l)
{
    if (!l->password_file || !*l->password_file)
        return 0;
    cr_replica_auth a;
    cr_error e;
    if (cr_replica_auth_read(l->password_file, &a, &e) != CR_OK) {
        cr_link_fail(l, e.msg);
        return -1;
    }
    int user = a.user[0] != '\0';
    const char *argv[3] = {"AUTH", user ? a.user : a.pass, a.pass};
    size_t len[3] = {4, strlen(argv[1]), strlen(a.pass)};
    redisReply *r = cr_link_argv(l, user ? 3 : 2, argv, len);
    cr_replica_auth_clear(&a);
    return status_ok(l, r, "state backend refused AUTH");
}

void cr_link_reauth(cr_link *l)
{
    if (l->ctx)
        authenticate(l);
}

static int select_db(cr_link *l)
{
    if (l->url.db <= 0)
        return 0;
    char what[32];
    snprintf(what, sizeof what, "SELECT %d", l->url.db);
    return status_ok(l, cr_link_cmd(l, "SELECT %d", l->url.db), what);
}

int cr_link_up(cr_link *l)
{
    if (l->ctx)
        return 1;
    if (cr_mono_s() < l->next_try)
        return 0;
    struct timeval tv = tv_of(l->timeout_s);
    l->ctx = l->url.is_unix ? redisConnectUnixWithTimeout(l->url.path, tv)
                            : redisConnectWithTimeout(l->url.host, l->url.port, tv);
    if (!l->ctx || l->ctx->err) {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why, "connect: %s", l->ctx ? l->ctx->errstr : "out of memory");
        cr_link_fail(l, why);
        return 0;
    }
    redisSetTimeout(l->ctx, tv);
    if (authenticate(l) != 0 || select_db(l) != 0)
        return 0;
    l->backoff = 0;
    return 1;
}

static redisReply *checked(cr_link *l, void *reply)
{
    if (!reply) {
        char why[CR_ERRLEN];
        snprintf(why, sizeof why, "%s", l->ctx && l->ctx->err ? l->ctx->errstr : "no reply");
        cr_link_fail(l, why);
    }
    return reply;
}

redisReply *cr_link_argv(cr_link *l, int argc, const char **argv, const size_t *len)
{
    if (!l->ctx)
        return NULL;
    l->round_trips++;
    return checked(l, redisCommandArgv(l->ctx, argc, argv, len));
}

redisReply *cr_link_cmd(cr_link *l, const char *fmt, ...)
{
    if (!l->ctx)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    void *reply = redisvCommand(l->ctx, fmt, ap);
    va_end(ap);
    l->round_trips++;
    return checked(l, reply);
}

int cr_link_append(cr_link *l, int argc, const char **argv, const size_t *len)
{
    if (!l->ctx || redisAppendCommandArgv(l->ctx, argc, argv, len) != REDIS_OK) {
        if (l->ctx)
            cr_link_fail(l, "out of memory pipelining");
        return -1;
    }
    return 0;
}

redisReply *cr_link_read(cr_link *l)
{
    void *reply = NULL;
    if (!l->ctx)
        return NULL;
    if (redisGetReply(l->ctx, &reply) != REDIS_OK)
        reply = NULL;
    return checked(l, reply);
}
