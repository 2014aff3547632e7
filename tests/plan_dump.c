/* plan_dump R QCAP W < "owner,rate" lines: prints the library's plan as JSON
 * (doubles with 17 significant digits, exact when read back), so tests can
 * compare a Plan over the wire with the library's answer for the same input.
 * Exit 3 with the error message on a planner error. */
#include <stdio.h>
#include <stdlib.h>

#include "planner.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: plan_dump R QCAP W < rates\n");
        return 2;
    }
    cr_planner_config cfg = {(uint32_t)strtoul(argv[1], NULL, 10), strtod(argv[2], NULL),
                             strtod(argv[3], NULL)};
    size_t n = 0, cap = 1024;
    cr_session_rate *r = malloc(cap * sizeof *r);
    long long owner;
    double rate;
    while (r && scanf(" %lld , %lf", &owner, &rate) == 2) {
        if (n == cap && !(r = realloc(r, (cap *= 2) * sizeof *r)))
            return 1;
        r[n++] = (cr_session_rate){owner, rate};
    }
    cr_table *t;
    cr_error err;
    if (cr_planner_plan(&cfg, r, n, &t, &err) != CR_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 3;
    }
    printf("{\"n_shards\": %u, \"admitted_rate_total\": %.17g, \"unadmitted_rate_total\": %.17g, "
           "\"imbalance\": %.17g, \"expected_load\": [",
           cr_table_n_shards(t), cr_table_admitted_rate_total(t), cr_table_unadmitted_rate_total(t),
           cr_table_imbalance(t));
    for (uint32_t s = 0; s < cr_table_n_shards(t); s++)
        printf("%s%.17g", s ? ", " : "", cr_table_expected_load(t)[s]);
    printf("], \"placements\": [");
    for (size_t i = 0; i < cr_table_n_placements(t); i++) {
        const cr_placement *p = cr_table_placement(t, i);
        printf("%s{\"owner\": %lld, \"preferred_shard\": %u, \"shards\": [", i ? ", " : "",
               (long long)p->owner, p->preferred_shard);
        for (uint32_t k = 0; k < p->kb; k++)
            printf("%s%u", k ? ", " : "", cr_table_shards(t, p)[k]);
        printf("]}");
    }
    printf("]}\n");
    cr_table_free(t);
    free(r);
    return 0;
}
