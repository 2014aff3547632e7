/* The endpoints file (endpoints/file.c): the bytes as a file's text, YAML
 * or JSON. No crash or leak (ASan, LSan); a refusal says why with the
 * file's name and leaves nothing; what it takes passes the set's own check
 * (cr_endpoints_check), and a set made of it keeps every id on its own
 * slot, in order, active; the same set applied again joins and removes
 * nothing. */
#include <stdlib.h>
#include <string.h>

#include "endpoints.h"
#include "fuzz.h"

static void check_set(const cr_endpoint_spec *v, size_t n)
{
    cr_error err;
    CR_FUZZ_CHECK(n >= 1 && n <= CR_ENDPOINTS_MAX && cr_endpoints_check(v, n, &err) == CR_OK,
                  "%zu endpoints parsed that the check refuses: %s", n, err.msg);
    cr_endpoints *e, *again;
    cr_endpoints_change chg;
    CR_FUZZ_CHECK(cr_endpoints_apply(NULL, v, n, 0, &e, &chg, &err) == CR_OK,
                  "a parsed set refused: %s", err.msg);
    CR_FUZZ_CHECK(e->n_slots == n && chg.joined == n && e->n_state[CR_ENDPOINT_ACTIVE] == n,
                  "%zu endpoints: %u slots, %u joined", n, e->n_slots, chg.joined);
    for (size_t i = 0; i < n; i++)
        CR_FUZZ_CHECK(strcmp(e->slot[i].id, v[i].id) == 0 &&
                          strcmp(e->slot[i].address, v[i].address) == 0 &&
                          cr_endpoints_find(e, v[i].id) == i,
                      "endpoint %zu not on its slot", i);
    CR_FUZZ_CHECK(cr_endpoints_apply(e, v, n, 1, &again, &chg, &err) == CR_OK &&
                      chg.joined == 0 && chg.removed == 0 && again->n_slots == n,
                  "the same set again changed %u, %u", chg.joined, chg.removed);
    cr_endpoints_release(again);
    cr_endpoints_release(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_endpoint_spec *v;
    size_t n;
    cr_error err;
    err.msg[0] = '\0';
    cr_status st = cr_endpoints_parse((const char *)data, size, "f.yaml", &v, &n, &err);
    if (st != CR_OK) {
        CR_FUZZ_CHECK(st == CR_EINVAL && !v && !n && strncmp(err.msg, "f.yaml", 6) == 0,
                      "refused (%d) with '%s'", (int)st, err.msg);
        return 0;
    }
    check_set(v, n);
    free(v);
    return 0;
}
