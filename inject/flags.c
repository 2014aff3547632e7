/* Operator settings: defaults, flag parsing and range checks, driven by one
 * table so that a flag's parse and its check cannot drift apart. */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COUNT 1000000u /* layers, heads, dims: far above any real model */

typedef enum rule {
    RULE_COUNT,    /* uint32_t, 1..MAX_COUNT */
    RULE_POSITIVE, /* double, finite, > 0 */
    RULE_NONNEG,   /* double, finite, >= 0 */
    RULE_FRACTION, /* double, in (0, 1] */
} rule;

static const struct flag {
    const char *name;
    size_t offset;
    rule rule;
    unsigned set_bit;
    int only_when_set; /* the field means nothing until the flag is given */
} FLAGS[] = {
    {"--model-layers", offsetof(cr_inject_config, model_layers), RULE_COUNT,
     CR_INJECT_SET_MODEL_SHAPE, 0},
    {"--model-kv-heads", offsetof(cr_inject_config, model_kv_heads), RULE_COUNT,
     CR_INJECT_SET_MODEL_SHAPE, 0},
    {"--model-head-dim", offsetof(cr_inject_config, model_head_dim), RULE_COUNT,
     CR_INJECT_SET_MODEL_SHAPE, 0},
    {"--kv-dtype-bytes", offsetof(cr_inject_config, kv_dtype_bytes), RULE_COUNT,
     CR_INJECT_SET_MODEL_SHAPE, 0},
    {"--tensor-parallel", offsetof(cr_inject_config, tensor_parallel), RULE_COUNT,
     CR_INJECT_SET_MODEL_SHAPE, 0},
    {"--kv-bytes-per-token", offsetof(cr_inject_config, kv_bytes_per_token), RULE_POSITIVE,
     CR_INJECT_SET_KV_BYTES, 1},
    {"--model-params-b", offsetof(cr_inject_config, model_params_b), RULE_POSITIVE, 0, 0},
    {"--model-d-model", offsetof(cr_inject_config, model_d_model), RULE_COUNT, 0, 0},
    {"--mfu", offsetof(cr_inject_config, mfu), RULE_FRACTION, 0, 0},
    {"--peak-tflops", offsetof(cr_inject_config, peak_tflops), RULE_POSITIVE, CR_INJECT_SET_PEAK,
     0},
    {"--prefill-fixed-ms", offsetof(cr_inject_config, prefill_fixed_ms), RULE_NONNEG, 0, 0},
    {"--link-gbps", offsetof(cr_inject_config, link_gbps), RULE_POSITIVE, CR_INJECT_SET_LINK, 0},
    {"--link-efficiency", offsetof(cr_inject_config, link_efficiency), RULE_FRACTION, 0, 0},
    {"--h2d-gbps", offsetof(cr_inject_config, h2d_gbps), RULE_POSITIVE, CR_INJECT_SET_H2D, 0},
    {"--load-fixed-ms", offsetof(cr_inject_config, load_fixed_ms), RULE_NONNEG, 0, 0},
    {"--link-queue-penalty", offsetof(cr_inject_config, link_queue_penalty), RULE_NONNEG,
     CR_INJECT_SET_PENALTY, 0},
    {"--decision-margin-ms", offsetof(cr_inject_config, decision_margin_ms), RULE_NONNEG,
     CR_INJECT_SET_MARGIN, 0},
};

#define N_FLAGS (sizeof FLAGS / sizeof FLAGS[0])

void cr_inject_config_default(cr_inject_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->model_layers = 32;
    cfg->model_kv_heads = 8;
    cfg->model_head_dim = 128;
    cfg->kv_dtype_bytes = 2;
    cfg->tensor_parallel = 1;
    cfg->model_params_b = 8.03;
    cfg->model_d_model = 4096;
    cfg->mfu = 0.5;
    cfg->peak_tflops = 312;
    cfg->prefill_fixed_ms = 10;
    cfg->link_gbps = 10;
    cfg->link_efficiency = 0.825;
    cfg->h2d_gbps = 25;
    cfg->load_fixed_ms = 2;
    cfg->link_queue_penalty = 0.5;
    cfg->decision_margin_ms = 100;
}

