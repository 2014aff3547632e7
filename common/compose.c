/* The composer (options.h): a program's flags over several components'
 * tables. This file only decides where values come from (defaults,
 * variables, flags) and in what order; parsing, ranges and messages are
 * the rows' own (options.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

/* ---- the walk ---------------------------------------------------------------- */

/* r at row k of part (g, p), or past the last row when there is none from
 * there on. */
static void settle(const cr_composition *c, cr_option_ref *r, size_t g, size_t p, size_t k)
{
    for (; g < c->n; g++, p = 0) {
        for (; p < c->groups[g].n; p++, k = 0) {
            const cr_option_part *part = &c->groups[g].parts[p];
            if (k < part->table->n) {
                r->table = part->table;
                r->o = &part->table->rows[k];
                r->offset = c->groups[g].offset + part->offset;
                r->group = g;
                r->part = p;
                return;
            }
        }
    }
    r->o = NULL;
}

cr_option_ref cr_compose_first(const cr_composition *c)
{
    cr_option_ref r = {0};
    settle(c, &r, 0, 0, 0);
    return r;
}

void cr_compose_next(const cr_composition *c, cr_option_ref *r)
{
    r->index++;
    settle(c, r, r->group, r->part, (size_t)(r->o - r->table->rows) + 1);
}

size_t cr_compose_rows(const cr_composition *c)
{
    size_t n = 0;
    for (size_t g = 0; g < c->n; g++)
        for (size_t p = 0; p < c->groups[g].n; p++)
            n += c->groups[g].parts[p].table->n;
    return n;
}

int cr_compose_find(const cr_composition *c, const char *name, size_t len, cr_option_ref *out)
{
    for (cr_option_ref r = cr_compose_first(c); r.o; cr_compose_next(c, &r)) {
        if (strlen(r.o->name) == len && strncmp(r.o->name, name, len) == 0) {
            *out = r;
            return 1;
        }
    }
    return 0;
}

int cr_compose_shadowed(const cr_composition *c, const cr_option_ref *r)
{
    cr_option_ref first;
    return cr_compose_find(c, r->o->name, strlen(r->o->name), &first) && first.o != r->o;
}

/* ---- defaults, checks, release ------------------------------------------------ */

void cr_compose_defaults(const cr_composition *c, void *cfg)
{
    for (size_t g = 0; g < c->n; g++)
        cr_options_parts_defaults(c->groups[g].parts, c->groups[g].n,
                                  (char *)cfg + c->groups[g].offset);
}

cr_status cr_compose_check(const cr_composition *c, const void *cfg, cr_error *err)
{
    for (size_t g = 0; g < c->n; g++) {
        cr_status st = cr_options_parts_check(c->groups[g].parts, c->groups[g].n,
                                              (const char *)cfg + c->groups[g].offset, err);
        if (st != CR_OK)
            return st;
    }
    return CR_OK;
}

void cr_compose_release(const cr_composition *c, void *cfg)
{
    for (cr_option_ref r = cr_compose_first(c); r.o; cr_compose_next(c, &r))
        if (r.o == r.table->rows) /* once per table */
            cr_options_release(r.table, (char *)cfg + r.offset);
}

/* ---- values from text ------------------------------------------------------------ */

/* A flag adds one value; the variable of a repeatable one holds values
 * separated by spaces or tabs. */
static cr_status set_row(const cr_option_ref *r, void *cfg, const char *value, int from_env,
                         cr_error *err)
{
    void *c = (char *)cfg + r->offset;
    if (!from_env || !(r->o->flags & CR_OPT_REPEATABLE))
        return cr_option_set(r->table, r->o, c, value, err);
    char *copy = strdup(value), *save = NULL;
    if (!copy)
        return cr_fail(err, CR_ENOMEM, "--%s: out of memory", r->o->name);
    cr_status st = CR_OK;
    for (char *item = strtok_r(copy, " \t", &save); item && st == CR_OK;
         item = strtok_r(NULL, " \t", &save))
        st = cr_option_set(r->table, r->o, c, item, err);
    free(copy);
    return st;
}

/* One flag given on the command line. */
typedef struct given {
    cr_option_ref row;
    const char *value;
} given;

static int on_command_line(const cr_option_ref *r, const given *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (g[i].row.o == r->o)
            return 1;
    return 0;
}

