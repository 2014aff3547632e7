/* Option rows: defaults, parsing, checks and text, all read from the rows.
 *
 * Fields are read and written with memcpy at their offsets, so a row's
 * field may be declared const char * or const char *const * in its struct
 * (cr_probe_config's are) while this file handles it as char * / char **. */
#include "options.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *field_at(void *cfg, size_t offset) { return (char *)cfg + offset; }
static const void *cfield_at(const void *cfg, size_t offset)
{
    return (const char *)cfg + offset;
}

static int is_integral_type(cr_option_type t)
{
    return t == CR_OPT_LONG || t == CR_OPT_U32 || t == CR_OPT_U64;
}

static int is_numeric_type(cr_option_type t) { return t == CR_OPT_DOUBLE || is_integral_type(t); }

/* The largest value a field of type t holds exactly (U64: as the header
 * bounds it). */
static double type_max(cr_option_type t)
{
    switch (t) {
    case CR_OPT_LONG:
        return (double)LONG_MAX;
    case CR_OPT_U32:
        return (double)UINT32_MAX;
    case CR_OPT_U64:
        return CR_OPT_U64_MAX;
    default:
        return INFINITY;
    }
}

/* v fits the field's type (before the row's own bounds). */
static int representable(cr_option_type t, double v)
{
    switch (t) {
    case CR_OPT_LONG:
        return v >= (double)LONG_MIN && v < -(double)LONG_MIN;
    case CR_OPT_U32:
    case CR_OPT_U64:
        return v >= 0 && v <= type_max(t);
    default:
        return 1;
    }
}

static int in_bounds(const cr_option *o, double v)
{
    if (!isfinite(v) || !representable(o->type, v))
        return 0;
    if ((o->flags & CR_OPT_MIN_OPEN) ? !(v > o->min) : !(v >= o->min))
        return 0;
    return v <= o->max;
}

static double read_number(const cr_option *o, const void *cfg)
{
    const void *p = cfield_at(cfg, o->offset);
    switch (o->type) {
    case CR_OPT_DOUBLE: {
        double v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case CR_OPT_LONG: {
        long v;
        memcpy(&v, p, sizeof v);
        return (double)v;
    }
    case CR_OPT_U32: {
        uint32_t v;
        memcpy(&v, p, sizeof v);
        return (double)v;
    }
    case CR_OPT_U64: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        return (double)v;
    }
    default:
        return NAN;
    }
}

/* v is representable (see in_bounds). */
static void write_number(const cr_option *o, void *cfg, double v)
{
    void *p = field_at(cfg, o->offset);
    if (o->type == CR_OPT_DOUBLE) {
        memcpy(p, &v, sizeof v);
    } else if (o->type == CR_OPT_LONG) {
        long x = (long)v;
        memcpy(p, &x, sizeof x);
    } else if (o->type == CR_OPT_U32) {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, sizeof x);
    } else if (o->type == CR_OPT_U64) {
        uint64_t x = (uint64_t)v;
        memcpy(p, &x, sizeof x);
    }
}

static char *read_ptr(const void *cfg, size_t offset)
{
    char *s;
    memcpy(&s, cfield_at(cfg, offset), sizeof s);
    return s;
}

static void write_ptr(void *cfg, size_t offset, const void *v)
{
    memcpy(field_at(cfg, offset), &v, sizeof v);
}

static size_t read_count(const void *cfg, size_t offset)
{
    size_t n;
    memcpy(&n, cfield_at(cfg, offset), sizeof n);
    return n;
}

static void write_count(void *cfg, size_t offset, size_t n)
{
    memcpy(field_at(cfg, offset), &n, sizeof n);
}

static int read_index(const cr_option *o, const void *cfg)
{
    int i;
    memcpy(&i, cfield_at(cfg, o->offset), sizeof i);
    return i;
}

static size_t n_choices(const cr_option *o)
{
    size_t n = 0;
    while (o->choices && o->choices[n])
        n++;
    return n;
}

static int choice_index(const cr_option *o, const char *value)
{
    for (size_t i = 0; o->choices && o->choices[i]; i++)
        if (strcmp(o->choices[i], value) == 0)
            return (int)i;
    return -1;
}

static int length_bounded(const cr_option *o)
{
    return (o->type == CR_OPT_STRING || o->type == CR_OPT_LIST) && o->max > 0;
}

