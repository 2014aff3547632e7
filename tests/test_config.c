/* Option rows and the sidecar's composed configuration: the rows' own
 * parsing, checks and text (on a table made up here), then, for every row
 * of every composed table, --help, the effective configuration's
 * "options", defaults, precedence (flag over variable over default), bad
 * values, and each component's check reading its bounds from its rows. */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "endpoints_file.h"
#include "memory_test.h"
#include "cunit_main.h"

/* ---- the row API on a table of its own ----------------------------------- */

typedef struct toy {
    long count;
    uint32_t u;
    uint64_t big;
    double frac, pos;
    double opt; /* CR_OPT_UNSET */
    char *name;
    int mode;
    char **items;
    size_t n_items;
    unsigned set;
} toy;

static const char *const MODES[] = {"fast", "slow", NULL};

static const cr_option TOY_ROWS[] = {
    {.name = "count", .key = "count", .type = CR_OPT_LONG, .offset = offsetof(toy, count),
     .def = 3, .min = -5, .max = 1000, .set_bit = 1, .help = "a count"},
    {.name = "u", .key = "u", .type = CR_OPT_U32, .offset = offsetof(toy, u), .def = 7, .min = 1,
     .max = UINT32_MAX, .help = "a u32"},
    {.name = "big", .key = "big", .type = CR_OPT_U64, .offset = offsetof(toy, big), .def = 1e6,
     .min = 1, .max = CR_OPT_U64_MAX, .help = "a u64"},
    {.name = "frac", .key = "frac", .type = CR_OPT_DOUBLE, .offset = offsetof(toy, frac),
     .def = 0.5, .min = 0, .max = 1, .flags = CR_OPT_MIN_OPEN, .help = "a fraction"},
    {.name = "pos", .key = "pos", .type = CR_OPT_DOUBLE, .offset = offsetof(toy, pos), .def = 2,
     .min = 0, .max = INFINITY, .flags = CR_OPT_MIN_OPEN, .help = "positive"},
    {.name = "opt", .key = "opt", .type = CR_OPT_DOUBLE, .offset = offsetof(toy, opt),
     .def_text = "computed", .min = 0, .max = 1e9, .flags = CR_OPT_UNSET, .set_bit = 2,
     .help = "optional"},
    {.name = "toy-name", .key = "name", .type = CR_OPT_STRING, .offset = offsetof(toy, name),
     .def_text = "dflt", .min = 1, .max = 8, .help = "a name"},
    {.name = "mode", .key = "mode", .type = CR_OPT_CHOICE, .offset = offsetof(toy, mode),
     .def_text = "slow", .choices = MODES, .help = "a mode"},
    {.name = "item", .key = "items", .type = CR_OPT_LIST, .offset = offsetof(toy, items),
     .count_offset = offsetof(toy, n_items), .min = 1, .max = 4, .flags = CR_OPT_REPEATABLE,
     .help = "items"},
};

static const cr_option_table TOY = {.group = "toy",
                                    .rows = TOY_ROWS,
                                    .n = sizeof TOY_ROWS / sizeof TOY_ROWS[0],
                                    .set_offset = offsetof(toy, set)};

static const cr_option *toy_row(const char *name)
{
    const cr_option *o = cr_option_find(&TOY, name, strlen(name));
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    return o;
}

static void expect_set_error(toy *t, const char *name, const char *value, const char *msg)
{
    cr_error err;
    toy before = *t;
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row(name), t, value, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
    CU_ASSERT(memcmp(&before, t, sizeof before) == 0); /* unchanged */
}

