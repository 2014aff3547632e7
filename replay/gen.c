/* The seeded synthetic workload (the rules are in replay.h).
 *
 * Defaults, for the paper's regime on the default cluster: 1000 sessions
 * with a request Gini of 0.76 (Zipf exponent about 1.04) at 500 requests/s
 * give the hottest session about 15% of the traffic, 73/s, and the next
 * 36/s: the hottest is above the planner's default qcap of 50/s, so it
 * needs kb = 2, and one shard at about 20 ms a hit request (the default
 * cluster) cannot serve it alone. Prompts follow the Mooncake conversation
 * trace's scale (24 blocks on average there): a 2-block system prompt, a
 * first prompt of 4 blocks, 1 block more per turn, up to 32 (then the
 * conversation starts over with new blocks): 19 blocks on average, all but
 * the new turn a prefix hit on the right shard. 100000 requests are 200 s
 * of traffic; the whole cluster runs at about 20% when every session hits
 * and is over capacity when none but the system prompt does.
 *
 * Shared documents: none by default, so the default workload is the one
 * above. With them, a session's document is drawn at each conversation
 * start by default: a conversation is about one document, and its turns
 * stay a prefix of each other, as they are without documents.
 *
 * Streams come from the seed: popularity draws, arrival gaps and, with
 * documents only, document draws (so a trace without documents is the
 * same as before they existed); a session's own blocks are numbered by a
 * counter (own_id makes their ids). The popularity draws are kept (one double per
 * request) so the Gini search can count, for each exponent tried, exactly
 * the ranks the trace will get. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define ZIPF_S_MAX 16.0
#define ZIPF_S_STEP 0.25
#define GINI_TOL 1e-3

void cr_replay_gen_default(cr_replay_gen_config *cfg)
{
    *cfg = (cr_replay_gen_config){
        .seed = 1, .n_requests = 100000, .n_sessions = 1000, .zipf_s = 1.0, .gini = 0.76,
        .rate_per_s = 500, .system_blocks = 2, .first_blocks = 4, .turn_blocks = 1,
        .max_blocks = 32, .output_tokens = 256, .document_zipf = 1.0,
    };
}

/* Documents and their blocks come together: one without the other is a
 * flag forgotten, not a workload. */
static cr_status check_documents(const cr_replay_gen_config *c, cr_error *err)
{
    if (c->documents > 0 && c->document_blocks < 1)
        return cr_fail(err, CR_EINVAL, "document_blocks must be >= 1 with documents (%u), got 0",
                       c->documents);
    if (c->documents == 0 && c->document_blocks > 0)
        return cr_fail(err, CR_EINVAL, "documents must be >= 1 with document_blocks (%u), got 0",
                       c->document_blocks);
    if (!cr_replay_finite_ge0(c->document_zipf))
        return cr_fail(err, CR_EINVAL, "document_zipf must be finite and >= 0, got %g",
                       c->document_zipf);
    if (c->document_per != CR_REPLAY_DOC_PER_SESSION &&
        c->document_per != CR_REPLAY_DOC_PER_REQUEST)
        return cr_fail(err, CR_EINVAL, "document_per must be session (0) or request (1), got %d",
                       (int)c->document_per);
    if (c->owners != CR_REPLAY_OWNER_SESSION && c->owners != CR_REPLAY_OWNER_DOCUMENT)
        return cr_fail(err, CR_EINVAL, "owners must be session (0) or document (1), got %d",
                       (int)c->owners);
    if (c->owners == CR_REPLAY_OWNER_DOCUMENT && c->documents == 0)
        return cr_fail(err, CR_EINVAL, "owners by document need documents >= 1, got 0");
    /* A request adds at most max_blocks own blocks, each with documents
     * ids (own_id): all of them within 63 bits. */
    if (c->documents > 0 && (uint64_t)c->n_requests > (UINT64_MAX / 2) / c->documents /
                                                          (c->max_blocks ? c->max_blocks : 1))
        return cr_fail(err, CR_EINVAL,
                       "documents (%u) * max_blocks (%u) * n_requests (%zu) must be < 2^63",
                       c->documents, c->max_blocks, c->n_requests);
    return CR_OK;
}

