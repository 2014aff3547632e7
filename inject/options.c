/* Operator settings: the inject component's option rows (defaults, bounds,
 * help), and the two structured flags' parsers. Parsing, defaults and
 * range checks all read the rows, so a flag's parse and its check cannot
 * drift apart. */
#include "internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COUNT CR_INJECT_MAX_COUNT
#define AT(field) offsetof(cr_inject_config, field)

/* A count: uint32_t in 1..MAX_COUNT. */
#define COUNT(flag, field, default_, bit, text)                                                   \
    {.name = flag, .key = #field, .type = CR_OPT_U32, .offset = AT(field), .def = default_,        \
     .min = 1, .max = MAX_COUNT, .set_bit = bit, .help = text}
/* A double, finite and > 0 (POSITIVE), >= 0 (NONNEG), or in (0, 1]. */
#define POSITIVE(flag, field, default_, bit, text)                                                \
    {.name = flag, .key = #field, .type = CR_OPT_DOUBLE, .offset = AT(field), .def = default_,     \
     .min = 0, .max = INFINITY, .flags = CR_OPT_MIN_OPEN, .set_bit = bit, .help = text}
#define NONNEG(flag, field, default_, bit, text)                                                  \
    {.name = flag, .key = #field, .type = CR_OPT_DOUBLE, .offset = AT(field), .def = default_,     \
     .min = 0, .max = INFINITY, .set_bit = bit, .help = text}
#define FRACTION(flag, field, default_, text)                                                     \
    {.name = flag, .key = #field, .type = CR_OPT_DOUBLE, .offset = AT(field), .def = default_,     \
     .min = 0, .max = 1, .flags = CR_OPT_MIN_OPEN, .help = text}

static cr_status set_model_config(void *cfg, const char *value, cr_error *err);
static int show_model_config(const void *cfg, char *buf, size_t len);
static cr_status set_prefill_coeffs(void *cfg, const char *value, cr_error *err);
static int show_prefill_coeffs(const void *cfg, char *buf, size_t len);
static cr_status set_kv_source(void *cfg, const char *value, cr_error *err);
static int show_kv_sources(const void *cfg, char *buf, size_t len);
static void release(void *cfg);

static const char *const ON_OFF[] = {"off", "on", NULL}; /* index 1: cfg->calibrate is 1 */

/* The shape flags a config.json also gives carry a bit of their own, which
 * keeps the file off their fields (see cr_inject_options). */
#define SHAPE(bit) (CR_INJECT_SET_MODEL_SHAPE | (bit))

