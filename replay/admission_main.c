/* cacheroute-admission: the admission figures of issue 33 (bench/admission.sh
 * runs it; docs/admission.md has the design). One workload of
 * bench/route_table.sh at 8 shards (caches of 25% of its distinct blocks,
 * prefill 20 + 0.08 (L-s) + 2e-6 (L^2-s^2) ms, no noise), each request
 * given an objective and a tenant (replay.h, "admission": 60% interactive
 * with a 2 s TTFT SLO, 40% batch with 30 s, the heavy tenant sending 3x
 * the light one's), replayed at each scale by cacheroute without and
 * with the door and by the four peers. Per policy, scale and objective:
 * goodput (requests within their SLO per second), attainment, p99 TTFT,
 * and the rest below. One line per row, tab-separated, on stdout (the
 * header first).
 *
 * usage: cacheroute-admission WORKLOAD SCALES [TRACES [POLICIES]]
 *   WORKLOAD  conv | syn (the shipped traces, under TRACES) | zipf | docs
 *   SCALES    comma-separated load scales (arrivals x scale)
 *   POLICIES  comma-separated, of the six below (default: all six)
 * shed and held shares, the batch service per tenant against its max-min
 * fair share over the run, the heavy tenant's share of the held work
 * dispatched against its max-min fair share of it (and that work's share
 * of all served),
 * and a hash of the routes (equal for equal routes).
 * CR_ADMIT_BUDGET_MS, CR_ADMIT_PRESSURE, CR_ADMIT_PRESSURE_OFF and
 * CR_ADMIT_PRESSURE_TAU_S override the door's sheddable budget (ms),
 * pressure bounds (shares) and its time constant (s); CR_ADMIT_SHED=1
 * makes the door shed what it would hold (the sidecar's default: no
 * queue); CR_ADMIT_MEET_SLO is --admit-meet-slo's index: 0 off (every
 * request at the rule's pick), 1 pressed (the default), 2 always. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const POLICIES[] = {"cacheroute", "cacheroute-door", "llmd-scorer",
                                       "sglang-cache-aware", "dynamo-kv", "aibrix-prefix"};
#define N_POLICIES (sizeof POLICIES / sizeof POLICIES[0])

static int open_workload(const char *w, const char *traces, cr_replay_trace *t, uint64_t *warmup,
                         cr_error *err)
{
    char path[4096];
    cr_owner_key key;
    cr_owner_key_parse(CR_REPLAY_OWNER_KEY_DEFAULT, &key, err);
    *warmup = 0;
    if (!strcmp(w, "conv") || !strcmp(w, "syn")) {
        snprintf(path, sizeof path, "%s/mooncake_%s_trace.jsonl", traces,
                 !strcmp(w, "conv") ? "conversation" : "synthetic");
        return cr_replay_trace_load(path, &key, t, err) == CR_OK ? 0 : -1;
    }
    cr_replay_gen_config g;
    cr_replay_gen_default(&g);
    g.n_requests = 100000;
    g.gini = 0.76;
    g.rate_per_s = 1;
    *warmup = 30000;
    if (!strcmp(w, "zipf")) {
        g.n_sessions = 1000, g.system_blocks = 4, g.first_blocks = 60, g.turn_blocks = 2;
        g.max_blocks = 80;
    } else if (!strcmp(w, "docs")) {
        g.n_sessions = 2000, g.documents = 200, g.document_blocks = 16, g.document_zipf = 1.1;
        g.system_blocks = 2, g.first_blocks = 4, g.turn_blocks = 1, g.max_blocks = 40;
    } else {
        cr_fail(err, CR_EINVAL, "unknown workload '%s' (conv, syn, zipf, docs)", w);
        return -1;
    }
    return cr_replay_generate(&g, t, err) == CR_OK ? 0 : -1;
}

static uint64_t distinct_blocks(const cr_replay_trace *t)
{
    cr_replay_cache set;
    uint32_t cap = t->n_blocks < CR_REPLAY_CACHE_MAX ? (uint32_t)t->n_blocks : CR_REPLAY_CACHE_MAX;
    cr_replay_cache_init(&set, cap ? cap : 1);
    uint64_t n = cr_replay_cache_insert(&set, t->blocks, (uint32_t)t->n_blocks) == 0 ? set.n : 0;
    cr_replay_cache_free(&set);
    return n;
}

static cr_status make(const char *name, const cr_core_config *core, const cr_replay_cluster *c,
                      cr_replay_policy *p, cr_error *err)
{
    if (!strcmp(name, "cacheroute"))
        return cr_replay_cacheroute_policy(core, CR_REPLAY_WEIGHT_REQUESTS, CR_REPLAY_CALL_ROUTE,
                                           CR_REPLAY_KV_EVENTS_OFF, c, p, err);
    if (!strcmp(name, "cacheroute-door"))
        return cr_replay_cacheroute_door_policy(core, c, p, err);
    return cr_replay_peer(name, c, p, err);
}

/* 1 when name is one of the comma-separated list (NULL: every one). */
static int chosen(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *at = list; at && *at; at += strcspn(at, ",") + (at[strcspn(at, ",")] != 0))
        if (strcspn(at, ",") == len && !strncmp(at, name, len))
            return 1;
    return !list;
}