void cr_inject_config_clear(cr_inject_config *cfg)
{
    free(cfg->kv_sources);
    cr_inject_config_default(cfg);
}

static const char *rule_text(rule r)
{
    switch (r) {
    case RULE_COUNT:
        return "must be an integer in 1..1000000";
    case RULE_POSITIVE:
        return "must be finite and > 0";
    case RULE_NONNEG:
        return "must be finite and >= 0";
    default:
        return "must be in (0, 1]";
    }
}

static int rule_ok(rule r, double v)
{
    switch (r) {
    case RULE_COUNT:
        return v >= 1 && v <= MAX_COUNT && v == floor(v);
    case RULE_POSITIVE:
        return isfinite(v) && v > 0;
    case RULE_NONNEG:
        return isfinite(v) && v >= 0;
    default:
        return v > 0 && v <= 1;
    }
}

static double field_get(const cr_inject_config *cfg, const struct flag *f)
{
    const char *p = (const char *)cfg + f->offset;
    return f->rule == RULE_COUNT ? *(const uint32_t *)p : *(const double *)p;
}

static void field_put(cr_inject_config *cfg, const struct flag *f, double v)
{
    char *p = (char *)cfg + f->offset;
    if (f->rule == RULE_COUNT)
        *(uint32_t *)p = (uint32_t)v;
    else
        *(double *)p = v;
}

/* A whole-string number; integers for counts (no sign, no exponent). */
static int parse_number(const char *s, rule r, double *v)
{
    char *end;
    errno = 0;
    if (r == RULE_COUNT) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned long long u = strtoull(s, &end, 10);
        *v = u > MAX_COUNT ? (double)MAX_COUNT + 1 : (double)u;
    } else {
        *v = strtod(s, &end);
    }
    return end == s || *end || (errno && r == RULE_COUNT) ? -1 : 0;
}

/* Splits "x,y,z" into at most max numbers; -1 on any empty or malformed
 * part (",,", a trailing comma) or too many parts. */
static int parse_list(const char *s, double *out, size_t max, size_t *n)
{
    for (*n = 0; *n < max; s++) {
        char *end;
        out[*n] = strtod(s, &end);
        if (end == s)
            return -1;
        (*n)++;
        if (*end == '\0')
            return 0;
        if (*end != ',')
            return -1;
        s = end;
    }
    return -1;
}

static int all_nonneg(const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!rule_ok(RULE_NONNEG, v[i]))
            return 0;
    }
    return 1;
}

cr_status cr_inject_parse_prefill_coeffs(const char *value, double out[3], cr_error *err)
{
    double v[3];
    size_t n;
    if (parse_list(value, v, 3, &n) < 0 || n != 3 || !all_nonneg(v, 3)) {
        snprintf(err->msg, sizeof err->msg,
                 "--prefill-coeffs expects a,b,c: three finite numbers >= 0, got \"%s\"", value);
        return CR_EINVAL;
    }
    memcpy(out, v, sizeof v);
    return CR_OK;
}

static cr_status check_name_len(size_t len, cr_error *err)
{
    if (len >= 1 && len <= CR_INJECT_NAME_MAX)
        return CR_OK;
    snprintf(err->msg, sizeof err->msg, "--kv-source name must be 1..%d bytes, got %zu",
             CR_INJECT_NAME_MAX, len);
    return CR_EINVAL;
}

static cr_status check_kv_source(const cr_kv_source_spec *s, cr_error *err)
{
    if (check_name_len(strnlen(s->name, sizeof s->name), err) != CR_OK)
        return CR_EINVAL;
    if (!rule_ok(RULE_POSITIVE, s->gbps) || !rule_ok(RULE_NONNEG, s->rtt_ms)) {
        snprintf(err->msg, sizeof err->msg,
                 "--kv-source %s needs GBPS finite > 0 and RTT_MS finite >= 0, got %g,%g", s->name,
                 s->gbps, s->rtt_ms);
        return CR_EINVAL;
    }
    return CR_OK;
}

