/* cacheroute injection decision: prefill retrieved knowledge from text, or
 * pull a precomputed KV cache from a source and load it?
 *
 * All times are milliseconds. Link and NIC bandwidths are gigabits per
 * second, host-to-GPU bandwidth gigabytes per second (G = 10^9 in both),
 * KV sizes bytes per token. With P prompt tokens, K knowledge tokens, L = P
 * + K, and C leading knowledge tokens cached at a source:
 *
 *   prefill(s, L) = a + b (L - s) + c (L^2 - s^2)       tokens [s, L)
 *   transfer(C)   = rtt + C kv_bytes_per_token 8 / (link Gb/s 10^9 efficiency)
 *   load(C)       = load_fixed + C kv_bytes_per_token / (h2d GB/s 10^9)
 *   text_total    = W + prefill(0, L)
 *   kv_total      = max(W, Lw + transfer(C)) + load(C) + prefill(C, L)
 *
 * W is the prefill queue wait (the request's, or this GPU's reserved
 * prefills), Lw the wait behind transfers already reserved on the source's
 * link. Each source with C > 0 scores kv_total + penalty Lw; the lowest
 * wins (ties by name, bytewise), and KV is chosen iff
 * score + margin < text_total.
 *
 * Where the coefficients come from (cr_inject_model.source, stable text
 * "prefill=X kv_bytes=X link=X h2d=X margin=X penalty=X"):
 *   prefill   fitted (--prefill-coeffs a,b,c), else from a peak:
 *             b = 2 params / (peak mfu), c = 2 layers d_model / (peak mfu),
 *             a = --prefill-fixed-ms, the peak being the GPU's probed one
 *             (probe), else --peak-tflops (flag), else 312 = A100 (default)
 *   kv_bytes  --kv-bytes-per-token (flag), else 2 layers kv_heads head_dim
 *             dtype_bytes / tensor_parallel (model-shape when any shape flag
 *             is set, default = Llama-3.1-8B's 131072)
 *   link      fastest up NIC or RDMA port with a known speed (nic), else
 *             --link-gbps (flag), else 10 (default); a --kv-source entry
 *             overrides bandwidth and rtt for its own source
 *   h2d       the GPU's measured copy bandwidth (probe), else --h2d-gbps
 *             (flag), else 25 (default)
 *   margin, penalty  flag or default
 * Measurements win over flags: the flags are what a node without a GPU or
 * NIC falls back to. To override a measurement use --prefill-coeffs or
 * --kv-source.
 */
#ifndef CR_INJECT_H
#define CR_INJECT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"  /* cr_status, cr_error */
#include "options.h" /* cr_option_table */
#include "probe.h"   /* cr_node_snapshot */

#define CR_INJECT_MAX_SOURCES 64      /* per request */
#define CR_INJECT_NAME_MAX 128        /* bytes in a source name */
#define CR_INJECT_MAX_TOKENS 10000000 /* prompt_tokens + knowledge_tokens */
#define CR_INJECT_MAX_LINKS 4096      /* source links whose reservations are tracked */
#define CR_INJECT_DEFAULT_RTT_MS 0.2  /* for sources without a --kv-source rtt */
#define CR_INJECT_SOURCE_LEN 128

/* Bits of cr_inject_config.set: which settings the operator gave, as the
 * model's source string reports them. */
enum {
    CR_INJECT_SET_MODEL_SHAPE = 1u << 0, /* any of the five shape flags */
    CR_INJECT_SET_KV_BYTES = 1u << 1,
    CR_INJECT_SET_PEAK = 1u << 2,
    CR_INJECT_SET_PREFILL_COEFFS = 1u << 3,
    CR_INJECT_SET_LINK = 1u << 4,
    CR_INJECT_SET_H2D = 1u << 5,
    CR_INJECT_SET_MARGIN = 1u << 6,
    CR_INJECT_SET_PENALTY = 1u << 7,
};

/* --kv-source NAME=GBPS[,RTT_MS] */
typedef struct cr_kv_source_spec {
    char name[CR_INJECT_NAME_MAX + 1];
    double gbps;   /* finite, > 0 */
    double rtt_ms; /* finite, >= 0; CR_INJECT_DEFAULT_RTT_MS when omitted */
} cr_kv_source_spec;

/* Operator settings, one field per flag. Defaults (Llama-3.1-8B, BF16),
 * bounds and help: the rows of cr_inject_options. */