/* Defaults: Llama-3.1-8B, BF16, on an A100 with a 10 Gb/s link. */
static const cr_option ROWS[] = {
    {.name = "model-config", .key = "model_config", .type = CR_OPT_CUSTOM, .def_text = "none",
     .set_bit = CR_INJECT_SET_MODEL_CONFIG, .set = set_model_config, .show = show_model_config,
     .help = "PATH of the model's Hugging Face config.json: its shape and parameter count "
             "(the flags below win over it)"},
    COUNT("model-layers", model_layers, 32, SHAPE(CR_INJECT_SET_LAYERS),
          "transformer layers (KV size, prefill c)"),
    COUNT("model-kv-heads", model_kv_heads, 8, SHAPE(CR_INJECT_SET_KV_HEADS),
          "KV heads (KV size)"),
    COUNT("model-head-dim", model_head_dim, 128, SHAPE(CR_INJECT_SET_HEAD_DIM),
          "head dimension (KV size)"),
    COUNT("kv-dtype-bytes", kv_dtype_bytes, 2, SHAPE(CR_INJECT_SET_KV_DTYPE),
          "bytes per KV element"),
    COUNT("tensor-parallel", tensor_parallel, 1, CR_INJECT_SET_MODEL_SHAPE,
          "tensor-parallel ways; divides the KV size"),
    {.name = "kv-bytes-per-token", .key = "kv_bytes_per_token", .type = CR_OPT_DOUBLE,
     .offset = AT(kv_bytes_per_token), .def_text = "from the model shape", .min = 0,
     .max = INFINITY, .flags = CR_OPT_MIN_OPEN | CR_OPT_UNSET, .set_bit = CR_INJECT_SET_KV_BYTES,
     .help = "KV cache bytes per token; overrides the shape"},
    POSITIVE("model-params-b", model_params_b, 8.03, CR_INJECT_SET_PARAMS,
             "parameters a prefilled token passes through, in 10^9 (prefill b)"),
    COUNT("model-d-model", model_d_model, 4096, CR_INJECT_SET_D_MODEL, "hidden size (prefill c)"),
    FRACTION("mfu", mfu, 0.5, "model FLOPs utilization during prefill"),
    POSITIVE("peak-tflops", peak_tflops, 312, CR_INJECT_SET_PEAK,
             "dense BF16 teraFLOP/s when no GPU is probed or its architecture is unknown"),
    NONNEG("prefill-fixed-ms", prefill_fixed_ms, 10, 0, "prefill a: fixed ms per request"),
    {.name = "prefill-coeffs", .key = "prefill_coeffs", .type = CR_OPT_CUSTOM,
     .def_text = "from the probe", .flags = CR_OPT_UNSET,
     .set_bit = CR_INJECT_SET_PREFILL_COEFFS, .set = set_prefill_coeffs,
     .show = show_prefill_coeffs,
     .help = "a,b,c fitted prefill coefficients (ms, ms/token, ms/token^2); override a, b and c"},
    {.name = "kv-source", .key = "kv_sources", .type = CR_OPT_CUSTOM, .def_text = "none",
     .flags = CR_OPT_REPEATABLE, .set = set_kv_source, .show = show_kv_sources,
     .help = "NAME=GBPS[,RTT_MS]: a KV source's link in gigabits/s (10^9) and rtt in ms"},
    POSITIVE("link-gbps", link_gbps, 10, CR_INJECT_SET_LINK,
             "link to KV sources in gigabits/s (10^9) when no NIC speed is probed"),
    FRACTION("link-efficiency", link_efficiency, 0.825, "usable fraction of link bandwidth"),
    POSITIVE("h2d-gbps", h2d_gbps, 25, CR_INJECT_SET_H2D,
             "host-to-GPU gigabytes/s (10^9) when not measured"),
    NONNEG("load-fixed-ms", load_fixed_ms, 2, 0, "fixed ms per KV load into the GPU"),
    NONNEG("link-queue-penalty", link_queue_penalty, 0.5, CR_INJECT_SET_PENALTY,
           "weight of link wait in the KV score"),
    NONNEG("decision-margin-ms", decision_margin_ms, 100, CR_INJECT_SET_MARGIN,
           "KV must beat text by this many ms"),
    {.name = "calibrate", .key = "calibrate", .type = CR_OPT_CHOICE, .offset = AT(calibrate),
     .def_text = "on", .choices = ON_OFF,
     .help = "fit prefill, link and load costs to ReportOutcome's measurements; off ignores them"},
    {.name = "calibration-half-life", .key = "calibration_half_life", .type = CR_OPT_U32,
     .offset = AT(calibration_half_life), .def = 500, .min = 1, .max = MAX_COUNT,
     .help = "samples after which a calibration sample weighs half"},
    {.name = "calibration-min-samples", .key = "calibration_min_samples", .type = CR_OPT_U32,
     .offset = AT(calibration_min_samples), .def = 30, .min = 3, .max = MAX_COUNT,
     .help = "samples a fit needs before decisions use it"},
    /* Caps on reservations: far above any real prefill or transfer (a
     * 128k-token prefill of a 70B model takes about two minutes on an
     * A100), so only a bogus request meets them. */
    {.name = "max-reservation-ms", .key = "max_reservation_ms", .type = CR_OPT_DOUBLE,
     .offset = AT(max_reservation_ms), .def = 600000, .min = 0, .max = 1e9,
     .flags = CR_OPT_MIN_OPEN,
     .help = "most GPU prefill or link transfer ms one SelectInjection may reserve"},
    /* A GPU's queue past ten minutes is no queue a decision can trust, and
     * the bound is what a flood of reservations can make every later
     * decision see. */
    {.name = "reservation-horizon-s", .key = "reservation_horizon_s", .type = CR_OPT_DOUBLE,
     .offset = AT(reservation_horizon_s), .def = 600, .min = 0, .max = 1e7,
     .flags = CR_OPT_MIN_OPEN,
     .help = "how far past now a GPU's or a link's reservations may reach, in seconds"},
    {.name = "reservation-confirm-s", .key = "reservation_confirm_s", .type = CR_OPT_DOUBLE,
     .offset = AT(reservation_confirm_s), .def = 30, .min = 0, .max = 86400,
     .help = "a GPU reservation that no ReportOutcome for its request_id confirms by its "
             "predicted end plus this many seconds gives its time back; 0 = never"},
};

