/* The Plan call's own work around the planner, part by part and on the
 * CPU only (no gRPC), from a PlanRequest's bytes: counting its rates
 * (cr_wire_count, what the handler refuses by), decoding them
 * (cr_wire_split_pairs) and writing the answer of the library's plan of
 * them (answer/plan_answer.c); best of K each.
 *
 *   bench/plan_wire.py PLANNER_BENCH --save-request /tmp/plan.bin
 *   plan_parts /tmp/plan.bin [K]
 *
 * (planner_bench's 1,000,000 rates as one 21.5 MB request.) Steadier than
 * plan_wire.py's wall times on a shared machine, as the planner and the
 * transport are left out. Figures: bench/README.md, under `plan_parts`. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "answer.h"
#include "bench_util.h"
#include "cacheroute/v1/cacheroute.pb-c.h"
#include "wire.h"

typedef Cacheroute__V1__PlanRequest PlanRequest;

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    long n = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1)) &&
        fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (f)
        fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return b;
}

/* req's config: all three fields given, as plan_wire.py sends them. */
static int config_of(const PlanRequest *req, cr_planner_config *cfg)
{
    const Cacheroute__V1__PlannerConfig *c = req->config;
    if (!c || !c->has_n_shards || !c->has_qcap || !c->has_warm_slots_per_shard)
        return -1;
    *cfg = (cr_planner_config){c->n_shards, c->qcap, c->warm_slots_per_shard};
    return 0;
}

static double min_of(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv)
{
    size_t len, rest_len = 0, n = 0, answer = 0;
    uint8_t *req = argc > 1 ? read_all(argv[1], &len) : NULL;
    int k = argc > 2 ? atoi(argv[2]) : 15;
    if (!req) {
        fprintf(stderr, "usage: plan_parts REQUEST_FILE [K] (a PlanRequest's bytes)\n");
        return 2;
    }
    const ProtobufCMessageDescriptor *d = &cacheroute__v1__plan_request__descriptor;
    double count = 1e9, split = 1e9, write = 1e9;
    cr_session_rate *rates = NULL;
    uint8_t *rest = malloc(len + 1);
    for (int i = 0; i < k; i++) {
        double t0 = bench_now();
        n = cr_wire_count(d, req, len, "rates");
        double t1 = bench_now();
        rates = rates ? rates : malloc((n + 1) * sizeof *rates);
        cr_wire_pairs out = {rates, n, sizeof *rates, offsetof(cr_session_rate, owner),
                             offsetof(cr_session_rate, rate), 0};
        if (!rest || !rates || cr_wire_split_pairs(req, len, 2, &out, rest, &rest_len) != 0) {
            fprintf(stderr, "not a PlanRequest of rates cr_wire_split_pairs takes\n");
            return 1;
        }
        count = min_of(count, t1 - t0);
        split = min_of(split, bench_now() - t1);
    }
    PlanRequest *m = (PlanRequest *)protobuf_c_message_unpack(d, NULL, rest_len, rest);
    cr_planner_config cfg;
    cr_table *t = NULL;
    cr_error err = {.msg = "no config with n_shards, qcap and warm_slots_per_shard"};
    if (!m || config_of(m, &cfg) != 0 || cr_planner_plan(&cfg, rates, n, &t, &err) != CR_OK) {
        fprintf(stderr, "cannot plan the request: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < k; i++) {
        cr_plan_answer a;
        double t0 = bench_now();
        uint8_t *body =
            cr_plan_answer_init(&a, t, SIZE_MAX) == 0 ? cr_plan_answer_finish(&a, &answer) : NULL;
        write = min_of(write, bench_now() - t0);
        if (!body)
            return 1;
        free(body);
    }
    printf("%zu rates in %zu bytes: count %.2f ms, split %.2f ms; answer %zu bytes "
           "(%zu placements) written in %.2f ms; best of %d\n",
           n, len, count * 1e3, split * 1e3, answer, cr_table_n_placements(t), write * 1e3, k);
    cr_table_free(t);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    free(rates);
    free(rest);
    free(req);
    return 0;
}
