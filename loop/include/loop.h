/* cacheroute loop: the closed loop's parts. What a decision predicted
 * (receipts, in a bounded store), what the engine measured (outcomes, and
 * their checks), and the figures both feed: served hit ratios, prediction
 * errors and regret. The core keeps one store and one set of figures and
 * calls them from SelectInjection, ReportOutcome, GetDecision and GetStats.
 */
#ifndef CR_LOOP_H
#define CR_LOOP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "inject.h"

/* A receipt is what a decision predicted, kept so the engine's measured
 * outcome can be compared with it (GetDecision, WatchDecisions,
 * ReportOutcome). The store keeps the newest --receipts receipts (default
 * 100,000) in a ring, the oldest evicted first, with a hash index by
 * request_id. A repeated request_id replaces the older receipt: the older
 * one is dropped at once (counted in receipts_replaced) and only the newer
 * can be found or matched. Memory: each receipt is one fixed-size slot,
 * sizeof(cr_receipt) (792 B on x86-64) + 4 B of hash, plus 5.3 to 10.7 B
 * of index (a power of two of 4-byte slots >= 4/3 of the bound, allocated
 * up front); 807 B per receipt at 100,000, 81 MB (measured by
 * `core_loop_bench`). Slots are allocated in chunks of 1,024 as the ring
 * first reaches them and never beyond the bound: receipt_bytes in
 * cr_loop_stats. */

#define CR_LOOP_MAX_OUTCOMES 10000     /* per cr_core_report batch */
#define CR_LOOP_REQUEST_ID_MAX 128     /* bytes in a request_id */
#define CR_LOOP_ERROR_MAX 256          /* bytes in an outcome's error */
#define CR_LOOP_MAX_RECEIPTS 10000000  /* --receipts' upper bound */
#define CR_LOOP_HALF_LIFE_S 60.0  /* rolling figures: see cr_loop_stats */
#define CR_LOOP_APE_FLOOR_MS 1.0       /* see cr_loop_error_stats */

/* The terms a prediction is made of; the names are stable metric labels. */
typedef enum cr_loop_term {
    CR_TERM_QUEUE_WAIT,
    CR_TERM_PREFILL,
    CR_TERM_TRANSFER, /* KV only */
    CR_TERM_LOAD,     /* KV only */
    CR_TERM_TOTAL,
    CR_N_TERMS
} cr_loop_term;

/* The two paths, as array indexes (a cr_inject_mode minus 1). */
typedef enum cr_loop_path { CR_PATH_TEXT, CR_PATH_KV, CR_N_PATHS } cr_loop_path;

/* "queue_wait", "prefill", "transfer", "load", "total"; "text", "kv";
 * "unknown" out of range. Static. */
const char *cr_loop_term_name(cr_loop_term t);
const char *cr_loop_path_name(cr_loop_path p);

/* One decision and, once reported, its measured outcome. Bounded: of the
 * request it keeps the sizes, the GPU, the given queue wait and how many
 * sources were offered, not the sources themselves; the chosen (best)
 * source's name and cached tokens are in decision.source and
 * cached_tokens. */
typedef struct cr_receipt {
    char request_id[CR_LOOP_REQUEST_ID_MAX + 1];
    uint64_t seq;        /* 1, 2, ... in the order receipts were made */
    double decided_at_s; /* the core's clock */
    uint32_t prompt_tokens, knowledge_tokens, gpu, n_sources;
    int has_queue_wait;
    double queue_wait_ms;         /* given with the request */
    uint32_t cached_tokens;       /* the best source's C; 0 when none */
    cr_inject_model model;        /* the coefficients and their provenance,
                                   * resolved just after the decision with
                                   * its snapshot (a fit adopted in between
                                   * by another thread shows here) */
    cr_inject_response decision;  /* mode, reason, source, both breakdowns */
    /* A route's objective at the door (request.h), as asked: its name and
     * fairness id NUL-terminated ("" none), its own TTFT SLO (0: the
     * objective's), and the door's word (request.h's CR_ROUTE_DOOR_*). Its
     * names' room is the door's (the core checks it equal). */
    char objective[64], fairness[64];
    double slo_ttft_ms;
    int door;
    /* From the latest matched outcome; all 0 until one is reported. */
    uint32_t outcomes;            /* outcomes matched so far */
    double reported_at_s;         /* the core's clock */
    cr_inject_mode used;          /* the path the errors compare with: the
                                   * outcome's mode when given, else the
                                   * decision's */
    unsigned error_has;           /* 1u << cr_loop_term per term measured */
    /* The outcome's queue_wait_ms, prefill_ms, transfer_ms and load_ms (KV
     * only) and ttft_ms as the total, each with its has bit. */
    double measured_ms[CR_N_TERMS];
    double error_ms[CR_N_TERMS];  /* measured minus predicted, of path used */
} cr_receipt;

