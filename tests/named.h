/* An endpoint set for the answer encoders' tests: 4 slots, the third
 * removed (a GONE slot keeps its name), ids and addresses from 1 byte to
 * the longest allowed, so every length prefix size is written. */
#ifndef CR_TEST_NAMED_H
#define CR_TEST_NAMED_H

#include <string.h>

#include "endpoints.h"

static inline cr_endpoints *cr_test_named_set(void)
{
    static char long_id[CR_ENDPOINT_ID_MAX + 1], long_address[CR_ENDPOINT_ADDRESS_MAX + 1];
    memset(long_id, 'i', CR_ENDPOINT_ID_MAX);
    memset(long_address, 'a', CR_ENDPOINT_ADDRESS_MAX);
    cr_endpoint_spec v[4] = {{.id = "a", .address = "b", .weight = 1},
                             {.id = long_id, .address = long_address, .weight = 2},
                             {.id = "vllm-2", .address = "10.0.0.2:8000", .weight = 0},
                             {.id = "vllm-3", .address = "http://10.0.0.3:8000/v1", .weight = 1}};
    cr_endpoints *first, *second;
    cr_endpoints_change chg;
    cr_error err;
    if (cr_endpoints_apply(NULL, v, 4, 0, &first, &chg, &err) != CR_OK)
        return NULL;
    v[2] = v[3]; /* vllm-2 leaves */
    cr_status st = cr_endpoints_apply(first, v, 3, 1, &second, &chg, &err);
    cr_endpoints_release(first);
    return st == CR_OK ? second : NULL;
}

#endif