static void test_rows_defaults_and_set(void)
{
    toy t;
    cr_error err;
    memset(&t, 0, sizeof t);
    cr_options_defaults(&TOY, &t);
    CU_ASSERT_EQUAL(t.count, 3);
    CU_ASSERT_EQUAL(t.u, 7);
    CU_ASSERT_EQUAL(t.big, 1000000);
    CU_ASSERT_EQUAL(t.frac, 0.5);
    CU_ASSERT_EQUAL(t.opt, 0); /* UNSET: left alone */
    CU_ASSERT_PTR_EQUAL(t.name, TOY_ROWS[6].def_text);
    CU_ASSERT_EQUAL(t.mode, 1);
    CU_ASSERT_EQUAL(t.n_items, 0);
    CU_ASSERT_EQUAL(t.set, 0);
    CU_ASSERT_FALSE(cr_option_is_set(&TOY, toy_row("opt"), &t));
    CU_ASSERT_TRUE(cr_option_is_set(&TOY, toy_row("u"), &t)); /* no set bit */
    CU_ASSERT_PTR_NULL(cr_option_find(&TOY, "coun", 4));

    /* Each message is "--NAME must be RANGE, got \"VALUE\"". */
    static const char *const bad[][3] = {
        {"count", "1.5", "an integer in -5..1000"},   {"count", "1001", "an integer in -5..1000"},
        {"count", " 1", "an integer in -5..1000"},    {"u", "0", "an integer >= 1"},
        {"u", "4294967296", "an integer >= 1"},       {"big", "1e300", "an integer >= 1"},
        {"frac", "0", "in (0, 1]"},                   {"frac", "nan", "in (0, 1]"},
        {"pos", "inf", "finite and > 0"},             {"pos", "1e999", "finite and > 0"},
        {"pos", "", "finite and > 0"},                {"opt", "-1", "in 0..1e+09"},
        {"toy-name", "", "1..8 bytes"},               {"toy-name", "123456789", "1..8 bytes"},
        {"mode", "Fast", "one of fast, slow"},        {"item", "12345", "1..4 bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[128];
        snprintf(msg, sizeof msg, "--%s must be %s, got \"%s\"", bad[i][0], bad[i][2], bad[i][1]);
        expect_set_error(&t, bad[i][0], bad[i][1], msg);
    }

    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("count"), &t, "-5", &err), CR_OK);
    CU_ASSERT_EQUAL(t.count, -5);
    CU_ASSERT_EQUAL(t.set, 1);
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("big"), &t, "9007199254740992", &err), CR_OK);
    CU_ASSERT_EQUAL(t.big, 9007199254740992ULL);
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("frac"), &t, "1", &err), CR_OK);
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("opt"), &t, "1e9", &err), CR_OK);
    CU_ASSERT_TRUE(cr_option_is_set(&TOY, toy_row("opt"), &t));
    CU_ASSERT_EQUAL(t.set, 3);
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("toy-name"), &t, "abc", &err), CR_OK);
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("toy-name"), &t, "abcd", &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(cr_option_string(toy_row("toy-name"), &t), "abcd");
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("mode"), &t, "fast", &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(cr_option_string(toy_row("mode"), &t), "fast");
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("item"), &t, "a", &err), CR_OK);
    CU_ASSERT_EQUAL(cr_option_set(&TOY, toy_row("item"), &t, "bb", &err), CR_OK);
    size_t n;
    char *const *items = cr_option_list(toy_row("item"), &t, &n);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(items[0], "a");
    CU_ASSERT_STRING_EQUAL(items[1], "bb");
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "", &err), CR_OK);
    cr_options_release(&TOY, &t);
    CU_ASSERT_PTR_NULL(t.name);
    CU_ASSERT_PTR_NULL(t.items);
    CU_ASSERT_EQUAL(t.n_items, 0);
}

static void test_rows_check_and_text(void)
{
    toy t;
    cr_error err;
    char *items[] = {"ok", ""};
    memset(&t, 0, sizeof t);
    cr_options_defaults(&TOY, &t);
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "cfg.", &err), CR_OK);
    t.opt = -1; /* unset: not checked */
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "cfg.", &err), CR_OK);
    t.set |= 2;
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "cfg.", &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "cfg.opt must be in 0..1e+09, got -1");
    t.opt = 0;
    t.frac = NAN;
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, NULL, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "--frac must be in (0, 1], got nan");
    t.frac = 0.1;
    t.pos = INFINITY;
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "", &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "pos must be finite and > 0, got inf");
    t.pos = 1;
    t.u = 0;
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "", &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "u must be >= 1, got 0");
    t.u = 1;
    t.mode = 7;
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "", &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "mode must be one of fast, slow, got 7");
    t.mode = 0;
    t.items = items;
    t.n_items = 2;
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "", &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "items[1] must be 1..4 bytes, got 0");
    t.n_items = 1;
    t.name = NULL; /* a NULL string passes */
    CU_ASSERT_EQUAL(cr_options_check(&TOY, &t, "", &err), CR_OK);

    char buf[128];
    cr_option_env_name(toy_row("toy-name"), buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "CACHEROUTE_TOY_NAME");
    cr_option_default_text(toy_row("frac"), buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "0.5");
    cr_option_default_text(toy_row("big"), buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "1000000");
    cr_option_default_text(toy_row("opt"), buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "computed");
    cr_option_default_text(toy_row("item"), buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "");
    cr_option_range_text(toy_row("count"), 0, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "in -5..1000");
    cr_option_range_text(toy_row("mode"), 1, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "one of fast, slow");
    cr_option_number_text(0.1, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "0.1");
    cr_option_number_text(1.0 / 3, buf, sizeof buf);
    CU_ASSERT_EQUAL(strtod(buf, NULL), 1.0 / 3);
    cr_option_number_text(-INFINITY, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "-inf");
}

/* ---- the composed configuration ------------------------------------------ */

/* Every row of every composed table. */
typedef struct row {
    const cr_option_table *table;
    const cr_option *o;
    size_t offset, index;
} row;

