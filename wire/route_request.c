/* RouteRequest { repeated RouteItem requests = 1 } and RouteItem {
 * optional int64 owner = 1; optional uint32 prompt_tokens = 2; repeated
 * uint64 block_hashes = 3; optional string namespace = 4; optional string
 * request_id = 5; optional string objective = 6; optional int32 priority =
 * 7; optional double ttft_slo_ms = 8; optional string fairness_id = 9 }
 * (test_wire_pairs checks the descriptors agree), decoded
 * straight from the wire into the caller's arrays: under Route calls of one
 * item of 64 hashes the sidecar spent 6.9% of its CPU in protobuf-c's
 * unpack (a scan table, a message, an array and two strings per item, each
 * from the allocator, and a generic packed parse), twice what the prefix
 * index's match and insert took.
 *
 * It parses as protobuf-c 1.4.1's unpack does by reusing the readers that
 * already do: both levels are read with cr_wire_next (scan.c) held to
 * protobuf-c's limits on a key and a length, each byte once, and an
 * item's hashes are taken as cr_wire_split_varints takes a repeated int64
 * (pairs.c). What it is not sure of it refuses, so that the caller hands
 * the whole message to protobuf-c: refusing costs time, never a different
 * answer.
 *
 * The bytes are walked twice when they decode here: once to size them
 * (cr_wire_route_size: the count that refuses a call before decoding, and
 * the bound of the hashes' array) and once to decode. When they do not,
 * protobuf-c's unpack and the string check walk them twice more. */
#include "wire.h"

#include <limits.h>
#include <string.h>

#include "internal.h"

enum { REQUESTS = 1 }; /* RouteRequest's */
enum { /* RouteItem's */
    OWNER = 1,
    PROMPT_TOKENS = 2,
    HASHES = 3,
    NAMESPACE = 4,
    REQUEST_ID = 5,
    OBJECTIVE = 6,
    PRIORITY = 7,
    TTFT_SLO_MS = 8,
    FAIRNESS_ID = 9
};

/* protobuf-c reads a key and a length prefix of at most 5 bytes. */
#define MAX_PREFIX 5
/* protobuf-c refuses a message of over 16 * (2^23 - 1) fields (its scan
 * table's last slab); a field takes 2 bytes at least, so a message under
 * 2^28 bytes never has that many. */
#define MAX_LEN ((size_t)1 << 28)

/* 8 bytes a step, their clear high bits summed by one multiply (each
 * byte's bit moved to its low bit, the bytes added up in the top byte):
 * a third of the time of a byte loop, which gcc widens to 64-bit lanes,
 * with or without -O3. */
size_t cr_wire_route_hashes_bound(const uint8_t *data, size_t len)
{
    size_t n = 0, i = 0;
    for (; len - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, data + i, sizeof w);
        n += (size_t)(((~w & 0x8080808080808080u) >> 7) * 0x0101010101010101u >> 56);
    }
    for (; i < len; i++)
        n += data[i] < 0x80;
    return n;
}

size_t cr_wire_route_size(const uint8_t *data, size_t len, size_t *max_hashes)
{
    const uint8_t *p = data, *end = data + len;
    cr_wire_field f;
    size_t items = 0;
    *max_hashes = 0;
    while (cr_wire_next(&p, end, &f) == 1) {
        if (f.number != REQUESTS)
            continue;
        items++; /* every occurrence, as cr_wire_count counts them */
        if (f.type == 2)
            *max_hashes += cr_wire_route_hashes_bound(f.value, f.len);
    }
    return items;
}

/* Bytes of the varint at p, which ends (cr_wire_next has read it). */
static size_t varint_bytes(const uint8_t *p)
{
    size_t n = 1;
    while (*p++ & 0x80)
        n++;
    return n;
}

/* cr_wire_next, -1 too where protobuf-c could read otherwise (a key or a
 * length prefix over 5 bytes, a length over INT_MAX) or
 * cr_wire_check_strings refuses (number 0): within those limits both read
 * the same fields. */
static int next_exact(const uint8_t **p, const uint8_t *end, cr_wire_field *f)
{
    const uint8_t *at = *p;
    int rc = cr_wire_next(p, end, f);
    if (rc != 1)
        return rc;
    size_t key = varint_bytes(at);
    if (key > MAX_PREFIX || f->number == 0)
        return -1;
    if (f->type == 2 && ((size_t)(f->value - at) - key > MAX_PREFIX || f->len > INT_MAX))
        return -1;
    return 1;
}

/* A string field protobuf-c takes and cr_wire_check_strings passes. */
static int string_ok(const cr_wire_field *f)
{
    return f->type == 2 && !memchr(f->value, 0, f->len) &&
           cr_wire_utf8_error(f->value, f->len) == f->len;
}

