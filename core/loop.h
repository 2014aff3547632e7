/* Internal to the core: the closed loop's parts. The receipt store (a
 * bounded ring with a hash index), the outcome checks, and the figures. */
#ifndef CR_CORE_LOOP_H
#define CR_CORE_LOOP_H

#include <pthread.h>

#include "core.h"

/* ---- receipts.c: the store ---- */

typedef struct cr_receipt_store cr_receipt_store;

/* A store of at most cap receipts (1..CR_CORE_MAX_RECEIPTS); NULL when out
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
void cr_receipts_stats(cr_receipt_store *s, cr_core_loop_stats *out);

/* ---- outcome_check.c ---- */

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

/* Regret of a reported receipt: the cr_core_path chosen with *lost_ms, or
 * -1 for none (see cr_core_loop_stats). Pure. */
int cr_receipt_regret(const cr_receipt *r, const cr_regret_fits *fits, double *lost_ms);

/* ---- loop_stats.c: the figures ---- */

/* What one applied outcome adds to the figures, built outside the lock. */
typedef struct cr_loop_delta {
    int matched, rejected, observed;
    int has_tokens, admitted, has_shard;
    uint32_t shard, prompt_tokens, cached_tokens;
    int path;            /* of the errors: a cr_core_path, -1 = none */
    unsigned error_has;  /* 1u << cr_core_term */
    double ape[CR_N_TERMS], error_ms[CR_N_TERMS];
    int regret_path;     /* a cr_core_path, -1 = no regret */
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
void cr_loop_figures_read(cr_loop_figures *f, double now, cr_core_loop_stats *out,
                          cr_core_shard_stats *shards, uint32_t max_shards);

#endif