static cr_status check(const cr_replay_gen_config *c, cr_error *err)
{
    if (c->n_requests < 1 || c->n_requests > SIZE_MAX / 64)
        return cr_fail(err, CR_EINVAL, "n_requests must be >= 1 and addressable, got %zu",
                       c->n_requests);
    if (c->n_sessions < 1 || c->n_sessions > UINT32_MAX)
        return cr_fail(err, CR_EINVAL, "n_sessions must be in [1, 2^32), got %zu", c->n_sessions);
    if (c->gini < 0 && !cr_replay_finite_ge0(c->zipf_s))
        return cr_fail(err, CR_EINVAL, "zipf_s must be finite and >= 0, got %g", c->zipf_s);
    if (!(c->gini < 1) || isnan(c->gini))
        return cr_fail(err, CR_EINVAL, "gini must be < 1 (< 0: use zipf_s), got %g", c->gini);
    if (!(isfinite(c->rate_per_s) && c->rate_per_s > 0))
        return cr_fail(err, CR_EINVAL, "rate_per_s must be finite and > 0, got %g", c->rate_per_s);
    if (!cr_replay_finite_ge0(c->burst_on_s) || !cr_replay_finite_ge0(c->burst_off_s))
        return cr_fail(err, CR_EINVAL, "burst_on_s and burst_off_s must be finite and >= 0");
    if (!cr_replay_finite_ge0(c->drift_per_s))
        return cr_fail(err, CR_EINVAL, "drift_per_s must be finite and >= 0, got %g",
                       c->drift_per_s);
    if (c->first_blocks < 1)
        return cr_fail(err, CR_EINVAL, "first_blocks must be >= 1, got 0");
    cr_status st = check_documents(c, err);
    if (st != CR_OK)
        return st;
    /* Every conversation's first prompt fits, so each has a turn. */
    uint64_t first = (uint64_t)c->system_blocks + c->document_blocks + c->first_blocks;
    if (c->max_blocks < first)
        return cr_fail(err, CR_EINVAL,
                       "max_blocks must be >= system_blocks + document_blocks + first_blocks "
                       "(%llu), got %u",
                       (unsigned long long)first, c->max_blocks);
    if ((uint64_t)c->max_blocks * CR_REPLAY_BLOCK_TOKENS + c->knowledge_tokens > UINT32_MAX)
        return cr_fail(err, CR_EINVAL, "max_blocks * %u + knowledge_tokens must be < 2^32",
                       CR_REPLAY_BLOCK_TOKENS);
    return CR_OK;
}

/* cdf[k] = P(rank <= k) for weights 1 / (k + 1)^s; the last exactly 1 so
 * every draw in [0, 1) lands. */
static void zipf_cdf(double s, size_t n, double *cdf)
{
    double sum = 0;
    for (size_t k = 0; k < n; k++)
        cdf[k] = sum += pow((double)(k + 1), -s);
    for (size_t k = 0; k < n; k++)
        cdf[k] /= sum;
    cdf[n - 1] = 1.0;
}

/* The first rank whose cdf is above u. */
static size_t rank_of(const double *cdf, size_t n, double u)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The Gini of requests per rank (ranks with requests only, as the owner
 * Gini sees them) that the sorted draws u get under cdf. */
static double rank_gini(const double *cdf, const double *u, size_t m, size_t *counts)
{
    size_t k = 0, used = 0;
    for (size_t i = 0; i < m; i++) {
        size_t was = k;
        while (cdf[k] <= u[i])
            k++;
        if (i == 0 || k != was)
            counts[used++] = 0;
        counts[used - 1]++;
    }
    return cr_replay_gini_of(counts, used);
}

/* What the exponent search works over: the sorted draws, and room for a
 * cdf and the counts per rank. */
typedef struct gini_search {
    size_t n, m; /* ranks, draws */
    const double *u;
    double *cdf;
    size_t *counts;
} gini_search;

/* The rank Gini at exponent s; leaves s's cdf in g->cdf. */
static double gini_at(const gini_search *g, double s)
{
    zipf_cdf(s, g->n, g->cdf);
    return rank_gini(g->cdf, g->u, g->m, g->counts);
}

/* Bisects [lo, hi], whose Gini rises through the target, to within
 * GINI_TOL; the end nearer the target after at most 50 halvings. */
static double bisect(const gini_search *g, double target, double lo, double g_lo, double hi,
                     double g_hi)
{
    for (int i = 0; i < 50 && g_hi - g_lo > GINI_TOL; i++) {
        double mid = (lo + hi) / 2, x = gini_at(g, mid);
        if (x < target) {
            lo = mid;
            g_lo = x;
        } else {
            hi = mid;
            g_hi = x;
        }
        if (fabs(x - target) < GINI_TOL)
            return mid;
    }
    return target - g_lo < g_hi - target ? lo : hi;
}

/* The exponent whose rank Gini is the target. The Gini over ranks that
 * get requests rises with the exponent and then falls (at a large one only
 * a few ranks get any), so the search walks up in steps of ZIPF_S_STEP to
 * the first exponent at or above the target and bisects that step; a
 * target past the peak gets the peak. */