/* cr_outcome.has: which measured fields the engine reported. */
enum {
    CR_OUT_OWNER = 1u << 0,
    CR_OUT_SHARD = 1u << 1,
    CR_OUT_PROMPT_TOKENS = 1u << 2,
    CR_OUT_CACHED_TOKENS = 1u << 3,
    CR_OUT_QUEUE_WAIT = 1u << 4,
    CR_OUT_PREFILL = 1u << 5,         /* prefill_ms */
    CR_OUT_PREFILLED_FROM = 1u << 6,  /* s */
    CR_OUT_PREFILLED_TO = 1u << 7,    /* L */
    CR_OUT_TRANSFER_MS = 1u << 8,
    CR_OUT_TRANSFER_BYTES = 1u << 9,
    CR_OUT_LOAD = 1u << 10,
    CR_OUT_TTFT = 1u << 11,
    CR_OUT_GPU = 1u << 12,
    /* The request failed on its shard (the engine could not be reached or
     * answered an error): counts against the shard's endpoint (core.h,
     * "endpoints"). Not a field but a fact, so it has no value. */
    CR_OUT_ERROR = 1u << 13,
};

/* What the serving engine measured for one request it served. Times are
 * ms; a field counts only with its has bit. */
typedef struct cr_outcome {
    const char *request_id; /* a SelectInjection's; NULL or "" = none */
    cr_inject_mode mode;    /* the path actually used; 0 = not reported */
    const char *source;     /* the KV source actually used; NULL or "" = none */
    unsigned has;           /* CR_OUT_* */
    int64_t owner;
    uint32_t shard;
    uint32_t prompt_tokens, cached_tokens; /* cached <= prompt */
    double queue_wait_ms, prefill_ms;
    uint32_t prefilled_from, prefilled_to; /* from <= to */
    double transfer_ms;
    uint64_t transfer_bytes; /* also the bytes loaded host-to-GPU */
    double load_ms;
    double ttft_ms; /* arrival to first token: the measured total */
    uint32_t gpu;
    const char *error; /* CR_OUT_ERROR: why; NULL = none; at most CR_LOOP_ERROR_MAX bytes */
} cr_outcome;

typedef struct cr_outcome_counts {
    uint32_t accepted;  /* applied: n minus rejected */
    uint32_t matched;   /* of those, matched to a receipt */
    uint32_t rejected;  /* valid but usable by nothing (see cr_core_report) */
    char first_rejection[CR_ERRLEN]; /* "" when none */
} cr_outcome_counts;

/* Rolling figures decay with a half-life of CR_LOOP_HALF_LIFE_S on the
 * core's clock (an outcome's weight halves every 60 s), so they describe
 * roughly the last few minutes; counters never decay. */

/* One path's error on one term, from matched outcomes that measured it.
 * The absolute percentage error is |measured - predicted| / max(measured,
 * CR_LOOP_APE_FLOOR_MS), so terms near 0 ms (an empty queue) stay finite. */
typedef struct cr_loop_error_stats {
    uint64_t samples;
    double ape;     /* rolling mean absolute percentage error, a fraction */
    double bias_ms; /* rolling mean of measured minus predicted */
} cr_loop_error_stats;

typedef struct cr_loop_shard_stats {
    uint64_t outcomes, prompt_tokens, cached_tokens;
    double hit_ratio; /* rolling cached / prompt; 0 with no tokens */
} cr_loop_shard_stats;

typedef struct cr_loop_stats {
    /* receipts */
    uint64_t receipts;          /* kept now */
    uint64_t receipts_capacity; /* --receipts */
    uint64_t receipts_made, receipts_evicted, receipts_replaced;
    uint64_t receipt_bytes;     /* the store's own allocation now */
    /* outcomes */
    uint64_t outcomes_accepted, outcomes_matched, outcomes_rejected;
    uint64_t observations; /* fed to cr_injector_observe */
    uint64_t reservations_expired; /* GPU reservations no outcome confirmed in time */
    /* Served prompt tokens, [admitted][cache]: admitted 0 = false, 1 =
     * true; cache 0 = miss (prompt - cached), 1 = hit (cached). The
     * counters of cacheroute_served_prompt_tokens_total. */
    uint64_t served_tokens[2][2];
    double hit_ratio;             /* rolling, token-weighted, all outcomes */
    double hit_ratio_admitted[2]; /* the same split by admitted */
    cr_loop_error_stats errors[CR_N_PATHS][CR_N_TERMS];
    /* Regret, by the path the decision chose: a KV decision whose measured
     * total (ttft_ms, the engine having used the path chosen) exceeds the
     * calibrated text prediction, or a text decision whose measured total
     * exceeds the calibrated KV prediction of the best source (only when a
     * KV path was priced). "Calibrated": the path not taken priced by the
     * receipt's formula with the fits adopted at report time in place of
     * the receipt's model (the GPU's prefill and h2d fits, the source's
     * link fit; each as predicted when not adopted), the link wait as
     * predicted, W the measured queue wait when given. regret_ms sums
     * measured minus that prediction: the ms lost. */
    uint64_t regrets[CR_N_PATHS];
    double regret_ms[CR_N_PATHS];
    uint32_t n_shards; /* shards with outcomes are all < n_shards */
    uint32_t n_gpus;   /* the latest snapshot's, at least 1 */
} cr_loop_stats;

