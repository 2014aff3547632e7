/* A scanner over a message's raw wire bytes, driven by its protobuf-c
 * descriptor: it looks at what protobuf-c would unpack before anything is
 * allocated, so that a request can be sized (how many entries a repeated
 * field holds) and its strings checked (UTF-8, no NUL) up front.
 *
 * Its scans never reject an encoding: what they cannot parse (a truncated
 * varint, a length past the end, a group) ends the walk, and protobuf-c's
 * unpack then refuses the message as malformed. cr_wire_next, the field
 * reader under them, tells the end and the malformed apart, so that a walk
 * that must fail closed (authz) can use it too. */
#include "wire.h"

#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 32 /* nesting the string check follows; ours is 3 deep */


static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

int cr_wire_next(const uint8_t **p, const uint8_t *end, cr_wire_field *f)
{
    uint64_t key, v;
    if (*p >= end)
        return 0;
    if (read_varint(p, end, &key) != 0 || key >> 3 > UINT32_MAX)
        return -1;
    f->number = (uint32_t)(key >> 3);
    f->type = (unsigned)(key & 7);
    f->value = NULL;
    f->len = 0;
    switch (f->type) {
    case 0:
        return read_varint(p, end, &f->varint) == 0 ? 1 : -1;
    case 1:
    case 5: {
        size_t n = f->type == 1 ? 8 : 4;
        if ((size_t)(end - *p) < n)
            return -1;
        *p += n;
        return 1;
    }
    case 2:
        if (read_varint(p, end, &v) != 0 || v > (uint64_t)(end - *p))
            return -1;
        f->value = *p;
        f->len = (size_t)v;
        *p += v;
        return 1;
    default: /* groups: protobuf-c does not take them */
        return -1;
    }
}

/* Elements one packed occurrence of field fd holds. */
static size_t packed_count(const ProtobufCFieldDescriptor *fd, const cr_wire_field *f)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return f->len / 8;
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return f->len / 4;
    default: { /* varints: one per byte without the continuation bit */
        size_t n = 0;
        for (size_t i = 0; i < f->len; i++)
            n += !(f->value[i] & 0x80);
        return n;
    }
    }
}

static int is_scalar(const ProtobufCFieldDescriptor *fd)
{
    return fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_BYTES &&
           fd->type != PROTOBUF_C_TYPE_MESSAGE;
}

/* Past a run of fields keyed key (one byte, wire type 2) of a one-byte
 * length each, counted into *n: what cr_wire_next would read of them, in
 * a tighter loop (a million small messages in a Plan's rates). */
static const uint8_t *skip_short(const uint8_t *p, const uint8_t *end, uint8_t key, size_t *n)
{
    while (end - p >= 2 && p[0] == key && p[1] < 0x80 && end - p - 2 >= p[1]) {
        p += 2 + p[1];
        ++*n;
    }
    return p;
}

size_t cr_wire_count(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                     const char *field)
{
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field_by_name(d, field);
    const uint8_t *p = data, *end = data + len;
    size_t n = 0;
    cr_wire_field f;
    int short_runs = fd && !is_scalar(fd) && fd->id < 16; /* each occurrence counts 1 */
    uint8_t key = short_runs ? (uint8_t)(fd->id << 3 | 2) : 0;
    while (fd && (!short_runs || (p = skip_short(p, end, key, &n)) < end) &&
           cr_wire_next(&p, end, &f) == 1) {
        if (f.number == fd->id)
            n += f.type == 2 && is_scalar(fd) ? packed_count(fd, &f) : 1;
    }
    return n;
}

uint64_t cr_wire_last_varint(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                             size_t len, const char *field, uint64_t absent)
{
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field_by_name(d, field);
    const uint8_t *p = data, *end = data + len;
    uint64_t v = absent;
    cr_wire_field f;
    while (fd && cr_wire_next(&p, end, &f) == 1) {
        if (f.number == fd->id && f.type == 0)
            v = f.varint; /* the last one wins, as in unpack */
    }
    return v;
}

/* ---- strings ---- */

/* The offset of the first byte of s that breaks UTF-8 (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF), or len. */
size_t cr_wire_utf8_error(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t k = s[i] < 0x80 ? 1 : cr_utf8_sequence(s + i, len - i);
        if (!k)
            return i;
        i += k;
    }
    return len;
}

/* One message the walk is inside: entered through field fd, which starts
 * at at in its parent message, whose bytes start at parent. */
typedef struct walk_frame {
    const ProtobufCFieldDescriptor *fd;
    const uint8_t *parent, *at;
} walk_frame;

