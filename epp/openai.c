/* The OpenAI request body reader (openai.h) over cJSON, the fastest of
 * Debian's three well-kept C JSON libraries on chat bodies (bench/README.md,
 * "EPP: JSON library"). cJSON checks neither UTF-8 nor depth (it recurses
 * up to 1,000 levels), so one pass over the bytes checks both first
 * (cr_openai_check): the parser never recurses deeper than
 * CR_OPENAI_MAX_DEPTH. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai.h"

/* ---- the pass before the parser ------------------------------------------ */

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Nonzero when a byte of w is c: the high bit of each such byte is set
 * (and maybe of bytes above one, never below the lowest). */
static inline uint64_t has_byte(uint64_t w, uint8_t c)
{
    uint64_t x = w ^ (ONES * c);
    return (x - ONES) & ~x & HIGHS;
}

/* Checks body[0..len) is UTF-8 with brackets (outside strings) at most
 * CR_OPENAI_MAX_DEPTH deep. With one_value, stops after the first bracket
 * that closes to depth 0 and sets *used to the bytes up to it (0 when
 * none closed). Runs of ASCII string text go eight bytes at a time, to
 * the next byte that matters. */
static cr_status scan(const uint8_t *body, size_t len, int one_value, size_t *used,
                      cr_error *err)
{
    const uint8_t *p = body, *end = body + len;
    size_t depth = 0;
    int in_str = 0;
    if (used)
        *used = 0;
    while (p < end) {
        if (in_str)
            for (uint64_t w, special; end - p >= 8; p += 8) {
                memcpy(&w, p, 8);
                special = (w & HIGHS) | has_byte(w, '"') | has_byte(w, '\\');
                if (special) { /* to the first: has_byte errs only above a true one */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                    p += (size_t)__builtin_ctzll(special) / 8;
#endif
                    break;
                }
            }
        if (p == end)
            break;
        uint8_t c = *p;
        if (c >= 0x80) {
            size_t k = cr_utf8_sequence(p, (size_t)(end - p));
            if (!k)
                return cr_fail(err, CR_EINVAL, "body is not UTF-8 at byte %zu",
                               (size_t)(p - body));
            p += k;
            continue;
        }
        p++;
        if (in_str) {
            if (c == '\\' && p < end && *p < 0x80)
                p++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > CR_OPENAI_MAX_DEPTH)
                return cr_fail(err, CR_EINVAL, "body nests deeper than %d", CR_OPENAI_MAX_DEPTH);
        } else if ((c == ']' || c == '}') && depth && --depth == 0 && one_value) {
            *used = (size_t)(p - body);
            return CR_OK;
        }
    }
    return CR_OK;
}

cr_status cr_openai_check(const uint8_t *body, size_t len, cr_error *err)
{
    return scan(body, len, 0, NULL, err);
}

/* ---- the request's kind ------------------------------------------------ */

static int is(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

cr_openai_kind cr_openai_kind_of(const char *method, size_t method_len, const char *path,
                                 size_t path_len)
{
    const char *q = memchr(path, '?', path_len);
    if (q)
        path_len = (size_t)(q - path);
    if (!is(method, method_len, "POST"))
        return CR_OPENAI_OTHER;
    if (is(path, path_len, "/v1/chat/completions"))
        return CR_OPENAI_CHAT;
    if (is(path, path_len, "/v1/completions"))
        return CR_OPENAI_COMPLETION;
    return CR_OPENAI_OTHER;
}

/* ---- reading the body ---------------------------------------------------- */

/* What a value is, for errors: "got number". */
static const char *kind_name(const cJSON *v)
{
    if (!v)
        return "nothing";
    if (cJSON_IsString(v))
        return "string";
    if (cJSON_IsNumber(v))
        return "number";
    if (cJSON_IsBool(v))
        return "boolean";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsArray(v))
        return "array";
    return "object";
}

/* What a value got, for errors: a number's value, else its kind. */
static const char *got(const cJSON *v, char buf[32])
{
    if (!cJSON_IsNumber(v))
        return kind_name(v);
    snprintf(buf, 32, "%.15g", v->valuedouble);
    return buf;
}