static double search_exponent(const gini_search *g, double target)
{
    double lo = 0, g_lo = gini_at(g, 0);
    if (g_lo >= target)
        return 0;
    for (double hi = ZIPF_S_STEP; hi <= ZIPF_S_MAX; hi += ZIPF_S_STEP) {
        double g_hi = gini_at(g, hi);
        if (g_hi >= target)
            return bisect(g, target, lo, g_lo, hi, g_hi);
        if (g_hi < g_lo)
            break;
        lo = hi;
        g_lo = g_hi;
    }
    return lo;
}

/* search_exponent over a sorted copy of the draws; leaves the exponent's
 * cdf in cdf. */
static cr_status solve_exponent(const cr_replay_gen_config *c, const double *u, double *cdf,
                                double *s_out, cr_error *err)
{
    size_t m = c->n_requests, n = c->n_sessions;
    double *sorted = malloc(m * sizeof *sorted);
    size_t *counts = malloc((m < n ? m : n) * sizeof *counts);
    cr_status st = CR_OK;
    if (sorted && counts) {
        memcpy(sorted, u, m * sizeof *sorted);
        qsort(sorted, m, sizeof *sorted, cr_replay_cmp_double);
        gini_search g = {n, m, sorted, cdf, counts};
        *s_out = search_exponent(&g, c->gini);
        zipf_cdf(*s_out, n, cdf);
    } else {
        st = cr_fail(err, CR_ENOMEM, "out of memory solving for gini %g", c->gini);
    }
    free(sorted);
    free(counts);
    return st;
}

/* The next arrival, seconds: Poisson at the rate, or on/off bursts
 * (Poisson in "on" time at the rate scaled up by the cycle, mapped onto
 * the wall clock). *active is the "on" time so far. */
static double next_arrival(const cr_replay_gen_config *c, cr_replay_rng *g, double *active)
{
    double on = c->burst_on_s, off = c->burst_off_s;
    int bursty = on > 0 && off > 0;
    double rate = bursty ? c->rate_per_s * (on + off) / on : c->rate_per_s;
    *active += -log(1.0 - cr_replay_unit(cr_replay_rng_next(g))) / rate;
    if (!bursty)
        return *active;
    double cycles = floor(*active / on);
    return cycles * (on + off) + (*active - cycles * on);
}

/* What emit writes with: the trace so far, the documents' cdf (NULL
 * without documents) and their stream, and the sessions' own blocks: the
 * next one from the counter, and where their ids start and how far apart
 * (own_id). */
typedef struct gen_state {
    const cr_replay_gen_config *c;
    cr_replay_builder *b;
    const double *doc_cdf;
    cr_replay_rng docs;
    uint64_t next_own, own_start, stride;
} gen_state;

/* The id of a session's own block number own (from the counter) behind
 * document d (0 without documents). A block's KV depends on everything
 * before it, so a turn behind another document is another block: one id
 * per (own, d), past every document's, dense without documents. */
static uint64_t own_id(const gen_state *g, uint64_t own, uint64_t d)
{
    return g->own_start + own * g->stride + d;
}

/* The system prompt into dst, then a document drawn now (none without
 * documents). */
static void write_head(gen_state *g, uint64_t *dst)
{
    const cr_replay_gen_config *c = g->c;
    for (uint32_t i = 0; i < c->system_blocks; i++)
        dst[i] = i;
    if (c->documents == 0)
        return;
    double u = cr_replay_unit(cr_replay_rng_next(&g->docs));
    uint64_t d = rank_of(g->doc_cdf, c->documents, u);
    uint64_t first = c->system_blocks + d * c->document_blocks;
    for (uint32_t j = 0; j < c->document_blocks; j++)
        dst[c->system_blocks + j] = first + j;
}

/* Appends r with its session's next prompt: the system prompt and a
 * document (the head), then the session's own blocks of its last prompt
 * (the request *last; SIZE_MAX for none yet) plus a turn, or a fresh
 * start when there is none or the turn would pass max_blocks. The head is
 * drawn anew at a fresh start and, per request, at every turn; else the
 * last prompt's is kept. With owners by document, r's owner becomes its
 * document. */
