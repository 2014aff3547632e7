/* The engines' /metrics bodies read (scrape.h, cr_scrape_parse): the
 * Prometheus text format 0.0.4, every line's syntax checked, the samples
 * of the names table's families kept. One pass over the body, nothing
 * allocated: label values are kept as spans of the body and unescaped only
 * when a used one is read, into one buffer on the stack. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "scrape.h"

/* vLLM: vllm/v1/metrics/loggers.py (gpu_cache_usage_perc before 0.10);
 * SGLang: sglang/srt/metrics/collector.py. */
const cr_scrape_names cr_scrape_engines[] = {
    {"vllm", "vllm:num_requests_waiting", "vllm:num_requests_running",
     "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cache_config_info",
     "vllm:lora_requests_info"},
    {"sglang", "sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage", NULL,
     NULL, NULL},
};
const size_t cr_scrape_n_engines = sizeof cr_scrape_engines / sizeof cr_scrape_engines[0];

/* The families a row names, in cr_scrape_names' order. */
enum { F_WAITING, F_RUNNING, F_KV, F_KV_OLD, F_CONFIG, F_LORA, F_N };
static const size_t FIELD_AT[F_N] = {
    offsetof(cr_scrape_names, waiting),      offsetof(cr_scrape_names, running),
    offsetof(cr_scrape_names, kv_usage),     offsetof(cr_scrape_names, kv_usage_old),
    offsetof(cr_scrape_names, cache_config), offsetof(cr_scrape_names, lora),
};

/* The labels read from the info families. */
enum { L_BLOCK_SIZE, L_GPU_BLOCKS, L_RUNNING, L_WAITING, L_MAX_LORA, L_N };
static const char *const LABEL[L_N] = {"block_size", "num_gpu_blocks", "running_lora_adapters",
                                       "waiting_lora_adapters", "max_lora"};

typedef struct span {
    const char *p; /* NULL: absent */
    size_t len;    /* raw, escapes included */
} span;

/* What the samples so far add up to. */
typedef struct acc {
    double sum[F_KV_OLD + 1]; /* waiting, running, kv, kv_old */
    unsigned n[F_KV_OLD + 1];
    uint32_t block_size;
    uint64_t gpu_blocks;
    span lora[L_N]; /* the latest lora sample's labels */
    double lora_at;
    size_t lora_line;
    int have_lora, any;
} acc;

/* A parse's position, for errors. */
typedef struct cursor {
    const char *p, *end;
    size_t line;
    cr_error *err;
} cursor;

static cr_status fail(cursor *c, const char *why)
{
    return cr_fail(c->err, CR_EINVAL, "line %zu: %s", c->line, why);
}

static int is_blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

static void skip_blanks(cursor *c)
{
    while (c->p < c->end && is_blank(*c->p))
        c->p++;
}

static int name_char(char ch, int first, int colon)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_')
        return 1;
    return (!first && ch >= '0' && ch <= '9') || (colon && ch == ':');
}

/* A metric name (colons allowed) or a label name at c->p; its length, 0
 * when there is none. */
static size_t read_name(cursor *c, int colon)
{
    const char *start = c->p;
    while (c->p < c->end && name_char(*c->p, c->p == start, colon))
        c->p++;
    return (size_t)(c->p - start);
}

/* The family name is, as F_*, or -1 for one not in the table. */
static int family_of(const char *name, size_t len)
{
    for (size_t r = 0; r < cr_scrape_n_engines; r++)
        for (int f = 0; f < F_N; f++) {
            const char *known =
                *(const char *const *)((const char *)&cr_scrape_engines[r] + FIELD_AT[f]);
            if (known && strlen(known) == len && !memcmp(known, name, len))
                return f;
        }
    return -1;
}

/* A quoted label value at c->p (past the opening quote): its raw span,
 * escapes checked; c->p past the closing quote. */
static cr_status read_value(cursor *c, span *out)
{
    out->p = c->p;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p == '\\') {
            if (c->p + 1 >= c->end || !strchr("\\\"n", c->p[1]))
                return fail(c, "a label value escapes only \\\\, \\\" and \\n");
            c->p++;
        }
        c->p++;
    }
    if (c->p >= c->end)
        return fail(c, "label value not closed");
    out->len = (size_t)(c->p - out->p);
    c->p++;
    return CR_OK;
}

/* The labels {a="x",b="y"} at c->p (on its '{'); the spans of those in
 * LABEL kept in got when want. */
static cr_status read_labels(cursor *c, int want, span *got)
{
    c->p++;
    for (int n = 0;; n++) {
        skip_blanks(c);
        if (c->p < c->end && *c->p == '}')
            break;
        if (n == CR_SCRAPE_LABELS_MAX)
            return fail(c, "more labels than 64");
        const char *name = c->p;
        size_t len = read_name(c, 0);
        if (!len)
            return fail(c, "a label name expected");
        skip_blanks(c);
        if (c->p >= c->end || *c->p != '=')
            return fail(c, "'=' expected after a label name");
        c->p++;
        skip_blanks(c);
        if (c->p >= c->end || *c->p != '"')
            return fail(c, "a quoted label value expected");
        c->p++;
        span v;
        if (read_value(c, &v) != CR_OK)
            return CR_EINVAL;
        for (int l = 0; want && l < L_N; l++)
            if (strlen(LABEL[l]) == len && !memcmp(LABEL[l], name, len))
                got[l] = v;
        skip_blanks(c);
        if (c->p < c->end && *c->p == ',')
            c->p++;
        else if (c->p >= c->end || *c->p != '}')
            return fail(c, "',' or '}' expected after a label value");
    }
    c->p++;
    return CR_OK;
}

