/* The engines' /metrics reader (scrape/parse.c): the bytes as one body.
 * No crash, leak or read past the body (ASan: the input is copied into a
 * buffer of exactly its size); a refusal says why, naming its line or the
 * missing families, and leaves the load unreported; a load read is within
 * route.h's contract: counts NaN or finite and not negative, the KV use
 * NaN or in [0, 1], at most CR_ENGINE_LORA_MAX adapters, each named,
 * shorter than CR_ENGINE_LORA_NAME_MAX and named once; and the same bytes
 * read twice give the same load (it is pure). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "scrape.h"

static void check_unreported(const cr_engine_load *l)
{
    CR_FUZZ_CHECK(isnan(l->waiting) && isnan(l->running) && isnan(l->kv_usage) &&
                      !l->block_size && !l->gpu_blocks && !l->max_lora && !l->n_lora &&
                      l->at_s == 0,
                  "a refused body left a load");
}

static void check_load(const cr_engine_load *l)
{
    CR_FUZZ_CHECK(isnan(l->waiting) || (isfinite(l->waiting) && l->waiting >= 0),
                  "waiting %g", l->waiting);
    CR_FUZZ_CHECK(isnan(l->running) || (isfinite(l->running) && l->running >= 0),
                  "running %g", l->running);
    CR_FUZZ_CHECK(isnan(l->kv_usage) || (l->kv_usage >= 0 && l->kv_usage <= 1), "kv_usage %g",
                  l->kv_usage);
    CR_FUZZ_CHECK(l->n_lora <= CR_ENGINE_LORA_MAX && l->at_s == 0, "%u adapters", l->n_lora);
    for (uint32_t i = 0; i < l->n_lora; i++) {
        size_t len = strnlen(l->lora[i], CR_ENGINE_LORA_NAME_MAX);
        CR_FUZZ_CHECK(len > 0 && len < CR_ENGINE_LORA_NAME_MAX, "adapter %u: %zu bytes", i, len);
        for (uint32_t j = 0; j < i; j++)
            CR_FUZZ_CHECK(strcmp(l->lora[i], l->lora[j]), "adapter %s twice", l->lora[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = malloc(size ? size : 1); /* exactly the body: ASan sees a read past it */
    CR_FUZZ_CHECK(body, "out of memory");
    memcpy(body, data, size);
    cr_engine_load a, b;
    cr_error err, err2;
    err.msg[0] = '\0';
    cr_status st = cr_scrape_parse(body, size, &a, &err);
    cr_status again = cr_scrape_parse(body, size, &b, &err2);
    free(body);
    CR_FUZZ_CHECK(st == again && !memcmp(&a, &b, sizeof a), "two reads of one body differ");
    if (st != CR_OK) {
        CR_FUZZ_CHECK(st == CR_EINVAL &&
                          (!strncmp(err.msg, "line ", 5) || !strncmp(err.msg, "no engine", 9) ||
                           strstr(err.msg, "add up past")),
                      "refused (%d) with '%s'", (int)st, err.msg);
        check_unreported(&a);
        return 0;
    }
    check_load(&a);
    return 0;
}
