/* The door's decision: pure, over the rule's ranked candidates
 * (docs/admission.md says why it is shaped so). */
#include <math.h>

#include "admit.h"

const char *cr_admit_verdict_name(cr_admit_verdict v)
{
    static const char *const names[] = {"route", "queued", "shed"};
    return (unsigned)v < sizeof names / sizeof names[0] ? names[v] : "unknown";
}

cr_admit_verdict cr_admit_decide(const cr_admit_ask *q, const cr_admit_candidate *c, size_t n,
                                 double budget_ms, double waited_ms, int can_wait,
                                 uint32_t *pick)
{
    *pick = 0;
    int sheddable = q->has_objective && q->priority < 0;
    int bounded = q->has_objective && q->slo_ms > 0;
    double bound = bounded ? q->slo_ms - waited_ms : INFINITY;
    double budget = sheddable && budget_ms > 0 ? budget_ms : INFINITY;
    if (n == 0 || (!bounded && budget == INFINITY)) /* nothing to choose from, or to meet */
        return CR_ADMIT_ROUTE;
    for (size_t i = 0; i < n; i++)
        if (c[i].ttft_ms <= bound && c[i].wait_ms <= budget) {
            *pick = (uint32_t)i;
            return CR_ADMIT_ROUTE;
        }
    if (!sheddable)
        return CR_ADMIT_ROUTE; /* critical: the rule's pick, never held or shed */
    return can_wait ? CR_ADMIT_HOLD : CR_ADMIT_SHED;
}