static size_t all_rows(row *out, size_t max)
{
    size_t n = 0;
    const cr_composition *c = &cr_config_composition;
    for (cr_option_ref r = cr_compose_first(c); r.o && n < max; cr_compose_next(c, &r), n++)
        out[n] = (row){r.table, r.o, r.offset, n};
    return n;
}

static row ROWS_[CR_CONFIG_MAX_OPTIONS];
static size_t N_ROWS_;

static void load_rows(void)
{
    if (!N_ROWS_)
        N_ROWS_ = all_rows(ROWS_, CR_CONFIG_MAX_OPTIONS);
}

static const void *row_cfg(const row *r, const cr_config *cfg)
{
    return (const char *)cfg + r->offset;
}

static void clear_env(void)
{
    char name[96];
    load_rows();
    for (size_t i = 0; i < N_ROWS_; i++) {
        cr_option_env_name(ROWS_[i].o, name, sizeof name);
        unsetenv(name);
    }
}

/* cr_config_load with argv[0] and up to 3 more arguments (NULL: none). */
static int load(cr_config *cfg, char *err, const char *a1, const char *a2, const char *a3)
{
    char *argv[5] = {"cacheroute-sidecar", NULL, NULL, NULL, NULL};
    int argc = 1;
    const char *args[3] = {a1, a2, a3};
    for (int i = 0; i < 3 && args[i]; i++)
        argv[argc++] = (char *)args[i];
    cr_error e;
    int rc = cr_config_load(cfg, argc, argv, &e);
    snprintf(err, 512, "%s", e.msg);
    return rc;
}

static json_t *option_entry(json_t *j, const cr_option *o)
{
    json_t *opts = json_object_get(j, "options"), *e;
    size_t i;
    json_array_foreach(opts, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "flag")), o->name) == 0)
            return e;
    }
    return NULL;
}

static void test_rows_fit_and_names_are_unique(void)
{
    load_rows();
    size_t total = 0;
    for (size_t i = 0; i < N_ROWS_; i++)
        total += ROWS_[i].o == ROWS_[i].table->rows ? ROWS_[i].table->n : 0;
    CU_ASSERT_EQUAL(N_ROWS_, total);
    CU_ASSERT(N_ROWS_ >= 36); /* server 6, core 1, planner 3, estimator 4, inject 19, probe 3 */
    for (size_t i = 0; i < N_ROWS_; i++) {
        for (size_t k = i + 1; k < N_ROWS_; k++) {
            CU_ASSERT(strcmp(ROWS_[i].o->name, ROWS_[k].o->name) != 0);
            if (strcmp(ROWS_[i].table->group, ROWS_[k].table->group) == 0)
                CU_ASSERT(strcmp(ROWS_[i].o->key, ROWS_[k].o->key) != 0);
        }
        CU_ASSERT_PTR_NOT_NULL(ROWS_[i].o->help);
        CU_ASSERT_PTR_NOT_NULL(ROWS_[i].o->key);
    }
}

static void test_usage_lists_every_row(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    cr_config_usage(f);
    fclose(f);
    load_rows();
    const char *prev = text;
    for (size_t i = 0; i < N_ROWS_; i++) {
        const cr_option *o = ROWS_[i].o;
        char want[400], env[96], def[160];
        cr_option_env_name(o, env, sizeof env);
        cr_option_default_text(o, def, sizeof def);
        snprintf(want, sizeof want, "\n  --%-24s %s\n", o->name, o->help);
        const char *at = strstr(text, want);
        CU_ASSERT_PTR_NOT_NULL(at);
        if (!at) {
            fprintf(stderr, "\n--%s missing from --help\n", o->name);
            continue;
        }
        CU_ASSERT(at >= prev); /* in row order */
        prev = at;
        snprintf(want, sizeof want, "env %s, default '%s'", env, def);
        const char *line2 = strchr(at + 1, '\n') + 1;
        CU_ASSERT(strncmp(line2 + 29, want, strlen(want)) == 0);
    }
    free(text);
}

static int same_value(const row *r, const void *a, const void *b)
{
    const cr_option *o = r->o;
    switch (o->type) {
    case CR_OPT_STRING:
    case CR_OPT_CHOICE: {
        const char *x = cr_option_string(o, a), *y = cr_option_string(o, b);
        return x == y || (x && y && strcmp(x, y) == 0);
    }
    case CR_OPT_LIST: {
        size_t n, m;
        cr_option_list(o, a, &n);
        cr_option_list(o, b, &m);
        return n == m;
    }
    case CR_OPT_CUSTOM: {
        char x[256] = "", y[256] = "";
        return o->show(a, x, sizeof x) == o->show(b, y, sizeof y) && strcmp(x, y) == 0;
    }
    default:
        return cr_option_number(o, a) == cr_option_number(o, b);
    }
}

