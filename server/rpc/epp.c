/* The ext_proc Process stream: the duplex kind's ops over the picker's
 * gRPC-free streams (epp.h). Nothing here decides anything: bytes in,
 * the picker's packed responses out, without a copy. */
#include <stdio.h>
#include <string.h>

#include "handlers.h"

static void wake(void *self) { cr_duplex_wake(self); }

static void *epp_open(void *ctx, uint64_t caller, double now, cr_duplex_call *self)
{
    cr_epp_stream *s = cr_epp_stream_open(ctx, caller, now);
    if (s) /* a request the door holds is answered at a wake */
        cr_epp_stream_wake_by(s, wake, self);
    return s;
}

static cr_duplex_next epp_step(void *session, const uint8_t *msg, size_t len, double now,
                               cr_duplex_out *out, char *why, size_t why_len)
{
    /* A step gives at most the largest body in chunks and a few more: about
     * 4 KiB of pointers, on the stack of the thread that runs it. */
    cr_epp_out o;
    cr_error err;
    o.n = 0;
    cr_epp_next next = cr_epp_stream_step(session, msg, len, now, &o, &err);
    int lost = 0;
    for (size_t i = 0; i < o.n; i++) /* cr_duplex_put takes each over, even failing */
        lost |= cr_duplex_put(out, o.msg[i].data, o.msg[i].len) != 0;
    o.n = 0;
    if (lost) {
        snprintf(why, why_len, "out of memory for the answers");
        return CR_DUPLEX_FAILED;
    }
    if (next == CR_EPP_FAILED)
        snprintf(why, why_len, "%s", err.msg);
    return next == CR_EPP_MORE ? CR_DUPLEX_MORE
           : next == CR_EPP_FINISHED ? CR_DUPLEX_FINISHED
                                     : CR_DUPLEX_FAILED;
}

static void epp_close(void *session, cr_duplex_end how, double now)
{
    cr_epp_stream_close(session, how == CR_DUPLEX_CLOSED ? CR_EPP_END_CLOSED : CR_EPP_END_BROKEN,
                        now);
}

static int epp_may_block(void *ctx) { return cr_epp_may_block(ctx); }

cr_duplex_ops cr_epp_ops(cr_epp *e)
{
    return (cr_duplex_ops){.open = epp_open, .step = epp_step, .close = epp_close,
                           .may_block = epp_may_block, .ctx = e};
}