static int next_prompt(gen_state *g, size_t *last, cr_replay_request *r)
{
    const cr_replay_gen_config *c = g->c;
    cr_replay_builder *b = g->b;
    uint32_t head = c->system_blocks + c->document_blocks;
    const cr_replay_request *p = *last == SIZE_MAX ? NULL : &b->t.reqs[*last];
    int fresh = !p || (uint64_t)p->n_blocks + c->turn_blocks > c->max_blocks;
    uint32_t keep = fresh ? 0 : p->n_blocks - head; /* the session's own */
    uint32_t add = fresh ? c->first_blocks : c->turn_blocks;
    if (cr_replay_builder_reserve(b, (size_t)head + keep + add) != 0)
        return -1;
    uint64_t *dst = b->t.blocks + b->t.n_blocks; /* after the reserve: it may move the pool */
    const uint64_t *was = fresh ? NULL : b->t.blocks + p->first_block;
    if (fresh || c->document_per == CR_REPLAY_DOC_PER_REQUEST)
        write_head(g, dst);
    else
        memcpy(dst, was, (size_t)head * sizeof *dst);
    uint64_t d = c->documents ? (dst[c->system_blocks] - c->system_blocks) / c->document_blocks : 0;
    for (uint32_t i = 0; i < keep; i++) /* the same turns, behind this document */
        dst[head + i] = own_id(g, (was[head + i] - g->own_start) / g->stride, d);
    for (uint32_t i = 0; i < add; i++)
        dst[head + keep + i] = own_id(g, g->next_own++, d);
    uint32_t n = head + keep + add;
    r->input_tokens = n * CR_REPLAY_BLOCK_TOKENS + c->knowledge_tokens;
    if (c->owners == CR_REPLAY_OWNER_DOCUMENT)
        r->owner = (int64_t)d;
    *last = b->t.n;
    return cr_replay_builder_add(b, r, NULL, n);
}

/* The session at popularity rank k at time t, with ranks rotating by
 * drift_per_s per second. */
static size_t session_at(const cr_replay_gen_config *c, size_t k, double t)
{
    if (c->drift_per_s <= 0)
        return k;
    double shift = fmod(floor(c->drift_per_s * t), (double)c->n_sessions);
    return (k + (size_t)shift) % c->n_sessions;
}

static cr_status emit(const cr_replay_gen_config *c, const double *u, const double *cdf,
                      const double *doc_cdf, size_t *last, cr_replay_builder *b, cr_error *err)
{
    cr_replay_rng arrivals = {cr_mix64(c->seed ^ 0xa55a5aa5a55a5aa5ULL)};
    double active = 0;
    /* Below 2^55: document_blocks fits in max_blocks, under 2^23 blocks. */
    uint64_t documents = (uint64_t)c->documents * c->document_blocks;
    gen_state g = {.c = c, .b = b, .doc_cdf = doc_cdf,
                   .docs = {cr_mix64(c->seed ^ 0x3cc3c33c3cc3c33cULL)},
                   .own_start = c->system_blocks + documents,
                   .stride = c->documents ? c->documents : 1};
    for (size_t i = 0; i < c->n_requests; i++) {
        double t = next_arrival(c, &arrivals, &active);
        size_t k = session_at(c, rank_of(cdf, c->n_sessions, u[i]), t);
        cr_replay_request r = {.t_ms = t * 1000.0, .output_tokens = c->output_tokens,
                               .knowledge_tokens = c->knowledge_tokens, .owner = (int64_t)k};
        if (next_prompt(&g, &last[k], &r) != 0)
            return cr_fail(err, CR_ENOMEM, "out of memory at request %zu of %zu", i,
                           c->n_requests);
    }
    return CR_OK;
}

cr_status cr_replay_generate(const cr_replay_gen_config *cfg, cr_replay_trace *out,
                             cr_error *err)
{
    memset(out, 0, sizeof *out);
    cr_status st = check(cfg, err);
    if (st != CR_OK)
        return st;
    double *u = malloc(cfg->n_requests * sizeof *u);
    double *cdf = malloc(cfg->n_sessions * sizeof *cdf);
    size_t *last = malloc(cfg->n_sessions * sizeof *last); /* per session */
    double *doc_cdf = cfg->documents ? malloc(cfg->documents * sizeof *doc_cdf) : NULL;
    cr_replay_builder b = {0};
    if (!u || !cdf || !last || (cfg->documents && !doc_cdf)) {
        st = cr_fail(err, CR_ENOMEM, "out of memory for %zu requests", cfg->n_requests);
        goto done;
    }
    cr_replay_rng pop = {cfg->seed};
    for (size_t i = 0; i < cfg->n_requests; i++)
        u[i] = cr_replay_unit(cr_replay_rng_next(&pop));
    for (size_t k = 0; k < cfg->n_sessions; k++)
        last[k] = SIZE_MAX;
    double s = cfg->zipf_s;
    if (cfg->gini >= 0)
        st = solve_exponent(cfg, u, cdf, &s, err);
    else
        zipf_cdf(s, cfg->n_sessions, cdf);
    if (doc_cdf)
        zipf_cdf(cfg->document_zipf, cfg->documents, doc_cdf);
    if (st == CR_OK)
        st = emit(cfg, u, cdf, doc_cdf, last, &b, err);
    if (st == CR_OK)
        cr_replay_builder_finish(&b, out); /* already in time order */
done:
    cr_replay_trace_free(&b.t);
    free(u);
    free(cdf);
    free(last);
    free(doc_cdf);
    return st;
}