/* The rows' defaults, each component's default function and a load with
 * nothing given all agree; every source is "default". */
static void test_defaults_come_from_rows(void)
{
    static cr_config from_rows, from_components, loaded;
    char err[512];
    clear_env();
    memset(&from_rows, 0, sizeof from_rows);
    for (size_t i = 0; i < N_ROWS_; i++)
        if (ROWS_[i].o == ROWS_[i].table->rows)
            cr_options_defaults(ROWS_[i].table, (char *)&from_rows + ROWS_[i].offset);
    memset(&from_components, 0, sizeof from_components);
    cr_options_defaults(&cr_server_options, &from_components.server);
    cr_core_config_default(&from_components.core);
    cr_replica_config_default(&from_components.replica);
    cr_options_defaults(&cr_epp_server_options, &from_components.epp);
    cr_options_defaults(&cr_admit_server_options, &from_components.admit);
    cr_options_defaults(&cr_discover_options, &from_components.discover);
    cr_options_defaults(&cr_scrape_options, &from_components.scrape);
    CU_ASSERT_EQUAL_FATAL(load(&loaded, err, NULL, NULL, NULL), 0);
    json_t *j = cr_config_json(&loaded);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "options")), N_ROWS_);
    for (size_t i = 0; i < N_ROWS_; i++) {
        const row *r = &ROWS_[i];
        CU_ASSERT(same_value(r, row_cfg(r, &from_rows), row_cfg(r, &from_components)));
        if (strcmp(r->o->name, "threads") != 0) /* 0 resolves to the cores */
            CU_ASSERT(same_value(r, row_cfg(r, &from_rows), row_cfg(r, &loaded)));
        json_t *e = json_array_get(json_object_get(j, "options"), i);
        char env[96];
        cr_option_env_name(r->o, env, sizeof env);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "flag")), r->o->name);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "env")), env);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "source")), "default");
        json_t *group = *r->table->group ? json_object_get(j, r->table->group) : j;
        CU_ASSERT_PTR_NOT_NULL(json_object_get(group, r->o->key));
        CU_ASSERT(json_equal(json_object_get(group, r->o->key), json_object_get(e, "value")));
    }
    CU_ASSERT(loaded.server.threads >= 1);
    /* The per-component checks accept the defaults. */
    cr_error e;
    CU_ASSERT_EQUAL(cr_planner_config_check(&from_components.core.planner, &e), CR_OK);
    CU_ASSERT_EQUAL(cr_estimator_config_check(&from_components.core.estimator, &e), CR_OK);
    CU_ASSERT_EQUAL(cr_inject_config_check(&from_components.core.inject, &e), CR_OK);
    CU_ASSERT_EQUAL(cr_probe_config_check(&from_components.core.probe, &e), CR_OK);
    json_decref(j);
    cr_config_free(&loaded);
}

