/* ReportOutcome: check the whole batch, then for each outcome match its
 * receipt, feed calibration, count served tokens, errors and regret, and
 * release its outstanding work. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* What one batch is applied against: one table, one clock reading. */
typedef struct batch {
    cr_core *c;
    cr_installed *table;
    double now;
    uint64_t caller; /* who reports: it releases only its own routes */
} batch;

static int given(const char *s) { return s && *s; }

static cr_inject_mode used_mode(const cr_outcome *o, const cr_receipt *r)
{
    return o->mode ? o->mode : r ? r->decision.mode : (cr_inject_mode)0;
}

/* The KV bytes moved: the outcome's, else the receipt's C times its model's
 * bytes per token when KV was used. 0 when unknown. */
static int kv_bytes(const cr_outcome *o, const cr_receipt *r, double *bytes)
{
    if (o->has & CR_OUT_TRANSFER_BYTES)
        *bytes = (double)o->transfer_bytes;
    else if (r && used_mode(o, r) == CR_INJECT_KV_CACHE && r->cached_tokens)
        *bytes = r->cached_tokens * r->model.kv_bytes_per_token;
    else
        return 0;
    return 1;
}

/* Prefilled tokens [s, L): the outcome's, else the receipt's path's. */
static int prefill_span(const cr_outcome *o, const cr_receipt *r, double *s, double *l)
{
    int kv = used_mode(o, r) == CR_INJECT_KV_CACHE;
    if (!(o->has & CR_OUT_PREFILLED_FROM) && !r)
        return 0;
    if (!(o->has & CR_OUT_PREFILLED_TO) && !r)
        return 0;
    *s = (o->has & CR_OUT_PREFILLED_FROM) ? o->prefilled_from : kv ? r->cached_tokens : 0;
    *l = (o->has & CR_OUT_PREFILLED_TO) ? o->prefilled_to
                                        : (double)r->prompt_tokens + r->knowledge_tokens;
    return *s <= *l;
}

/* What calibration can take from o (r: its receipt, or NULL); 1 when any. */
static int observation_of(const cr_outcome *o, const cr_receipt *r, double now,
                          cr_inject_observation *ob)
{
    memset(ob, 0, sizeof *ob);
    ob->gpu = (o->has & CR_OUT_GPU) ? o->gpu : r ? r->gpu : 0;
    ob->now_ms = now * 1e3;
    double bytes = 0;
    int has_bytes = kv_bytes(o, r, &bytes);
    if ((o->has & CR_OUT_PREFILL) && prefill_span(o, r, &ob->prefill_from, &ob->prefill_to)) {
        ob->has_prefill = 1;
        ob->prefill_ms = o->prefill_ms;
    }
    ob->source = given(o->source) ? o->source : r && r->decision.source[0] ? r->decision.source
                                                                            : NULL;
    if ((o->has & CR_OUT_TRANSFER_MS) && has_bytes && ob->source) {
        ob->has_transfer = 1;
        ob->transfer_bytes = bytes;
        ob->transfer_ms = o->transfer_ms;
    }
    if ((o->has & CR_OUT_LOAD) && has_bytes) {
        ob->has_load = 1;
        ob->load_bytes = bytes;
        ob->load_ms = o->load_ms;
    }
    if (o->has & CR_OUT_QUEUE_WAIT) {
        ob->has_queue_wait = 1;
        ob->queue_wait_ms = o->queue_wait_ms;
    }
    return ob->has_prefill || ob->has_transfer || ob->has_load || ob->has_queue_wait;
}

/* Served tokens, by admitted and shard (the given one, else the route). */
static void served(const batch *b, const cr_outcome *o, cr_loop_delta *d)
{
    unsigned both = CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS;
    if ((o->has & both) != both)
        return;
    d->has_tokens = 1;
    d->prompt_tokens = o->prompt_tokens;
    d->cached_tokens = o->cached_tokens;
    if (o->has & CR_OUT_OWNER) {
        d->shard = cr_router_shard(b->c->router, b->table ? b->table->table : NULL,
                                   cr_core_shards(b->c, b->table), o->owner, &d->admitted);
        d->has_shard = 1;
    }
    if (o->has & CR_OUT_SHARD) {
        d->shard = o->shard;
        d->has_shard = 1;
    }
}

