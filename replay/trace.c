/* Mooncake JSON-lines traces, owner keys and the owner Gini.
 *
 * Owner keys, measured on the two shipped traces (sessions = distinct
 * owners; reuse = the block-weighted share of blocks that are a prefix hit
 * on an infinite cache shared only by requests of the same owner, against
 * one cache for everything; the Gini of requests per owner):
 *
 *   conversation (12,031 requests, 24.0 blocks each, 3,537 s; block 0 is
 *   in every request, the shared system prompt; reuse 0.366 overall)
 *     key        sessions  req/session  max  Gini   reuse
 *     prefix:1          1     12031.00  all  0      0.366
 *     prefix:2      7,373         1.63   43  0.315  0.341
 *     prefix:3      7,900         1.52   43  0.290  0.337
 *     prefix:4      8,228         1.46   43  0.272  0.334
 *     prefix:6      8,650         1.39   43  0.247  (.331 at prefix:5)
 *     block:0           1     12031.00  all  0      0.366
 *     block:1      7,373         1.63   43  0.315  0.341 (= prefix:2)
 *     block:2      7,900         1.52   43  0.290  0.337
 *   synthetic (3,993 requests, 30.5 blocks each, 1,022 s; no block in
 *   every request; reuse 0.640 overall)
 *     prefix:1      2,211         1.81   24  0.396  0.640
 *     prefix:2      2,224         1.80   24  0.395  0.639
 *     prefix:4      2,226         1.79   24  0.394  0.639
 *     prefix:6      2,327         1.72   24  0.373  0.635 (at prefix:5)
 *     block:0       2,211         1.81   24  0.396  0.640 (= prefix:1)
 *     block:1       2,224         1.80   24  0.395  0.639 (= prefix:2)
 *
 * So the default is prefix:2 (CR_REPLAY_OWNER_KEY_DEFAULT): on the
 * conversation trace it is the coarsest key that does not lump everything
 * into one session, and it keeps all of the reuse but block 0's first
 * fetch per conversation (0.025: a multi-turn conversation repeats its
 * earlier turns as a prefix, so its turns share block 1); longer keys only
 * split conversations whose turns diverge after block 1, losing reuse. On
 * the synthetic trace it is prefix:1 but for 13 owners. block:1 is the
 * same partition on both. Both traces are far from the paper's skewed
 * regime (Gini about 0.76): the hottest owner has 43 requests in an hour,
 * so no session needs more than one shard unless the load is scaled up by
 * orders of magnitude; the generator covers that regime.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TWO_53 9007199254740992.0 /* numbers from here on are not all exact */
#define TWO_32 4294967296.0

cr_status cr_replay_line_fail(const cr_replay_line *at, cr_error *err, const char *fmt, ...)
{
    char why[CR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return cr_fail(err, CR_EINVAL, "%s:%zu: %s", at->name, at->line, why);
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "a number";
    }
}

/* v (named what) as a number in [lo, hi), integral when integer. Numbers
 * are decoded as doubles (JSON_DECODE_INT_AS_REAL), so an integer too large
 * for int64 is a range error naming its key rather than a parse error, and
 * every integer below 2^53 is exact. */
static cr_status number(const json_t *v, const char *what, double lo, double hi, int integer,
                        const cr_replay_line *at, double *out, cr_error *err)
{
    const char *kind = integer ? "an integer" : "a number";
    if (!json_is_number(v))
        return cr_replay_line_fail(at, err, "%s must be %s, got %s", what, kind, type_name(v));
    double x = json_number_value(v);
    if (!(x >= lo && x < hi) || (integer && x != (double)(int64_t)x))
        return cr_replay_line_fail(at, err, "%s must be %s in [%.0f, %s), got %.17g", what, kind,
                                   lo, hi == TWO_53 ? "2^53" : "2^32", x);
    *out = x;
    return CR_OK;
}

static cr_status field(const json_t *obj, const char *key, double lo, double hi, int integer,
                       const cr_replay_line *at, double *out, cr_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return cr_replay_line_fail(at, err, "missing key %s", key);
    return number(v, key, lo, hi, integer, at, out, err);
}

