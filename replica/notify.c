/* The wait between syncs: on the publish channel (a second connection in
 * subscribe mode) and on the stop pipe, so a follower installs a new table
 * within a round trip of its publish rather than at its next sync (the
 * sync's fetch stays as the fallback: a lost notification, a subscription
 * that is down). */
#include <poll.h>
#include <unistd.h>

#include "internal.h"

/* Subscribed (1) or not (0), trying once when the backoff allows. */
static int subscribed(cr_replica *r)
{
    if (r->sub.ctx)
        return 1;
    if (!cr_link_up(&r->sub))
        return 0;
    redisReply *ok = cr_link_cmd(&r->sub, "SUBSCRIBE %s", r->k_notify);
    int good = ok && ok->type == REDIS_REPLY_ARRAY;
    freeReplyObject(ok);
    if (ok && !good)
        cr_link_fail(&r->sub, "SUBSCRIBE refused");
    return good;
}

/* Reads what the subscription has: 1 when a message (a new generation)
 * came. A failure drops the subscription (retried with backoff). */
static int read_messages(cr_replica *r)
{
    int got = 0;
    redisReply *m = cr_link_read(&r->sub);
    while (m) {
        got |= m->type == REDIS_REPLY_ARRAY && m->elements == 3;
        freeReplyObject(m);
        void *more = NULL;
        if (redisReaderGetReply(r->sub.ctx->reader, &more) != REDIS_OK)
            more = NULL;
        m = more;
    }
    return got;
}

int cr_replica_wait(cr_replica *r, double until)
{
    double left = until - cr_mono_s();
    int sub = subscribed(r);
    struct pollfd p[2] = {{r->wake_fd[0], POLLIN, 0}, {sub ? r->sub.ctx->fd : -1, POLLIN, 0}};
    int ms = left > 0 ? (int)(left * 1e3) + 1 : 0;
    if (!sub && ms > 100)
        ms = 100; /* retry the subscription soon */
    if (poll(p, sub ? 2 : 1, ms) <= 0)
        return 0;
    if (p[0].revents & POLLIN) { /* woken: stop, or work asked for now */
        char b;
        if (read(r->wake_fd[0], &b, 1) < 0) { /* drained by another wait: fine */
        }
        return -1;
    }
    return sub && p[1].revents ? read_messages(r) : 0;
}

int cr_replica_wake_open(cr_replica *r)
{
    return pipe(r->wake_fd);
}

void cr_replica_wake(cr_replica *r)
{
    char b = 1;
    if (write(r->wake_fd[1], &b, 1) < 0) { /* full: a wake is already pending */
    }
}

void cr_replica_wake_close(cr_replica *r)
{
    if (r->wake_fd[0] >= 0) {
        close(r->wake_fd[0]);
        close(r->wake_fd[1]);
    }
    cr_link_close(&r->sub);
}