static void defaults(void *cfg) { cr_inject_config_default(cfg); }
static cr_status check(const void *cfg, cr_error *err) { return cr_inject_config_check(cfg, err); }

const cr_option_table cr_inject_options = {
    .group = "inject",
    .rows = ROWS,
    .n = sizeof ROWS / sizeof ROWS[0],
    .set_offset = AT(set),
    .release = release,
    .defaults = defaults,
    .check = check,
};

void cr_inject_config_default(cr_inject_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cr_options_defaults(&cr_inject_options, cfg);
}

static void release(void *cfg)
{
    cr_inject_config *c = cfg;
    free(c->kv_sources);
    c->kv_sources = NULL;
    c->n_kv_sources = 0;
    free(c->model_config);
    c->model_config = NULL;
}

void cr_inject_config_clear(cr_inject_config *cfg)
{
    cr_options_release(&cr_inject_options, cfg);
    cr_inject_config_default(cfg);
}

/* ---- the structured flags -------------------------------------------------- */

/* Splits "x,y,z" into at most max numbers, each a whole finite number
 * (cr_parse_double): -1 on any empty or malformed part (",,", a trailing
 * comma), too many parts, or out of memory. */
static int parse_list(const char *s, double *out, size_t max, size_t *n)
{
    char *copy = strdup(s), *part = copy;
    int rc = copy ? 0 : -1;
    for (*n = 0; rc == 0; (*n)++) {
        char *comma = strchr(part, ',');
        if (comma)
            *comma = '\0';
        if (*n == max || cr_parse_double(part, &out[*n]) != 0)
            rc = -1;
        if (!comma)
            break;
        part = comma + 1;
    }
    if (rc == 0)
        (*n)++;
    free(copy);
    return rc;
}

static int all_nonneg(const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!(isfinite(v[i]) && v[i] >= 0))
            return 0;
    }
    return 1;
}

cr_status cr_inject_parse_prefill_coeffs(const char *value, cr_prefill_cost *out, cr_error *err)
{
    double v[3];
    size_t n;
    if (parse_list(value, v, 3, &n) < 0 || n != 3 || !all_nonneg(v, 3))
        return cr_fail(err, CR_EINVAL,
                       "--prefill-coeffs expects a,b,c: three finite numbers >= 0, got \"%s\"",
                       value);
    *out = (cr_prefill_cost){v[0], v[1], v[2]};
    return CR_OK;
}

static cr_status set_prefill_coeffs(void *cfg, const char *value, cr_error *err)
{
    return cr_inject_parse_prefill_coeffs(value, &((cr_inject_config *)cfg)->prefill_coeffs, err);
}