static int listed(const char *const *names, const char *a)
{
    for (int i = 0; names && names[i]; i++)
        if (!strcmp(names[i], a))
            return i;
    return -1;
}

/* Splits argv into flags and values without applying any: 0, 1 for a stop
 * argument, -1 with err. */
static int scan_args(const cr_composition *c, int argc, char **argv, cr_compose_args *a,
                     given *out, size_t *n, cr_error *err)
{
    *n = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int k;
        if ((k = listed(a->switches, arg)) >= 0) {
            a->switched |= 1u << k;
            continue;
        }
        if ((k = listed(a->stops, arg)) >= 0) {
            a->stopped = k;
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0)
            return cr_fail(err, CR_EINVAL, "unexpected argument '%s' (see --help)", arg), -1;
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        cr_option_ref r;
        if (!cr_compose_find(c, arg + 2, len, &r))
            return cr_fail(err, CR_EINVAL, "unknown flag '%.*s' (see --help)", (int)len + 2, arg),
                   -1;
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value)
            return cr_fail(err, CR_EINVAL, "--%s: missing value", r.o->name), -1;
        out[(*n)++] = (given){r, value};
    }
    return 0;
}

/* A bad variable: NAME and why, to the caller. */
typedef void (*bad_env_fn)(void *ctx, const char *variable, const cr_error *why);

/* Each variable whose flag is not in g. Stops at the first bad one (err
 * "NAME: why") unless bad is given, which hears of every bad one. Returns
 * the number of bad ones. */
static int apply_env(const cr_composition *c, void *cfg, const given *g, size_t n,
                     unsigned char *source, bad_env_fn bad, void *ctx, cr_error *err)
{
    int n_bad = 0;
    char name[96];
    for (cr_option_ref r = cr_compose_first(c); r.o; cr_compose_next(c, &r)) {
        cr_option_env_name(r.o, name, sizeof name);
        const char *v = getenv(name);
        if (!v || on_command_line(&r, g, n) || cr_compose_shadowed(c, &r))
            continue;
        cr_error e;
        if (set_row(&r, cfg, v, 1, &e) == CR_OK) {
            if (source)
                source[r.index] = CR_SOURCE_ENV;
            continue;
        }
        n_bad++;
        if (bad) {
            bad(ctx, name, &e);
            continue;
        }
        cr_fail(err, CR_EINVAL, "%s: %s", name, e.msg);
        break;
    }
    return n_bad;
}

int cr_compose_parse(const cr_composition *c, int argc, char **argv, void *cfg,
                     cr_compose_args *a, cr_error *err)
{
    err->msg[0] = '\0';
    a->stopped = -1;
    a->switched = 0;
    given *g = calloc((size_t)argc + 1, sizeof *g);
    size_t n = 0;
    if (!g)
        return cr_fail(err, CR_ENOMEM, "out of memory"), -1;
    int rc = scan_args(c, argc, argv, a, g, &n, err);
    if (rc == 0 && a->env && apply_env(c, cfg, g, n, a->source, NULL, NULL, err) > 0)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (set_row(&g[i].row, cfg, g[i].value, 0, err) != CR_OK)
            rc = -1;
        else if (a->source)
            a->source[g[i].row.index] = CR_SOURCE_FLAG;
    }
    free(g);
    return rc;
}

int cr_compose_env_errors(const cr_composition *c, void *cfg,
                          void (*bad)(void *ctx, const char *variable, const cr_error *why),
                          void *ctx)
{
    return apply_env(c, cfg, NULL, 0, NULL, bad, ctx, NULL);
}

void cr_compose_text(const cr_option_ref *r, const void *cfg, char *buf, size_t len)
{
    const cr_option *o = r->o;
    const void *c = (const char *)cfg + r->offset;
    buf[0] = '\0';
    if ((o->flags & CR_OPT_UNSET) && !cr_option_is_set(r->table, o, c))
        return;
    if (o->type == CR_OPT_CUSTOM) {
        if (o->show && o->show(c, buf, len) <= 0)
            buf[0] = '\0';
    } else if (o->type == CR_OPT_STRING || o->type == CR_OPT_CHOICE) {
        const char *v = cr_option_string(o, c);
        snprintf(buf, len, "%s", v ? v : "");
    } else if (o->type != CR_OPT_LIST) {
        cr_option_number_text(cr_option_number(o, c), buf, len);
    }
}