static void test_json_keys(void)
{
    cr_config cfg;
    char err[512];
    clear_env();
    CU_ASSERT_EQUAL_FATAL(load(&cfg, err, "--check-config", NULL, NULL), 2);
    json_t *j = cr_config_json(&cfg);
    static const char *const top[] = {"listen", "threads", "max_message_bytes",
                                      "shutdown_grace_s", "metrics_listen", "log_level",
                                      "replan_interval_s"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        CU_ASSERT_PTR_NOT_NULL(json_object_get(j, top[i]));
    json_t *planner = json_object_get(j, "planner"), *estimator = json_object_get(j, "estimator");
    CU_ASSERT_EQUAL(json_object_size(planner), 3);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(planner, "n_shards"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(planner, "qcap"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(planner, "warm_slots_per_shard"));
    CU_ASSERT_EQUAL(json_object_size(estimator), 4);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(estimator, "clock")), "seconds");
    CU_ASSERT_PTR_NOT_NULL(json_object_get(estimator, "half_life"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(estimator, "window"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(estimator, "max_owners"));
    json_t *inject = json_object_get(j, "inject"), *probe = json_object_get(j, "probe");
    CU_ASSERT_EQUAL(json_object_size(inject), cr_inject_options.n);
    CU_ASSERT_EQUAL(json_object_size(probe), cr_probe_options.n);
    CU_ASSERT(json_is_null(json_object_get(inject, "kv_bytes_per_token")));
    CU_ASSERT(json_is_null(json_object_get(inject, "prefill_coeffs")));
    CU_ASSERT(json_is_null(json_object_get(inject, "kv_sources")));
    CU_ASSERT(json_is_array(json_object_get(probe, "nic_names")));
    CU_ASSERT(json_is_integer(json_object_get(planner, "n_shards")));
    CU_ASSERT(json_is_real(json_object_get(planner, "qcap")));
    json_decref(j);
    cr_config_free(&cfg);
}

/* Two valid values other than the default, as text, and what the
 * effective configuration shows for each (NULL: the text itself, or for
 * numbers the number it parses as). */
typedef struct alt {
    char a[512], b[512];
    const char *show_a, *show_b;
} alt;

static int valid_number(const cr_option *o, double v)
{
    int open = (o->flags & CR_OPT_MIN_OPEN) != 0;
    if (!isfinite(v) || (open ? !(v > o->min) : !(v >= o->min)) || v > o->max || v == o->def)
        return 0;
    return o->type == CR_OPT_DOUBLE || v == floor(v);
}

static int alternatives(const cr_option *o, alt *out)
{
    static const struct {
        const char *name, *a, *b, *show_a, *show_b;
    } fixed[] = {
        {"listen", "127.0.0.1:1", "[::1]:2", NULL, NULL},
        {"metrics-listen", "127.0.0.1:3", "", NULL, NULL},
        {"sysfs-root", "/tmp/cr-a", "/tmp/cr-b", NULL, NULL},
        {"state-file", "/tmp/cr-state-a", "", NULL, NULL},
        {"nic", "eth7 eth9", "eth8", NULL, NULL},
        {"prefill-coeffs", "1,2,3", "4,5e-06,0", NULL, NULL},
        {"model-config", CR_TEST_MODEL_CONFIGS "/Llama-3.1-8B.json",
         CR_TEST_MODEL_CONFIGS "/Mixtral-8x7B.json", NULL, NULL},
        {"kv-source", "a=1 b=2,3", "c=4", "a=1,0.2 b=2,3", "c=4,0.2"},
        {"tls-cert", "/tmp/cr-a.pem", "/tmp/cr-b.pem", NULL, NULL},
        {"tls-key", "/tmp/cr-a.key", "/tmp/cr-b.key", NULL, NULL},
        {"tls-client-ca", "/tmp/cr-ca-a.pem", "/tmp/cr-ca-b.pem", NULL, NULL},
        {"health-listen", "127.0.0.1:4", "[::1]:5", NULL, NULL},
        {"admin-identity", "spiffe://a/admin admin.example", "cn-admin", NULL, NULL},
        {"route-identity", "spiffe://a/gateway gw.example", "cn-gateway", NULL, NULL},
        {"admin-token-file", "/tmp/cr-token-a", "/tmp/cr-token-b", NULL, NULL},
        {"endpoints-file", "/tmp/cr-endpoints-a.yaml", "/tmp/cr-endpoints-b.json", NULL, NULL},
        {"state-backend", "redis://127.0.0.1:6379", "unix:/tmp/cr-r.sock?db=2", NULL, NULL},
        {"state-backend-password-file", "/tmp/cr-redis-pw-a", "/tmp/cr-redis-pw-b", NULL, NULL},
        {"replica-id", "replica-0", "r.1_x", NULL, NULL},
        {"cluster", "c1", "prod.east-2", NULL, NULL},
        {"kv-events", "0=tcp://127.0.0.1:5557 1=ipc:///k,replay=tcp://h:5558", "2=tcp://h:1",
         NULL, NULL},
        {"kv-events-topic", "kv@", "kv@vllm-0@llama-3", NULL, NULL},
        {"epp-listen", "127.0.0.1:9002", "[::1]:9003", NULL, NULL},
        {"epp-owner-header", "x-user", "", NULL, NULL},
        {"epp-base-model", "llama-3", "", NULL, NULL},
        {"objectives", "interactive:0:2000,batch:-1", "", NULL, NULL},
        /* at most --admit-max-queued, which is 0 here */
        {"admit-max-per-id", "0", "0", NULL, NULL},
        /* at most --admit-pressure (0.1) */
        {"admit-pressure-off", "0.02", "0.04", NULL, NULL},
        {"endpoints-dns", "vllm.default.svc:8000", "vllm:1", NULL, NULL},
        {"dns-server", "127.0.0.1:53", "[::1]:5353", NULL, NULL},
        {"kv-events-template", "tcp://{ip}:5557", "ipc:///run/{ip}", NULL, NULL},
        {"scrape-path", "/metrics/engine", "/stats?format=prometheus", NULL, NULL},
        {"endpoints-k8s-pool", "llm/vllm-pool", "", NULL, NULL},
        {"k8s-api", "https://127.0.0.1:6443", "https://[::1]:6443", NULL, NULL},
        {"k8s-token-file", "/tmp/cr-k8s-token-a", "/tmp/cr-k8s-token-b", NULL, NULL},
        {"k8s-ca-file", "/tmp/cr-k8s-ca-a.pem", "/tmp/cr-k8s-ca-b.pem", NULL, NULL},
    };
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (strcmp(o->name, fixed[i].name) == 0) {
            snprintf(out->a, sizeof out->a, "%s", fixed[i].a);
            snprintf(out->b, sizeof out->b, "%s", fixed[i].b);
            out->show_a = fixed[i].show_a;
            out->show_b = fixed[i].show_b;
            return 1;
        }
    }
    if (o->type == CR_OPT_CHOICE) {
        int k = 0;
        for (size_t i = 0; o->choices[i]; i++)
            if (strcmp(o->choices[i], o->def_text) != 0 && k++ == 0)
                snprintf(out->a, sizeof out->a, "%s", o->choices[i]);
        snprintf(out->b, sizeof out->b, "%s", o->def_text); /* the flag may give the default */
        return k > 0;
    }
    if (o->type == CR_OPT_DOUBLE || o->type == CR_OPT_LONG || o->type == CR_OPT_U32 ||
        o->type == CR_OPT_U64) {
        double base = (o->flags & CR_OPT_UNSET) ? 1 : o->def;
        const double cands[] = {base * 2, base + 1, base / 2, o->min + 1, o->max, base + 2};
        int k = 0;
        for (size_t i = 0; i < sizeof cands / sizeof cands[0] && k < 2; i++) {
            if (!valid_number(o, cands[i]) || (k == 1 && strtod(out->a, NULL) == cands[i]))
                continue;
            cr_option_number_text(cands[i], k ? out->b : out->a, sizeof out->a);
            k++;
        }
        return k == 2;
    }
    return 0;
}

/* The value in "options" is what text says. */
static void assert_value(const cr_option *o, json_t *v, const char *text, const char *show)
{
    if (o->type == CR_OPT_LIST) {
        char copy[64], *save = NULL;
        snprintf(copy, sizeof copy, "%s", text);
        size_t i = 0;
        for (char *item = strtok_r(copy, " ", &save); item; item = strtok_r(NULL, " ", &save))
            CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(v, i++)), item);
        CU_ASSERT_EQUAL(json_array_size(v), i);
    } else if (json_is_string(v)) {
        CU_ASSERT_STRING_EQUAL(json_string_value(v), show ? show : text);
    } else {
        CU_ASSERT(json_is_number(v));
        CU_ASSERT_EQUAL(json_number_value(v), strtod(text, NULL));
    }
}