typedef struct cr_inject_config {
    uint32_t model_layers;         /* --model-layers */
    uint32_t model_kv_heads;       /* --model-kv-heads */
    uint32_t model_head_dim;       /* --model-head-dim */
    uint32_t kv_dtype_bytes;       /* --kv-dtype-bytes */
    uint32_t tensor_parallel;      /* --tensor-parallel */
    double kv_bytes_per_token;     /* --kv-bytes-per-token; used when set */
    double model_params_b;         /* --model-params-b (10^9 parameters) */
    uint32_t model_d_model;        /* --model-d-model */
    double mfu;                    /* --mfu */
    double peak_tflops;            /* --peak-tflops */
    double prefill_fixed_ms;       /* --prefill-fixed-ms */
    double prefill_coeffs[3];      /* --prefill-coeffs a,b,c; used when set */
    double link_gbps;              /* --link-gbps */
    double link_efficiency;        /* --link-efficiency */
    double h2d_gbps;               /* --h2d-gbps */
    double load_fixed_ms;          /* --load-fixed-ms */
    double link_queue_penalty;     /* --link-queue-penalty */
    double decision_margin_ms;     /* --decision-margin-ms */
    cr_kv_source_spec *kv_sources; /* --kv-source (repeatable); owned, see clear */
    size_t n_kv_sources;
    unsigned set; /* CR_INJECT_SET_*: the table's set word */
} cr_inject_config;

/* The inject component's option rows, one per flag above, on
 * cr_inject_config; group "inject". --prefill-coeffs and --kv-source are
 * CUSTOM rows (shown as the text a flag takes: "a,b,c", and
 * "NAME=GBPS,RTT_MS" per source, space-separated). */
extern const cr_option_table cr_inject_options;

/* Fills the rows' defaults; nothing set, no sources. */
void cr_inject_config_default(cr_inject_config *cfg);

/* Frees cfg->kv_sources and restores the defaults. */
void cr_inject_config_clear(cr_inject_config *cfg);

/* Parses value for flag (one of cr_inject_options' rows, spelled "--name"),
 * stores it and marks it set; --kv-source appends. CR_EINVAL with err
 * naming the flag and the value for an unknown flag, a malformed or out of
 * range value, or a --kv-source name given twice (cfg unchanged then);
 * CR_ENOMEM when a source cannot be added. */
cr_status cr_inject_config_set(cr_inject_config *cfg, const char *flag, const char *value,
                               cr_error *err);

/* Checks every field (for configs filled in directly) against the rows and
 * the structured flags' rules; err names the flag. */
cr_status cr_inject_config_check(const cr_inject_config *cfg, cr_error *err);

/* The two structured flag values on their own. */
cr_status cr_inject_parse_kv_source(const char *value, cr_kv_source_spec *out, cr_error *err);
cr_status cr_inject_parse_prefill_coeffs(const char *value, double out[3], cr_error *err);

/* The coefficients in effect for one GPU (see the top of this file). */
typedef struct cr_inject_model {
    double prefill_fixed_ms;      /* a */
    double prefill_ms_per_token;  /* b */
    double prefill_ms_per_token2; /* c */
    double peak_tflops;           /* the peak behind b and c; 0 when fitted */
    double kv_bytes_per_token;
    double link_gbps;   /* for sources without a --kv-source entry */
    double link_rtt_ms; /* likewise: CR_INJECT_DEFAULT_RTT_MS */
    double link_efficiency;
    double h2d_gbps;
    double load_fixed_ms;
    double decision_margin_ms;
    double link_queue_penalty;
    char source[CR_INJECT_SOURCE_LEN];
} cr_inject_model;

/* Resolves cfg (assumed checked) against snap (NULL = nothing probed) for
 * GPU gpu, valid in 0..max(1, snap->n_gpus) - 1; CR_EINVAL naming "gpu"
 * otherwise. Pure. */
cr_status cr_inject_model_resolve(const cr_inject_config *cfg, const cr_node_snapshot *snap,
                                  uint32_t gpu, cr_inject_model *out, cr_error *err);

/* ---- requests ----------------------------------------------------------- */

typedef struct cr_kv_source {
    const char *name;       /* 1..CR_INJECT_NAME_MAX bytes */
    uint32_t cached_tokens; /* C, <= knowledge_tokens */
} cr_kv_source;

typedef struct cr_inject_request {
    uint32_t prompt_tokens;    /* P */
    uint32_t knowledge_tokens; /* K; P + K <= CR_INJECT_MAX_TOKENS */
    const cr_kv_source *sources;
    size_t n_sources; /* <= CR_INJECT_MAX_SOURCES */
    int has_queue_wait;
    double queue_wait_ms; /* W when has_queue_wait: finite, >= 0 */
    uint32_t gpu;
    int dry_run; /* decide without reserving anything */
} cr_inject_request;