/* The path ("sources[1].name") is spelled only when there is an error to
 * report: a request of a million sub-messages walks without formatting or
 * allocating anything. */
typedef struct string_walk {
    const char *top; /* the request's message name */
    walk_frame frames[MAX_DEPTH + 1];
    int depth;
    char path[256];
    cr_error *err;
} string_walk;

/* How many fields numbered number come before at in the message at p. */
static size_t occurrences(const uint8_t *p, const uint8_t *at, uint32_t number)
{
    cr_wire_field f;
    size_t n = 0;
    const uint8_t *q = p;
    while (q < at && cr_wire_next(&q, at, &f) == 1)
        n += f.number == number;
    return n;
}

/* w->path: the fields w's frames went through, each repeated one with its
 * index among its field's occurrences. */
static const char *spell_path(string_walk *w)
{
    size_t at = 0;
    w->path[0] = '\0';
    for (int i = 0; i < w->depth && at < sizeof w->path; i++) {
        const walk_frame *fr = &w->frames[i];
        size_t room = sizeof w->path - at;
        int n;
        if (fr->fd->label == PROTOBUF_C_LABEL_REPEATED)
            n = snprintf(w->path + at, room, "%s%s[%zu]", at ? "." : "", fr->fd->name,
                         occurrences(fr->parent, fr->at, fr->fd->id));
        else
            n = snprintf(w->path + at, room, "%s%s", at ? "." : "", fr->fd->name);
        at = n < 0 ? sizeof w->path : at + (size_t)n;
    }
    return w->path;
}

static int check_string(string_walk *w, const cr_wire_field *f)
{
    const void *nul = memchr(f->value, 0, f->len);
    size_t bad = cr_wire_utf8_error(f->value, f->len);
    if (nul) {
        cr_fail(w->err, CR_EINVAL, "%s must not contain a NUL byte, found at byte %zu of %zu",
                spell_path(w), (size_t)((const uint8_t *)nul - f->value), f->len);
        return -1;
    }
    if (bad < f->len) {
        cr_fail(w->err, CR_EINVAL, "%s must be valid UTF-8, not at byte %zu of %zu", spell_path(w),
                bad, f->len);
        return -1;
    }
    return 0;
}

static int walk_strings(string_walk *w, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                        size_t len, int depth);

/* f is fd's occurrence starting at at in the message whose bytes start at
 * parent. */
static int walk_field(string_walk *w, const ProtobufCFieldDescriptor *fd, const cr_wire_field *f,
                      const uint8_t *parent, const uint8_t *at, int depth)
{
    int text = fd->type == PROTOBUF_C_TYPE_STRING;
    int sub = fd->type == PROTOBUF_C_TYPE_MESSAGE && depth < MAX_DEPTH;
    if (f->type != 2 || (!text && !sub))
        return 0;
    w->frames[w->depth++] = (walk_frame){fd, parent, at};
    int rc = text ? check_string(w, f)
                  : walk_strings(w, fd->descriptor, f->value, f->len, depth + 1);
    if (rc == 0)
        w->depth--;
    return rc;
}

/* 1 when d has no string or message field: nothing in its bytes but its
 * keys to check (a SessionRate, say, a million of them in a Plan). */
static int keys_only(const ProtobufCMessageDescriptor *d)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].type == PROTOBUF_C_TYPE_STRING ||
            d->fields[i].type == PROTOBUF_C_TYPE_MESSAGE)
            return 0;
    return 1;
}

static int walk_strings(string_walk *w, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                        size_t len, int depth)
{
    const uint8_t *p = data, *end = data + len, *at = p;
    cr_wire_field f;
    int rc = 0, look = !keys_only(d);
    while (rc == 0 && cr_wire_next(&p, end, &f) == 1) {
        if (f.number == 0) { /* protobuf-c 1.4 takes it in a multi-byte key */
            const char *path = spell_path(w);
            cr_fail(w->err, CR_EINVAL,
                    "malformed %s message: %s%sa field numbered 0, which protobuf does not allow",
                    w->top, path, *path ? " has " : "");
            rc = -1;
            break;
        }
        const ProtobufCFieldDescriptor *fd =
            look ? protobuf_c_message_descriptor_get_field(d, (unsigned)f.number) : NULL;
        if (fd)
            rc = walk_field(w, fd, &f, data, at, depth);
        at = p;
    }
    return rc;
}

int cr_wire_check_strings(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                          cr_error *err)
{
    string_walk w = {.top = d->name, .err = err};
    return walk_strings(&w, d, data, len, 0);
}