static void expect_source(const cr_config *cfg, const cr_option *o, const char *source,
                          const char *text, const char *show)
{
    json_t *j = cr_config_json(cfg);
    json_t *e = option_entry(j, o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "source")), source);
    if (text)
        assert_value(o, json_object_get(e, "value"), text, show);
    json_decref(j);
}

/* For every row: the variable beats the default, the flag beats the
 * variable, and "options" says which won. */
static void test_precedence(void)
{
    clear_env();
    for (size_t i = 0; i < N_ROWS_; i++) {
        const cr_option *o = ROWS_[i].o;
        char env[96], flag[96], err[512];
        alt v;
        cr_config cfg;
        if (strcmp(o->name, "kv-events-template") == 0) /* it needs a discovery source */
            setenv("CACHEROUTE_ENDPOINTS_DNS", "vllm:8000", 1);
        CU_ASSERT_TRUE(alternatives(o, &v));
        cr_option_env_name(o, env, sizeof env);
        snprintf(flag, sizeof flag, "--%s", o->name);
        setenv(env, v.a, 1);
        int rc = load(&cfg, err, "--check-config", NULL, NULL);
        if (rc != 2)
            fprintf(stderr, "\n%s=%s: %s\n", env, v.a, err);
        CU_ASSERT_EQUAL(rc, 2);
        expect_source(&cfg, o, "env", v.a, v.show_a);
        cr_config_free(&cfg);
        rc = load(&cfg, err, flag, v.b, NULL);
        if (rc != 0)
            fprintf(stderr, "\n%s %s: %s\n", flag, v.b, err);
        CU_ASSERT_EQUAL(rc, 0);
        expect_source(&cfg, o, "flag", v.b, v.show_b);
        cr_config_free(&cfg);
        /* A flag overrides even a bad variable. */
        setenv(env, "\x01", 1);
        CU_ASSERT_EQUAL(load(&cfg, err, flag, v.b, NULL), 0);
        cr_config_free(&cfg);
        unsetenv(env);
        CU_ASSERT_EQUAL(load(&cfg, err, NULL, NULL, NULL), 0);
        expect_source(&cfg, o, "default", NULL, NULL);
        cr_config_free(&cfg);
        clear_env();
    }
}

/* A value the row's own check refuses: an address without a port, or
 * for a name a character outside [A-Za-z0-9._-]. */
static const char *refused_by_valid(const cr_option *o)
{
    if (!strcmp(o->name, "replica-id") || !strcmp(o->name, "cluster"))
        return "name/with/slash";
    if (!strcmp(o->name, "epp-owner-header"))
        return "X-Session-Id"; /* the data plane sends header names in lower case */
    return "host-without-port";
}

