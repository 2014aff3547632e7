/* ReportOutcome: the outcomes as the core's, one cr_core_report. Every
 * check is the core's. */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "reply.h"

typedef Cacheroute__V1__Outcome Outcome;
typedef Cacheroute__V1__ReportOutcomeRequest ReportRequest;

/* The message's fields, each with its has bit when present; the strings
 * point into m (NULL when absent). */
static void outcome_of(const Outcome *m, cr_outcome *o)
{
    memset(o, 0, sizeof *o);
    o->request_id = m->request_id;
    o->mode = (cr_inject_mode)m->mode; /* absent = 0; the core checks the range */
    o->source = m->source;
#define TAKE(field, bit)                                                                       \
    do {                                                                                       \
        if (m->has_##field) {                                                                  \
            o->has |= (bit);                                                                   \
            o->field = m->field;                                                               \
        }                                                                                      \
    } while (0)
    TAKE(owner, CR_OUT_OWNER);
    TAKE(shard, CR_OUT_SHARD);
    TAKE(prompt_tokens, CR_OUT_PROMPT_TOKENS);
    TAKE(cached_tokens, CR_OUT_CACHED_TOKENS);
    TAKE(queue_wait_ms, CR_OUT_QUEUE_WAIT);
    TAKE(prefill_ms, CR_OUT_PREFILL);
    TAKE(prefilled_from, CR_OUT_PREFILLED_FROM);
    TAKE(prefilled_to, CR_OUT_PREFILLED_TO);
    TAKE(transfer_ms, CR_OUT_TRANSFER_MS);
    TAKE(transfer_bytes, CR_OUT_TRANSFER_BYTES);
    TAKE(load_ms, CR_OUT_LOAD);
    TAKE(ttft_ms, CR_OUT_TTFT);
    TAKE(gpu, CR_OUT_GPU);
#undef TAKE
    if (m->error && *m->error) { /* "" is no error, as proto3 strings go */
        o->has |= CR_OUT_ERROR;
        o->error = m->error;
    }
}

static void report_outcome(void *ctx, const void *message, cr_reply *out)
{
    const cr_handlers *h = ctx;
    const ReportRequest *req = message;
    size_t n = req->n_outcomes;
    cr_outcome *o = malloc((n ? n : 1) * sizeof *o);
    if (!o) {
        cr_reply_error(out, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu outcomes", n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        outcome_of(req->outcomes[i], &o[i]);
    cr_outcome_counts counts;
    cr_error err;
    cr_status st = cr_core_report_as(h->core, out->caller, o, n, &counts, &err);
    if (st != CR_OK) {
        cr_reply_core_error(out, st, &err);
    } else {
        Cacheroute__V1__ReportOutcomeResponse resp = CACHEROUTE__V1__REPORT_OUTCOME_RESPONSE__INIT;
        resp.accepted = counts.accepted;
        resp.matched = counts.matched;
        resp.rejected = counts.rejected;
        resp.first_rejection = counts.first_rejection;
        cr_reply_message(out, &resp.base, h->max_message, NULL);
    }
    free(o);
}

void cr_handle_report_outcome(void *ctx, const uint8_t *data, size_t len, cr_reply *out)
{
    /* Counted before decoding, so an oversized batch costs no allocation. */
    size_t n = cr_wire_count(&cacheroute__v1__report_outcome_request__descriptor, data, len,
                             "outcomes");
    cr_error err;
    cr_status st = cr_outcome_count_check(n, &err);
    if (st != CR_OK) {
        cr_reply_core_error(out, st, &err);
        return;
    }
    cr_run_decoded(ctx, &cacheroute__v1__report_outcome_request__descriptor, data, len, out,
                   report_outcome);
}