/* ---- receipts.c: the store ---- */

typedef struct cr_receipt_store cr_receipt_store;

/* A store of at most cap receipts (1..CR_LOOP_MAX_RECEIPTS); NULL when out
 * of memory. Its index is allocated here, slots as the ring reaches them. */
cr_receipt_store *cr_receipts_new(uint64_t cap);
void cr_receipts_free(cr_receipt_store *s);

/* Keeps a copy of *r (its request_id non-empty, NUL-terminated), replacing
 * a receipt with the same id and evicting the oldest when full; sets
 * r->seq. Returns 0, or -1 when a slot chunk cannot be allocated (nothing
 * kept then). Thread-safe. */
int cr_receipts_put(cr_receipt_store *s, cr_receipt *r);

/* Copies the receipt for id into *out: 1 found, 0 not. Thread-safe. */
int cr_receipts_get(cr_receipt_store *s, const char *id, cr_receipt *out);

/* Runs fn on the stored receipt for id under the store's lock (fn must be
 * short and must not call back into the store), then copies it into *out:
 * 1 found, 0 not (fn not called). */
int cr_receipts_update(cr_receipt_store *s, const char *id,
                       void (*fn)(cr_receipt *r, const void *ctx), const void *ctx,
                       cr_receipt *out);

/* The store's counters and allocation, into the receipt fields of *out. */
void cr_receipts_stats(cr_receipt_store *s, cr_loop_stats *out);

/* ---- outcome_check.c ---- */

/* A batch of n outcomes: CR_EINVAL "outcomes must hold at most 10000
 * entries, got N" past CR_LOOP_MAX_OUTCOMES. Pure. */
cr_status cr_outcome_count_check(size_t n, cr_error *err);

/* Checks o (entry i of a batch) in field order against shards and gpus;
 * CR_EINVAL with err naming "outcomes[i].field". Pure. */
cr_status cr_outcome_check(const cr_outcome *o, size_t i, uint32_t shards, uint32_t gpus,
                           cr_error *err);

/* ---- receipt_outcome.c: what a matched outcome means for its receipt ---- */

typedef struct cr_outcome_at {
    const cr_outcome *o;
    double now; /* core seconds */
} cr_outcome_at;

/* A cr_receipts_update fn (ctx a cr_outcome_at): counts the outcome and
 * replaces the receipt's measured terms and errors with its own. */
void cr_receipt_apply_outcome(cr_receipt *r, const void *ctx);

/* The calibration a receipt's path not taken is priced with: its GPU's
 * and its source's link (zero, not adopted, when none). */
typedef struct cr_regret_fits {
    cr_inject_calibration gpu;
    cr_inject_line_calibration link;
} cr_regret_fits;

/* Regret of a reported receipt: the cr_loop_path chosen with *lost_ms, or
 * -1 for none (see cr_loop_stats). Pure. */
int cr_receipt_regret(const cr_receipt *r, const cr_regret_fits *fits, double *lost_ms);

/* ---- loop_stats.c: the figures ---- */

/* What one applied outcome adds to the figures, built outside the lock. */
typedef struct cr_loop_delta {
    int matched, rejected, observed;
    int has_tokens, admitted, has_shard;
    uint32_t shard, prompt_tokens, cached_tokens;
    int path;            /* of the errors: a cr_loop_path, -1 = none */
    unsigned error_has;  /* 1u << cr_loop_term */
    double ape[CR_N_TERMS], error_ms[CR_N_TERMS];
    int regret_path;     /* a cr_loop_path, -1 = no regret */
    double regret_ms;
} cr_loop_delta;

typedef struct cr_loop_figures cr_loop_figures;

cr_loop_figures *cr_loop_figures_new(void);
void cr_loop_figures_free(cr_loop_figures *f);
/* Adds d at now (core seconds). One short lock; O(1) but for a rare
 * doubling of the shard array (bounded by the shard count checked). */
void cr_loop_figures_add(cr_loop_figures *f, const cr_loop_delta *d, double now);
/* The figures' part of *out (outcome counters, tokens, rolling figures,
 * errors, regret, n_shards) decayed to now, and shards[0..max). */
void cr_loop_figures_read(cr_loop_figures *f, double now, cr_loop_stats *out,
                          cr_loop_shard_stats *shards, uint32_t max_shards);

#endif
