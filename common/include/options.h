/* cacheroute options: each setting is one row, declared by the component it
 * configures (name, type, typed default, bounds, help, and where in that
 * component's config struct the value goes), as nginx and Redis declare
 * their directives. The sidecar composes the components' tables; --help,
 * the CACHEROUTE_* variables, --check-config and the start-up log are all
 * generated from the same rows, and each component's own config check
 * reads the bounds from them, so a default, a range or a help text exists
 * exactly once.
 *
 * Rows are static data; every function here is pure apart from writing the
 * config struct it is given. Not thread-safe on one struct.
 */
#ifndef CR_OPTIONS_H
#define CR_OPTIONS_H

#include <stddef.h>

#include "common.h"

typedef enum cr_option_type {
    CR_OPT_DOUBLE, /* double */
    CR_OPT_LONG,   /* long; integral */
    CR_OPT_U32,    /* uint32_t; integral */
    CR_OPT_U64,    /* uint64_t; integral, bounds at most 2^53 */
    CR_OPT_STRING, /* char *: the row's def_text itself, or a malloc'd copy
                    * the struct owns (see cr_options_release); with max > 0
                    * its length in bytes must be in min..max */
    CR_OPT_CHOICE, /* int or enum: the index of the value in choices */
    CR_OPT_LIST,   /* char ** at offset, its size_t count at count_offset;
                    * each occurrence appends a malloc'd copy; with max > 0
                    * each item's length in bytes must be in min..max */
    CR_OPT_CUSTOM  /* parsed by set, shown by show */
} cr_option_type;

/* cr_option.flags */
enum {
    CR_OPT_MIN_OPEN = 1u << 0,   /* numeric: value > min (else >= min) */
    CR_OPT_REPEATABLE = 1u << 1, /* may be given many times; its variable
                                  * holds a space-separated list */
    CR_OPT_UNSET = 1u << 2       /* no default: the field means nothing until
                                  * set_bit is set (shown as null) */
};

typedef struct cr_option {
    const char *name; /* flag without "--" ("n-shards"); the variable is
                       * CACHEROUTE_ + upper case, '-' as '_' */
    const char *key;  /* the field's name: the key in the effective config's
                       * JSON and in errors of checks on a struct */
    cr_option_type type;
    size_t offset;        /* of the field in the component's config struct */
    double def;           /* numeric default */
    const char *def_text; /* STRING and CHOICE: the default; others: shown by
                           * --help in place of def when not NULL */
    double min, max;      /* numeric bounds, inclusive but for CR_OPT_MIN_OPEN;
                           * STRING and LIST: length bounds when max > 0 */
    unsigned flags;       /* CR_OPT_* above */
    unsigned set_bit;     /* or'ed into the table's set word when given */
    const char *const *choices;                /* CHOICE: NULL-terminated */
    size_t count_offset;                       /* LIST */
    cr_status (*valid)(const char *value, cr_error *err); /* STRING, LIST
                           * (each item): optional extra check; err names
                           * the flag */
    cr_status (*set)(void *cfg, const char *value, cr_error *err); /* CUSTOM:
                           * parse and store, cfg unchanged on error */
    int (*show)(const void *cfg, char *buf, size_t len); /* CUSTOM: the
                           * effective value as text a flag would take, as
                           * snprintf: returns the length of the whole text
                           * (buf holds what fits), 0 when unset */
    const char *help;
} cr_option;

#define CR_OPT_NO_SET ((size_t)-1)
#define CR_OPT_U64_MAX 9007199254740992.0 /* 2^53: the largest U64 bound */

typedef struct cr_option_table {
    const char *group; /* the JSON object holding this table's keys in the
                        * effective config; "" = the top level */
    const cr_option *rows;
    size_t n;
    size_t set_offset;              /* of an unsigned word of set bits, or
                                     * CR_OPT_NO_SET */
    void (*release)(void *cfg);     /* optional: frees what CUSTOM rows own */
    /* Optional: the component's whole default (the rows' and what no row
     * names) and its whole check (the rows' bounds and its rules across
     * fields), for a composer; NULL: the rows' alone. */
    void (*defaults)(void *cfg);
    cr_status (*check)(const void *cfg, cr_error *err);
} cr_option_table;

/* A table of the array rows, without a set word or hooks:
 * const cr_option_table cr_x_options = CR_OPTION_TABLE("x", ROWS); */
#define CR_OPTION_TABLE(group_, rows_)                                                            \
    {.group = (group_), .rows = (rows_), .n = sizeof(rows_) / sizeof((rows_)[0]),                  \
     .set_offset = CR_OPT_NO_SET}
