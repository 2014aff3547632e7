/* cacheroute injection decision: prefill retrieved knowledge from text, or
 * pull a precomputed KV cache from a source and load it?
 *
 * All times are milliseconds. Link and NIC bandwidths are gigabits per
 * second, host-to-GPU bandwidth gigabytes per second (G = 10^9 in both),
 * KV sizes bytes per token. With P prompt tokens, K knowledge tokens, L = P
 * + K, and C leading knowledge tokens cached at a source (the terms are
 * cost.h's, with the coefficients below):
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
 *   prefill   calibrated from reported outcomes, fitted(n=N,mape=M%) (see
 *             calibrate.c), else --prefill-coeffs a,b,c (fitted), else from
 *             a peak: b = 2 params / (peak mfu), c = 2 layers d_model /
 *             (peak mfu), a = --prefill-fixed-ms, the peak being the GPU's
 *             probed one (probe), else --peak-tflops (flag), else 312 = A100
 *             (default)
 *   kv_bytes  --kv-bytes-per-token (flag), else 2 layers kv_heads head_dim
 *             dtype_bytes / tensor_parallel: model-config when --model-config
 *             gave the shape (shape flags on top of it win), model-shape when
 *             only shape flags did, default = Llama-3.1-8B's 131072
 *   link      fastest up NIC or RDMA port with a known speed (nic), else
 *             --link-gbps (flag), else 10 (default); a --kv-source entry
 *             overrides bandwidth and rtt for its own source, and a source's
 *             calibrated link (its reported transfers) overrides both
 *   h2d       calibrated from reported loads, fitted (load_fixed too), else
 *             the GPU's measured copy bandwidth (probe), else --h2d-gbps
 *             (flag), else 25 (default)
 *   margin, penalty  flag or default
 * Measurements win over flags: the flags are what a node without a GPU or
 * NIC falls back to. To override a probe use --prefill-coeffs or
 * --kv-source; to keep the open-loop model, --calibrate off.
 *
 * The parameter count behind b (--model-params-b, or from --model-config) is
 * the active non-embedding count: the weights each prefilled token is
 * multiplied through (attention, the MLPs of the num_experts_per_tok experts
 * routed to it, the router, the norms). The input embedding is a lookup, and
 * engines apply the output head to the last prompt position only, so neither
 * is priced per token. Mixtral-8x7B: 12.6 of its 46.7 x 10^9. The flag's
 * default, 8.03, is Llama-3.1-8B's total count (its config.json gives 6.98).
 */
#ifndef CR_INJECT_H
#define CR_INJECT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"  /* cr_status, cr_error */
#include "cost.h"    /* cr_prefill_cost, cr_load_cost, cr_transfer_cost */
#include "options.h" /* cr_option_table */
#include "probe.h"   /* cr_node_snapshot */

#define CR_INJECT_MAX_SOURCES 64      /* per request */
#define CR_INJECT_NAME_MAX 128        /* bytes in a source name */
#define CR_INJECT_MAX_TOKENS 10000000 /* prompt_tokens + knowledge_tokens */
#define CR_INJECT_MAX_LINKS 4096      /* source links whose reservations are tracked */
#define CR_INJECT_DEFAULT_RTT_MS 0.2  /* for sources without a --kv-source rtt */
#define CR_INJECT_SOURCE_LEN 128

/* Bits of cr_inject_config.set: which settings the operator gave, as the
 * model's source string reports them, and (the per-field bits) which fields
 * --model-config must leave alone. */
