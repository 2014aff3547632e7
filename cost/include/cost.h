/* cacheroute's cost model: what a prefill, a KV transfer and a KV load
 * take, in milliseconds. One formula per term and one name per
 * coefficient, for everything that predicts a cost (the route rule,
 * SelectInjection, the receipts' regret) or simulates one (the replay's
 * truth); each caller keeps its own coefficients (flags, probes, fits).
 *
 *   prefill(s, L) = a + b (L - s) + c (L^2 - s^2)    tokens [s, L)
 *   transfer(B)   = rtt + B 8 / (Gb/s 10^6)          B bytes over a link
 *   load(B)       = fixed + B / (GB/s 10^6)          B bytes host-to-GPU
 *
 * G = 10^9 (a rate per second is 10^6 per ms). The coefficients are
 * finite and >= 0 wherever they come from (flags, probes, fits kept >= 0,
 * the replay's --true-prefill), so a cost is never below 0; the prefill
 * clamps anyway (s into [0, L], the sum at 0), once, here, so that no
 * caller has to. Pure functions, libc only. */
#ifndef CR_COST_H
#define CR_COST_H

/* The prefill's coefficients. The wire's names for them
 * (prefill_fixed_ms, ...) map to these at the edge. */
typedef struct cr_prefill_cost {
    double fixed_ms;      /* a: ms per request */
    double ms_per_token;  /* b: ms per token prefilled (its FLOPs through the weights) */
    double ms_per_token2; /* c: ms per token^2 (attention over the tokens before it) */
} cr_prefill_cost;

/* prefill(s, L) ms: the tokens [s, L) of L prefilled, the first s already
 * cached. s is taken into [0, L]; never below 0. */
double cr_prefill_ms(const cr_prefill_cost *k, double s, double l);

/* A transfer of KV over a link. */
typedef struct cr_transfer_cost {
    double rtt_ms; /* per transfer */
    double gbps;   /* the rate the bytes move at, Gb/s, efficiency included; > 0 */
} cr_transfer_cost;

/* transfer(B) ms for bytes B >= 0. */
double cr_transfer_ms(const cr_transfer_cost *k, double bytes);

/* A load of KV from host memory into the GPU. */
typedef struct cr_load_cost {
    double fixed_ms; /* per load */
    double h2d_gbps; /* host-to-GPU GB/s; > 0 */
} cr_load_cost;

/* load(B) ms for bytes B; 0 when there is nothing to load (B <= 0). */
double cr_load_ms(const cr_load_cost *k, double bytes);

#endif