typedef struct cr_cost_breakdown {
    double queue_wait_ms;
    double prefill_ms;
    double link_wait_ms; /* KV only */
    double transfer_ms;  /* KV only */
    double load_ms;      /* KV only */
    double total_ms;
} cr_cost_breakdown;

/* The wire enum's values. */
typedef enum cr_inject_mode { CR_INJECT_TEXT = 1, CR_INJECT_KV_CACHE = 2 } cr_inject_mode;

/* Why a decision went the way it did. The names are stable (the wire's
 * reason strings, metric labels): never rename one. */
typedef enum cr_inject_reason {
    CR_REASON_NO_KNOWLEDGE,       /* text: K = 0 */
    CR_REASON_NO_KV_AVAILABLE,    /* text: no source has C > 0 */
    CR_REASON_KV_FASTER,          /* KV */
    CR_REASON_KV_HIDDEN_BY_QUEUE, /* KV, and Lw + transfer <= W */
    CR_REASON_TEXT_FASTER,        /* text */
    CR_REASON_LINK_CONGESTED,     /* text, but KV would win with every link idle */
    CR_INJECT_N_REASONS
} cr_inject_reason;

/* "no_knowledge", ...; "unknown" out of range. Static. */
const char *cr_inject_reason_name(cr_inject_reason r);
/* The mode a reason goes with. */
cr_inject_mode cr_inject_reason_mode(cr_inject_reason r);

typedef struct cr_inject_response {
    cr_inject_mode mode;
    int source_index;                    /* best source in the request, -1 when none had C > 0 */
    char source[CR_INJECT_NAME_MAX + 1]; /* its name, or "" */
    cr_cost_breakdown text;
    int has_kv;
    cr_cost_breakdown kv; /* the best source's; zero when !has_kv */
    /* The loser's total minus the winner's; 0 without a KV option. Negative
     * when the margin or the link penalty kept the faster path from winning. */
    double saving_ms;
    cr_inject_reason reason;
} cr_inject_response;

/* One source's link as the decision sees it. */
typedef struct cr_inject_link {
    double gbps;
    double rtt_ms;
    double wait_ms; /* Lw */
} cr_inject_link;

/* The decision alone, every wait given: queue_wait_ms is W (req's own is
 * ignored) and links[i] belongs to req->sources[i]. No validation, no state,
 * no reservation: cr_inject_select's pure core, for tests and what-if tools. */
void cr_inject_decide(const cr_inject_model *m, const cr_inject_request *req, double queue_wait_ms,
                      const cr_inject_link *links, cr_inject_response *out);

/* ---- the injector: config plus reservation timelines -------------------- */

typedef struct cr_injector cr_injector;

/* Copies cfg. NULL with err filled when it fails cr_inject_config_check or
 * memory runs out (about 0.6 MB for the link table). */
cr_injector *cr_injector_new(const cr_inject_config *cfg, cr_error *err);
void cr_injector_free(cr_injector *inj);

/* cr_inject_model_resolve with the injector's config. Thread-safe. */
cr_status cr_injector_model(const cr_injector *inj, const cr_node_snapshot *snap, uint32_t gpu,
                            cr_inject_model *out, cr_error *err);

/* Validates req, resolves the model for req->gpu against snap (NULL =
 * nothing probed), decides, and unless dry_run reserves the chosen path:
 * the GPU's queue grows by the chosen prefill (the GPU works through
 * reserved prefills back to back), and a KV choice occupies the source's
 * link for its bytes (transfer minus rtt). W is req's queue_wait_ms when
 * given, else the GPU's reserved work left at now_ms; Lw is likewise the
 * link's. now_ms is any monotonic clock in ms, and reservations expire as
 * it passes them. The link table tracks at most CR_INJECT_MAX_LINKS source
 * names: a new name drops expired ones first, then the soonest to expire.
 * CR_EINVAL, with err naming the field and value, for bad input (nothing
 * reserved then). Thread-safe: one short mutex section per call. */
cr_status cr_inject_select(cr_injector *inj, const cr_node_snapshot *snap,
                           const cr_inject_request *req, double now_ms, cr_inject_response *out,
                           cr_error *err);

/* Source names whose link reservations are tracked now. Thread-safe. */
size_t cr_injector_tracked_links(cr_injector *inj);

#endif