/* NAME=GBPS[,RTT_MS]; the last '=' splits, so a name may contain '='. */
cr_status cr_inject_parse_kv_source(const char *value, cr_kv_source_spec *out, cr_error *err)
{
    const char *eq = strrchr(value, '=');
    double v[2] = {0, CR_INJECT_DEFAULT_RTT_MS};
    size_t n = 0;
    if (!eq || parse_list(eq + 1, v, 2, &n) < 0) {
        snprintf(err->msg, sizeof err->msg, "--kv-source expects NAME=GBPS[,RTT_MS], got \"%s\"",
                 value);
        return CR_EINVAL;
    }
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
        if (strcmp(v[i].name, name) == 0) {
            snprintf(err->msg, sizeof err->msg, "--kv-source %s given twice", name);
            return CR_EINVAL;
        }
    }
    return CR_OK;
}

static cr_status add_kv_source(cr_inject_config *cfg, const char *value, cr_error *err)
{
    cr_kv_source_spec s;
    if (cr_inject_parse_kv_source(value, &s, err) != CR_OK ||
        check_unique(cfg->kv_sources, cfg->n_kv_sources, s.name, err) != CR_OK)
        return CR_EINVAL;
    cr_kv_source_spec *v = realloc(cfg->kv_sources, (cfg->n_kv_sources + 1) * sizeof *v);
    if (!v) {
        snprintf(err->msg, sizeof err->msg, "out of memory adding --kv-source %s", s.name);
        return CR_ENOMEM;
    }
    v[cfg->n_kv_sources++] = s;
    cfg->kv_sources = v;
    return CR_OK;
}

static cr_status flag_error(const struct flag *f, const char *text, double v, cr_error *err)
{
    if (text)
        snprintf(err->msg, sizeof err->msg, "%s %s, got \"%s\"", f->name, rule_text(f->rule), text);
    else
        snprintf(err->msg, sizeof err->msg, "%s %s, got %g", f->name, rule_text(f->rule), v);
    return CR_EINVAL;
}

cr_status cr_inject_config_set(cr_inject_config *cfg, const char *flag, const char *value,
                               cr_error *err)
{
    if (strcmp(flag, "--kv-source") == 0)
        return add_kv_source(cfg, value, err);
    if (strcmp(flag, "--prefill-coeffs") == 0) {
        if (cr_inject_parse_prefill_coeffs(value, cfg->prefill_coeffs, err) != CR_OK)
            return CR_EINVAL;
        cfg->set |= CR_INJECT_SET_PREFILL_COEFFS;
        return CR_OK;
    }
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct flag *f = &FLAGS[i];
        double v;
        if (strcmp(flag, f->name) != 0)
            continue;
        if (parse_number(value, f->rule, &v) < 0 || !rule_ok(f->rule, v))
            return flag_error(f, value, 0, err);
        field_put(cfg, f, v);
        cfg->set |= f->set_bit;
        return CR_OK;
    }
    snprintf(err->msg, sizeof err->msg, "unknown flag %s", flag);
    return CR_EINVAL;
}

cr_status cr_inject_config_check(const cr_inject_config *cfg, cr_error *err)
{
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct flag *f = &FLAGS[i];
        double v = field_get(cfg, f);
        if ((!f->only_when_set || (cfg->set & f->set_bit)) && !rule_ok(f->rule, v))
            return flag_error(f, NULL, v, err);
    }
    const double *c = cfg->prefill_coeffs;
    if ((cfg->set & CR_INJECT_SET_PREFILL_COEFFS) && !all_nonneg(c, 3)) {
        snprintf(err->msg, sizeof err->msg,
                 "--prefill-coeffs must be three finite numbers >= 0, got %g,%g,%g", c[0], c[1],
                 c[2]);
        return CR_EINVAL;
    }
    for (size_t i = 0; i < cfg->n_kv_sources; i++) {
        if (check_kv_source(&cfg->kv_sources[i], err) != CR_OK ||
            check_unique(cfg->kv_sources, i, cfg->kv_sources[i].name, err) != CR_OK)
            return CR_EINVAL;
    }
    return CR_OK;
}
