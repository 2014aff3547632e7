/* Internal to the inject library: request checks, the link table, the
 * online fits and the injector's state. */
#ifndef CR_INJECT_INTERNAL_H
#define CR_INJECT_INTERNAL_H

#include <pthread.h>

#include "inject.h"

/* Layers, heads, dims and other counts: far above any real model. */
#define CR_INJECT_MAX_COUNT 1000000

/* GPUs a request may name: max(1, probed), at most CR_PROBE_MAX_GPUS. */
size_t cr_inject_n_gpus(const cr_node_snapshot *snap);
/* CR_EINVAL naming "gpu" when gpu is not below cr_inject_n_gpus(snap). */
cr_status cr_inject_check_gpu(const cr_node_snapshot *snap, uint32_t gpu, cr_error *err);

/* Every input check of cr_inject_select; err names the wire field. */
cr_status cr_inject_request_check(const cr_inject_request *req, const cr_node_snapshot *snap,
                                  double now_ms, cr_error *err);

/* Where each coefficient of a model came from: the words of its source
 * text. fit_n > 0 makes the prefill part "fitted(n=N,mape=M%)". */
typedef struct cr_inject_labels {
    const char *prefill, *kv_bytes, *link, *h2d, *margin, *penalty;
    uint64_t fit_n;
    double fit_mape; /* a fraction */
} cr_inject_labels;

/* cr_inject_model_resolve without the source text, which
 * cr_inject_model_write_source then writes from labels. */
cr_status cr_inject_model_resolve_labels(const cr_inject_config *cfg,
                                         const cr_node_snapshot *snap, uint32_t gpu,
                                         cr_inject_model *out, cr_inject_labels *labels,
                                         cr_error *err);
void cr_inject_model_write_source(cr_inject_model *m, const cr_inject_labels *labels);

/* ---- fit.c: one relation y = coef . x fitted online ---------------------- */

#define CR_FIT_MAX 3 /* coefficients */

/* What a fitted relation is: its size, units and bounds. */
typedef struct cr_fit_kind {
    size_t dim;               /* 2 or 3 */
    double scale[CR_FIT_MAX]; /* x_j / scale_j is about 1 for a typical sample */
    double lower[CR_FIT_MAX]; /* coef_j >= lower_j */
    int needs_span;           /* adopt only once x_1 spans a 4x range */
} cr_fit_kind;

/* Shared by every fit of an injector. */
typedef struct cr_fit_params {
    double lambda;        /* 2^(-1 / half-life) */
    uint64_t min_samples; /* before adoption */
} cr_fit_params;

typedef struct cr_fit {
    double theta[CR_FIT_MAX];         /* unconstrained estimate, scaled units */
    double p[CR_FIT_MAX][CR_FIT_MAX]; /* its covariance, scaled units */
    double p_cap;                     /* trace bound (anti-windup) */
    double coef[CR_FIT_MAX];          /* the bounded fit, natural units */
    double err_fit, err_prior, weight; /* forgetting-weighted sums of each APE */
    double x_min, x_max;              /* of x_1 over the samples */
    uint64_t n;
    int adopted;
} cr_fit;

/* Starts f at prior (natural units, dim of k's coefficients). */
void cr_fit_start(cr_fit *f, const cr_fit_kind *k, const double *prior);
/* Scores prior and f on (x, y), then adds the sample (y > 0, finite) and
 * re-decides adoption. O(1). */
void cr_fit_add(cr_fit *f, const cr_fit_kind *k, const cr_fit_params *p, const double *x,
                double y, const double *prior);
/* coef . x over k's dim. */
double cr_fit_eval(const cr_fit_kind *k, const double *coef, const double *x);
/* The rolling error of the fit and of the prior (0 before any sample). */
double cr_fit_mape(const cr_fit *f);
double cr_fit_mape_prior(const cr_fit *f);

/* ---- the link table (timeline.c) ---------------------------------------- */

/* Per source name, the time its link is busy until and its calibration: a
 * fixed pool of cap entries chained from a power-of-two bucket array. Not
 * thread-safe. */
typedef struct cr_link_entry {
    char name[CR_INJECT_NAME_MAX + 1];
    double busy_until_ms;
    double observed_ms; /* the last transfer fed to fit */
    cr_fit fit;         /* rtt, ms per byte; fit.n == 0: never observed */
    int32_t next;       /* bucket chain, or free list; -1 ends either */
} cr_link_entry;