static int length_ok(const cr_option *o, size_t len)
{
    return !length_bounded(o) || ((double)len >= o->min && (double)len <= o->max);
}

/* ---- text ----------------------------------------------------------------- */

void cr_option_number_text(double v, char *buf, size_t len)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (prec == 17 || !isfinite(v) || strtod(buf, NULL) == v)
            return;
    }
}

void cr_option_env_name(const cr_option *o, char *buf, size_t len)
{
    if (len == 0)
        return;
    size_t i = (size_t)snprintf(buf, len, "CACHEROUTE_");
    if (i >= len)
        return;
    for (const char *p = o->name; *p && i + 1 < len; p++)
        buf[i++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[i] = '\0';
}

static void integer_range_text(const cr_option *o, const char *pre, char *buf, size_t len)
{
    const char *gt = (o->flags & CR_OPT_MIN_OPEN) ? ">" : ">=";
    if (o->max >= type_max(o->type))
        snprintf(buf, len, "%s%s %.0f", pre, gt, o->min);
    else if (o->flags & CR_OPT_MIN_OPEN)
        snprintf(buf, len, "%sin (%.0f, %.0f]", pre, o->min, o->max);
    else
        snprintf(buf, len, "%sin %.0f..%.0f", pre, o->min, o->max);
}

static void double_range_text(const cr_option *o, char *buf, size_t len)
{
    int open = (o->flags & CR_OPT_MIN_OPEN) != 0;
    if (isinf(o->max) && isinf(o->min))
        snprintf(buf, len, "finite");
    else if (isinf(o->max))
        snprintf(buf, len, "finite and %s %g", open ? ">" : ">=", o->min);
    else if (isinf(o->min))
        snprintf(buf, len, "finite and <= %g", o->max);
    else if (open)
        snprintf(buf, len, "in (%g, %g]", o->min, o->max);
    else
        snprintf(buf, len, "in %g..%g", o->min, o->max);
}

static void choices_text(const cr_option *o, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "one of ");
    for (size_t i = 0; o->choices && o->choices[i] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", o->choices[i]);
}

void cr_option_range_text(const cr_option *o, int from_text, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (is_integral_type(o->type))
        integer_range_text(o, from_text ? "an integer " : "", buf, len);
    else if (o->type == CR_OPT_DOUBLE)
        double_range_text(o, buf, len);
    else if (o->type == CR_OPT_CHOICE)
        choices_text(o, buf, len);
    else if (length_bounded(o))
        snprintf(buf, len, "%.0f..%.0f bytes", o->min, o->max);
}

void cr_option_default_text(const cr_option *o, char *buf, size_t len)
{
    if (len == 0)
        return;
    if (o->def_text)
        snprintf(buf, len, "%s", o->def_text);
    else if (is_numeric_type(o->type))
        cr_option_number_text(o->def, buf, len);
    else
        buf[0] = '\0';
}

/* ---- defaults, lookup, set ------------------------------------------------ */

void cr_options_defaults(const cr_option_table *t, void *cfg)
{
    for (size_t i = 0; i < t->n; i++) {
        const cr_option *o = &t->rows[i];
        if (o->flags & CR_OPT_UNSET)
            continue;
        if (is_numeric_type(o->type)) {
            write_number(o, cfg, o->def);
        } else if (o->type == CR_OPT_STRING) {
            write_ptr(cfg, o->offset, o->def_text);
        } else if (o->type == CR_OPT_CHOICE) {
            int k = o->def_text ? choice_index(o, o->def_text) : 0;
            k = k < 0 ? 0 : k;
            memcpy(field_at(cfg, o->offset), &k, sizeof k);
        } else if (o->type == CR_OPT_LIST) {
            write_ptr(cfg, o->offset, NULL);
            write_count(cfg, o->count_offset, 0);
        }
    }
}

const cr_option *cr_option_find(const cr_option_table *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->n; i++)
        if (strlen(t->rows[i].name) == len && strncmp(t->rows[i].name, name, len) == 0)
            return &t->rows[i];
    return NULL;
}

static cr_status set_failed(const cr_option *o, const char *value, cr_error *err)
{
    char want[160];
    cr_option_range_text(o, 1, want, sizeof want);
    return cr_fail(err, CR_EINVAL, "--%s must be %s, got \"%s\"", o->name, want, value);
}