/* The strings' room: each copy is an unescaped string of the body, no
 * longer than its source, so len + 4 bytes hold them all. */
typedef struct room {
    char *at;
} room;

static char *keep(room *r, const char *s, size_t n)
{
    char *out = r->at;
    memcpy(out, s, n);
    out[n] = 0;
    r->at += n + 1;
    return out;
}

/* An optional string field: "" when absent or null. */
static cr_status opt_string(const cJSON *root, const char *name, room *rm, char **out,
                            size_t *out_len, cr_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
        return cr_fail(err, CR_EINVAL, "%s must be a string, got %s", name, kind_name(v));
    const char *s = cJSON_IsString(v) ? v->valuestring : "";
    *out_len = strlen(s);
    *out = keep(rm, s, *out_len);
    return CR_OK;
}

/* A non-negative integer at most max (an exact double), or absent/null. */
static cr_status opt_count(const cJSON *root, const char *name, double max, int64_t *out,
                           cr_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    char buf[32];
    *out = -1;
    if (!v || cJSON_IsNull(v))
        return CR_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(d >= 0 && d <= max && d == floor(d)))
        return cr_fail(err, CR_EINVAL, "%s must be a non-negative integer, got %s", name,
                       got(v, buf));
    *out = (int64_t)d;
    return CR_OK;
}

static void append(cr_openai_request *r, const char *s)
{
    size_t n = strlen(s);
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
}

/* One message's content: a string, null, or parts whose "text" parts
 * count (images and audio carry no prompt bytes here). */
static cr_status chat_content(cr_openai_request *r, const cJSON *c, int i, cr_error *err)
{
    if (cJSON_IsString(c)) {
        append(r, c->valuestring);
        return CR_OK;
    }
    if (!c || cJSON_IsNull(c))
        return CR_OK;
    if (!cJSON_IsArray(c))
        return cr_fail(err, CR_EINVAL,
                       "messages[%d].content must be a string or an array of parts, got %s", i,
                       kind_name(c));
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsObject(part))
            return cr_fail(err, CR_EINVAL, "messages[%d].content[%d] must be an object, got %s",
                           i, j, kind_name(part));
        if (!cJSON_IsString(type))
            return cr_fail(err, CR_EINVAL, "messages[%d].content[%d].type must be a string, got %s",
                           i, j, kind_name(type));
        if (strcmp(type->valuestring, "text") == 0) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsString(text))
                return cr_fail(err, CR_EINVAL, "messages[%d].content[%d].text must be a string, got %s",
                               i, j, kind_name(text));
            append(r, text->valuestring);
        }
        j++;
    }
    return CR_OK;
}

static cr_status read_chat(cr_openai_request *r, const cJSON *root, cr_error *err)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    int n = cJSON_GetArraySize(msgs);
    if (!cJSON_IsArray(msgs) || n == 0)
        return cr_fail(err, CR_EINVAL, "messages must be a non-empty array, got %s",
                       cJSON_IsArray(msgs) ? "an empty one" : kind_name(msgs));
    if (n > CR_OPENAI_MAX_MESSAGES)
        return cr_fail(err, CR_EINVAL, "messages has %d entries, at most %d", n,
                       CR_OPENAI_MAX_MESSAGES);
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        if (!cJSON_IsObject(m))
            return cr_fail(err, CR_EINVAL, "messages[%d] must be an object, got %s", i,
                           kind_name(m));
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role))
            return cr_fail(err, CR_EINVAL, "messages[%d].role must be a string, got %s", i,
                           kind_name(role));
        append(r, role->valuestring);
        cr_status st = chat_content(r, cJSON_GetObjectItemCaseSensitive(m, "content"), i, err);
        if (st != CR_OK)
            return st;
        i++;
    }
    return CR_OK;
}