static void row(const char *w, double scale, const char *policy, const cr_replay_result *r)
{
    static const char *const names[] = {"interactive", "batch"};
    const cr_replay_admission_result *a = r->admission;
    for (unsigned k = 0; k < CR_REPLAY_CLASSES; k++) {
        const cr_replay_class_result *c = &a->cls[k];
        double n = c->requests ? (double)c->requests : NAN;
        double work = c->tenant_work_ms[0] + c->tenant_work_ms[1];
        /* max-min: half the work served, or all the light one left over
         * when it asked for less than half */
        double fair = work > 0 ? fmax(0.5, 1 - c->tenant_asked_ms[1] / work) : NAN;
        double sent = c->dispatched_work_ms[0] + c->dispatched_work_ms[1];
        printf("%s\t%g\t%s\t%s\t%zu\t%.4f\t%.4f\t%.1f\t%.4f\t%.4f\t%.4f\t%zu\t%zu\t%zu\t%zu\t%.3f\t%.1f\t%.3f\t%.3f\t%016llx\t%.3f\t%.3f\n",
               w, scale, policy, names[k], c->requests, c->goodput_per_s, c->attainment,
               c->ttft_p99_ms, c->shed / n, c->dropped / n, c->held / n,
               c->tenant_requests[0], c->tenant_served[0], c->tenant_requests[1],
               c->tenant_served[1], work > 0 ? c->tenant_work_ms[0] / work : NAN, r->ttft_p99_ms,
               fmin(fair, 1), sent > 0 ? c->dispatched_work_ms[0] / sent : NAN,
               (unsigned long long)a->routes, sent > 0 ? c->heavy_fair_dispatched_ms / sent : NAN,
               work > 0 ? sent / work : NAN);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: cacheroute-admission WORKLOAD SCALES [TRACES [POLICIES]]\n");
        return 2;
    }
    cr_error err;
    cr_replay_trace t;
    cr_replay_cluster c;
    cr_replay_cluster_default(&c);
    if (open_workload(argv[1], argc > 3 ? argv[3] : "/work/shared/traces", &t, &c.warmup, &err)) {
        fprintf(stderr, "cacheroute-admission: %s\n", err.msg);
        return 2;
    }
    cr_replay_admission adm;
    cr_replay_admission_default(&adm);
    double shed = 0, meet = CR_ADMIT_MEET_PRESSED;
    const struct {
        const char *name;
        double *into;
    } knobs[] = {{"CR_ADMIT_BUDGET_MS", &adm.door.budget_ms},
                 {"CR_ADMIT_PRESSURE", &adm.door.pressure},
                 {"CR_ADMIT_PRESSURE_OFF", &adm.door.pressure_off},
                 {"CR_ADMIT_PRESSURE_TAU_S", &adm.door.pressure_tau_s},
                 {"CR_ADMIT_SHED", &shed},
                 {"CR_ADMIT_MEET_SLO", &meet}};
    for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++)
        if (getenv(knobs[k].name))
            *knobs[k].into = atof(getenv(knobs[k].name));
    adm.shed_at_once = shed != 0;
    adm.door.meet_slo = (int)meet;
    c.shards = 8;
    c.truth.prefill = (cr_prefill_cost){20, 0.08, 2e-6};
    c.truth.noise = 0;
    c.shard_blocks = (uint64_t)fmax(1, ceil(0.25 / 8 * (double)distinct_blocks(&t)));
    c.admission = &adm;
    cr_core_config core;
    cr_core_config_default(&core);
    printf("workload\tscale\tpolicy\tobjective\trequests\tgoodput_per_s\tattainment\t"
           "ttft_p99_ms\tshed\tdropped\theld\theavy_requests\theavy_served\tlight_requests\t"
           "light_served\theavy_work_share\tall_p99_ms\theavy_fair_share\theavy_dispatched_share\t"
           "routes\theavy_dispatched_fair_share\tdispatched_share\n");
    const char *only = argc > 4 ? argv[4] : NULL;
    for (size_t k = 0; only && k < N_POLICIES && !chosen(only, POLICIES[k]); k++)
        if (k + 1 == N_POLICIES) {
            fprintf(stderr, "cacheroute-admission: POLICIES names none of the six: %s\n", only);
            return 2;
        }
    int rc = 0;
    for (char *sc = strtok(argv[2], ","); sc && !rc; sc = strtok(NULL, ",")) {
        c.scale = atof(sc);
        for (size_t k = 0; k < N_POLICIES && !rc; k++) {
            if (!chosen(only, POLICIES[k]))
                continue;
            cr_replay_policy p;
            cr_replay_result r;
            if (make(POLICIES[k], &core, &c, &p, &err) != CR_OK ||
                cr_replay_run(&t, &c, &p, 60, &r, &err) != CR_OK) {
                fprintf(stderr, "cacheroute-admission: %s: %s\n", POLICIES[k], err.msg);
                rc = 1;
            } else {
                row(argv[1], c.scale, POLICIES[k], &r);
                cr_replay_result_free(&r);
            }
            if (p.free)
                p.free(p.state);
        }
    }
    cr_replay_trace_free(&t);
    return rc;
}
