/* The closed loop at library level, on one thread, in virtual time:
 * cr_core_report ingesting outcomes in batches of 1,000 (each matched to a
 * receipt, with a prefill to calibrate, tokens and a TTFT), and
 * SelectInjection's cost with receipts kept against without. Also the
 * store's bytes per receipt at its bound.
 *
 * usage: core_loop_bench [outcomes=5000000] [selects=1000000] [receipts=100000] */
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core.h"

typedef struct vclock {
    double t;
} vclock;

static double vclock_now(void *ctx) { return ((vclock *)ctx)->t; }

static cr_core *quiet_core(uint64_t receipts, vclock *clock)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cfg.receipts = receipts;
    cr_clock_source src = {vclock_now, clock};
    cr_error err;
    cr_core *c = cr_core_new(&cfg, NULL, &src, &err);
    if (!c) {
        fprintf(stderr, "core: %s\n", err.msg);
        exit(1);
    }
    return c;
}

/* ns per cr_core_select over n calls, ids[i % n_ids] (NULL = none); the
 * clock moves 1 s per call so every queue is empty. */
static double select_ns(cr_core *c, vclock *clock, char (*ids)[24], size_t n_ids, uint64_t n)
{
    cr_kv_source src = {"peer", 2000};
    cr_inject_request req = {.prompt_tokens = 500, .knowledge_tokens = 4000, .sources = &src,
                             .n_sources = 1};
    cr_inject_response r;
    cr_error err;
    double t0 = bench_now();
    for (uint64_t i = 0; i < n; i++) {
        clock->t += 1;
        if (cr_core_select(c, ids ? ids[i % n_ids] : NULL, &req, &r, &err) != CR_OK) {
            fprintf(stderr, "select: %s\n", err.msg);
            exit(1);
        }
    }
    return (bench_now() - t0) / n * 1e9;
}

/* One matched outcome per receipt id, as an engine reports a text prefill. */
static void fill_outcomes(cr_outcome *o, char (*ids)[24], size_t n)
{
    for (size_t i = 0; i < n; i++)
        o[i] = (cr_outcome){
            .request_id = ids[i],
            .has = CR_OUT_OWNER | CR_OUT_PROMPT_TOKENS | CR_OUT_CACHED_TOKENS |
                   CR_OUT_QUEUE_WAIT | CR_OUT_PREFILL | CR_OUT_TTFT,
            .owner = (int64_t)i,
            .prompt_tokens = 4500,
            .cached_tokens = (uint32_t)(i % 4500),
            .queue_wait_ms = 1.5,
            .prefill_ms = 400 + (double)(i % 7),
            .ttft_ms = 420,
        };
}

int main(int argc, char **argv)
{
    uint64_t outcomes = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000000;
    uint64_t selects = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
    uint64_t receipts = argc > 3 ? strtoull(argv[3], NULL, 10) : 100000;
    if (!receipts || receipts > CR_LOOP_MAX_RECEIPTS) {
        fprintf(stderr, "receipts must be in 1..%d\n", CR_LOOP_MAX_RECEIPTS);
        return 2;
    }
    char(*ids)[24] = malloc(receipts * sizeof *ids);
    for (uint64_t i = 0; i < receipts; i++)
        snprintf(ids[i], sizeof ids[i], "req-%016llx", (unsigned long long)cr_mix64(i));

    /* Each core is warmed up first, the store filled to its bound, so the
     * timed calls are the steady state: every kept receipt evicts one. */
    vclock clock = {0};
    cr_core *plain = quiet_core(0, &clock);
    select_ns(plain, &clock, NULL, 0, receipts);
    double without = select_ns(plain, &clock, NULL, 0, selects);
    cr_core_free(plain);
    long rss0 = bench_status_bytes("VmRSS");
    cr_core *c = quiet_core(receipts, &clock);
    select_ns(c, &clock, ids, receipts, receipts);
    long rss1 = bench_status_bytes("VmRSS");
    double with = select_ns(c, &clock, ids, receipts, selects);
    long rss2 = bench_status_bytes("VmRSS");
    cr_loop_stats st;
    cr_core_loop_stats_read(c, &st, NULL, 0, NULL, 0);
    printf("select: %.0f ns/call without receipts, %.0f ns/call with (+%.0f ns)\n", without, with,
           with - without);
    printf("store: %.1f B/receipt own bytes, RSS +%.1f B/receipt at %llu receipts, RSS %+ld KiB "
           "over %llu more selects\n",
           (double)st.receipt_bytes / st.receipts, (double)(rss1 - rss0) / st.receipts,
           (unsigned long long)st.receipts, (rss2 - rss1) / 1024, (unsigned long long)selects);

    enum { BATCH = 1000 };
    size_t n_batches = (size_t)(receipts / BATCH);
    cr_outcome *o = malloc(n_batches * BATCH * sizeof *o);
    fill_outcomes(o, ids, n_batches * BATCH);
    cr_outcome_counts counts;
    cr_error err;
    uint64_t matched = 0, done = 0;
    double t0 = bench_now();
    for (size_t b = 0; done < outcomes; b = (b + 1) % n_batches, done += BATCH) {
        clock.t += 0.001; /* 1 ms per batch: the rolling figures decay */
        if (cr_core_report(c, o + b * BATCH, BATCH, &counts, &err) != CR_OK) {
            fprintf(stderr, "report: %s\n", err.msg);
            return 1;
        }
        matched += counts.matched;
    }
    double dt = bench_now() - t0;
    printf("report: %.2f million outcomes/s on one thread, batches of %d (%llu outcomes, %.1f%% "
           "matched, %.0f ns/outcome)\n",
           done / dt / 1e6, BATCH, (unsigned long long)done, 100.0 * matched / done,
           dt / done * 1e9);
    cr_core_free(c);
    free(o);
    free(ids);
    return 0;
}