/* A list of token ids; kept in r when keep_ids (the first list). */
static cr_status token_ids(cr_openai_request *r, const cJSON *list, const char *where,
                           int keep_ids, cr_error *err)
{
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (keep_ids && n) {
        r->tokens = malloc(n * sizeof *r->tokens);
        if (!r->tokens)
            return cr_fail(err, CR_ENOMEM, "out of memory for %zu token ids", n);
    }
    size_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, list)
    {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        char buf[32];
        if (!(d >= 0 && d <= 4294967295.0 && d == floor(d)))
            return cr_fail(err, CR_EINVAL, "%s[%zu] must be a token id in 0..4294967295, got %s",
                           where, i, got(v, buf));
        if (keep_ids)
            r->tokens[i] = (uint32_t)d;
        i++;
    }
    if (keep_ids)
        r->n_tokens = n;
    return CR_OK;
}

static cr_status read_prompt(cr_openai_request *r, const cJSON *root, cr_error *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsString(p)) {
        append(r, p->valuestring);
        return CR_OK;
    }
    int n = cJSON_GetArraySize(p);
    if (!cJSON_IsArray(p) || n == 0)
        return cr_fail(err, CR_EINVAL,
                       "prompt must be a string, a list of strings or token ids, got %s",
                       cJSON_IsArray(p) ? "an empty list" : kind_name(p));
    const cJSON *first = p->child;
    if (cJSON_IsNumber(first)) /* token ids: bounded by the body, not by entries */
        return token_ids(r, p, "prompt", 1, err);
    if (n > CR_OPENAI_MAX_MESSAGES)
        return cr_fail(err, CR_EINVAL, "prompt has %d entries, at most %d", n,
                       CR_OPENAI_MAX_MESSAGES);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, p)
    {
        char where[32];
        snprintf(where, sizeof where, "prompt[%d]", i);
        if (cJSON_IsString(first) && cJSON_IsString(v)) {
            append(r, v->valuestring);
        } else if (cJSON_IsArray(first) && cJSON_IsArray(v)) {
            cr_status st = token_ids(r, v, where, i == 0, err);
            if (st != CR_OK)
                return st;
        } else {
            return cr_fail(err, CR_EINVAL, "%s must be %s, got %s", where,
                           cJSON_IsArray(first) ? "a list of token ids"
                           : cJSON_IsString(first) ? "a string"
                                                   : "a string, a list of strings or token ids",
                           kind_name(v));
        }
        i++;
    }
    return CR_OK;
}

/* "line 1 column 7" of body[at]. */
static void where_in(const uint8_t *body, size_t at, char *buf, size_t size)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
        if (body[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    snprintf(buf, size, "line %zu column %zu", line, col);
}

/* The parsed root of body, or NULL with err; whitespace only after it. */
static cJSON *parse(const uint8_t *body, size_t len, cr_error *err)
{
    if (!len) {
        cr_fail(err, CR_EINVAL, "body is not JSON: it is empty");
        return NULL;
    }
    if (cr_openai_check(body, len, err) != CR_OK)
        return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)body, len, &end, 0);
    size_t at = end ? (size_t)((const uint8_t *)end - body) : len;
    if (root)
        while (at < len && strchr(" \t\r\n", body[at]) && body[at])
            at++;
    if (!root || at < len) {
        char pos[64];
        const char *what = root ? "more after the value" : "a syntax error";
        where_in(body, at < len ? at : len, pos, sizeof pos);
        cJSON_Delete(root);
        cr_fail(err, CR_EINVAL, "body is not JSON: %s at %s", what, pos);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cr_fail(err, CR_EINVAL, "body must be a JSON object, got %s", kind_name(root));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static cr_status read_fields(cr_openai_request *r, const cJSON *root, room *rm, cr_error *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(model) || !model->valuestring[0])
        return cr_fail(err, CR_EINVAL, "model must be a non-empty string, got %s",
                       cJSON_IsString(model) ? "an empty one" : kind_name(model));
    r->model_len = strlen(model->valuestring);
    r->model = keep(rm, model->valuestring, r->model_len);
    cr_status st = opt_string(root, "user", rm, &r->user, &r->user_len, err);
    if (st == CR_OK)
        st = opt_string(root, "cache_salt", rm, &r->cache_salt, &r->cache_salt_len, err);
    if (st != CR_OK)
        return st;
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsNull(stream) && !cJSON_IsBool(stream))
        return cr_fail(err, CR_EINVAL, "stream must be true or false, got %s", kind_name(stream));
    r->stream = cJSON_IsTrue(stream);
    int64_t mct, mt;
    const double max = 9007199254740992.0; /* 2^53: every integer below is exact */
    if ((st = opt_count(root, "max_completion_tokens", max, &mct, err)) != CR_OK ||
        (st = opt_count(root, "max_tokens", max, &mt, err)) != CR_OK)
        return st;
    r->max_tokens = mct >= 0 ? mct : mt;
    r->text = (uint8_t *)rm->at;
    return r->kind == CR_OPENAI_CHAT ? read_chat(r, root, err) : read_prompt(r, root, err);
}

