/* The OpenAI request body reader (private to epp/): the few fields of a
 * /v1/chat/completions or /v1/completions body the picker routes by, read
 * with the JSON library docs/epp.md names (chosen by bench/epp_json.c). */
#ifndef CR_EPP_OPENAI_H
#define CR_EPP_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define CR_OPENAI_MAX_DEPTH 64      /* JSON nesting read, at most; deeper is refused */
/* messages[] / prompt[] entries, at most; a prompt of token ids is
 * bounded by the body alone (a long context has more than 65,536 ids) */
#define CR_OPENAI_MAX_MESSAGES 65536

typedef enum cr_openai_kind {
    CR_OPENAI_OTHER,      /* any other path or method: routed by load alone */
    CR_OPENAI_CHAT,       /* POST /v1/chat/completions */
    CR_OPENAI_COMPLETION  /* POST /v1/completions */
} cr_openai_kind;

/* The kind of a request by its :method and :path (a query string after
 * '?' ignored). Pure. */
cr_openai_kind cr_openai_kind_of(const char *method, size_t method_len, const char *path,
                                 size_t path_len);

/* What routing reads of a body. The strings are NUL-terminated copies in
 * memory the request owns (cr_openai_request_free); absent ones are ""
 * with length 0. */
typedef struct cr_openai_request {
    cr_openai_kind kind;
    char *model;       /* the namespace's first part: a LoRA adapter is named here */
    size_t model_len;
    char *user;        /* the body's "user": the owner when no header gives one */
    size_t user_len;
    char *cache_salt;  /* vLLM's "cache_salt": part of the namespace */
    size_t cache_salt_len;
    int stream;        /* "stream": true */
    int64_t max_tokens; /* "max_completion_tokens", else "max_tokens"; -1 absent */
    /* The prompt's bytes as the estimate mode packs them: for chat, each
     * message's role then its content, in order (content a string, or the
     * "text" of its parts of type "text"); for completions the prompt
     * string, or the strings of a list, in order. */
    uint8_t *text;
    size_t text_len;
    /* A completions prompt given as token ids (a list of integers, or the
     * first list of a list of lists): the tokens themselves; NULL else. */
    uint32_t *tokens;
    size_t n_tokens;
} cr_openai_request;

/* Reads body (len bytes, at most what --epp-max-body-bytes let in) of a
 * request of kind (CHAT or COMPLETION) into *out. CR_OK; CR_EINVAL with err
 * naming the field and what it got, out empty: "body is not JSON: ... at
 * line 1 column 7", "body must be a JSON object", "model must be a
 * non-empty string, got number", "messages must be a non-empty array",
 * "messages[2].content must be a string or an array of parts, got number",
 * "prompt must be a string, a list of strings or token ids",
 * "prompt[3] must be a token id in 0..4294967295, got -1", "body nests
 * deeper than 64", "body is not UTF-8" ...; CR_ENOMEM. Pure. */
cr_status cr_openai_parse(cr_openai_kind kind, const uint8_t *body, size_t len,
                          cr_openai_request *out, cr_error *err);
/* The pass cr_openai_parse makes before the JSON library sees a body:
 * well-formed UTF-8 (RFC 3629: no overlongs, no surrogates) and brackets
 * outside strings at most CR_OPENAI_MAX_DEPTH deep, without recursion, in
 * one pass. CR_OK, or CR_EINVAL with err ("body is not UTF-8 at byte 12",
 * "body nests deeper than 64"). Pure. */
cr_status cr_openai_check(const uint8_t *body, size_t len, cr_error *err);

/* Frees what r holds and empties it; an empty r is fine. */
void cr_openai_request_free(cr_openai_request *r);

/* The usage an engine reports at the end of a response: from a JSON body
 * (non-streamed) or the last SSE "data:" event that carries "usage"
 * (streamed, with stream_options.include_usage). tail is the last bytes of
 * the response body (at most CR_EPP_USAGE_TAIL_BYTES). 1 with *prompt and
 * *cached (0 when prompt_tokens_details is absent) set, 0 when none is
 * found. Pure. */
int cr_openai_usage(const uint8_t *tail, size_t len, uint32_t *prompt, uint32_t *cached);

#endif
