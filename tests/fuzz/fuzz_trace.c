/* The replay's Mooncake trace parser: the bytes as a trace, through
 * cr_replay_trace_parse and, written to a file, cr_replay_trace_load, under
 * two owner keys; the two readers and the two keys must agree on whether
 * the trace is valid, and a valid one must be well formed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "replay.h"

static void check_trace(const cr_replay_trace *t)
{
    size_t blocks = 0;
    CR_FUZZ_CHECK(t->n >= 1, "a valid trace without requests");
    for (size_t i = 0; i < t->n; i++) {
        const cr_replay_request *r = &t->reqs[i];
        CR_FUZZ_CHECK(isfinite(r->t_ms) && r->t_ms >= 0 && (i == 0 || r->t_ms >= r[-1].t_ms),
                      "request %zu at %g ms, out of order", i, r->t_ms);
        CR_FUZZ_CHECK(r->input_tokens >= 1 && r->n_blocks >= 1 &&
                          r->first_block + r->n_blocks <= t->n_blocks,
                      "request %zu: %u tokens, blocks [%zu, +%u) of %zu", i, r->input_tokens,
                      r->first_block, r->n_blocks, t->n_blocks);
        CR_FUZZ_CHECK(r->owner >= 0, "request %zu: owner %lld", i, (long long)r->owner);
        blocks += r->n_blocks;
    }
    CR_FUZZ_CHECK(blocks == t->n_blocks, "requests hold %zu blocks of %zu", blocks, t->n_blocks);
}

/* Parses as name, checks, and returns the status and request count. */
static cr_status parse(const char *text, size_t size, const char *path, const cr_owner_key *key,
                       size_t *n)
{
    cr_replay_trace t;
    cr_error err;
    err.msg[0] = '\0';
    cr_status st = path ? cr_replay_trace_load(path, key, &t, &err)
                        : cr_replay_trace_parse("fuzz", text, size, key, &t, &err);
    const char *name = path ? path : "fuzz";
    *n = t.n;
    if (st == CR_OK)
        check_trace(&t);
    else
        CR_FUZZ_CHECK(t.n == 0 && t.reqs == NULL && !strncmp(err.msg, name, strlen(name)),
                      "failed %d keeping %zu requests, error '%s'", (int)st, t.n, err.msg);
    cr_replay_trace_free(&t);
    return st;
}

/* data in a file of its own; its path in path. */
static void write_file(const uint8_t *data, size_t size, char *path, size_t len)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/cacheroute-fuzz-trace-%ld", dir && *dir ? dir : "/tmp",
             (long)getpid());
    FILE *f = fopen(path, "wb");
    CR_FUZZ_CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s",
                  path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size ? size : 1);
    CR_FUZZ_CHECK(text, "out of memory");
    if (size)
        memcpy(text, data, size);
    char path[512];
    write_file(data, size, path, sizeof path);
    const cr_owner_key keys[2] = {{CR_OWNER_PREFIX, 2}, {CR_OWNER_BLOCK, 1}};
    size_t n0, n;
    cr_status st0 = parse(text, size, NULL, &keys[0], &n0);
    for (int k = 0; k < 2; k++)
        for (int from_file = k == 0; from_file < 2; from_file++) {
            cr_status st = parse(text, size, from_file ? path : NULL, &keys[k], &n);
            CR_FUZZ_CHECK(st == st0 && n == n0, "key %d, file %d: status %d with %zu requests, "
                          "not %d with %zu", k, from_file, (int)st, n, (int)st0, n0);
        }
    unlink(path);
    free(text);
    return 0;
}
