/* A prompt as the router's block keys (private to epp/): the chained hash
 * Route's callers compute (route.h, cr_route_block_hash), so a picker's
 * route and a Route call for the same tokens land on the same keys. */
#ifndef CR_EPP_KEYS_H
#define CR_EPP_KEYS_H

#include <stddef.h>
#include <stdint.h>

/* The estimate mode (--epp-tokens estimate, as llm-d's default estimate):
 * text's bytes packed into 32-bit pseudo-tokens, 4 bytes each (little
 * endian; a last partial one padded with zero bytes), *prompt_tokens of
 * them; then the keys of the full blocks of block_tokens pseudo-tokens
 * each, chained, into keys[0..max) (a prompt longer than max blocks keeps
 * its first max). Returns the keys written. Pure; reads text once. */
size_t cr_epp_keys_estimate(const uint8_t *text, size_t len, uint32_t block_tokens,
                            uint64_t *keys, size_t max, uint32_t *prompt_tokens);

/* The same from real token ids (an engine's /tokenize, or a prompt given
 * as ids): the keys of the full blocks of tokens[0..n). Pure. */
size_t cr_epp_keys_tokens(const uint32_t *tokens, size_t n, uint32_t block_tokens,
                          uint64_t *keys, size_t max);

#endif