/* Each bad value is an error naming the flag (or the variable) and the
 * value. */
static void test_bad_values(void)
{
    clear_env();
    for (size_t i = 0; i < N_ROWS_; i++) {
        const cr_option *o = ROWS_[i].o;
        static char bad[8][4200];
        size_t n = 4;
        memset(bad, 0, sizeof bad);
        strcpy(bad[0], "abc");
        strcpy(bad[1], "x5");
        strcpy(bad[2], "nan");
        strcpy(bad[3], "inf");
        if (o->type == CR_OPT_STRING || o->type == CR_OPT_LIST) {
            n = 0;
            if (o->max > 0 && o->max + 1 < sizeof bad[0])
                memset(bad[n++], 'a', (size_t)o->max + 1); /* one byte too long */
            if (o->min >= 1)
                bad[n++][0] = '\0';
            if (o->valid)
                snprintf(bad[n++], sizeof bad[0], "%s", refused_by_valid(o));
        } else if (o->type == CR_OPT_CHOICE) {
            n = 2;
            snprintf(bad[1], sizeof bad[1], "%c%s", 'X', o->def_text);
        } else if (o->type == CR_OPT_CUSTOM) {
            n = 2;
            snprintf(bad[1], sizeof bad[1], "1,,2");
        } else {
            if (!isinf(o->max))
                cr_option_number_text(o->max * 2 + 1, bad[n++], sizeof bad[0]);
            cr_option_number_text(o->min - 1, bad[n++], sizeof bad[0]);
            if (o->type != CR_OPT_DOUBLE)
                cr_option_number_text(o->min + 0.5, bad[n++], sizeof bad[0]);
        }
        char env[96], flag[96], err[512];
        cr_option_env_name(o, env, sizeof env);
        snprintf(flag, sizeof flag, "--%s", o->name);
        for (size_t k = 0; k < n; k++) {
            cr_config cfg;
            int rc = load(&cfg, err, flag, bad[k], NULL);
            if (rc != -1 || !strstr(err, flag))
                fprintf(stderr, "\n%s '%.40s': rc %d, %s\n", flag, bad[k], rc, err);
            CU_ASSERT_EQUAL(rc, -1);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, flag));
            if (o->type != CR_OPT_CUSTOM && strlen(bad[k]) < 100)
                CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[k]));
            CU_ASSERT_PTR_NULL(strchr(err, '\n'));
            cr_config_free(&cfg);
            if ((o->flags & CR_OPT_REPEATABLE) && !bad[k][0])
                continue; /* an empty list, in a variable */
            setenv(env, bad[k], 1);
            rc = load(&cfg, err, "--check-config", NULL, NULL);
            if (rc != -1 || !strstr(err, env))
                fprintf(stderr, "\n%s='%.40s': rc %d, %s\n", env, bad[k], rc, err);
            CU_ASSERT_EQUAL(rc, -1);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, env));
            cr_config_free(&cfg);
            unsetenv(env);
        }
    }
}

/* Writes a value outside the row's bounds into its field; 0 when the row
 * has none to break. */
static int break_field(const cr_option *o, void *cfg)
{
    char *p = (char *)cfg + o->offset;
    double nan_ = NAN;
    if (o->type == CR_OPT_DOUBLE) {
        memcpy(p, &nan_, sizeof nan_);
        return 1;
    }
    if (o->type == CR_OPT_U32 && o->min >= 1) {
        uint32_t z = 0;
        memcpy(p, &z, sizeof z);
        return 1;
    }
    if (o->type == CR_OPT_U64 && o->min >= 1) {
        uint64_t z = 0;
        memcpy(p, &z, sizeof z);
        return 1;
    }
    if (o->type == CR_OPT_CHOICE) {
        int k = 99;
        memcpy(p, &k, sizeof k);
        return 1;
    }
    return 0;
}

/* Each component's check reads its bounds from its rows: a field broken
 * directly is reported, named as the check names fields. */
