/* --model-config: a Hugging Face config.json read (jansson) into the model
 * shape and the parameter counts the cost model needs. Keys are checked in
 * the order of cr_model_shape; the first bad one is the error. */
#include "internal.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CR_INJECT_MAX_COUNT == 1000000, "ill_typed's text says 1..1000000");

typedef struct reader {
    const char *path;
    json_t *root;
    cr_error *err;
} reader;

static cr_status missing(const reader *r, const char *key)
{
    return cr_fail(r->err, CR_EINVAL, "--model-config %s: %s is missing", r->path, key);
}

static cr_status ill_typed(const reader *r, const char *key, const char *want, const json_t *v)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    cr_status st = cr_fail(r->err, CR_EINVAL, "--model-config %s: %s must be %s, got %.40s",
                           r->path, key, want, text ? text : "?");
    free(text);
    return st;
}

/* The counts, in order; required ones must be there, optional ones stay 0
 * when absent or null. */
static const struct {
    const char *key;
    size_t offset;
    int required;
} COUNTS[] = {
    {"num_hidden_layers", offsetof(cr_model_shape, layers), 1},
    {"hidden_size", offsetof(cr_model_shape, hidden_size), 1},
    {"num_attention_heads", offsetof(cr_model_shape, heads), 1},
    {"num_key_value_heads", offsetof(cr_model_shape, kv_heads), 0},
    {"head_dim", offsetof(cr_model_shape, head_dim), 0},
    {"intermediate_size", offsetof(cr_model_shape, intermediate_size), 1},
    {"vocab_size", offsetof(cr_model_shape, vocab_size), 1},
    {"num_local_experts", offsetof(cr_model_shape, experts), 0},
    {"num_experts_per_tok", offsetof(cr_model_shape, experts_per_token), 0},
};

static cr_status read_counts(const reader *r, cr_model_shape *m)
{
    for (size_t i = 0; i < sizeof COUNTS / sizeof COUNTS[0]; i++) {
        const json_t *v = json_object_get(r->root, COUNTS[i].key);
        if (!v || (json_is_null(v) && !COUNTS[i].required)) {
            if (COUNTS[i].required)
                return missing(r, COUNTS[i].key);
            continue;
        }
        json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
        if (n < 1 || n > CR_INJECT_MAX_COUNT)
            return ill_typed(r, COUNTS[i].key, "an integer in 1..1000000", v);
        uint32_t u = (uint32_t)n;
        memcpy((char *)m + COUNTS[i].offset, &u, sizeof u);
    }
    return CR_OK;
}

/* torch_dtype, or dtype as newer transformers write it. */
static cr_status read_dtype(const reader *r, cr_model_shape *m)
{
    static const struct {
        const char *name;
        uint32_t bytes;
    } DTYPES[] = {{"bfloat16", 2}, {"float16", 2}, {"float32", 4}};
    const char *key = json_object_get(r->root, "torch_dtype") ? "torch_dtype" : "dtype";
    const json_t *v = json_object_get(r->root, key);
    if (!v)
        return missing(r, "torch_dtype");
    const char *s = json_string_value(v);
    for (size_t i = 0; s && i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
        if (strcmp(s, DTYPES[i].name) == 0) {
            m->dtype_bytes = DTYPES[i].bytes;
            return CR_OK;
        }
    }
    return ill_typed(r, key, "\"bfloat16\", \"float16\" or \"float32\"", v);
}

static cr_status read_tied(const reader *r, cr_model_shape *m)
{
    const json_t *v = json_object_get(r->root, "tie_word_embeddings");
    if (v && !json_is_boolean(v))
        return ill_typed(r, "tie_word_embeddings", "true or false", v);
    m->tied_embeddings = v && json_is_true(v);
    return CR_OK;
}

/* Other MoE layouts name their experts differently and size them with
 * other keys: refuse them rather than price them as dense. */