static cr_status set_number(const cr_option *o, void *cfg, const char *value, cr_error *err)
{
    double v;
    if (cr_parse_double(value, &v) != 0 || !in_bounds(o, v) ||
        (is_integral_type(o->type) && v != floor(v)))
        return set_failed(o, value, err);
    write_number(o, cfg, v);
    return CR_OK;
}

static cr_status set_text(const cr_option *o, void *cfg, const char *value, cr_error *err)
{
    if (!length_ok(o, strlen(value)))
        return set_failed(o, value, err);
    if (o->valid && o->valid(value, err) != CR_OK)
        return CR_EINVAL;
    char *copy = strdup(value);
    if (!copy)
        return cr_fail(err, CR_ENOMEM, "--%s: out of memory", o->name);
    if (o->type == CR_OPT_STRING) {
        char *old = read_ptr(cfg, o->offset);
        if (old != o->def_text)
            free(old);
        write_ptr(cfg, o->offset, copy);
        return CR_OK;
    }
    size_t n = read_count(cfg, o->count_offset);
    char **items = (char **)read_ptr(cfg, o->offset);
    char **grown = realloc(items, (n + 1) * sizeof *grown);
    if (!grown) {
        free(copy);
        return cr_fail(err, CR_ENOMEM, "--%s: out of memory", o->name);
    }
    grown[n] = copy;
    write_ptr(cfg, o->offset, grown);
    write_count(cfg, o->count_offset, n + 1);
    return CR_OK;
}

static void mark_set(const cr_option_table *t, const cr_option *o, void *cfg)
{
    if (t->set_offset == CR_OPT_NO_SET || !o->set_bit)
        return;
    unsigned word;
    memcpy(&word, cfield_at(cfg, t->set_offset), sizeof word);
    word |= o->set_bit;
    memcpy(field_at(cfg, t->set_offset), &word, sizeof word);
}

cr_status cr_option_set(const cr_option_table *t, const cr_option *o, void *cfg,
                        const char *value, cr_error *err)
{
    cr_status st;
    if (is_numeric_type(o->type)) {
        st = set_number(o, cfg, value, err);
    } else if (o->type == CR_OPT_CHOICE) {
        int k = choice_index(o, value);
        st = k < 0 ? set_failed(o, value, err) : CR_OK;
        if (st == CR_OK)
            memcpy(field_at(cfg, o->offset), &k, sizeof k);
    } else if (o->type == CR_OPT_STRING || o->type == CR_OPT_LIST) {
        st = set_text(o, cfg, value, err);
    } else if (o->set) {
        st = o->set(cfg, value, err);
    } else {
        st = cr_fail(err, CR_EINVAL, "--%s cannot be set", o->name);
    }
    if (st == CR_OK)
        mark_set(t, o, cfg);
    return st;
}

/* ---- checks ----------------------------------------------------------------- */

int cr_option_is_set(const cr_option_table *t, const cr_option *o, const void *cfg)
{
    if (t->set_offset == CR_OPT_NO_SET || !o->set_bit)
        return !(o->flags & CR_OPT_UNSET);
    unsigned word;
    memcpy(&word, cfield_at(cfg, t->set_offset), sizeof word);
    return (word & o->set_bit) != 0;
}

/* "--name" or "PREFIXkey" into buf. */
static void check_name(const cr_option *o, const char *prefix, char *buf, size_t len)
{
    if (prefix)
        snprintf(buf, len, "%s%s", prefix, o->key);
    else
        snprintf(buf, len, "--%s", o->name);
}

static cr_status check_failed(const cr_option *o, const char *prefix, const char *index,
                              const char *got, cr_error *err)
{
    char name[96], want[160];
    check_name(o, prefix, name, sizeof name);
    cr_option_range_text(o, 0, want, sizeof want);
    return cr_fail(err, CR_EINVAL, "%s%s must be %s, got %s", name, index, want, got);
}

