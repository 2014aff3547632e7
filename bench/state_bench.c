/* The state file at scale: a core tracking N owners (and an installed
 * table, and a calibrated GPU) writes its snapshot (cr_core_snapshot: copy,
 * encode, SHA-256, write, fsync, rename, fsync the folder) and a new core
 * restores it (read, check, decode, import), each timed by the core's own
 * report; the file's size and the peak memory a snapshot adds.
 *
 * usage: state_bench [owners=1000000] [repeats=5] [folder=/tmp] */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_util.h"
#include "core.h"

typedef struct seen {
    cr_state_result result;
    double seconds;
    uint64_t bytes, owners;
} seen;

static void on_state(void *ctx, const cr_core_state_event *ev)
{
    seen *s = ctx;
    *s = (seen){ev->result, ev->seconds, ev->bytes, ev->owners};
}

static cr_core *core_at(const char *path, seen *s)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cfg.state_file = (char *)path;
    cr_core_hooks hooks = {.state = on_state, .ctx = s};
    cr_error err;
    cr_core *c = cr_core_new(&cfg, &hooks, NULL, &err);
    if (!c) {
        fprintf(stderr, "core: %s\n", err.msg);
        exit(1);
    }
    return c;
}

/* n owners, one arrival each (in batches of 1,000), a plan installed, and
 * a few prefills observed. */
static void fill(cr_core *c, uint64_t n)
{
    int64_t batch[1000];
    cr_error err;
    for (uint64_t i = 0; i < n; i += 1000) {
        size_t k = n - i < 1000 ? (size_t)(n - i) : 1000;
        for (size_t j = 0; j < k; j++)
            batch[j] = (int64_t)cr_mix64(i + j);
        if (cr_core_record(c, batch, k, NULL, 0, NULL, NULL, &err) != CR_OK)
            exit(1);
    }
    cr_core_plan_request req = {.from_estimator = 1, .install = 1};
    cr_core_plan_result res;
    if (cr_core_plan(c, &req, &res, &err) != CR_OK)
        exit(1);
    cr_core_plan_result_free(&res);
    for (uint32_t i = 0; i < 50; i++) {
        cr_outcome o = {.has = CR_OUT_PREFILL | CR_OUT_PREFILLED_FROM | CR_OUT_PREFILLED_TO,
                        .prefill_ms = 20.0 + i, .prefilled_to = 1000 + 100 * i};
        cr_outcome_counts counts;
        cr_core_report(c, &o, 1, &counts, &err);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void line(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    printf("%-8s best %8.1f ms  median %8.1f ms  worst %8.1f ms\n", what, v[0] * 1e3,
           v[n / 2] * 1e3, v[n - 1] * 1e3);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    char path[4096];
    snprintf(path, sizeof path, "%s/cr-state-bench.state", argc > 3 ? argv[3] : "/tmp");
    unlink(path);
    if (repeats < 1 || repeats > 100)
        return 2;
    seen s;
    cr_core *c = core_at(path, &s);
    fill(c, n);
    double write_s[100], read_s[100];
    long peak = 0;
    cr_error err;
    for (int i = 0; i < repeats; i++) {
        long rss = bench_status_bytes("VmRSS");
        bench_reset_peak();
        if (cr_core_snapshot(c, &err) != CR_OK) {
            fprintf(stderr, "snapshot: %s\n", err.msg);
            return 1;
        }
        long grew = bench_status_bytes("VmHWM") - rss;
        peak = grew > peak ? grew : peak;
        write_s[i] = s.seconds;
    }
    uint64_t bytes = s.bytes;
    cr_core_free(c);
    for (int i = 0; i < repeats; i++) {
        c = core_at(path, &s);
        if (s.result != CR_STATE_RESTORED || s.owners != n) {
            fprintf(stderr, "restore failed\n");
            return 1;
        }
        read_s[i] = s.seconds;
        cr_core_free(c);
    }
    printf("owners %llu, file %llu bytes (%.1f B/owner), snapshot peak extra memory %.1f "
           "B/owner\n",
           (unsigned long long)n, (unsigned long long)bytes, (double)bytes / (double)n,
           (double)peak / (double)n);
    line("snapshot", write_s, repeats);
    line("restore", read_s, repeats);
    unlink(path);
    return 0;
}