/* hash_ids into the builder's spare room; *n of them. */
static cr_status hash_ids(cr_replay_builder *b, const json_t *obj, const cr_replay_line *at,
                          uint32_t *n, cr_error *err)
{
    const json_t *ids = json_object_get(obj, "hash_ids");
    if (!ids)
        return cr_replay_line_fail(at, err, "missing key hash_ids");
    if (!json_is_array(ids))
        return cr_replay_line_fail(at, err, "hash_ids must be an array, got %s", type_name(ids));
    size_t len = json_array_size(ids); /* < CR_REPLAY_LINE_MAX / 2: fits uint32 */
    if (len == 0)
        return cr_replay_line_fail(at, err, "hash_ids must not be empty");
    if (cr_replay_builder_reserve(b, len) != 0)
        return cr_fail(err, CR_ENOMEM, "%s:%zu: out of memory", at->name, at->line);
    for (size_t i = 0; i < len; i++) {
        char what[32];
        snprintf(what, sizeof what, "hash_ids[%zu]", i);
        double x = 0; /* set by number() on success; gcc -O3 cannot see it */
        if (number(json_array_get(ids, i), what, 0, TWO_53, 1, at, &x, err) != CR_OK)
            return CR_EINVAL;
        b->t.blocks[b->t.n_blocks + i] = (uint64_t)x;
    }
    *n = (uint32_t)len;
    return CR_OK;
}

static cr_status request(cr_replay_builder *b, const json_t *obj, const cr_owner_key *key,
                         const cr_replay_line *at, cr_error *err)
{
    double t, in, out;
    uint32_t n = 0;
    cr_status st;
    if ((st = field(obj, "timestamp", 0, TWO_53, 0, at, &t, err)) != CR_OK ||
        (st = field(obj, "input_length", 1, TWO_32, 1, at, &in, err)) != CR_OK ||
        (st = field(obj, "output_length", 0, TWO_32, 1, at, &out, err)) != CR_OK ||
        (st = hash_ids(b, obj, at, &n, err)) != CR_OK)
        return st;
    cr_replay_request r = {.t_ms = t, .input_tokens = (uint32_t)in, .output_tokens = (uint32_t)out};
    r.owner = cr_replay_owner_of(key, b->t.blocks + b->t.n_blocks, n);
    if (cr_replay_builder_add(b, &r, NULL, n) != 0)
        return cr_fail(err, CR_ENOMEM, "%s:%zu: out of memory", at->name, at->line);
    return CR_OK;
}

static int blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

static cr_status line(cr_replay_builder *b, const cr_owner_key *key, const cr_replay_line *at,
                      const char *text, size_t len, cr_error *err)
{
    if (len > CR_REPLAY_LINE_MAX)
        return cr_replay_line_fail(at, err, "line longer than %u bytes", CR_REPLAY_LINE_MAX);
    if (blank(text, len))
        return CR_OK;
    const char *nul = memchr(text, '\0', len);
    if (nul) /* jansson would stop reading there */
        return cr_replay_line_fail(at, err, "bad JSON at column %zu: a NUL byte",
                                   (size_t)(nul - text) + 1);
    json_error_t jerr;
    json_t *obj = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
    if (!obj)
        return cr_replay_line_fail(at, err, "bad JSON at column %d: %s", jerr.column, jerr.text);
    cr_status st = json_is_object(obj)
                       ? request(b, obj, key, at, err)
                       : cr_replay_line_fail(at, err, "must be a JSON object, got %s",
                                             type_name(obj));
    json_decref(obj);
    return st;
}

/* Hands the trace over, or frees it: on error, or when it is empty. */
static cr_status finish(cr_replay_builder *b, cr_status st, const char *name,
                        cr_replay_trace *out, cr_error *err)
{
    if (st == CR_OK && b->t.n == 0)
        st = cr_fail(err, CR_EINVAL, "%s: no requests", name);
    if (st != CR_OK) {
        cr_replay_trace_free(&b->t);
        return st;
    }
    cr_replay_builder_finish(b, out);
    return CR_OK;
}

cr_status cr_replay_trace_parse(const char *name, const char *text, size_t len,
                                const cr_owner_key *key, cr_replay_trace *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    cr_replay_builder b = {0};
    cr_replay_line at = {name, 0};
    cr_status st = CR_OK;
    for (size_t i = 0; i < len && st == CR_OK;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) + 1 : len;
        at.line++;
        st = line(&b, key, &at, text + i, end - i, err);
        i = end;
    }
    return finish(&b, st, name, out, err);
}