typedef struct cr_link_table {
    cr_link_entry *pool;
    int32_t *buckets;
    size_t mask; /* buckets - 1 */
    size_t cap, used;
    int32_t free_head;
} cr_link_table;

cr_status cr_link_table_init(cr_link_table *t, size_t cap);
void cr_link_table_free(cr_link_table *t);
/* name's entry, or NULL when untracked. */
cr_link_entry *cr_link_table_find(const cr_link_table *t, const char *name);
/* name's entry, added (idle, unobserved) when untracked: a full table first
 * drops the expired entries that hold no calibration, then, if none had,
 * the entry idle the longest (its reservation end, or its last observation
 * when later). */
cr_link_entry *cr_link_table_get(cr_link_table *t, const char *name, double now_ms);
/* Appends busy_ms of transfer to name's link, from now_ms at the earliest. */
void cr_link_table_reserve(cr_link_table *t, const char *name, double now_ms, double busy_ms);

/* ---- the injector -------------------------------------------------------- */

/* A GPU's calibration: the prior it is scored against and its two fits. */
typedef struct cr_gpu_calibration {
    cr_inject_model prior; /* coefficients only; its source text is not kept */
    cr_fit prefill;        /* a, b, c */
    cr_fit h2d;            /* load_fixed, ms per byte */
} cr_gpu_calibration;

/* ---- pending.c: a GPU's reservations not yet confirmed ---- */

#define CR_PENDING_CAP 1024 /* per GPU; past it the oldest is no longer tracked */

typedef struct cr_pending_item {
    double end_ms;     /* predicted end, when made */
    double ms;         /* the time it reserved */
    double shifted_at; /* cr_pending.shifted_ms when made */
    int confirmed;     /* an outcome came for it */
} cr_pending_item;

typedef struct cr_pending {
    cr_pending_item *ring; /* CR_PENDING_CAP, allocated at the first add */
    uint32_t head, n;
    uint64_t head_seq;     /* the seq of ring[head] */
    double shifted_ms;     /* time given back so far: later ends move earlier */
    uint64_t expired;      /* reservations expired unconfirmed */
} cr_pending;

void cr_pending_free(cr_pending *p);
/* Tracks a reservation of ms ending at end_ms; its id (0: not tracked, out
 * of memory). When full the oldest stops being tracked (it keeps its time:
 * *back is 0, kept for the callers' one shape). */
uint64_t cr_pending_add(cr_pending *p, double end_ms, double ms, double *back);
/* The reservation id was served: it no longer expires. */
void cr_pending_confirm(cr_pending *p, uint64_t id);
/* Pops what is done (confirmed) or expired (unconfirmed past its end plus
 * margin_ms at now_ms); returns the time expired ones give back. */
double cr_pending_expire(cr_pending *p, double now_ms, double margin_ms);

struct cr_injector {
    cr_inject_config cfg; /* kv_sources: our own copy, sorted by name */
    cr_fit_params fit;
    pthread_mutex_t lock; /* guards everything below */
    double gpu_busy_until_ms[CR_PROBE_MAX_GPUS];
    cr_pending gpu_pending[CR_PROBE_MAX_GPUS]; /* unconfirmed reservations */
    cr_gpu_calibration gpus[CR_PROBE_MAX_GPUS];
    cr_link_table links;
};

/* The link a decision on model m uses for name before calibration: its
 * --kv-source entry, else m's defaults. No lock needed. */
cr_inject_link cr_injector_link_prior(const cr_injector *inj, const cr_inject_model *m,
                                      const char *name);

/* Under inj->lock. Records m as gpu's prior, then puts gpu's adopted fits
 * over m, noting them in labels. */
void cr_calibration_apply(cr_injector *inj, uint32_t gpu, cr_inject_model *m,
                          cr_inject_labels *labels);
/* Under inj->lock. link with e's adopted fit over it, for model m. */
void cr_calibration_link(const cr_link_entry *e, const cr_inject_model *m, cr_inject_link *link);
/* Starts every GPU's calibration at the unprobed model. */
void cr_calibration_init(cr_injector *inj);

/* injector.c: under the lock, gives gpu's timeline back what its
 * unconfirmed reservations held past their end + the margin. */
void cr_injector_expire(cr_injector *inj, uint32_t gpu, double now_ms);

#endif