static void test_component_checks_use_rows(void)
{
    static const struct {
        const cr_option_table *t;
        size_t size;
        const char *prefix; /* NULL: "--flag" */
    } parts[] = {
        {&cr_planner_options, sizeof(cr_planner_config), "config."},
        {&cr_estimator_options, sizeof(cr_estimator_config), ""},
        {&cr_inject_options, sizeof(cr_inject_config), NULL},
        {&cr_probe_options, sizeof(cr_probe_config), ""},
    };
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
        for (size_t i = 0; i < parts[p].t->n; i++) {
            const cr_option *o = &parts[p].t->rows[i];
            cr_core_config core;
            cr_core_config_default(&core);
            void *c = p == 0 ? (void *)&core.planner
                      : p == 1 ? (void *)&core.estimator
                      : p == 2 ? (void *)&core.inject
                               : (void *)&core.probe;
            if (o->flags & CR_OPT_UNSET)
                core.inject.set |= o->set_bit;
            if (!break_field(o, c))
                continue;
            cr_error err;
            cr_status st = p == 0   ? cr_planner_config_check(c, &err)
                           : p == 1 ? cr_estimator_config_check(c, &err)
                           : p == 2 ? cr_inject_config_check(c, &err)
                                    : cr_probe_config_check(c, &err);
            char want[96];
            if (parts[p].prefix)
                snprintf(want, sizeof want, "%s%s must be ", parts[p].prefix, o->key);
            else
                snprintf(want, sizeof want, "--%s must be ", o->name);
            CU_ASSERT_EQUAL(st, CR_EINVAL);
            CU_ASSERT(strncmp(err.msg, want, strlen(want)) == 0);
            if (strncmp(err.msg, want, strlen(want)) != 0)
                fprintf(stderr, "\nwant '%s...', got '%s'\n", want, err.msg);
        }
    }
}

/* --help works with a broken environment: usage on stdout, exit status 1
 * (the caller exits 0), and one warning line naming each bad variable. */
static void test_help_with_bad_environment(void)
{
    clear_env();
    setenv("CACHEROUTE_N_SHARDS", "0", 1);
    setenv("CACHEROUTE_MFU", "2", 1);
    char path[] = "/tmp/test_config_stderr_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    fflush(stdout);
    fflush(stderr);
    int out = dup(1), errfd = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(fd, 2);
    cr_config cfg;
    char err[512];
    int rc = load(&cfg, err, "--help", NULL, NULL);
    fflush(stdout);
    fflush(stderr);
    dup2(out, 1);
    dup2(errfd, 2);
    close(out);
    close(errfd);
    close(null);
    cr_config_free(&cfg);
    char text[2048] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    unlink(path);
    clear_env();
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_FATAL(n > 0);
    text[n] = '\0';
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "CACHEROUTE_N_SHARDS"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "CACHEROUTE_MFU"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "refuse to start"));
    CU_ASSERT_PTR_NOT_NULL(strchr(text, '\n'));
    CU_ASSERT_EQUAL(strchr(text, '\n') - text, n - 1); /* one line */
}

/* --epp-listen: endpoint addresses are where the gateway sends requests,
 * so only ip:port passes, and a refusal names the file, entry and value. */
static void test_epp_wants_ip_ports(void)
{
    static const char *const good[] = {"10.0.0.7:8000", "127.0.0.1:1", "[::1]:8000",
                                       "[fd00::2:1]:65535"};
    static const char *const bad[] = {"engine-a:8000", "10.0.0.7", "10.0.0.7:", "10.0.0.7:0",
                                      "10.0.0.7:65536", "10.0.0:80", "::1:8000", "[::1]8000",
                                      "[10.0.0.7]:80", "10.0.0.7:80x", "unix:/s"};
    cr_error err;
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cr_endpoint_spec e = {.id = "a", .address = good[i], .weight = 1};
        CU_ASSERT_EQUAL(cr_endpoints_check_ip_ports("f.yaml", &e, 1, &err), CR_OK);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_endpoint_spec e[2] = {{.id = "a", .address = "10.0.0.1:80", .weight = 1},
                                 {.id = "b", .address = bad[i], .weight = 1}};
        CU_ASSERT_EQUAL(cr_endpoints_check_ip_ports("f.yaml", e, 2, &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "f.yaml"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "endpoints[1] (id \"b\")"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i]));
    }
}

static const cr_test_case row_tests[] = {
    {"defaults and set", test_rows_defaults_and_set},
    {"checks and text", test_rows_check_and_text},
    {NULL, NULL},
};

static const cr_test_case config_tests[] = {
    {"rows fit, names unique", test_rows_fit_and_names_are_unique},
    {"--help lists every row", test_usage_lists_every_row},
    {"defaults come from the rows", test_defaults_come_from_rows},
    {"effective configuration keys", test_json_keys},
    {"flag beats variable beats default", test_precedence},
    {"bad values name the flag", test_bad_values},
    {"component checks read the rows", test_component_checks_use_rows},
    {"--help with a bad environment", test_help_with_bad_environment},
    {"--epp-listen wants ip:port endpoints", test_epp_wants_ip_ports},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {
    {"option rows", row_tests},
    {"sidecar config", config_tests},
};

/* No cgroup limit, whatever the machine running the tests has: the
 * defaults asserted here are the rows'. */
static int run(void)
{
    cr_memory_test_cgroup("/nonexistent-cgroup-root", "/nonexistent-self-cgroup");
    return cr_run_suites(suites, (int)(sizeof suites / sizeof suites[0]));
}

int main(void) { return run(); }