/* One field of an item into q (its hashes appended to hashes; the last
 * request id's field goes to *id): 0, or -1 where protobuf-c or the string
 * check refuses it, or the hashes are more than hashes holds. */
static int item_field(const cr_wire_field *f, cr_route_request *q, cr_wire_varints *hashes,
                      cr_wire_field *id)
{
    switch (f->number) {
    case OWNER:
        q->has_owner = 1;
        q->owner = (int64_t)f->varint;
        return f->type == 0 ? 0 : -1;
    case PROMPT_TOKENS:
        q->has_prompt_tokens = 1;
        q->prompt_tokens = (uint32_t)f->varint;
        return f->type == 0 ? 0 : -1;
    case HASHES: /* one varint or packed ones; a 32- or 64-bit one protobuf-c refuses */
        if (f->type == 0 && hashes->n < hashes->max) {
            hashes->values[hashes->n++] = (int64_t)f->varint;
            return 0;
        }
        return f->type == 2 && cr_wire_take_packed(hashes, f->value, f->len) == 0 ? 0 : -1;
    case NAMESPACE:
        q->space = (const char *)f->value;
        q->space_len = f->len;
        return string_ok(f) ? 0 : -1;
    case REQUEST_ID:
        *id = *f;
        return string_ok(f) ? 0 : -1;
    case OBJECTIVE:
        q->objective = (const char *)f->value;
        q->objective_len = f->len;
        return string_ok(f) ? 0 : -1;
    case PRIORITY: /* protobuf-c keeps an int32's low 32 bits */
        q->has_priority = 1;
        q->priority = (int32_t)(uint32_t)f->varint;
        return f->type == 0 ? 0 : -1;
    case TTFT_SLO_MS: /* take_item points value at a 64-bit field's bytes */
        if (f->type != 1)
            return -1;
        memcpy(&q->slo_ttft_ms, f->value, sizeof(double));
        return 0;
    case FAIRNESS_ID:
        q->fairness = (const char *)f->value;
        q->fairness_len = f->len;
        return string_ok(f) ? 0 : -1;
    default: /* unknown, skipped; 0 the string check refuses */
        return f->number ? 0 : -1;
    }
}

/* The request id's last value, NUL-terminated, in out's text. */
static const char *copy_id(cr_wire_route_out *out, const cr_wire_field *id)
{
    char *s = out->text + out->text_used;
    memcpy(s, id->value, id->len);
    s[id->len] = '\0';
    out->text_used += id->len + 1;
    return s;
}

/* One item's len bytes at v into the next of out's items, in one walk:
 * its fields with next_exact, its hashes appended to out's. An item's id
 * takes fewer bytes than its field, so text_cap = the request's length
 * holds every item's id. */
static int take_item(const uint8_t *v, size_t len, cr_wire_route_out *out)
{
    if (out->n_items == out->max_items)
        return -1;
    cr_route_request *q = &out->items[out->n_items++];
    /* int64_t and uint64_t may alias: the hashes are the varints' bits */
    cr_wire_varints hashes = {(int64_t *)(out->hashes + out->n_hashes),
                              out->max_hashes - out->n_hashes, 0};
    *q = (cr_route_request){.hashes = NULL};
    const uint8_t *p = v, *end = v + len;
    cr_wire_field f, id = {.value = NULL};
    int rc;
    while ((rc = next_exact(&p, end, &f)) == 1) {
        if (f.type == 1) { /* a 64-bit field: its bytes end at p */
            f.value = p - sizeof(uint64_t);
            f.len = sizeof(uint64_t);
        }
        if (item_field(&f, q, &hashes, &id) != 0)
            return -1;
    }
    if (rc != 0)
        return -1;
    if (hashes.n)
        q->hashes = out->hashes + out->n_hashes;
    q->n_hashes = hashes.n;
    out->n_hashes += hashes.n;
    if (id.value) {
        if (out->text_cap - out->text_used <= id.len)
            return -1; /* never with text_cap the request's length */
        q->request_id = copy_id(out, &id);
    }
    return 0;
}

int cr_wire_route_request(const uint8_t *data, size_t len, cr_wire_route_out *out)
{
    const uint8_t *p = data, *end = data + len;
    cr_wire_field f;
    int rc;
    out->n_items = out->n_hashes = out->text_used = 0;
    if (len >= MAX_LEN)
        return -1;
    while ((rc = next_exact(&p, end, &f)) == 1) {
        /* another wire type protobuf-c refuses; unknown fields skipped */
        if (f.number == REQUESTS && (f.type != 2 || take_item(f.value, f.len, out) != 0))
            return -1;
    }
    return rc;
}