static cr_status check_row(const cr_option *o, const void *cfg, const char *prefix,
                           cr_error *err)
{
    char got[48];
    if (is_numeric_type(o->type)) {
        double v = read_number(o, cfg);
        if (in_bounds(o, v))
            return CR_OK;
        cr_option_number_text(v, got, sizeof got);
        return check_failed(o, prefix, "", got, err);
    }
    if (o->type == CR_OPT_CHOICE) {
        int k = read_index(o, cfg);
        if (k >= 0 && (size_t)k < n_choices(o))
            return CR_OK;
        snprintf(got, sizeof got, "%d", k);
        return check_failed(o, prefix, "", got, err);
    }
    if (o->type == CR_OPT_STRING) {
        const char *s = read_ptr(cfg, o->offset);
        if (!s || length_ok(o, strlen(s)))
            return CR_OK;
        snprintf(got, sizeof got, "%zu", strlen(s));
        return check_failed(o, prefix, "", got, err);
    }
    if (o->type == CR_OPT_LIST) {
        size_t n = read_count(cfg, o->count_offset);
        char *const *items = (char *const *)read_ptr(cfg, o->offset);
        for (size_t i = 0; i < n; i++) {
            size_t len = items[i] ? strlen(items[i]) : 0;
            if (length_ok(o, len))
                continue;
            char index[32];
            snprintf(index, sizeof index, "[%zu]", i);
            snprintf(got, sizeof got, "%zu", len);
            return check_failed(o, prefix, index, got, err);
        }
    }
    return CR_OK;
}

cr_status cr_options_check(const cr_option_table *t, const void *cfg, const char *prefix,
                           cr_error *err)
{
    for (size_t i = 0; i < t->n; i++) {
        const cr_option *o = &t->rows[i];
        if ((o->flags & CR_OPT_UNSET) && !cr_option_is_set(t, o, cfg))
            continue;
        if (check_row(o, cfg, prefix, err) != CR_OK)
            return CR_EINVAL;
    }
    return CR_OK;
}

/* ---- release, reads ----------------------------------------------------------- */

void cr_options_release(const cr_option_table *t, void *cfg)
{
    for (size_t i = 0; i < t->n; i++) {
        const cr_option *o = &t->rows[i];
        if (o->type == CR_OPT_STRING) {
            char *s = read_ptr(cfg, o->offset);
            if (s != o->def_text) {
                free(s);
                write_ptr(cfg, o->offset, NULL);
            }
        } else if (o->type == CR_OPT_LIST) {
            size_t n = read_count(cfg, o->count_offset);
            char **items = (char **)read_ptr(cfg, o->offset);
            for (size_t k = 0; k < n; k++)
                free(items[k]);
            free(items);
            write_ptr(cfg, o->offset, NULL);
            write_count(cfg, o->count_offset, 0);
        }
    }
    if (t->release)
        t->release(cfg);
}

double cr_option_number(const cr_option *o, const void *cfg) { return read_number(o, cfg); }

const char *cr_option_string(const cr_option *o, const void *cfg)
{
    if (o->type == CR_OPT_STRING)
        return read_ptr(cfg, o->offset);
    if (o->type == CR_OPT_CHOICE) {
        int k = read_index(o, cfg);
        return k >= 0 && (size_t)k < n_choices(o) ? o->choices[k] : NULL;
    }
    return NULL;
}

char *const *cr_option_list(const cr_option *o, const void *cfg, size_t *n)
{
    if (o->type != CR_OPT_LIST) {
        *n = 0;
        return NULL;
    }
    *n = read_count(cfg, o->count_offset);
    return (char *const *)read_ptr(cfg, o->offset);
}

/* ---- compositions ---------------------------------------------------------- */

void cr_options_parts_defaults(const cr_option_part *parts, size_t n, void *cfg)
{
    for (size_t i = 0; i < n; i++) {
        const cr_option_table *t = parts[i].table;
        void *c = (char *)cfg + parts[i].offset;
        if (t->defaults)
            t->defaults(c);
        else
            cr_options_defaults(t, c);
    }
}

cr_status cr_options_parts_check(const cr_option_part *parts, size_t n, const void *cfg,
                                 cr_error *err)
{
    for (size_t i = 0; i < n; i++) {
        const cr_option_table *t = parts[i].table;
        const void *c = (const char *)cfg + parts[i].offset;
        cr_status st = t->check ? t->check(c, err) : cr_options_check(t, c, "", err);
        if (st != CR_OK)
            return st;
    }
    return CR_OK;
}
