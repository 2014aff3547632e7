/* A prompt as the router's block keys (keys.h). The key of a block is
 * XXH3-64 of its token ids as little-endian uint32, seeded with the key
 * before (cr_route_block_hash); an estimate's pseudo-tokens are the text's
 * bytes themselves in that order, so its blocks hash straight from the
 * text, with no copy, and the same keys as cr_route_block_hash gives for
 * the packed tokens (tests/test_epp_openai.c checks both ways agree). */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "keys.h"
#include "route.h"

size_t cr_epp_keys_estimate(const uint8_t *text, size_t len, uint32_t block_tokens,
                            uint64_t *keys, size_t max, uint32_t *prompt_tokens)
{
    size_t tokens = len / 4 + (len % 4 != 0);
    *prompt_tokens = tokens > UINT32_MAX ? UINT32_MAX : (uint32_t)tokens;
    if (!block_tokens)
        return 0;
    size_t blocks = tokens / block_tokens, bytes = (size_t)block_tokens * 4;
    blocks = blocks < max ? blocks : max;
    uint64_t parent = 0;
    for (size_t b = 0; b < blocks; b++) {
        size_t at = b * bytes;
        if (at + bytes <= len) {
            parent = XXH3_64bits_withSeed(text + at, bytes, parent);
        } else { /* the last block ends in the zero-padded last pseudo-token */
            static const uint8_t zeros[3];
            XXH3_state_t st;
            XXH3_64bits_reset_withSeed(&st, parent);
            XXH3_64bits_update(&st, text + at, len - at);
            XXH3_64bits_update(&st, zeros, at + bytes - len);
            parent = XXH3_64bits_digest(&st);
        }
        keys[b] = parent;
    }
    return blocks;
}

size_t cr_epp_keys_tokens(const uint32_t *tokens, size_t n, uint32_t block_tokens,
                          uint64_t *keys, size_t max)
{
    if (!block_tokens)
        return 0;
    size_t blocks = n / block_tokens;
    blocks = blocks < max ? blocks : max;
    uint64_t parent = 0;
    for (size_t b = 0; b < blocks; b++)
        keys[b] = parent = cr_route_block_hash(parent, tokens + b * block_tokens, block_tokens);
    return blocks;
}
