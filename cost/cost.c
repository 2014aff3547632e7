/* The cost model's terms (cost.h). Each sum is written in the order the
 * callers always evaluated it, so that moving them here changed no bit. */
#include "cost.h"

double cr_prefill_ms(const cr_prefill_cost *k, double s, double l)
{
    s = s < l ? s : l;
    s = s > 0 ? s : 0;
    double ms = k->fixed_ms + k->ms_per_token * (l - s) + k->ms_per_token2 * (l * l - s * s);
    return ms > 0 ? ms : 0;
}

/* Gb/s carry bits: 8 per byte. */
double cr_transfer_ms(const cr_transfer_cost *k, double bytes)
{
    return k->rtt_ms + bytes * 8 / (k->gbps * 1e6);
}

double cr_load_ms(const cr_load_cost *k, double bytes)
{
    return bytes > 0 ? k->fixed_ms + bytes / (k->h2d_gbps * 1e6) : 0;
}
