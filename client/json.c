#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *json_double(double v)
{
    if (isnan(v))
        return json_string("NaN");
    if (isinf(v))
        return json_string(v > 0 ? "Infinity" : "-Infinity");
    return json_real(v);
}

static json_t *json_u64(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return json_string(buf);
}

static json_t *json_i64(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return json_string(buf);
}

/* One value of field f stored at p. */
static json_t *value_to_json(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_i64(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return json_u64(*(const uint64_t *)p);
    case PROTOBUF_C_TYPE_FLOAT:
        return json_double(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_double(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
        return ev ? json_string(ev->name) : json_integer(*(const int *)p);
    }
    case PROTOBUF_C_TYPE_STRING:
        return json_string(*(char *const *)p ? *(char *const *)p : "");
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        return json_integer((json_int_t)b->len); /* size only: no CLI answer carries bytes */
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)p;
        return sub ? cr_message_to_json(sub) : json_null();
    }
    }
    return json_null();
}

static size_t value_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

/* Strings, bytes and messages are pointers (or hold one): no has_ flag. */
static int is_pointer(const ProtobufCFieldDescriptor *f)
{
    return f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_BYTES ||
           f->type == PROTOBUF_C_TYPE_MESSAGE;
}

/* Whether an `optional` field (proto2, or proto3 `optional`) is absent. */
static int absent_optional(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    const char *base = (const char *)m + f->offset;
    if (f->label != PROTOBUF_C_LABEL_OPTIONAL || (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
        return 0;
    if (f->type == PROTOBUF_C_TYPE_BYTES)
        return !*(const protobuf_c_boolean *)((const char *)m + f->quantifier_offset);
    if (is_pointer(f))
        return *(void *const *)base == NULL;
    return !*(const protobuf_c_boolean *)((const char *)m + f->quantifier_offset);
}

json_t *cr_message_to_json(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    json_t *obj = json_object();
    for (unsigned i = 0; obj && i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *base = (const char *)m + f->offset;
        if (absent_optional(m, f))
            continue;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)((const char *)m + f->quantifier_offset);
            if (which != f->id)
                continue; /* another member of the oneof, or none, is set */
        }
        json_t *v;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
            const char *items = *(const char *const *)base;
            v = json_array();
            for (size_t k = 0; v && k < n; k++)
                json_array_append_new(v, value_to_json(f, items + k * value_size(f)));
        } else {
            v = value_to_json(f, base);
        }
        json_object_set_new(obj, f->name, v);
    }
    return obj;
}

/* ---- JSON -> message ---- */

/* name "prompt_tokens" against key "promptTokens" */
static int camel_equal(const char *name, const char *key)
{
    for (; *name; name++, key++) {
        int want = *name;
        if (*name == '_' && name[1])
            want = toupper((unsigned char)*++name);
        if (*key != want)
            return 0;
    }
    return *key == '\0';
}

static const ProtobufCFieldDescriptor *field_named(const ProtobufCMessageDescriptor *d,
                                                   const char *key)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, key);
    for (unsigned i = 0; !f && i < d->n_fields; i++)
        if (camel_equal(d->fields[i].name, key))
            f = &d->fields[i];
    return f;
}

/* An integer given as a JSON number or a string of digits, in [lo, hi]. */
static int int_in(const json_t *v, long double lo, long double hi, long double *out)
{
    if (json_is_integer(v)) {
        *out = (long double)json_integer_value(v);
    } else if (json_is_string(v) && *json_string_value(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        if (*s == '-') {
            long long x = strtoll(s, &end, 10);
            *out = (long double)x;
        } else {
            unsigned long long x = strtoull(s, &end, 10);
            *out = (long double)x;
        }
        if (errno || *end || isspace((unsigned char)*s))
            return -1;
    } else {
        return -1;
    }
    return *out >= lo && *out <= hi ? 0 : -1;
}

static int double_of(const json_t *v, double *out)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (json_is_number(v))
        *out = json_number_value(v);
    else if (s && !strcmp(s, "NaN"))
        *out = NAN;
    else if (s && !strcmp(s, "Infinity"))
        *out = INFINITY;
    else if (s && !strcmp(s, "-Infinity"))
        *out = -INFINITY;
    else
        return -1;
    return 0;
}

static ProtobufCMessage *from_json(const json_t *j, const ProtobufCMessageDescriptor *d,
                                   const char *path, cr_error *err);

