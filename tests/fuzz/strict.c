/* What a strict proto3 reader refuses in a message protobuf-c takes
 * (fuzz.h). */
#include <stdio.h>
#include <string.h>

#include "fuzz.h"

/* Whether the n bytes at s are UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF), as proto3 requires of a string. */
static int utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k; /* continuation bytes */
        uint32_t cp, least;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f, least = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f, least = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07, least = 0x10000;
        } else {
            return 0;
        }
        if (k >= n - i)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* One present field f of m: its strings are UTF-8, its messages strict. */
static const char *strict_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                                char *buf, size_t len)
{
    const char *at = (const char *)m + f->offset;
    size_t n = 1;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        n = *(const size_t *)((const char *)m + f->quantifier_offset);
        at = *(const char *const *)at;
    } else if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
               *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id) {
        return NULL; /* another member of the oneof is set */
    }
    for (size_t i = 0; i < n; i++) {
        const void *v = ((const void *const *)at)[i];
        if (f->type == PROTOBUF_C_TYPE_STRING && v && !utf8(v, strlen(v))) {
            snprintf(buf, len, "%s.%s is not UTF-8", m->descriptor->name, f->name);
            return buf;
        }
        if (f->type == PROTOBUF_C_TYPE_MESSAGE && v)
            if (cr_fuzz_strict_error(v, buf, len))
                return buf;
    }
    return NULL;
}

const char *cr_fuzz_strict_error(const ProtobufCMessage *m, char *buf, size_t len)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (size_t i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0) {
            snprintf(buf, len, "%s holds an unknown field numbered 0", d->name);
            return buf;
        }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if ((f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE) &&
            strict_field(m, f, buf, len))
            return buf;
    }
    return NULL;
}