/* The token at c->p up to a blank or the line's end, as a NUL-ended copy
 * in buf (size bytes); 0 when empty or too long. */
static size_t read_token(cursor *c, char *buf, size_t size)
{
    const char *start = c->p;
    while (c->p < c->end && !is_blank(*c->p))
        c->p++;
    size_t len = (size_t)(c->p - start);
    if (!len || len >= size)
        return 0;
    memcpy(buf, start, len);
    buf[len] = '\0';
    return len;
}

/* A sample's value: a float as Go's ParseFloat takes it, NaN, +Inf, -Inf. */
static cr_status read_number(cursor *c, double *v)
{
    char num[64];
    char *end;
    if (!read_token(c, num, sizeof num))
        return fail(c, "a value expected");
    *v = strtod(num, &end);
    if (*end || (isnan(*v) && strcasecmp(num, "nan")))
        return fail(c, "the value is not a number");
    return CR_OK;
}

/* An optional timestamp (ms, an int64) and the line's end. */
static cr_status read_tail(cursor *c)
{
    skip_blanks(c);
    if (c->p == c->end)
        return CR_OK;
    char ts[32];
    int64_t ms;
    if (!read_token(c, ts, sizeof ts) || cr_parse_i64(ts, &ms) != 0)
        return fail(c, "the timestamp is not an integer");
    skip_blanks(c);
    return c->p == c->end ? CR_OK : fail(c, "text after the timestamp");
}

/* A used label's value unescaped into buf (CR_SCRAPE_VALUE_MAX bytes). */
static cr_status unescape(cursor *c, span v, char *buf)
{
    size_t n = 0;
    for (size_t i = 0; i < v.len; i++, n++) {
        if (n + 1 >= CR_SCRAPE_VALUE_MAX)
            return fail(c, "a label value longer than 4095 bytes");
        char ch = v.p[i];
        if (ch == '\\')
            ch = v.p[++i] == 'n' ? '\n' : v.p[i];
        buf[n] = ch;
    }
    buf[n] = '\0';
    return CR_OK;
}

/* A decimal label's value; absent, "" and Python's "None" are no value
 * (0). */
static cr_status label_u64(cursor *c, span v, const char *what, uint64_t max, uint64_t *out)
{
    char buf[CR_SCRAPE_VALUE_MAX];
    int64_t x;
    *out = 0;
    if (!v.p)
        return CR_OK;
    if (unescape(c, v, buf) != CR_OK)
        return CR_EINVAL;
    if (!*buf || !strcmp(buf, "None"))
        return CR_OK;
    if (cr_parse_i64(buf, &x) != 0 || x < 0 || (uint64_t)x > max) {
        char why[96];
        snprintf(why, sizeof why, "%s must be a decimal in 0..%llu", what,
                 (unsigned long long)max);
        return fail(c, why);
    }
    *out = (uint64_t)x;
    return CR_OK;
}

/* vllm:cache_config_info's sample: block_size agreed, num_gpu_blocks
 * summed. */
static cr_status add_config(cursor *c, const span *got, acc *a)
{
    uint64_t bs, blocks;
    if (label_u64(c, got[L_BLOCK_SIZE], "block_size", UINT32_MAX, &bs) != CR_OK ||
        label_u64(c, got[L_GPU_BLOCKS], "num_gpu_blocks", UINT64_MAX / 2, &blocks) != CR_OK)
        return CR_EINVAL;
    if (bs && a->block_size && bs != a->block_size)
        return fail(c, "block_size differs from an earlier label set's");
    if (bs)
        a->block_size = (uint32_t)bs;
    if (blocks > UINT64_MAX / 2 - a->gpu_blocks)
        return fail(c, "num_gpu_blocks sum too large");
    a->gpu_blocks += blocks;
    return CR_OK;
}

/* One sample of used family f with value v (labels in got). */
static cr_status add_sample(cursor *c, int f, double v, const span *got, acc *a)
{
    a->any = 1;
    if (f == F_LORA) { /* the latest label set wins: its value is when it was set */
        if (!a->have_lora || v >= a->lora_at) {
            memcpy(a->lora, got, sizeof a->lora);
            a->lora_at = v;
            a->lora_line = c->line;
            a->have_lora = 1;
        }
        return CR_OK;
    }
    if (f == F_CONFIG)
        return add_config(c, got, a);
    if (!isfinite(v) || v < 0)
        return fail(c, "a load must be finite and not negative");
    a->sum[f] += v;
    a->n[f]++;
    return CR_OK;
}