cr_status cr_openai_parse(cr_openai_kind kind, const uint8_t *body, size_t len,
                          cr_openai_request *out, cr_error *err)
{
    memset(out, 0, sizeof *out);
    if (kind != CR_OPENAI_CHAT && kind != CR_OPENAI_COMPLETION)
        return cr_fail(err, CR_EINVAL, "only chat and completion bodies are read, got kind %d",
                       (int)kind);
    cJSON *root = parse(body, len, err);
    if (!root)
        return CR_EINVAL;
    /* model, user, cache_salt and text in one block: model first (what
     * cr_openai_request_free frees). */
    char *block = malloc(len + 4);
    if (!block) {
        cJSON_Delete(root);
        return cr_fail(err, CR_ENOMEM, "out of memory for a %zu-byte body", len);
    }
    room rm = {block};
    out->kind = kind;
    cr_status st = read_fields(out, root, &rm, err);
    cJSON_Delete(root);
    if (st != CR_OK) {
        free(block);
        out->model = NULL;
        cr_openai_request_free(out);
        return st;
    }
    out->text[out->text_len] = 0;
    return CR_OK;
}

void cr_openai_request_free(cr_openai_request *r)
{
    free(r->model);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

/* ---- usage --------------------------------------------------------------- */

/* A count field of o in 0..UINT32_MAX, else 0. */
static uint32_t count_of(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
    return d >= 0 && d <= 4294967295.0 ? (uint32_t)d : 0;
}

/* Usage from the object at tail[at..len), if it is one with prompt_tokens. */
static int usage_at(const uint8_t *tail, size_t len, size_t at, uint32_t *prompt, uint32_t *cached)
{
    while (at < len && strchr(" \t\r\n:", tail[at]) && tail[at])
        at++;
    size_t used;
    cr_error err;
    if (at >= len || tail[at] != '{' || scan(tail + at, len - at, 1, &used, &err) != CR_OK ||
        !used)
        return 0; /* null, or cut off, or not what an engine writes */
    cJSON *u = cJSON_ParseWithLength((const char *)tail + at, used);
    int ok = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens"));
    if (ok) {
        *prompt = count_of(u, "prompt_tokens");
        *cached = count_of(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details"),
                           "cached_tokens");
    }
    cJSON_Delete(u);
    return ok;
}

/* The last "usage" key in tail: in a JSON body it is the body's (engines
 * write it after the choices), in an SSE stream the last event's that
 * carries one (earlier events may carry "usage": null, and "data: [DONE]"
 * has none). Found as text, so a tail cut anywhere still reads. */
int cr_openai_usage(const uint8_t *tail, size_t len, uint32_t *prompt, uint32_t *cached)
{
    static const char key[] = "\"usage\"";
    const size_t k = sizeof key - 1;
    for (size_t i = len >= k ? len - k + 1 : 0; i-- > 0;)
        if (memcmp(tail + i, key, k) == 0 && (i == 0 || tail[i - 1] != '\\') &&
            usage_at(tail, len, i + k, prompt, cached))
            return 1;
    return 0;
}
