/* A matched outcome against its receipt: the measured terms and their
 * errors, and whether the decision was regrettable. Pure functions; the
 * first runs under the store's lock, so it only copies and subtracts. */
#include <math.h>
#include <string.h>

#include "loop.h"

/* The breakdown the path used was predicted with; NULL when that path was
 * not priced (KV used where no source had cached tokens). */
static const cr_cost_breakdown *predicted(const cr_receipt *r)
{
    if (r->used == CR_INJECT_KV_CACHE)
        return r->decision.has_kv ? &r->decision.kv : NULL;
    return &r->decision.text;
}

static void term(cr_receipt *r, cr_loop_term t, int given, double measured, double predicted)
{
    if (!given)
        return;
    r->error_has |= 1u << t;
    r->measured_ms[t] = measured;
    r->error_ms[t] = measured - predicted;
}

void cr_receipt_apply_outcome(cr_receipt *r, const void *ctx)
{
    const cr_outcome_at *at = ctx;
    const cr_outcome *o = at->o;
    r->outcomes++;
    r->reported_at_s = at->now;
    r->used = o->mode ? o->mode : r->decision.mode;
    r->error_has = 0;
    memset(r->measured_ms, 0, sizeof r->measured_ms);
    memset(r->error_ms, 0, sizeof r->error_ms);
    const cr_cost_breakdown *p = predicted(r);
    if (!p)
        return;
    int kv = r->used == CR_INJECT_KV_CACHE;
    term(r, CR_TERM_QUEUE_WAIT, o->has & CR_OUT_QUEUE_WAIT, o->queue_wait_ms, p->queue_wait_ms);
    term(r, CR_TERM_PREFILL, o->has & CR_OUT_PREFILL, o->prefill_ms, p->prefill_ms);
    term(r, CR_TERM_TRANSFER, kv && (o->has & CR_OUT_TRANSFER_MS), o->transfer_ms,
         p->transfer_ms);
    term(r, CR_TERM_LOAD, kv && (o->has & CR_OUT_LOAD), o->load_ms, p->load_ms);
    term(r, CR_TERM_TOTAL, o->has & CR_OUT_TTFT, o->ttft_ms, p->total_ms);
}

/* The path not taken, priced with the calibration now: each adopted fit
 * over the coefficients the decision was made with. */
static double other_path(const cr_receipt *r, const cr_regret_fits *fits, double w)
{
    const cr_inject_response *d = &r->decision;
    const cr_prefill_cost *k = fits->gpu.adopted ? &fits->gpu.prefill : &r->model.prefill;
    double l = (double)r->prompt_tokens + r->knowledge_tokens, c = r->cached_tokens;
    if (d->mode == CR_INJECT_KV_CACHE)
        return w + cr_prefill_ms(k, 0, l);
    double bytes = c * r->model.kv_bytes_per_token;
    const cr_inject_line_calibration *link = &fits->link, *h2d = &fits->gpu.h2d;
    double transfer = link->adopted && link->gbps > 0
                          ? cr_transfer_ms(&(cr_transfer_cost){link->fixed_ms, link->gbps}, bytes)
                          : d->kv.transfer_ms;
    double load = h2d->adopted && h2d->gbps > 0
                      ? cr_load_ms(&(cr_load_cost){h2d->fixed_ms, h2d->gbps}, bytes)
                      : d->kv.load_ms;
    return fmax(w, d->kv.link_wait_ms + transfer) + load + cr_prefill_ms(k, c, l);
}

int cr_receipt_regret(const cr_receipt *r, const cr_regret_fits *fits, double *lost_ms)
{
    const cr_inject_response *d = &r->decision;
    /* Only a measured total of the path chosen says anything about the
     * choice, and a text choice only when a KV path was priced. */
    if (!(r->error_has & (1u << CR_TERM_TOTAL)) || r->used != d->mode ||
        (d->mode == CR_INJECT_TEXT && !d->has_kv))
        return -1;
    double w = (r->error_has & (1u << CR_TERM_QUEUE_WAIT)) ? r->measured_ms[CR_TERM_QUEUE_WAIT]
                                                           : d->text.queue_wait_ms;
    double measured = r->measured_ms[CR_TERM_TOTAL], other = other_path(r, fits, w);
    if (!(measured > other))
        return -1;
    *lost_ms = measured - other;
    return d->mode == CR_INJECT_KV_CACHE ? CR_PATH_KV : CR_PATH_TEXT;
}