/* The same with the component's defaults and check (see cr_option_table). */
#define CR_OPTION_TABLE_HOOKED(group_, rows_, defaults_, check_)                                  \
    {.group = (group_), .rows = (rows_), .n = sizeof(rows_) / sizeof((rows_)[0]),                  \
     .set_offset = CR_OPT_NO_SET, .defaults = (defaults_), .check = (check_)}

/* ---- compositions: several components' tables over one struct ---- */

/* One table of a composition and where its struct lies in the composed
 * struct. */
typedef struct cr_option_part {
    const cr_option_table *table;
    size_t offset;
} cr_option_part;

/* Each part's defaults (its table's defaults hook, else its rows') into
 * cfg + the part's offset, in order. */
void cr_options_parts_defaults(const cr_option_part *parts, size_t n, void *cfg);

/* Each part's check (its table's check hook, else its rows' bounds with
 * the keys as they are), in order: the first failure's status with err
 * naming the field. */
cr_status cr_options_parts_check(const cr_option_part *parts, size_t n, const void *cfg,
                                 cr_error *err);

/* Writes every row's default into cfg: numbers from def, STRING fields
 * pointing at def_text, CHOICE the index of def_text, LIST empty; CUSTOM
 * and CR_OPT_UNSET rows are left alone, as are fields no row names. */
void cr_options_defaults(const cr_option_table *t, void *cfg);

/* The row named name (len bytes, no "--"), or NULL. */
const cr_option *cr_option_find(const cr_option_table *t, const char *name, size_t len);

/* Parses value for row o (one of t's) into cfg and marks its set bit. A
 * number must be a whole finite number (cr_parse_double), integral for
 * integer types, within bounds; a CHOICE one of choices exactly. On error:
 * CR_EINVAL (CR_ENOMEM when a copy cannot be made), cfg unchanged, and err
 * reads "--NAME must be RANGE, got \"VALUE\"" (or the CUSTOM row's text). */
cr_status cr_option_set(const cr_option_table *t, const cr_option *o, void *cfg,
                        const char *value, cr_error *err);

/* Checks every row of a struct filled in directly (CR_OPT_UNSET rows only
 * when set) against its bounds, in row order: numbers against min..max,
 * CHOICE indexes against choices, STRING and LIST lengths when bounded
 * (a NULL string passes). CUSTOM rows are the component's to check. The
 * first failure is CR_EINVAL with "PREFIXKEY must be RANGE, got VALUE"
 * ("config.qcap must be finite and > 0, got 0"; a length for strings,
 * "nic_names[1] must be 1..127 bytes, got 0" for a list item), or with
 * prefix NULL "--NAME must be ...". */
cr_status cr_options_check(const cr_option_table *t, const void *cfg, const char *prefix,
                           cr_error *err);

/* 1 when o's set bit is set in cfg (always 1 for rows without a set bit or
 * tables without a set word, unless the row is CR_OPT_UNSET). */
int cr_option_is_set(const cr_option_table *t, const cr_option *o, const void *cfg);

/* Frees every STRING that is not its row's default (the field becomes
 * NULL) and every LIST (it becomes empty), then calls t->release; cfg's
 * other fields are left as they are. */
void cr_options_release(const cr_option_table *t, void *cfg);

/* ---- text, for --help, errors and the effective configuration ---- */

/* "CACHEROUTE_N_SHARDS" */
void cr_option_env_name(const cr_option *o, char *buf, size_t len);
/* What a value must be. For integer types "in 1..65536", or ">= 1" when max
 * is the type's own maximum (2^53 for U64), prefixed "an integer " when
 * from_text (the value was typed, so it may not be one); for doubles
 * "finite and > 0" (max infinite), "in (0, 1]" (min open), "in 0..1e+09";
 * for choices "one of seconds, calls"; for bounded STRING and LIST rows
 * "1..127 bytes"; "" when the row has no range (CUSTOM, unbounded text). */
void cr_option_range_text(const cr_option *o, int from_text, char *buf, size_t len);
/* The default as --help shows it: def_text when given, else def for
 * numeric rows ("8", "0.825", "67108864"), else "". */
void cr_option_default_text(const cr_option *o, char *buf, size_t len);

/* v as the shortest of "%.15g", "%.16g", "%.17g" that reads back as v
 * ("0.1", "8.03", "1e+300", "nan", "-inf"): how errors and --help show a
 * double. */
void cr_option_number_text(double v, char *buf, size_t len);

/* Typed reads of the effective value, for the effective configuration. */
double cr_option_number(const cr_option *o, const void *cfg);      /* numeric rows */
const char *cr_option_string(const cr_option *o, const void *cfg); /* STRING, CHOICE */
/* LIST: the items (*n of them). */
char *const *cr_option_list(const cr_option *o, const void *cfg, size_t *n);