/* snprintf's contract: the whole text's length, buf holding what fits. */
static int append(char *buf, size_t len, int used, const char *text)
{
    size_t at = (size_t)used < len ? (size_t)used : len;
    int n = snprintf(buf + at, len - at, "%s", text);
    return used + n;
}

static int show_prefill_coeffs(const void *cfg, char *buf, size_t len)
{
    const cr_inject_config *c = cfg;
    if (!(c->set & CR_INJECT_SET_PREFILL_COEFFS))
        return 0;
    const cr_prefill_cost *k = &c->prefill_coeffs;
    const double v[3] = {k->fixed_ms, k->ms_per_token, k->ms_per_token2};
    int used = 0;
    for (int i = 0; i < 3; i++) {
        char num[40];
        cr_option_number_text(v[i], num, sizeof num);
        used = append(buf, len, append(buf, len, used, i ? "," : ""), num);
    }
    return used;
}

static cr_status check_name_len(size_t len, cr_error *err)
{
    if (len >= 1 && len <= CR_INJECT_NAME_MAX)
        return CR_OK;
    return cr_fail(err, CR_EINVAL, "--kv-source name must be 1..%d bytes, got %zu",
                   CR_INJECT_NAME_MAX, len);
}

static cr_status check_kv_source(const cr_kv_source_spec *s, cr_error *err)
{
    if (check_name_len(strnlen(s->name, sizeof s->name), err) != CR_OK)
        return CR_EINVAL;
    if (!(isfinite(s->gbps) && s->gbps > 0) || !all_nonneg(&s->rtt_ms, 1))
        return cr_fail(err, CR_EINVAL,
                       "--kv-source %s needs GBPS finite > 0 and RTT_MS finite >= 0, got %g,%g",
                       s->name, s->gbps, s->rtt_ms);
    return CR_OK;
}

/* NAME=GBPS[,RTT_MS]; the last '=' splits, so a name may contain '='. */
cr_status cr_inject_parse_kv_source(const char *value, cr_kv_source_spec *out, cr_error *err)
{
    const char *eq = strrchr(value, '=');
    double v[2] = {0, CR_INJECT_DEFAULT_RTT_MS};
    size_t n = 0;
    if (!eq || parse_list(eq + 1, v, 2, &n) < 0)
        return cr_fail(err, CR_EINVAL, "--kv-source expects NAME=GBPS[,RTT_MS], got \"%s\"",
                       value);
    cr_kv_source_spec s = {.gbps = v[0], .rtt_ms = v[1]};
    size_t len = (size_t)(eq - value);
    if (check_name_len(len, err) != CR_OK)
        return CR_EINVAL;
    memcpy(s.name, value, len);
    if (check_kv_source(&s, err) != CR_OK)
        return CR_EINVAL;
    *out = s;
    return CR_OK;
}

static cr_status check_unique(const cr_kv_source_spec *v, size_t n, const char *name, cr_error *err)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].name, name) == 0)
            return cr_fail(err, CR_EINVAL, "--kv-source %s given twice", name);
    }
    return CR_OK;
}

static cr_status set_kv_source(void *config, const char *value, cr_error *err)
{
    cr_inject_config *cfg = config;
    cr_kv_source_spec s;
    if (cr_inject_parse_kv_source(value, &s, err) != CR_OK ||
        check_unique(cfg->kv_sources, cfg->n_kv_sources, s.name, err) != CR_OK)
        return CR_EINVAL;
    cr_kv_source_spec *v = realloc(cfg->kv_sources, (cfg->n_kv_sources + 1) * sizeof *v);
    if (!v)
        return cr_fail(err, CR_ENOMEM, "out of memory adding --kv-source %s", s.name);
    v[cfg->n_kv_sources++] = s;
    cfg->kv_sources = v;
    return CR_OK;
}

