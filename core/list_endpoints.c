/* ListEndpoints: the current set, a DOWN endpoint due for a retry made
 * ACTIVE first. */
#include <stdatomic.h>

#include "internal.h"

const cr_endpoints *cr_core_endpoints(cr_core *c)
{
    /* every RecordArrival and Route answer asks: without a set, no lock */
    if (!atomic_load_explicit(&c->member_slots, memory_order_acquire))
        return NULL;
    double now = core_now(c);
    if (now >= atomic_load_explicit(&c->next_retry, memory_order_relaxed))
        cr_members_retry(c, now);
    return cr_members_current(c);
}
