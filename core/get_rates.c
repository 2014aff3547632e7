/* GetRates: the estimator's rates now, of the listed owners or of every
 * tracked one. */
#include <stdlib.h>

#include "internal.h"

static cr_session_rate *listed_rates(cr_core *c, const int64_t *owners, size_t n, double now)
{
    cr_session_rate *r = malloc(n * sizeof *r);
    double rates[CR_CORE_BATCH];
    for (size_t at = 0; r && at < n; at += CR_CORE_BATCH) {
        size_t m = n - at < CR_CORE_BATCH ? n - at : CR_CORE_BATCH;
        cr_estimator_rate_batch(c->estimator, owners + at, m, now, rates);
        for (size_t i = 0; i < m; i++)
            r[at + i] = (cr_session_rate){owners[at + i], rates[i]};
    }
    return r;
}

cr_status cr_core_rates(cr_core *c, const int64_t *owners, size_t n, cr_session_rate **out,
                        size_t *n_out, uint64_t *tracked, cr_error *err)
{
    double now = core_now(c);
    size_t listed = n;
    *out = n ? listed_rates(c, owners, n, now) : cr_estimator_rates(c->estimator, now, &n);
    if (!*out)
        return listed ? cr_fail(err, CR_ENOMEM, "out of memory for %zu rates", listed)
                      : cr_fail(err, CR_ENOMEM, "out of memory taking the snapshot");
    *n_out = n;
    *tracked = cr_estimator_size(c->estimator);
    return CR_OK;
}