/* "NAME=GBPS,RTT_MS" per source, space-separated (the variable's form). */
static int show_kv_sources(const void *cfg, char *buf, size_t len)
{
    const cr_inject_config *c = cfg;
    int used = 0;
    for (size_t i = 0; i < c->n_kv_sources; i++) {
        char gbps[40], rtt[40];
        cr_option_number_text(c->kv_sources[i].gbps, gbps, sizeof gbps);
        cr_option_number_text(c->kv_sources[i].rtt_ms, rtt, sizeof rtt);
        used = append(buf, len, used, i ? " " : "");
        used = append(buf, len, used, c->kv_sources[i].name);
        used = append(buf, len, append(buf, len, append(buf, len, used, "="), gbps), ",");
        used = append(buf, len, used, rtt);
    }
    return used;
}

/* Each field the file gives, but those an explicit setting holds. */
static void apply_shape(cr_inject_config *cfg, const cr_model_shape *m)
{
    const struct {
        unsigned bit;
        uint32_t *field, value;
    } fields[] = {
        {CR_INJECT_SET_LAYERS, &cfg->model_layers, m->layers},
        {CR_INJECT_SET_KV_HEADS, &cfg->model_kv_heads, m->kv_heads},
        {CR_INJECT_SET_HEAD_DIM, &cfg->model_head_dim, m->head_dim},
        {CR_INJECT_SET_KV_DTYPE, &cfg->kv_dtype_bytes, m->dtype_bytes},
        {CR_INJECT_SET_D_MODEL, &cfg->model_d_model, m->hidden_size},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!(cfg->set & fields[i].bit))
            *fields[i].field = fields[i].value;
    }
    if (!(cfg->set & CR_INJECT_SET_PARAMS))
        cfg->model_params_b = m->params_active / 1e9;
}

static cr_status set_model_config(void *config, const char *value, cr_error *err)
{
    cr_inject_config *cfg = config;
    cr_model_shape m;
    if (cr_inject_read_model_config(value, &m, err) != CR_OK)
        return CR_EINVAL;
    char *path = strdup(value);
    if (!path)
        return cr_fail(err, CR_ENOMEM, "--model-config: out of memory");
    apply_shape(cfg, &m);
    free(cfg->model_config);
    cfg->model_config = path;
    return CR_OK;
}

static int show_model_config(const void *cfg, char *buf, size_t len)
{
    const char *path = ((const cr_inject_config *)cfg)->model_config;
    return path ? append(buf, len, 0, path) : 0;
}

/* ---- set and check ------------------------------------------------------------ */

cr_status cr_inject_config_set(cr_inject_config *cfg, const char *flag, const char *value,
                               cr_error *err)
{
    const cr_option *o =
        strncmp(flag, "--", 2) == 0 ? cr_option_find(&cr_inject_options, flag + 2, strlen(flag + 2))
                                    : NULL;
    if (!o)
        return cr_fail(err, CR_EINVAL, "unknown flag %s", flag);
    return cr_option_set(&cr_inject_options, o, cfg, value, err);
}

cr_status cr_inject_config_check(const cr_inject_config *cfg, cr_error *err)
{
    if (cr_options_check(&cr_inject_options, cfg, NULL, err) != CR_OK)
        return CR_EINVAL;
    const cr_prefill_cost *k = &cfg->prefill_coeffs;
    const double c[3] = {k->fixed_ms, k->ms_per_token, k->ms_per_token2};
    if ((cfg->set & CR_INJECT_SET_PREFILL_COEFFS) && !all_nonneg(c, 3))
        return cr_fail(err, CR_EINVAL,
                       "--prefill-coeffs must be three finite numbers >= 0, got %g,%g,%g", c[0],
                       c[1], c[2]);
    for (size_t i = 0; i < cfg->n_kv_sources; i++) {
        if (check_kv_source(&cfg->kv_sources[i], err) != CR_OK ||
            check_unique(cfg->kv_sources, i, cfg->kv_sources[i].name, err) != CR_OK)
            return CR_EINVAL;
    }
    return CR_OK;
}