/* ---- the composer: argv, variables, --check-config (compose.c) ------------
 *
 * A program's flags are the rows of several components' tables over one
 * struct: groups of parts, each group's parts over the struct at its own
 * offset (the sidecar: its server rows, the core's parts at the offset of
 * its cr_core_config, the replica's). The sidecar and the replay tool
 * parse, look up, default, check and print them here, so a flag means,
 * parses and fails alike in both. */

typedef struct cr_option_group {
    const cr_option_part *parts;
    size_t n;
    size_t offset; /* of the group's struct in the composed one */
} cr_option_group;

typedef struct cr_composition {
    const cr_option_group *groups;
    size_t n;
} cr_composition;

/* One row of a composition: its table and row, where its table's struct
 * lies in the composed struct, and its index in walk order (--help order:
 * groups, their parts, their rows, each in order). */
typedef struct cr_option_ref {
    const cr_option_table *table;
    const cr_option *o; /* NULL past the last row */
    size_t offset;
    size_t index;
    size_t group, part; /* private: the walk's place */
} cr_option_ref;

/* Walks every row: for (cr_option_ref r = cr_compose_first(c); r.o;
 * cr_compose_next(c, &r)). */
cr_option_ref cr_compose_first(const cr_composition *c);
void cr_compose_next(const cr_composition *c, cr_option_ref *r);
size_t cr_compose_rows(const cr_composition *c);

/* The first row named name (len bytes, no "--") in walk order, so an
 * earlier table's row shadows a later one's: 1 with *out, or 0. */
int cr_compose_find(const cr_composition *c, const char *name, size_t len, cr_option_ref *out);
/* 1 when an earlier row of the same name shadows r. */
int cr_compose_shadowed(const cr_composition *c, const cr_option_ref *r);

/* Each part's defaults, checks (cr_options_parts_defaults and _check) and
 * release, over cfg, the composed struct. */
void cr_compose_defaults(const cr_composition *c, void *cfg);
cr_status cr_compose_check(const cr_composition *c, const void *cfg, cr_error *err);
void cr_compose_release(const cr_composition *c, void *cfg);

/* Where a row's value came from. */
enum { CR_SOURCE_DEFAULT = 0, CR_SOURCE_ENV, CR_SOURCE_FLAG };

/* What a program's command line holds besides its rows' flags. */
typedef struct cr_compose_args {
    const char *const *stops;    /* NULL-terminated: arguments that end the
                                  * parse, nothing applied (-h, --help,
                                  * --version); *stopped is its index */
    const char *const *switches; /* NULL-terminated: flags without a value
                                  * (--check-config, --generate); bit i of
                                  * *switched set when given */
    int env;                     /* 1: each row's CACHEROUTE_* variable is
                                  * read unless its flag is given (a flag
                                  * wins, even over a bad variable; a
                                  * repeatable flag replaces its variable's
                                  * space-separated list) */
    unsigned char *source;       /* optional: per row index, CR_SOURCE_* */
    int stopped;                 /* out */
    unsigned switched;           /* out */
} cr_compose_args;

/* Parses argv[1..argc) into cfg (holding its defaults): --flag value or
 * --flag=value, every argument scanned before any is applied, then the
 * variables (with a->env), then the flags in order, each through
 * cr_option_set. Returns 0, 1 when a stop argument came (nothing applied),
 * or -1 with err: "unexpected argument 'x' (see --help)", "unknown flag
 * '--x' (see --help)", "--x: missing value", the row's own message for a
 * bad value, or "CACHEROUTE_X: <the row's message>" for a bad variable. */
int cr_compose_parse(const cr_composition *c, int argc, char **argv, void *cfg,
                     cr_compose_args *a, cr_error *err);

/* Applies every variable to cfg (--help's look at a broken environment):
 * bad(ctx, "CACHEROUTE_X", why) for each bad one; returns how many. */
int cr_compose_env_errors(const cr_composition *c, void *cfg,
                          void (*bad)(void *ctx, const char *variable, const cr_error *why),
                          void *ctx);

/* A row's value as the text a flag would take ("" when unset or a list). */
void cr_compose_text(const cr_option_ref *r, const void *cfg, char *buf, size_t len);

/* The effective configuration as a JSON object (compose_json.c, jansson):
 * each table's rows by key, at the top level or in the table's group
 * object, null for a row without a value; then "options", one {"flag",
 * "env", "value", "source"} per row in walk order (source from source[],
 * "default" when NULL). NULL when out of memory. The caller owns it. */
struct json_t;
struct json_t *cr_compose_json(const cr_composition *c, const void *cfg,
                               const unsigned char *source);

#endif
