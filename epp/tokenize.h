/* The engine mode's tokenizer (private to epp/): an endpoint's /tokenize
 * (vLLM's API: POST {"model", "prompt"} or, for chat, {"model",
 * "messages"}, which applies the model's chat template; answers {"tokens":
 * [...]}) over libcurl, bounded by a timeout, with a cache of recent
 * prompts' token ids, so that the keys match what the engines' KV events
 * report. Any failure is the caller's cue to fall back to the estimate. */
#ifndef CR_EPP_TOKENIZE_H
#define CR_EPP_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "openai.h"

#define CR_TOKENIZE_CACHE_ENTRIES 4096        /* prompts remembered */
#define CR_TOKENIZE_CACHE_BYTES (64u << 20)   /* their token ids, in all */
#define CR_TOKENIZE_MAX_REPLY_BYTES (32u << 20) /* a /tokenize answer, at most */

typedef struct cr_tokenizer cr_tokenizer;

/* NULL when out of memory or libcurl cannot start. */
cr_tokenizer *cr_tokenizer_new(double timeout_s);
void cr_tokenizer_free(cr_tokenizer *t);

/* The token ids of r's prompt (body: the request's own bytes, whose
 * "messages" or "prompt" the call forwards) from http://ADDRESS/tokenize,
 * or from the cache (keyed by model and prompt bytes). CR_OK with *ids
 * (malloc'd; the caller frees) and *n; CR_EINVAL with err saying why (a
 * timeout, a status, a reply that is no token list). Blocks for at most
 * the timeout. Thread-safe. */
cr_status cr_tokenize(cr_tokenizer *t, const char *address, const cr_openai_request *r,
                      const uint8_t *body, size_t len, uint32_t **ids, size_t *n,
                      cr_error *err);

/* Calls answered from the cache, and calls that failed. Thread-safe. */
void cr_tokenizer_counts(cr_tokenizer *t, uint64_t *hits, uint64_t *failures);

#endif