/* The reported receipt's errors and regret. */
static void judged(const batch *b, const cr_receipt *r, cr_loop_delta *d)
{
    d->path = r->error_has ? (int)r->used - 1 : -1;
    for (int t = 0; t < CR_N_TERMS; t++) {
        d->error_ms[t] = r->error_ms[t];
        d->ape[t] = fabs(r->error_ms[t]) / fmax(r->measured_ms[t], CR_LOOP_APE_FLOOR_MS);
    }
    d->error_has = r->error_has;
    if (!(r->error_has & (1u << CR_TERM_TOTAL)))
        return;
    cr_regret_fits fits;
    cr_injector_calibration(b->c->injector, r->gpu, &fits.gpu);
    if (r->decision.mode == CR_INJECT_KV_CACHE || !r->decision.has_kv ||
        !cr_injector_link_calibration(b->c->injector, r->decision.source, &fits.link))
        memset(&fits.link, 0, sizeof fits.link);
    d->regret_path = cr_receipt_regret(r, &fits, &d->regret_ms);
}

static void rejection(const cr_outcome *o, size_t i, cr_outcome_counts *out)
{
    if (out->rejected++)
        return;
    if (given(o->request_id))
        snprintf(out->first_rejection, sizeof out->first_rejection,
                 "outcomes[%zu]: no receipt for request_id \"%.128s\", nothing to calibrate, "
                 "no tokens",
                 i, o->request_id);
    else
        snprintf(out->first_rejection, sizeof out->first_rejection,
                 "outcomes[%zu]: no request_id, nothing to calibrate, no tokens", i);
}

static void apply(const batch *b, const cr_outcome *o, size_t i, cr_outcome_counts *out)
{
    cr_core *c = b->c;
    cr_loop_delta d = {.path = -1, .regret_path = -1};
    cr_receipt r;
    cr_outcome_at at = {o, b->now};
    d.matched = c->receipts && given(o->request_id) &&
                cr_receipts_update(c->receipts, o->request_id, cr_receipt_apply_outcome, &at, &r);
    if (d.matched && c->hooks.receipted)
        c->hooks.receipted(c->hooks.ctx, &r);
    if (d.matched) /* its reservation was served: it no longer expires */
        cr_injector_confirm(c->injector, r.gpu, r.decision.reservation);
    if (d.matched && (o->has & CR_OUT_TTFT))
        cr_core_door_outcome(c, &r, o->ttft_ms);
    cr_inject_observation ob;
    cr_error err;
    int observable = observation_of(o, d.matched ? &r : NULL, b->now, &ob);
    d.observed = observable && cr_injector_observe(c->injector, &ob, &err) == CR_OK;
    if (d.observed && (ob.has_prefill || ob.has_load)) /* its GPU's fits may have moved */
        cr_core_route_model_changed(c, ob.gpu);
    served(b, o, &d);
    if (d.matched)
        judged(b, &r, &d);
    unsigned here = CR_OUT_OWNER | CR_OUT_SHARD;
    uint32_t routed = UINT32_MAX;
    int by_id = given(o->request_id) &&
                cr_router_release_request(c->router,
                                          cr_route_request_key(o->request_id,
                                                               strlen(o->request_id), b->caller),
                                          b->now, (o->has & CR_OUT_CACHED_TOKENS) != 0,
                                          o->cached_tokens, &routed);
    int released = by_id || ((o->has & here) == here &&
                             cr_router_release(c->router, o->owner, o->shard, b->now,
                                               b->caller));
    /* a failure counts against the shard given, else the one it was routed to */
    uint32_t failed_on = !(o->has & CR_OUT_ERROR) ? UINT32_MAX
                         : (o->has & CR_OUT_SHARD) ? o->shard
                         : by_id                   ? routed
                                                   : UINT32_MAX;
    int failed = failed_on != UINT32_MAX && cr_members_error(c, failed_on, b->now);
    d.rejected = !d.matched && !observable && !d.has_tokens && !released && !failed;
    if (d.rejected)
        rejection(o, i, out);
    out->matched += (uint32_t)d.matched;
    cr_loop_figures_add(c->figures, &d, b->now);
}

cr_status cr_core_report(cr_core *c, const cr_outcome *o, size_t n, cr_outcome_counts *out,
                         cr_error *err)
{
    return cr_core_report_as(c, 0, o, n, out, err);
}

cr_status cr_core_report_as(cr_core *c, uint64_t caller, const cr_outcome *o, size_t n,
                            cr_outcome_counts *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    if (cr_outcome_count_check(n, err) != CR_OK)
        return CR_EINVAL;
    batch b = {c, cr_core_acquire(c, NULL), core_now(c), caller};
    uint32_t shards = cr_core_shards(c, b.table), gpus = cr_core_gpu_count(c);
    cr_status st = CR_OK;
    for (size_t i = 0; st == CR_OK && i < n; i++)
        st = cr_outcome_check(&o[i], i, shards, gpus, err);
    for (size_t i = 0; st == CR_OK && i < n; i++)
        apply(&b, &o[i], i, out);
    if (st == CR_OK)
        out->accepted = (uint32_t)n - out->rejected;
    cr_installed_release(b.table);
    return st;
}