enum {
    CR_INJECT_SET_MODEL_SHAPE = 1u << 0, /* any of the five shape flags */
    CR_INJECT_SET_KV_BYTES = 1u << 1,
    CR_INJECT_SET_PEAK = 1u << 2,
    CR_INJECT_SET_PREFILL_COEFFS = 1u << 3,
    CR_INJECT_SET_LINK = 1u << 4,
    CR_INJECT_SET_H2D = 1u << 5,
    CR_INJECT_SET_MARGIN = 1u << 6,
    CR_INJECT_SET_PENALTY = 1u << 7,
    CR_INJECT_SET_LAYERS = 1u << 8, /* each field a config.json also gives */
    CR_INJECT_SET_KV_HEADS = 1u << 9,
    CR_INJECT_SET_HEAD_DIM = 1u << 10,
    CR_INJECT_SET_KV_DTYPE = 1u << 11,
    CR_INJECT_SET_PARAMS = 1u << 12,
    CR_INJECT_SET_D_MODEL = 1u << 13,
    CR_INJECT_SET_MODEL_CONFIG = 1u << 14,
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
    cr_prefill_cost prefill_coeffs; /* --prefill-coeffs a,b,c; used when set */
    double link_gbps;              /* --link-gbps */
    double link_efficiency;        /* --link-efficiency */
    double h2d_gbps;               /* --h2d-gbps */
    double load_fixed_ms;          /* --load-fixed-ms */
    double link_queue_penalty;     /* --link-queue-penalty */
    double decision_margin_ms;     /* --decision-margin-ms */
    cr_kv_source_spec *kv_sources; /* --kv-source (repeatable); owned, see clear */
    size_t n_kv_sources;
    char *model_config;            /* --model-config PATH; owned, NULL when not given */
    int calibrate;                 /* --calibrate: 1 on, 0 off */
    uint32_t calibration_half_life;   /* --calibration-half-life, in samples */
    uint32_t calibration_min_samples; /* --calibration-min-samples */
    double max_reservation_ms;     /* --max-reservation-ms: one decision's GPU or link time */
    double reservation_horizon_s;  /* --reservation-horizon-s: how far ahead a timeline reaches */
    double reservation_confirm_s;  /* --reservation-confirm-s: a reservation no outcome confirms
                                    * by its predicted end + this gives its time back; 0 = never */
    unsigned set; /* CR_INJECT_SET_*: the table's set word */
} cr_inject_config;

/* The inject component's option rows, one per flag above, on
 * cr_inject_config; group "inject". --prefill-coeffs, --kv-source and
 * --model-config are CUSTOM rows (shown as the text a flag takes: "a,b,c",
 * "NAME=GBPS,RTT_MS" per source, space-separated, and the path).
 *
 * --model-config reads the file when it is set (cr_inject_read_model_config)
 * and fills the six fields it gives (layers, KV heads, head dim, dtype bytes,
 * parameters, d_model), except those an explicit flag or variable already
 * set; a flag or variable applied after it overwrites its field as any
 * setting does. So an explicit shape setting wins over the file whatever the
 * order the sidecar applies them in (defaults, variables in row order, flags
 * in command-line order). A second --model-config replaces what the first
 * file gave. */
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
cr_status cr_inject_parse_prefill_coeffs(const char *value, cr_prefill_cost *out, cr_error *err);

/* What a Hugging Face config.json says about a model's cost. */
typedef struct cr_model_shape {
    uint32_t layers;            /* num_hidden_layers */
    uint32_t hidden_size;       /* hidden_size: d_model */
    uint32_t heads;             /* num_attention_heads */
    uint32_t kv_heads;          /* num_key_value_heads; default heads (no GQA) */
    uint32_t head_dim;          /* head_dim; default hidden_size / heads */
    uint32_t dtype_bytes;       /* torch_dtype (or dtype): bfloat16, float16 2; float32 4 */
    uint32_t intermediate_size; /* each expert's, for a MoE */
    uint32_t vocab_size;
    uint32_t experts;           /* num_local_experts; 1 when dense */
    uint32_t experts_per_token; /* num_experts_per_tok; 1 when dense */
    int tied_embeddings;        /* tie_word_embeddings; default false */
    double params_total;        /* every weight, embeddings included */
    double params_active;       /* per token, without embeddings: what b uses */
    double kv_bytes_per_token;  /* 2 layers kv_heads head_dim dtype_bytes */
} cr_model_shape;