cr_status cr_replay_trace_load(const char *path, const cr_owner_key *key, cr_replay_trace *out,
                               cr_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return cr_fail(err, CR_EINVAL, "%s: cannot open: %s", path, strerror(errno));
    cr_replay_builder b = {0};
    cr_replay_line at = {path, 0};
    cr_status st = CR_OK;
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    while (st == CR_OK && (len = getline(&text, &cap, f)) >= 0) {
        at.line++;
        st = line(&b, key, &at, text, (size_t)len, err);
    }
    if (st == CR_OK && !feof(f)) /* getline failed: out of memory, or a read error */
        st = cr_fail(err, errno == ENOMEM ? CR_ENOMEM : CR_EINVAL, "%s:%zu: cannot read: %s",
                     path, at.line + 1, strerror(errno));
    free(text);
    fclose(f);
    return finish(&b, st, path, out, err);
}

void cr_replay_trace_free(cr_replay_trace *t)
{
    free(t->reqs);
    free(t->blocks);
    memset(t, 0, sizeof *t);
}

/* ---- owners ------------------------------------------------------------------ */

cr_status cr_owner_key_parse(const char *text, cr_owner_key *out, cr_error *err)
{
    const char *colon = strchr(text, ':');
    int64_t n;
    if (colon && colon[1] >= '0' && colon[1] <= '9' && cr_parse_i64(colon + 1, &n) == 0 &&
        n <= UINT32_MAX) {
        size_t len = (size_t)(colon - text);
        if (len == 6 && !strncmp(text, "prefix", len) && n >= 1) {
            *out = (cr_owner_key){CR_OWNER_PREFIX, (uint32_t)n};
            return CR_OK;
        }
        if (len == 5 && !strncmp(text, "block", len)) {
            *out = (cr_owner_key){CR_OWNER_BLOCK, (uint32_t)n};
            return CR_OK;
        }
    }
    return cr_fail(err, CR_EINVAL,
                   "owner key must be prefix:N (N >= 1) or block:N (N >= 0), got \"%.64s\"", text);
}

int64_t cr_replay_owner_of(const cr_owner_key *key, const uint64_t *ids, uint32_t n)
{
    if (n == 0)
        return 0;
    if (key->kind == CR_OWNER_BLOCK)
        return (int64_t)ids[key->n < n ? key->n : n - 1]; /* ids are below 2^53 or generated */
    uint64_t h = 0;
    for (uint32_t i = 0; i < n && i < key->n; i++)
        h = cr_mix64(h ^ ids[i]);
    return (int64_t)(h >> 1);
}

static int cmp_i64(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static int cmp_size(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    return (a > b) - (a < b);
}

double cr_replay_gini_of(size_t *counts, size_t n)
{
    qsort(counts, n, sizeof *counts, cmp_size);
    double num = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        num += (2.0 * (double)(i + 1) - (double)n - 1.0) * (double)counts[i];
        sum += (double)counts[i];
    }
    return sum > 0 ? num / ((double)n * sum) : 0.0;
}

size_t *cr_replay_owner_counts(const cr_replay_trace *t, size_t *n)
{
    int64_t *owners = malloc((t->n ? t->n : 1) * sizeof *owners);
    size_t *counts = malloc((t->n ? t->n : 1) * sizeof *counts);
    if (owners && counts) {
        for (size_t i = 0; i < t->n; i++)
            owners[i] = t->reqs[i].owner;
        qsort(owners, t->n, sizeof *owners, cmp_i64);
        size_t k = 0;
        for (size_t i = 0; i < t->n; i++)
            if (i == 0 || owners[i] != owners[i - 1])
                counts[k++] = 1;
            else
                counts[k - 1]++;
        *n = k;
    } else {
        free(counts);
        counts = NULL;
    }
    free(owners);
    return counts;
}

double cr_replay_owner_gini(const cr_replay_trace *t)
{
    size_t n;
    size_t *counts = cr_replay_owner_counts(t, &n);
    double g = counts ? cr_replay_gini_of(counts, n) : NAN;
    free(counts);
    return g;
}
