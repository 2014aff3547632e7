/* Forget: owners dropped from the estimator (an admin call). */
#include "internal.h"

uint32_t cr_core_forget(cr_core *c, const int64_t *owners, size_t n)
{
    uint32_t forgotten = 0;
    for (size_t i = 0; i < n; i++)
        forgotten += (uint32_t)cr_estimator_forget(c->estimator, owners[i]);
    return forgotten;
}