/* Reads path as a Llama-style decoder's config.json (Mixtral's MoE keys
 * included). Required: num_hidden_layers, hidden_size, num_attention_heads,
 * intermediate_size, vocab_size, torch_dtype (or dtype); optional:
 * num_key_value_heads, head_dim, num_local_experts with num_experts_per_tok,
 * tie_word_embeddings. Counts must be integers in 1..1000000. Parameters:
 * per layer attention hidden head_dim (2 heads + 2 kv_heads), MLP 3 hidden
 * intermediate per expert (gate, up, down), router hidden experts, norms
 * 2 hidden; plus a final norm, the embedding and, untied, the output head.
 * The file must be a regular file of at most CR_MODEL_CONFIG_MAX_BYTES
 * (cr_file_read). CR_EINVAL with err "--model-config PATH: ..." naming the
 * key, or what kept the file from being read. */
#define CR_MODEL_CONFIG_MAX_BYTES (1u << 20) /* a config.json is a few KB */
cr_status cr_inject_read_model_config(const char *path, cr_model_shape *out, cr_error *err);

/* The coefficients in effect for one GPU (see the top of this file). */
typedef struct cr_inject_model {
    cr_prefill_cost prefill;      /* a, b, c */
    double peak_tflops;           /* the peak behind b and c; 0 when fitted */
    double kv_bytes_per_token;
    double link_gbps;   /* for sources without a --kv-source entry */
    double link_rtt_ms; /* likewise: CR_INJECT_DEFAULT_RTT_MS */
    double link_efficiency;
    cr_load_cost load;  /* load_fixed and h2d */
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
    /* The GPU reservation this decision made, for cr_injector_confirm; 0
     * for none (a dry run, or --reservation-confirm-s 0). */
    uint64_t reservation;
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

/* Copies cfg (but model_config, which it does not need). NULL with err
 * filled when it fails cr_inject_config_check or memory runs out (about
 * 1.5 MB for the link table and its calibration). */
cr_injector *cr_injector_new(const cr_inject_config *cfg, cr_error *err);
void cr_injector_free(cr_injector *inj);

/* cr_inject_model_resolve with the injector's config, then the GPU's
 * adopted calibration over it (see cr_injector_observe). Thread-safe. */
cr_status cr_injector_model(cr_injector *inj, const cr_node_snapshot *snap, uint32_t gpu,
                            cr_inject_model *out, cr_error *err);

/* The same model without its source text (out->source is left empty): for
 * callers on a hot path that read only coefficients (Route). */
cr_status cr_injector_coefficients(cr_injector *inj, const cr_node_snapshot *snap,
                                   uint32_t gpu, cr_inject_model *out, cr_error *err);

/* Validates req, resolves the model for req->gpu against snap (NULL =
 * nothing probed), decides, and unless dry_run reserves the chosen path:
 * the GPU's queue grows by the chosen prefill (the GPU works through
 * reserved prefills back to back), and a KV choice occupies the source's
 * link for its bytes (transfer minus rtt). W is req's queue_wait_ms when
 * given, else the GPU's reserved work left at now_ms; Lw is likewise the
 * link's. now_ms is any monotonic clock in ms, and reservations expire as
 * it passes them. The model is the GPU's with its adopted calibration over
 * it, and a source's calibrated link replaces its configured one (see
 * cr_injector_observe). The link table tracks at most CR_INJECT_MAX_LINKS
 * source names: a new name drops expired ones without calibration first,
 * then the one idle the longest (a calibrated one counting as busy until
 * its last observation).
 * CR_EINVAL, with err naming the field and value, for bad input (nothing
 * reserved then).
 * Caps (not for dry runs, which reserve nothing): a decision whose chosen
 * path would reserve more than --max-reservation-ms of GPU prefill or of
 * link transfer is CR_EINVAL ("prompt_tokens 9999999 + knowledge_tokens 0
 * would reserve N ms of prefill on GPU 0, over --max-reservation-ms
 * 600000; nothing reserved"), and one that would push a GPU's or a link's
 * timeline more than --reservation-horizon-s past now_ms is CR_ENOMEM
 * ("reserved link transfer from NAME would reach 3600.5 s ahead, past
 * --reservation-horizon-s 3600; ...": full until time passes or
 * ClearReservations); nothing is reserved then, so one request cannot
 * poison every later decision. cr_injector_observe keeps timelines within
 * the horizon too. Thread-safe: one short
 * mutex section per call. */
cr_status cr_inject_select(cr_injector *inj, const cr_node_snapshot *snap,
                           const cr_inject_request *req, double now_ms, cr_inject_response *out,
                           cr_error *err);

/* Which timelines cr_injector_clear empties: GPU gpu's prefill queue
 * (has_gpu), source's link (source not NULL), both when both are given,
 * and every GPU's and every link's when neither is. */
typedef struct cr_inject_clear {
    int has_gpu;
    uint32_t gpu;       /* < cr_inject_n_gpus of the snapshot */
    const char *source; /* 1..CR_INJECT_NAME_MAX bytes, or NULL */
} cr_inject_clear;

typedef struct cr_inject_cleared {
    uint32_t gpus, links; /* timelines that held reserved time at now_ms */
    double ms;            /* the reserved time dropped, summed over them */
} cr_inject_cleared;

/* A decision's GPU reservation (cr_inject_response.reservation) was
 * served: an outcome confirmed it, so it no longer expires. Unknown ids
 * (expired, cleared, 0) are ignored. Thread-safe. */
void cr_injector_confirm(cr_injector *inj, uint32_t gpu, uint64_t reservation);

/* GPU reservations expired unconfirmed so far (--reservation-confirm-s). */
uint64_t cr_injector_expired(cr_injector *inj);

/* Drops the pending reservations of the timelines which names, as of now_ms:
 * later decisions see those GPUs and links idle (calibration is kept). For
 * operators (ClearReservations) after a burst of bogus reservations.
 * CR_EINVAL naming "gpu" (not below the snapshot's GPUs) or "source" (not
 * 1..CR_INJECT_NAME_MAX bytes) with nothing cleared. Thread-safe: one
 * short lock; O(CR_INJECT_MAX_LINKS) when every link is cleared. */
cr_status cr_injector_clear(cr_injector *inj, const cr_node_snapshot *snap,
                            const cr_inject_clear *which, double now_ms, cr_inject_cleared *out,
                            cr_error *err);

/* Source names whose link reservations are tracked now. Thread-safe. */
size_t cr_injector_tracked_links(cr_injector *inj);

/* ---- online calibration (the closed-loop issue) ------------------------- */

/* What the engine measured for one served request, as calibration reads
 * it. Each part counts only with its has_ flag; values are validated by the
 * caller (finite, >= 0, from <= to). A part with a time of 0 ms (nothing to
 * take a relative error of), or a transfer without a 1..CR_INJECT_NAME_MAX
 * byte source name, feeds no fit. */
typedef struct cr_inject_observation {
    uint32_t gpu;
    double now_ms; /* the injector's clock, as for cr_inject_select */
    int has_prefill;
    double prefill_from, prefill_to, prefill_ms; /* tokens [s, L) took ms */
    int has_transfer;
    const char *source; /* the KV source's name */
    double transfer_bytes, transfer_ms;
    int has_load;
    double load_bytes, load_ms; /* host-to-GPU */
    int has_queue_wait;
    double queue_wait_ms; /* measured wait before this request's prefill */
} cr_inject_observation;

/* Feeds one observation (with --calibrate off: checks it and ignores it).
 *   prefill   the GPU's a, b, c: relative-error recursive least squares with
 *             forgetting (--calibration-half-life samples), kept >= 0, used
 *             once --calibration-min-samples samples span a 4x range of
 *             L - s and while its rolling error (the forgetting-weighted
 *             MAPE of each sample before it updates the fit) beats the
 *             prior's. Samples weigh half after a half-life, so a step
 *             change is followed within a few: a 3x one to within 5% in 5
 *             half-lives (the old samples then weigh 2^-5)
 *   load      the GPU's load_fixed and h2d rate: the same fit on a line
 *   transfer  the source's rtt and effective rate: the same fit on a line;
 *             with one transfer size it is an EWMA of bytes / (ms - rtt)
 *   timelines now_ms is taken as the moment the engine measured it (the
 *             request's first token, the transfer's ack). A queue wait sets
 *             the GPU's timeline to that wait from now; without one, a
 *             prefill moves the GPU's reservations still pending by its
 *             error against the model in use, and a transfer the source's
 *             link reservations likewise (never to before now).
 * The prior a sample is scored against is the open-loop model of the GPU's
 * latest cr_inject_select or cr_injector_model (the config's, unprobed,
 * before either). CR_EINVAL naming "gpu" for a GPU >= CR_PROBE_MAX_GPUS, or
 * "now_ms" when it is not finite; nothing changes then. Thread-safe; O(1)
 * per call: one short lock (a new source may sweep the link table, as a
 * reservation does). */
cr_status cr_injector_observe(cr_injector *inj, const cr_inject_observation *o, cr_error *err);

/* A line fit's state: ms = fixed_ms + bytes / rate. */
typedef struct cr_inject_line_calibration {
    uint64_t samples;
    int adopted;                 /* the fit is what decisions use now */
    double fixed_ms;             /* link: rtt; h2d: load_fixed */
    double gbps;                 /* link: effective Gb/s (efficiency included); h2d: GB/s */
    double mape_fit, mape_prior; /* rolling error of each on new samples, as a fraction */
} cr_inject_line_calibration;

/* A GPU's calibration state, for GetStats and GetNodeProfile. */
typedef struct cr_inject_calibration {
    uint64_t samples;    /* prefill observations fed */
    int adopted;         /* the fit is what the model uses now */
    cr_prefill_cost prefill; /* the fit, >= 0 */
    double mape_fit, mape_prior; /* rolling error of each on new samples, as a fraction */
    cr_inject_line_calibration h2d; /* the GPU's load fit */
} cr_inject_calibration;

/* gpu's state; all zero for a GPU >= CR_PROBE_MAX_GPUS or one never
 * observed. Thread-safe. */
void cr_injector_calibration(cr_injector *inj, uint32_t gpu, cr_inject_calibration *out);

/* source's link fit: 1 with *out filled when the link table tracks source,
 * else 0 with *out zeroed. Thread-safe. */
int cr_injector_link_calibration(cr_injector *inj, const char *source,
                                 cr_inject_line_calibration *out);

/* ---- saving and restoring the calibration (the state file) ----
 *
 * The section (inject/calibrate_state.c), little-endian (bytes.h): u32
 * count, then per fit that has samples u32 gpu, u8 kind (0 prefill, 1
 * h2d) and the fit; u32 count, then per calibrated KV source u8 name
 * length, the name and its link fit. A fit is its RLS state (estimate,
 * covariance and its bound, the bounded coefficients, the rolling errors
 * and their weight, the span of sizes seen: 21 f64), u64 samples and u8
 * adopted. Priors are not stored: they come from the configuration and the
 * probe, as at any start. Reservations (timelines) are not stored either:
 * they are seconds long and past after a restart. */

struct cr_buf;
struct cr_cursor;

/* Appends the section to b (b->failed when out of memory). Thread-safe:
 * one lock over the copy. */
void cr_injector_save_calibration(cr_injector *inj, struct cr_buf *b);

/* Reads one section from c and checks all of it first (CR_EINVAL naming
 * the entry and field, "calibration links[2].fit.p[1][1] must be finite
 * and > 0, got -1", for a short or bad section; CR_ENOMEM out of memory);
 * then, with apply, replaces the injector's fits with it (GPUs and links
 * not in it lose theirs; a name given twice keeps the later). Nothing is
 * changed on error or without apply. Thread-safe. */
cr_status cr_injector_load_calibration(cr_injector *inj, struct cr_cursor *c, int apply,
                                       cr_error *err);

#endif