static cr_status refuse_other_moe(const reader *r)
{
    static const char *const KEYS[] = {"num_experts", "n_routed_experts"};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        if (json_object_get(r->root, KEYS[i]))
            return cr_fail(r->err, CR_EINVAL,
                           "--model-config %s: %s: only Mixtral's num_local_experts MoE layout "
                           "is read; give --model-params-b instead",
                           r->path, KEYS[i]);
    }
    return CR_OK;
}

/* The optional counts' defaults, and the rules across keys. */
static cr_status complete(const reader *r, cr_model_shape *m)
{
    if (!m->kv_heads)
        m->kv_heads = m->heads;
    if (m->kv_heads > m->heads)
        return cr_fail(r->err, CR_EINVAL,
                       "--model-config %s: num_key_value_heads must be at most "
                       "num_attention_heads %u, got %u",
                       r->path, m->heads, m->kv_heads);
    if (!m->head_dim && m->hidden_size % m->heads)
        return cr_fail(r->err, CR_EINVAL,
                       "--model-config %s: head_dim is missing and hidden_size %u is not a "
                       "multiple of num_attention_heads %u",
                       r->path, m->hidden_size, m->heads);
    if (!m->head_dim)
        m->head_dim = m->hidden_size / m->heads;
    if (m->experts && !m->experts_per_token)
        return missing(r, "num_experts_per_tok");
    if (!m->experts)
        m->experts = m->experts_per_token = 1; /* dense: num_experts_per_tok means nothing */
    if (m->experts_per_token > m->experts)
        return cr_fail(r->err, CR_EINVAL,
                       "--model-config %s: num_experts_per_tok must be at most "
                       "num_local_experts %u, got %u",
                       r->path, m->experts, m->experts_per_token);
    return CR_OK;
}

/* Weights without biases (Llama and Mixtral have none): attention q, k, v,
 * o; a gated MLP (gate, up, down) per expert; the router; two norms a
 * layer and a final one; the embedding, and the output head unless tied.
 * Active: what one token passes through, embeddings aside (inject.h). */
static void count(cr_model_shape *m)
{
    double h = m->hidden_size, q = (double)m->heads * m->head_dim;
    double kv = (double)m->kv_heads * m->head_dim;
    double attention = h * (2 * q + 2 * kv), expert = 3 * h * m->intermediate_size;
    double shared = attention + (m->experts > 1 ? h * m->experts : 0) + 2 * h;
    double embedding = (double)m->vocab_size * h;
    m->params_total = m->layers * (shared + m->experts * expert) + h +
                      embedding * (m->tied_embeddings ? 1 : 2);
    m->params_active = m->layers * (shared + m->experts_per_token * expert) + h;
    m->kv_bytes_per_token = 2.0 * m->layers * m->kv_heads * m->head_dim * m->dtype_bytes;
}

cr_status cr_inject_read_model_config(const char *path, cr_model_shape *out, cr_error *err)
{
    json_error_t je;
    char label[300], *text;
    size_t len;
    snprintf(label, sizeof label, "--model-config %s", path);
    if (cr_file_read(path, label, CR_MODEL_CONFIG_MAX_BYTES, &text, &len, err) != CR_OK)
        return CR_EINVAL; /* a regular file only: a FIFO would block the start */
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root && je.line > 0)
        return cr_fail(err, CR_EINVAL, "--model-config %s: not JSON: %s at line %d", path,
                       je.text, je.line);
    if (!root)
        return cr_fail(err, CR_EINVAL, "--model-config %s: %s", path, je.text);
    reader r = {path, root, err};
    cr_model_shape m;
    memset(&m, 0, sizeof m);
    cr_status st = json_is_object(root) ? CR_OK
                                        : cr_fail(err, CR_EINVAL,
                                                  "--model-config %s: not a JSON object", path);
    if (st == CR_OK && (read_counts(&r, &m) != CR_OK || read_dtype(&r, &m) != CR_OK ||
                        read_tied(&r, &m) != CR_OK || refuse_other_moe(&r) != CR_OK ||
                        complete(&r, &m) != CR_OK))
        st = CR_EINVAL;
    json_decref(root);
    if (st == CR_OK) {
        count(&m);
        *out = m;
    }
    return st;
}
