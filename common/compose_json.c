/* The composer's effective configuration as JSON (options.h): what
 * --check-config prints and the sidecar logs at start. */
#include <jansson.h>
#include <stdlib.h>

#include "options.h"

static json_t *string_or_null(const char *s)
{
    json_t *j = s ? json_string(s) : NULL;
    return j ? j : json_null();
}

static json_t *custom_json(const cr_option *o, const void *c)
{
    char small[256];
    int len = o->show ? o->show(c, small, sizeof small) : 0;
    if (len <= 0)
        return json_null();
    if ((size_t)len < sizeof small)
        return string_or_null(small);
    char *big = malloc((size_t)len + 1);
    json_t *j = NULL;
    if (big && o->show(c, big, (size_t)len + 1) == len)
        j = string_or_null(big);
    free(big);
    return j ? j : json_null();
}

/* The row's effective value, typed. */
static json_t *value_json(const cr_option_table *t, const cr_option *o, const void *c)
{
    if ((o->flags & CR_OPT_UNSET) && !cr_option_is_set(t, o, c))
        return json_null();
    switch (o->type) {
    case CR_OPT_DOUBLE:
        return json_real(cr_option_number(o, c));
    case CR_OPT_LONG:
    case CR_OPT_U32:
    case CR_OPT_U64:
        return json_integer((json_int_t)cr_option_number(o, c));
    case CR_OPT_STRING:
    case CR_OPT_CHOICE:
        return string_or_null(cr_option_string(o, c));
    case CR_OPT_LIST: {
        size_t n;
        char *const *items = cr_option_list(o, c, &n);
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
            json_array_append_new(a, string_or_null(items[i]));
        return a ? a : json_null();
    }
    default:
        return custom_json(o, c);
    }
}

static json_t *group_object(json_t *root, const char *group)
{
    if (!*group)
        return root;
    json_t *obj = json_object_get(root, group);
    if (!obj) {
        obj = json_object();
        json_object_set_new(root, group, obj);
    }
    return obj;
}

json_t *cr_compose_json(const cr_composition *c, const void *cfg, const unsigned char *source)
{
    static const char *const SOURCES[] = {"default", "env", "flag"};
    json_t *root = json_object(), *options = json_array();
    if (!root || !options) {
        json_decref(root);
        json_decref(options);
        return NULL;
    }
    char env[96];
    for (cr_option_ref r = cr_compose_first(c); r.o; cr_compose_next(c, &r)) {
        const void *part = (const char *)cfg + r.offset;
        json_t *v = value_json(r.table, r.o, part);
        unsigned src = source && source[r.index] < 3 ? source[r.index] : 0;
        cr_option_env_name(r.o, env, sizeof env);
        json_object_set_new(group_object(root, r.table->group), r.o->key, json_incref(v));
        json_array_append_new(options, json_pack("{s:s,s:s,s:o,s:s}", "flag", r.o->name, "env",
                                                 env, "value", v, "source", SOURCES[src]));
    }
    json_object_set_new(root, "options", options);
    return root;
}
