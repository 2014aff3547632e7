/* The decision: text versus the best KV source, with every wait given. Pure
 * arithmetic on validated input; the formulas are in inject.h. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* The link's transfer at its efficiency (cost.h). */
static double transfer_ms(const cr_inject_model *m, const cr_inject_link *link, double c)
{
    cr_transfer_cost k = {link->rtt_ms, link->gbps * m->link_efficiency};
    return cr_transfer_ms(&k, c * m->kv_bytes_per_token);
}

static cr_cost_breakdown kv_cost(const cr_inject_model *m, double l, double c, double w,
                                 const cr_inject_link *link)
{
    cr_cost_breakdown kv = {.queue_wait_ms = w, .link_wait_ms = link->wait_ms};
    kv.transfer_ms = transfer_ms(m, link, c);
    kv.load_ms = cr_load_ms(&m->load, c * m->kv_bytes_per_token);
    kv.prefill_ms = cr_prefill_ms(&m->prefill, c, l);
    kv.total_ms = fmax(w, link->wait_ms + kv.transfer_ms) + kv.load_ms + kv.prefill_ms;
    return kv;
}

static const struct {
    const char *name;
    cr_inject_mode mode;
} REASONS[CR_INJECT_N_REASONS] = {
    [CR_REASON_NO_KNOWLEDGE] = {"no_knowledge", CR_INJECT_TEXT},
    [CR_REASON_NO_KV_AVAILABLE] = {"no_kv_available", CR_INJECT_TEXT},
    [CR_REASON_KV_FASTER] = {"kv_faster", CR_INJECT_KV_CACHE},
    [CR_REASON_KV_HIDDEN_BY_QUEUE] = {"kv_hidden_by_queue", CR_INJECT_KV_CACHE},
    [CR_REASON_TEXT_FASTER] = {"text_faster", CR_INJECT_TEXT},
    [CR_REASON_LINK_CONGESTED] = {"link_congested", CR_INJECT_TEXT},
};

const char *cr_inject_reason_name(cr_inject_reason r)
{
    return (unsigned)r < CR_INJECT_N_REASONS ? REASONS[r].name : "unknown";
}

cr_inject_mode cr_inject_reason_mode(cr_inject_reason r)
{
    return (unsigned)r < CR_INJECT_N_REASONS ? REASONS[r].mode : CR_INJECT_TEXT;
}

/* The mode follows from the reason, so the two can never disagree. */
static void finish(cr_inject_response *out, cr_inject_reason reason)
{
    cr_inject_mode mode = REASONS[reason].mode;
    out->mode = mode;
    out->reason = reason;
    if (!out->has_kv)
        out->saving_ms = 0;
    else if (mode == CR_INJECT_KV_CACHE)
        out->saving_ms = out->text.total_ms - out->kv.total_ms;
    else
        out->saving_ms = out->kv.total_ms - out->text.total_ms;
}

/* Fills out->kv and the source fields with the lowest-scoring source (ties
 * by name); returns its score, and in *idle_best the lowest kv_total any
 * source would have with its link idle. */
static double pick_best(const cr_inject_model *m, const cr_inject_request *req, double l, double w,
                        const cr_inject_link *links, cr_inject_response *out, double *idle_best)
{
    double best_score = INFINITY;
    *idle_best = INFINITY;
    for (size_t i = 0; i < req->n_sources; i++) {
        double c = req->sources[i].cached_tokens;
        if (c == 0)
            continue;
        cr_inject_link idle = links[i];
        idle.wait_ms = 0;
        *idle_best = fmin(*idle_best, kv_cost(m, l, c, w, &idle).total_ms);
        cr_cost_breakdown kv = kv_cost(m, l, c, w, &links[i]);
        double score = kv.total_ms + m->link_queue_penalty * links[i].wait_ms;
        if (score < best_score ||
            (score == best_score && strcmp(req->sources[i].name, out->source) < 0)) {
            best_score = score;
            out->kv = kv;
            out->source_index = (int)i;
            strcpy(out->source, req->sources[i].name); /* validated: <= 128 bytes */
        }
    }
    out->has_kv = out->source_index >= 0;
    return best_score;
}

void cr_inject_decide(const cr_inject_model *m, const cr_inject_request *req, double queue_wait_ms,
                      const cr_inject_link *links, cr_inject_response *out)
{
    double w = queue_wait_ms, l = (double)req->prompt_tokens + req->knowledge_tokens;
    memset(out, 0, sizeof *out);
    out->source_index = -1;
    out->text.queue_wait_ms = w;
    out->text.prefill_ms = cr_prefill_ms(&m->prefill, 0, l);
    out->text.total_ms = w + out->text.prefill_ms;
    if (req->knowledge_tokens == 0) {
        finish(out, CR_REASON_NO_KNOWLEDGE);
        return;
    }
    double idle_best, best_score = pick_best(m, req, l, w, links, out, &idle_best);
    double text = out->text.total_ms, margin = m->decision_margin_ms;
    if (!out->has_kv)
        finish(out, CR_REASON_NO_KV_AVAILABLE);
    else if (best_score + margin < text)
        finish(out, out->kv.link_wait_ms + out->kv.transfer_ms <= w ? CR_REASON_KV_HIDDEN_BY_QUEUE
                                                                    : CR_REASON_KV_FASTER);
    else
        finish(out, idle_best + margin < text ? CR_REASON_LINK_CONGESTED : CR_REASON_TEXT_FASTER);
}
