/* argv into settings: --help, the flags (looked up in the rows, rows.c),
 * the list flags' numbers and the rules across flags. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "internal.h" /* cr_replay_cmp_double */

cr_status cli_parse_values(const char *flag, const char *text, double lo, int open, size_t want,
                           values *out, cr_error *err)
{
    values v = {.n = 0};
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        char item[64];
        double x;
        if (v.n == MAX_VALUES || len == 0 || len >= sizeof item)
            break;
        memcpy(item, p, len);
        item[len] = '\0';
        if (cr_parse_double(item, &x) != 0 || x < lo || (open && x == lo))
            break;
        v.v[v.n++] = x;
        if (!p[len]) {
            if (want == 0 || v.n == want) {
                *out = v;
                return CR_OK;
            }
            break;
        }
        p += len + 1;
    }
    char n_text[32];
    if (want)
        snprintf(n_text, sizeof n_text, "%zu", want);
    else
        snprintf(n_text, sizeof n_text, "1 to %d", MAX_VALUES);
    return cr_fail(err, CR_EINVAL, "--%s must be %s comma-separated numbers %s %g, got \"%s\"",
                   flag, n_text, open ? ">" : ">=", lo, text);
}

void cli_usage(FILE *out)
{
    settings d;
    cli_settings_default(&d);
    fprintf(out,
            "usage: " TOOL " (--trace PATH | --generate) [--flag value | --flag=value]... "
            "[--sweep]\n\n"
            "Replays a trace through routing policies on a simulated cluster in virtual time.\n"
            "  --generate               use the seeded generator (its flags below)\n"
            "  --sweep                  also search qcap, W and margin for the best capacity\n");
    const cr_composition *c = &cli_flags;
    const char *heading = NULL; /* tables of one group share one */
    for (cr_option_ref r = cr_compose_first(c); r.o; cr_compose_next(c, &r)) {
        char def[256], range[160];
        const char *group = r.table->group[0] ? r.table->group : "core";
        if (!heading || strcmp(heading, group) != 0)
            fprintf(out, "\n%s:\n", heading = group);
        if (cr_compose_shadowed(c, &r))
            continue;
        cr_compose_text(&r, &d, def, sizeof def);
        cr_option_range_text(r.o, 1, range, sizeof range);
        fprintf(out, "  --%-22s %s (default '%s'%s%s)\n", r.o->name, r.o->help, def,
                *range ? ", must be " : "", range);
    }
    cli_settings_free(&d);
}

int cli_parse_args(int argc, char **argv, settings *s, cr_error *err)
{
    static const char *const stops[] = {"-h", "--help", NULL};
    static const char *const switches[] = {"--generate", "--sweep", NULL};
    cr_compose_args a = {.stops = stops, .switches = switches};
    int rc = cr_compose_parse(&cli_flags, argc, argv, s, &a, err);
    s->generate = !!(a.switched & 1u);
    s->sweep = !!(a.switched & 2u);
    return rc;
}

/* The list flags' text into numbers; scales sorted and distinct. */
static cr_status parse_lists(settings *s, cr_error *err)
{
    const struct {
        const char *flag, *text;
        values *out;
        int open; /* > 0, else >= 0 */
    } lists[] = {{"scale", s->scale_text, &s->scales, 1},
                 {"sweep-qcap", s->sweep_qcap_text, &s->sweep_qcap, 1},
                 {"sweep-warm-slots", s->sweep_warm_text, &s->sweep_warm, 1},
                 {"sweep-margin", s->sweep_margin_text, &s->sweep_margin, 0}};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        lists[i].out->n = 0;
        if (*lists[i].text && cli_parse_values(lists[i].flag, lists[i].text, 0, lists[i].open, 0,
                                               lists[i].out, err))
            return CR_EINVAL;
    }
    values *v = &s->scales;
    qsort(v->v, v->n, sizeof v->v[0], cr_replay_cmp_double);
    size_t k = 0;
    for (size_t i = 0; i < v->n; i++)
        if (k == 0 || v->v[i] != v->v[k - 1])
            v->v[k++] = v->v[i];
    v->n = k;
    return k ? CR_OK : cr_fail(err, CR_EINVAL, "--scale must not be empty");
}

int cli_finish_settings(settings *s, cr_error *err)
{
    if (parse_lists(s, err) != CR_OK)
        return -1;
    if (s->generate == (s->trace[0] != '\0'))
        return cr_fail(err, CR_EINVAL, "give exactly one of --trace PATH and --generate"), -1;
    if ((s->set & SET_FRACTION) && (s->set & SET_BLOCKS))
        return cr_fail(err, CR_EINVAL, "give at most one of --shard-blocks and --shard-fraction"),
               -1;
    if ((s->set & SET_ZIPF) && !(s->set & SET_GINI))
        s->gen.gini = -1; /* an exponent alone means that exponent */
    s->gen.seed = s->cluster.seed;
    const cr_core_config *c = &s->core;
    if (cr_estimator_config_check(&c->estimator, err) != CR_OK ||
        cr_inject_config_check(&c->inject, err) != CR_OK)
        return -1;
    return 0;
}