/* One value of f from v into p; 0, or -1 with err filled. */
static int value_from_json(const ProtobufCFieldDescriptor *f, const json_t *v, void *p,
                           const char *path, cr_error *err)
{
    long double x;
    const char *want = NULL;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        if (int_in(v, INT32_MIN, INT32_MAX, &x) == 0)
            *(int32_t *)p = (int32_t)x;
        else
            want = "an integer in -2147483648..2147483647";
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if (int_in(v, 0, UINT32_MAX, &x) == 0)
            *(uint32_t *)p = (uint32_t)x;
        else
            want = "an integer in 0..4294967295";
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if (int_in(v, INT64_MIN, INT64_MAX, &x) == 0)
            *(int64_t *)p = (int64_t)x;
        else
            want = "a 64-bit integer";
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if (int_in(v, 0, UINT64_MAX, &x) == 0)
            *(uint64_t *)p = (uint64_t)x;
        else
            want = "an integer in 0..18446744073709551615";
        break;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE: {
        double d;
        if (double_of(v, &d) != 0)
            want = "a number, \"NaN\", \"Infinity\" or \"-Infinity\"";
        else if (f->type == PROTOBUF_C_TYPE_FLOAT)
            *(float *)p = (float)d;
        else
            *(double *)p = d;
        break;
    }
    case PROTOBUF_C_TYPE_BOOL:
        if (json_is_boolean(v))
            *(protobuf_c_boolean *)p = json_is_true(v);
        else
            want = "true or false";
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            json_is_string(v) ? protobuf_c_enum_descriptor_get_value_by_name(
                                    f->descriptor, json_string_value(v))
                              : NULL;
        if (ev)
            *(int *)p = ev->value;
        else if (!json_is_string(v) && int_in(v, INT32_MIN, INT32_MAX, &x) == 0)
            *(int *)p = (int)x;
        else
            want = "one of the enum's value names, or a number";
        break;
    }
    case PROTOBUF_C_TYPE_STRING:
        if (!json_is_string(v)) {
            want = "a string";
        } else if (!(*(char **)p = strdup(json_string_value(v)))) {
            cr_fail(err, CR_ENOMEM, "%s: out of memory", path);
            return -1;
        }
        break;
    case PROTOBUF_C_TYPE_MESSAGE:
        if (!json_is_object(v))
            want = "an object";
        else if (!(*(ProtobufCMessage **)p = from_json(v, f->descriptor, path, err)))
            return -1;
        break;
    case PROTOBUF_C_TYPE_BYTES:
        want = "nothing: bytes fields are not read from JSON";
        break;
    }
    if (!want)
        return 0;
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    cr_fail(err, CR_EINVAL, "%s must be %s, got %.80s", path, want, text ? text : "?");
    free(text);
    return -1;
}

/* Field f of m from v (not null): a repeated one from an array. */
static int field_from_json(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                           const json_t *v, const char *path, cr_error *err)
{
    char *base = (char *)m + f->offset;
    if (f->label != PROTOBUF_C_LABEL_REPEATED) {
        if (value_from_json(f, v, base, path, err) != 0)
            return -1;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
            *(uint32_t *)((char *)m + f->quantifier_offset) = f->id;
        else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && !is_pointer(f))
            *(protobuf_c_boolean *)((char *)m + f->quantifier_offset) = 1;
        return 0;
    }
    if (!json_is_array(v)) {
        cr_fail(err, CR_EINVAL, "%s must be an array", path);
        return -1;
    }
    size_t n = json_array_size(v), size = value_size(f);
    char *items = calloc(n ? n : 1, size), item[200];
    if (!items) {
        cr_fail(err, CR_ENOMEM, "%s: out of memory", path);
        return -1;
    }
    *(void **)base = items;
    for (size_t k = 0; k < n; k++) {
        snprintf(item, sizeof item, "%.170s[%zu]", path, k);
        if (value_from_json(f, json_array_get(v, k), items + k * size, item, err) != 0)
            return -1; /* the items so far are counted and freed with m */
        *(size_t *)((char *)m + f->quantifier_offset) = k + 1;
    }
    return 0;
}

static ProtobufCMessage *from_json(const json_t *j, const ProtobufCMessageDescriptor *d,
                                   const char *path, cr_error *err)
{
    ProtobufCMessage *m = malloc(d->sizeof_message);
    if (!m) {
        cr_fail(err, CR_ENOMEM, "%s: out of memory", *path ? path : d->name);
        return NULL;
    }
    protobuf_c_message_init(d, m);
    const char *key;
    json_t *v;
    char sub[200];
    json_object_foreach((json_t *)j, key, v) {
        const ProtobufCFieldDescriptor *f = field_named(d, key);
        snprintf(sub, sizeof sub, "%.120s%s%.70s", path, *path ? "." : "", key);
        if (!f) {
            cr_fail(err, CR_EINVAL, "unknown field %s (%s has no such field)", sub, d->name);
            protobuf_c_message_free_unpacked(m, NULL);
            return NULL;
        }
        if (!json_is_null(v) && field_from_json(m, f, v, sub, err) != 0) {
            protobuf_c_message_free_unpacked(m, NULL);
            return NULL;
        }
    }
    return m;
}

ProtobufCMessage *cr_message_from_json(const json_t *j, const ProtobufCMessageDescriptor *d,
                                       cr_error *err)
{
    if (!json_is_object(j)) {
        cr_fail(err, CR_EINVAL, "expected a JSON object (a %s)", d->name);
        return NULL;
    }
    return from_json(j, d, "", err);
}
