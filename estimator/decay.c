/* Forward decay (Cormode, Shkapenyuk, Srivastava, Xu 2009) on the seconds
 * clock: an owner's count N is kept relative to its partition's epoch, an
 * arrival at t adding add 2^((t - epoch)/H), so its rate at t is
 * N 2^(-(t - epoch)/H). The factor is one per partition and time, not per
 * owner: a batch computes it once per partition it visits, and a slot
 * needs no time of its own. An arrival before the epoch (threads read the
 * clock in some order) weighs 2^(negative): exactly its own time. */
#include <float.h>
#include <math.h>

#include "internal.h"

/* (t - epoch)/H; 0 when undefined (H = infinity with an infinite span, or
 * a NaN time): nothing decays then. */
static double span(const cr_estimator *e, const cr_est_part *p, double t)
{
    double x = (t - p->epoch) * e->inv_hl;
    return isnan(x) ? 0 : x;
}

/* One exp2 for both factors: f = 1/g past the epoch, where x <= 512 keeps
 * g normal (reads may see x past 1074, where g underflows to 0: a rate
 * below any double). */
static cr_est_scale scale_of(double x)
{
    if (x > 0) {
        double g = exp2(-x);
        return (cr_est_scale){1 / g, g};
    }
    return (cr_est_scale){exp2(x), 1};
}

/* Every N of p (locked) onto the epoch now, x = span(now) > 0. An N that
 * underflows becomes DBL_MIN, not 0: 0 would read as an empty slot and cut
 * the probe chains running through it. NaN (an N that had overflowed to
 * infinity, times 0) is floored the same way by fmax. */
static void renormalise(cr_est_part *p, double now, double x)
{
    double g = exp2(-x);
    for (size_t i = 0; i < p->cap; i++)
        if (p->slots[i].r != 0)
            p->slots[i].r = fmax(p->slots[i].r * g, DBL_MIN);
    cr_est_set_epoch(p, now);
}

cr_est_scale cr_est_scale_for(cr_estimator *e, cr_est_part *p, double now)
{
    if (e->cfg.clock == CR_CLOCK_CALLS)
        return (cr_est_scale){1, 1};
    if (now == p->at)
        return p->sc;
    double x = span(e, p, now);
    if (!isfinite(now)) /* no epoch from it; the caller's checks keep it out */
        return scale_of(x);
    if (!p->count) {
        cr_est_set_epoch(p, now); /* nothing is relative to the old one */
        return p->sc;
    }
    if (x > CR_EST_RENORM_AT) {
        renormalise(p, now, x); /* then the scale at now is 1 */
        return p->sc;
    }
    p->at = now;
    p->sc = scale_of(x);
    return p->sc;
}

double cr_est_read_g(const cr_estimator *e, const cr_est_part *p, double now)
{
    if (e->cfg.clock == CR_CLOCK_CALLS)
        return 1;
    return now == p->at ? p->sc.g : scale_of(span(e, p, now)).g;
}

double cr_est_forward(const cr_estimator *e, const cr_est_part *p, double count, double t_last)
{
    if (e->cfg.clock == CR_CLOCK_CALLS)
        return count;
    return fmax(count * scale_of(span(e, p, t_last)).f, DBL_MIN);
}