/* One line, c->p..c->end, '\n' and a '\r' before it excluded. */
static cr_status parse_line(cursor *c, acc *a)
{
    if (memchr(c->p, '\0', (size_t)(c->end - c->p)))
        return fail(c, "a NUL byte");
    skip_blanks(c);
    if (c->p == c->end || *c->p == '#')
        return CR_OK;
    const char *name = c->p;
    size_t len = read_name(c, 1);
    if (!len)
        return fail(c, "a metric name expected");
    int f = family_of(name, len);
    span got[L_N] = {{0}};
    const char *after = c->p;
    skip_blanks(c);
    int spaced = c->p > after; /* a blank ends the name when no labels follow */
    if (c->p < c->end && *c->p == '{') {
        if (read_labels(c, f == F_CONFIG || f == F_LORA, got) != CR_OK)
            return CR_EINVAL;
        skip_blanks(c);
        spaced = 1;
    }
    if (c->p == c->end || !spaced)
        return fail(c, "a value expected after the name and labels");
    double v = 0;
    if (read_number(c, &v) != CR_OK || read_tail(c) != CR_OK)
        return CR_EINVAL;
    return f < 0 ? CR_OK : add_sample(c, f, v, got, a);
}

/* Adds the comma-separated names of list to out's adapters, once each. */
static void add_adapters(const char *list, cr_engine_load *out)
{
    while (*list) {
        size_t len = strcspn(list, ",");
        const char *name = list;
        list += len + (list[len] == ',');
        while (len && is_blank(*name))
            name++, len--;
        while (len && is_blank(name[len - 1]))
            len--;
        if (!len || len >= CR_ENGINE_LORA_NAME_MAX || out->n_lora == CR_ENGINE_LORA_MAX)
            continue;
        int seen = 0;
        for (uint32_t i = 0; i < out->n_lora && !seen; i++)
            seen = strlen(out->lora[i]) == len && !memcmp(out->lora[i], name, len);
        if (!seen) {
            memcpy(out->lora[out->n_lora], name, len);
            out->lora[out->n_lora++][len] = '\0';
        }
    }
}

/* The latest lora sample's labels into out. */
static cr_status finish_lora(cursor *c, const acc *a, cr_engine_load *out)
{
    char buf[CR_SCRAPE_VALUE_MAX];
    uint64_t max;
    c->line = a->lora_line;
    if (label_u64(c, a->lora[L_MAX_LORA], "max_lora", UINT32_MAX, &max) != CR_OK)
        return CR_EINVAL;
    out->max_lora = (uint32_t)max;
    for (int l = L_RUNNING; l <= L_WAITING; l++) {
        if (!a->lora[l].p)
            continue;
        if (unescape(c, a->lora[l], buf) != CR_OK)
            return CR_EINVAL;
        add_adapters(buf, out);
    }
    return CR_OK;
}

static void unreported(cr_engine_load *out)
{
    memset(out, 0, sizeof *out);
    out->waiting = out->running = out->kv_usage = NAN;
}

/* The sums into out. */
static cr_status finish(cursor *c, const acc *a, cr_engine_load *out)
{
    if (!a->any)
        return cr_fail(c->err, CR_EINVAL,
                       "no engine metrics: none of vLLM's or SGLang's families in %zu lines",
                       c->line);
    if (a->n[F_WAITING])
        out->waiting = a->sum[F_WAITING];
    if (a->n[F_RUNNING])
        out->running = a->sum[F_RUNNING];
    int kv = a->n[F_KV] ? F_KV : F_KV_OLD;
    if (a->n[kv])
        out->kv_usage = fmin(a->sum[kv] / a->n[kv], 1.0);
    for (int f = F_WAITING; f <= F_RUNNING; f++)
        if (a->n[f] && !isfinite(a->sum[f]))
            return cr_fail(c->err, CR_EINVAL, "the %s requests add up past a double",
                           f == F_WAITING ? "waiting" : "running");
    out->block_size = a->block_size;
    out->gpu_blocks = a->gpu_blocks;
    return a->have_lora ? finish_lora(c, a, out) : CR_OK;
}

cr_status cr_scrape_parse(const char *body, size_t len, cr_engine_load *out, cr_error *err)
{
    acc a;
    memset(&a, 0, sizeof a);
    unreported(out);
    err->msg[0] = '\0';
    cursor c = {.p = body, .end = body, .line = 0, .err = err};
    const char *stop = body + len, *next;
    cr_status st = CR_OK;
    for (const char *line = body; st == CR_OK && line < stop; line = next) {
        const char *nl = memchr(line, '\n', (size_t)(stop - line));
        const char *eol = nl ? nl : stop;
        next = nl ? nl + 1 : stop;
        c.line++;
        if (eol - line > CR_SCRAPE_LINE_MAX) {
            st = fail(&c, "longer than 65536 bytes");
            break;
        }
        c.p = line;
        c.end = eol > line && eol[-1] == '\r' ? eol - 1 : eol;
        st = parse_line(&c, &a);
    }
    if (st == CR_OK)
        st = finish(&c, &a, out);
    if (st != CR_OK)
        unreported(out);
    return st;
}
