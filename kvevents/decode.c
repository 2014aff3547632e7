/* vLLM's KV-event payloads decoded (kvevents.h): the bytes walked once
 * before msgpack-c sees them, then msgpack-c's objects read in two passes
 * of the same code, the first checking and sizing, the second filling
 * arrays of exactly that size. */
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvevents.h"

/* ---- the bytes, before msgpack-c --------------------------------------------
 *
 * msgpack-c allocates a container's objects as soon as it reads its header
 * (24 B an item), so five bytes claiming 2^32 items would ask it for 96 GiB,
 * and a token_ids of 2^24 + 1 one-byte ints for 400 MB before the count is
 * refused. This walk over the headers refuses first: a container claiming
 * more items than bytes are left (each item takes one at least), more
 * events, hashes of an event or tokens of an event than the bounds
 * (kvevents.h), nesting deeper than msgpack-c's stack (which it reports as
 * out of memory), a cut-short item, a byte no item starts with, bytes past
 * the first item. It knows the batch's shape just enough to find those
 * counts: the batch's events (an array's second item, a map's "events"),
 * each event's block_hashes (second item, or key) and token_ids (a
 * BlockStored array's fourth item, or key "token_ids" in any map event).
 * No recursion: a level per open container. */

#define MAX_DEPTH 32 /* msgpack-c's MSGPACK_EMBED_STACK_SIZE, as built (unpack_define.h) */

/* What the lead bytes 0xc4..0xdf carry: a big-endian length of len_bytes,
 * then fixed bytes, then, by what: nothing more, len bytes (a str when
 * str), len items, or len key-value pairs. */
enum { NONE, BYTES, ITEMS, PAIRS };
static const struct {
    uint8_t len_bytes, fixed, what, str;
} LEADS[0xe0 - 0xc4] = {
    {1, 0, BYTES, 0}, {2, 0, BYTES, 0}, {4, 0, BYTES, 0}, /* bin 8, 16, 32 */
    {1, 1, BYTES, 0}, {2, 1, BYTES, 0}, {4, 1, BYTES, 0}, /* ext 8, 16, 32 (and a type byte) */
    {0, 4, NONE, 0},  {0, 8, NONE, 0},                    /* float 32, 64 */
    {0, 1, NONE, 0},  {0, 2, NONE, 0},  {0, 4, NONE, 0},  {0, 8, NONE, 0}, /* uint 8..64 */
    {0, 1, NONE, 0},  {0, 2, NONE, 0},  {0, 4, NONE, 0},  {0, 8, NONE, 0}, /* int 8..64 */
    {0, 2, NONE, 0},  {0, 3, NONE, 0},  {0, 5, NONE, 0},  {0, 9, NONE, 0},
    {0, 17, NONE, 0},                                     /* fixext */
    {1, 0, BYTES, 1}, {2, 0, BYTES, 1}, {4, 0, BYTES, 1}, /* str 8, 16, 32 */
    {2, 0, ITEMS, 0}, {4, 0, ITEMS, 0},                   /* array 16, 32 */
    {2, 0, PAIRS, 0}, {4, 0, PAIRS, 0},                   /* map 16, 32 */
};

typedef struct item {
    uint64_t size;  /* bytes of its own: header and payload, not its items' */
    uint64_t items; /* items it holds (a map's keys and values) */
    uint64_t body;  /* a str's or bin's bytes, the last of size */
    int str, map;
} item;

/* The item at p, left bytes there (at least 1): 0, or -1 when its header
 * is cut short or p holds 0xc1 (never used). */
static int item_at(const uint8_t *p, size_t left, item *it)
{
    uint8_t b = p[0];
    *it = (item){.size = 1};
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0; /* fixint, nil, bool */
    if (b <= 0x9f) {
        it->map = b <= 0x8f;
        it->items = (b & 0x0f) * (it->map ? 2u : 1u); /* fixmap, fixarray */
        return 0;
    }
    if (b <= 0xbf) {
        it->body = b & 0x1f; /* fixstr */
        it->size += it->body;
        it->str = 1;
        return 0;
    }
    if (b == 0xc1)
        return -1;
    unsigned nl = LEADS[b - 0xc4].len_bytes, what = LEADS[b - 0xc4].what;
    if (left < 1 + nl)
        return -1;
    uint64_t len = 0;
    for (unsigned i = 1; i <= nl; i++)
        len = len << 8 | p[i];
    it->body = what == BYTES ? len : 0;
    it->size += nl + LEADS[b - 0xc4].fixed + it->body;
    it->items = what == ITEMS ? len : what == PAIRS ? 2 * len : 0;
    it->str = LEADS[b - 0xc4].str;
    it->map = what == PAIRS;
    return 0;
}

/* What an item is in the batch, for the counts checked. */
enum { AS_OTHER, AS_ROOT, AS_BATCH, AS_EVENTS, AS_EVENT, AS_TAG, AS_KEY, AS_HASHES, AS_TOKENS };

/* An open container: its items still to read and the index of the next. */
typedef struct level {
    uint64_t left, at;
    uint8_t role, map;
    uint8_t value_role; /* a map's: what its last key makes the value after it */
    uint8_t stored;     /* an array event's: its tag is "BlockStored" */
} level;

/* The role of the item read next in l. */
static int child_role(const level *l)
{
    if (l->map)
        return l->at % 2 == 0 ? AS_KEY : l->value_role;
    switch (l->role) {
    case AS_ROOT: return AS_BATCH;
    case AS_BATCH: return l->at == 1 ? AS_EVENTS : AS_OTHER;
    case AS_EVENTS: return AS_EVENT;
    case AS_EVENT:
        return l->at == 0                 ? AS_TAG
               : l->at == 1               ? AS_HASHES
               : l->at == 3 && l->stored ? AS_TOKENS : AS_OTHER;
    default: return AS_OTHER;
    }
}

static int is_text(const uint8_t *body, const item *it, const char *s)
{
    return it->str && it->body == strlen(s) && !memcmp(body, s, it->body);
}

/* The role a map's key str (at body) gives its value. */
static uint8_t value_role(const level *l, const uint8_t *body, const item *key)
{
    if (l->role == AS_BATCH)
        return is_text(body, key, "events") ? AS_EVENTS : AS_OTHER;
    if (l->role == AS_EVENT)
        return is_text(body, key, "block_hashes") ? AS_HASHES
               : is_text(body, key, "token_ids")  ? AS_TOKENS : AS_OTHER;
    return AS_OTHER;
}

/* A container of the role's (kept only when it is of the type the role
 * needs: a wrong type is the decoder's to name) past its bound. */
static int too_many(int *role, const item *it, uint64_t event, cr_error *err)
{
    if (*role == AS_BATCH || *role == AS_EVENT)
        return 0;
    if (it->map || (*role != AS_EVENTS && *role != AS_HASHES && *role != AS_TOKENS)) {
        *role = AS_OTHER;
        return 0;
    }
    if (*role == AS_EVENTS && it->items > CR_KV_MAX_EVENTS)
        cr_fail(err, CR_EINVAL, "events has %llu events, at most %d",
                (unsigned long long)it->items, CR_KV_MAX_EVENTS);
    else if (*role == AS_HASHES && it->items > CR_KV_MAX_HASHES)
        cr_fail(err, CR_EINVAL, "event %llu: block_hashes has %llu hashes, at most %d",
                (unsigned long long)event, (unsigned long long)it->items, CR_KV_MAX_HASHES);
    else if (*role == AS_TOKENS && it->items > CR_KV_MAX_TOKENS)
        cr_fail(err, CR_EINVAL, "event %llu: token_ids has %llu tokens, at most %u",
                (unsigned long long)event, (unsigned long long)it->items, CR_KV_MAX_TOKENS);
    else
        return 0;
    return 1;
}

static cr_status check_bytes(const uint8_t *data, size_t len, cr_error *err)
{
    level lv[MAX_DEPTH] = {{.left = 1, .role = AS_ROOT}}; /* [0]: the payload's one item */
    int depth = 1;
    size_t off = 0;
    uint64_t event = 0; /* the index of the event being read */
    while (depth > 0) {
        level *l = &lv[depth - 1];
        if (!l->left) {
            depth--;
            continue;
        }
        l->left--;
        int role = child_role(l);
        uint64_t index = l->at++;
        item it;
        if (off >= len || item_at(data + off, len - off, &it) != 0 || it.size > len - off)
            return cr_fail(err, CR_EINVAL, off < len && data[off] == 0xc1
                           ? "not msgpack: byte 0xc1 at offset %zu"
                           : "truncated: an item at offset %zu does not fit in %zu bytes",
                           off, len);
        const uint8_t *body = data + off + it.size - it.body;
        off += it.size;
        if (role == AS_KEY)
            l->value_role = value_role(l, body, &it);
        else if (role == AS_TAG)
            l->stored = is_text(body, &it, "BlockStored");
        if (!it.items)
            continue;
        if (it.items > len - off)
            return cr_fail(err, CR_EINVAL, "truncated: a container before offset %zu claims "
                           "%llu items, %zu bytes left", off, (unsigned long long)it.items,
                           len - off);
        if (role == AS_EVENT)
            event = index;
        if (too_many(&role, &it, event, err))
            return CR_EINVAL;
        if (depth > MAX_DEPTH - 1)
            return cr_fail(err, CR_EINVAL, "nested deeper than %d containers at offset %zu",
                           MAX_DEPTH - 1, off);
        lv[depth++] = (level){.left = it.items, .role = (uint8_t)role, .map = (uint8_t)it.map};
    }
    if (off != len)
        return cr_fail(err, CR_EINVAL, "%zu trailing bytes after the batch (it ends at offset "
                       "%zu)", len - off, off);
    return CR_OK;
}

/* ---- msgpack-c's objects --------------------------------------------------- */

/* A pass over the batch's events: the first (b NULL) checks and counts,
 * the second fills b's arrays, sized by the first. */
typedef struct pass {
    cr_kv_batch *b;
    cr_error *err;
    size_t at;                                /* the event read (NO_EVENT: the batch) */
    size_t events, hashes, tokens, name_bytes; /* emitted so far */
    uint64_t skipped;
} pass;

#define NO_EVENT SIZE_MAX

/* cr_fail with "event i: " before the text when reading an event. */
__attribute__((format(printf, 2, 3))) static cr_status bad(const pass *p, const char *fmt, ...)
{
    char text[CR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (p->at == NO_EVENT)
        return cr_fail(p->err, CR_EINVAL, "%s", text);
    return cr_fail(p->err, CR_EINVAL, "event %zu: %s", p->at, text);
}

/* What o is, for an error: its type, or its value when an int. */
static const char *got(const msgpack_object *o, char buf[24])
{
    static const char *const names[] = {
        [MSGPACK_OBJECT_NIL] = "nil",      [MSGPACK_OBJECT_BOOLEAN] = "bool",
        [MSGPACK_OBJECT_FLOAT32] = "float", [MSGPACK_OBJECT_FLOAT64] = "float",
        [MSGPACK_OBJECT_STR] = "str",      [MSGPACK_OBJECT_ARRAY] = "array",
        [MSGPACK_OBJECT_MAP] = "map",      [MSGPACK_OBJECT_BIN] = "bin",
        [MSGPACK_OBJECT_EXT] = "ext",
    };
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        snprintf(buf, 24, "%llu", (unsigned long long)o->via.u64);
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        snprintf(buf, 24, "%lld", (long long)o->via.i64);
    else
        return (size_t)o->type < sizeof names / sizeof names[0] && names[o->type]
                   ? names[o->type] : "?";
    return buf;
}

static int is_nil(const msgpack_object *o) { return !o || o->type == MSGPACK_OBJECT_NIL; }

static int is_str(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* o's fields by name into f[0..n-1] (NULL: absent): an array's by
 * position, a map's by key (keys not named ignored, a name twice refused);
 * the first `required` present. */
static cr_status fields(const pass *p, const msgpack_object *o, const char *const *names,
                        size_t n, size_t required, const msgpack_object **f)
{
    memset(f, 0, n * sizeof *f);
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        for (size_t k = 0; k < n && k < o->via.array.size; k++)
            f[k] = &o->via.array.ptr[k];
    } else {
        for (uint32_t i = 0; i < o->via.map.size; i++)
            for (size_t k = 0; k < n; k++) {
                if (!is_str(&o->via.map.ptr[i].key, names[k]))
                    continue;
                if (f[k])
                    return bad(p, "%s given twice", names[k]);
                f[k] = &o->via.map.ptr[i].val;
            }
    }
    for (size_t k = 0; k < required; k++)
        if (!f[k])
            return bad(p, "%s is missing", names[k]);
    return CR_OK;
}

/* A block hash: an int as its 64 bits, bytes (bin or str) as their
 * XXH3-64. -1 for anything else. */
static int hash_of(const msgpack_object *o, uint64_t *h)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *h = o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *h = (uint64_t)o->via.i64; /* vLLM's older int64 hashes, as two's complement */
    else if (o->type == MSGPACK_OBJECT_BIN)
        *h = XXH3_64bits(o->via.bin.ptr, o->via.bin.size);
    else if (o->type == MSGPACK_OBJECT_STR)
        *h = XXH3_64bits(o->via.str.ptr, o->via.str.size);
    else
        return -1;
    return 0;
}

/* block_hashes into out (NULL: checked only); *n how many. */
static cr_status hashes_of(const pass *p, const msgpack_object *o, uint64_t *out, size_t *n)
{
    char buf[24];
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return bad(p, "block_hashes must be an array, got %s", got(o, buf));
    if (o->via.array.size > CR_KV_MAX_HASHES)
        return bad(p, "block_hashes has %u hashes, at most %d", o->via.array.size,
                   CR_KV_MAX_HASHES);
    uint64_t h;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        if (hash_of(&o->via.array.ptr[i], &h) != 0)
            return bad(p, "block_hashes[%u] must be an int or bytes, got %s", i,
                       got(&o->via.array.ptr[i], buf));
        if (out)
            out[i] = h;
    }
    *n = o->via.array.size;
    return CR_OK;
}

/* token_ids into out (NULL: checked only); *n how many. */
static cr_status tokens_of(const pass *p, const msgpack_object *o, uint32_t *out, size_t *n)
{
    char buf[24];
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return bad(p, "token_ids must be an array, got %s", got(o, buf));
    if (o->via.array.size > CR_KV_MAX_TOKENS)
        return bad(p, "token_ids has %u tokens, at most %u", o->via.array.size,
                   CR_KV_MAX_TOKENS);
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *t = &o->via.array.ptr[i];
        if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > UINT32_MAX)
            return bad(p, "token_ids[%u] must be an int in 0..%u, got %s", i, UINT32_MAX,
                       got(t, buf));
        if (out)
            out[i] = (uint32_t)t->via.u64;
    }
    *n = o->via.array.size;
    return CR_OK;
}

/* Whether the event's blocks are in a tier indexed, and which (*tier):
 * medium "GPU", nil or absent (the GPU), or "CPU" (host memory). 1 yes,
 * 0 no (another tier: a disk, a remote store), -1 with err set when it is
 * not a str or nil. */
static int indexed_tier(const pass *p, const msgpack_object *medium, cr_kv_tier *tier)
{
    char buf[24];
    *tier = CR_KV_GPU;
    if (is_nil(medium) || is_str(medium, "GPU"))
        return 1;
    if (medium->type == MSGPACK_OBJECT_STR) {
        *tier = CR_KV_CPU;
        return is_str(medium, "CPU");
    }
    bad(p, "medium must be a str or nil, got %s", got(medium, buf));
    return -1;
}

/* The cache salt in a block's extra keys (vLLM's tuple of the LoRA name,
 * multimodal keys, the salt, prompt-embedding keys, in that order; the
 * salt only in a request's first block): its second str when the first is
 * the LoRA name lora (len bytes), else its first; NULL when it has none.
 * keys: the event's extra_keys (nil, or a list with one entry a block). */
static const msgpack_object *salt_of(const pass *p, const msgpack_object *keys,
                                     const char *lora, size_t len, cr_status *st)
{
    char buf[24];
    *st = CR_OK;
    if (is_nil(keys))
        return NULL;
    if (keys->type != MSGPACK_OBJECT_ARRAY) {
        *st = bad(p, "extra_keys must be a list or nil, got %s", got(keys, buf));
        return NULL;
    }
    const msgpack_object *first = keys->via.array.size ? &keys->via.array.ptr[0] : NULL;
    if (!first || is_nil(first) || first->type != MSGPACK_OBJECT_ARRAY)
        return NULL; /* no keys for the first block, or a shape not known: no salt */
    int lora_seen = !len;
    for (uint32_t i = 0; i < first->via.array.size; i++) {
        const msgpack_object *k = &first->via.array.ptr[i];
        if (k->type != MSGPACK_OBJECT_STR)
            continue; /* a multimodal key, prompt-embedding bytes */
        if (!lora_seen && k->via.str.size == len && !memcmp(k->via.str.ptr, lora, len)) {
            lora_seen = 1;
            continue;
        }
        return k->via.str.size ? k : NULL;
    }
    return NULL;
}

/* The namespace (route.h): the LoRA adapter (lora_name when a non-empty
 * str, else lora_id in decimal), the cache salt from extra_keys, or both
 * as "ADAPTER\x1fSALT"; none without either. Written at out (NULL:
 * checked only; room for CR_CORE_NAMESPACE_MAX bytes); *len its length. */
static cr_status space_of(const pass *p, const msgpack_object *id, const msgpack_object *name,
                          const msgpack_object *extra, char *out, size_t *len)
{
    char buf[24], text[CR_CORE_NAMESPACE_MAX + 1];
    const char *s = NULL;
    *len = 0;
    if (!is_nil(name) && name->type != MSGPACK_OBJECT_STR)
        return bad(p, "lora_name must be a str or nil, got %s", got(name, buf));
    if (!is_nil(id) && id->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
        id->type != MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return bad(p, "lora_id must be an int or nil, got %s", got(id, buf));
    if (!is_nil(name) && name->via.str.size) {
        if (name->via.str.size > CR_CORE_NAMESPACE_MAX)
            return bad(p, "lora_name must be at most %d bytes, got %u", CR_CORE_NAMESPACE_MAX,
                       name->via.str.size);
        s = name->via.str.ptr;
        *len = name->via.str.size;
    } else if (!is_nil(id)) {
        s = got(id, buf); /* an int: its decimal */
        *len = strlen(s);
    }
    cr_status st;
    const msgpack_object *salt =
        salt_of(p, extra, !is_nil(name) ? name->via.str.ptr : NULL,
                !is_nil(name) ? name->via.str.size : 0, &st);
    if (st != CR_OK)
        return st;
    if (salt) {
        size_t both = (*len ? *len + 1 : 0) + salt->via.str.size;
        if (both > CR_CORE_NAMESPACE_MAX)
            return bad(p, "the LoRA adapter and cache salt must be at most %d bytes, got %zu",
                       CR_CORE_NAMESPACE_MAX, both);
        if (*len) { /* ADAPTER 0x1f SALT */
            memcpy(text, s, *len);
            text[(*len)++] = 0x1f;
        }
        memcpy(text + *len, salt->via.str.ptr, salt->via.str.size);
        *len += salt->via.str.size;
        s = text;
    }
    if (out && *len)
        memcpy(out, s, *len);
    return CR_OK;
}

/* ---- the events --------------------------------------------------------- */

/* Where the event being read writes its arrays: b's next free places when
 * filling and the event is emitted, else nowhere (checked only). */
static void room(const pass *p, int emit, uint64_t **h, uint32_t **t, char **s)
{
    int fill = emit && p->b;
    *h = fill ? p->b->hashes + p->hashes : NULL;
    *t = fill ? p->b->tokens + p->tokens : NULL;
    *s = fill ? p->b->names + p->name_bytes : NULL;
}

enum {
    S_TYPE, S_HASHES, S_PARENT, S_TOKENS, S_BLOCK_SIZE, S_LORA_ID, S_MEDIUM, S_LORA_NAME,
    S_EXTRA_KEYS, S_FIELDS
};
static const char *const STORED[S_FIELDS] = {"type", "block_hashes", "parent_block_hash",
                                             "token_ids", "block_size", "lora_id", "medium",
                                             "lora_name", "extra_keys"};

static cr_status block_stored(pass *p, const msgpack_object *o, cr_kv_event *ev, int *emit)
{
    const msgpack_object *f[S_FIELDS];
    char buf[24];
    uint64_t *h;
    uint32_t *t;
    char *s;
    if (fields(p, o, STORED, S_FIELDS, S_BLOCK_SIZE + 1, f) != CR_OK ||
        (*emit = indexed_tier(p, f[S_MEDIUM], &ev->tier)) < 0)
        return CR_EINVAL;
    room(p, *emit, &h, &t, &s);
    ev->kind = CR_KV_STORED;
    if (hashes_of(p, f[S_HASHES], h, &ev->n) != CR_OK ||
        tokens_of(p, f[S_TOKENS], t, &ev->n_tokens) != CR_OK ||
        space_of(p, f[S_LORA_ID], f[S_LORA_NAME], f[S_EXTRA_KEYS], s, &ev->space_len) !=
            CR_OK)
        return CR_EINVAL;
    ev->has_parent = !is_nil(f[S_PARENT]);
    if (ev->has_parent && hash_of(f[S_PARENT], &ev->parent) != 0)
        return bad(p, "parent_block_hash must be an int, bytes or nil, got %s",
                   got(f[S_PARENT], buf));
    const msgpack_object *bs = f[S_BLOCK_SIZE];
    if (bs->type != MSGPACK_OBJECT_POSITIVE_INTEGER || bs->via.u64 < 1 ||
        bs->via.u64 > CR_CORE_MAX_BLOCK_TOKENS)
        return bad(p, "block_size must be an int in 1..%u, got %s", CR_CORE_MAX_BLOCK_TOKENS,
                   got(bs, buf));
    ev->block_size = (uint32_t)bs->via.u64;
    if (ev->n_tokens != ev->n * ev->block_size)
        return bad(p, "token_ids has %zu tokens, %zu blocks of %u need %zu", ev->n_tokens,
                   ev->n, ev->block_size, ev->n * ev->block_size);
    ev->engine = h;
    ev->tokens = t;
    ev->space = s;
    return CR_OK;
}

enum { R_TYPE, R_HASHES, R_MEDIUM };
static const char *const REMOVED[] = {"type", "block_hashes", "medium"};

static cr_status block_removed(pass *p, const msgpack_object *o, cr_kv_event *ev, int *emit)
{
    const msgpack_object *f[3];
    uint64_t *h;
    uint32_t *t;
    char *s;
    if (fields(p, o, REMOVED, 3, R_HASHES + 1, f) != CR_OK ||
        (*emit = indexed_tier(p, f[R_MEDIUM], &ev->tier)) < 0)
        return CR_EINVAL;
    room(p, *emit, &h, &t, &s);
    ev->kind = CR_KV_REMOVED;
    ev->engine = h;
    return hashes_of(p, f[R_HASHES], h, &ev->n);
}

/* The event's tag: an array's first item, a map's "type". */
static cr_status tag_of(const pass *p, const msgpack_object *o, const msgpack_object **tag)
{
    static const char *const TYPE[] = {"type"};
    char buf[24];
    if (o->type != MSGPACK_OBJECT_ARRAY && o->type != MSGPACK_OBJECT_MAP)
        return bad(p, "must be an array or a map, got %s", got(o, buf));
    if (o->type == MSGPACK_OBJECT_ARRAY)
        return fields(p, o, TYPE, 1, 1, tag);
    /* a map's other keys are read by the event's own fields() */
    for (uint32_t i = 0; i < o->via.map.size; i++)
        if (is_str(&o->via.map.ptr[i].key, "type")) {
            *tag = &o->via.map.ptr[i].val;
            return CR_OK;
        }
    return bad(p, "type is missing");
}

/* Event i: checked, and when filling and its tier is indexed, written. */
static cr_status one_event(pass *p, const msgpack_object *o, size_t i)
{
    const msgpack_object *tag;
    cr_kv_event ev = {0};
    int emit = 1;
    char buf[24];
    p->at = i;
    cr_status st = tag_of(p, o, &tag);
    if (st != CR_OK)
        return st;
    if (is_str(tag, "BlockStored"))
        st = block_stored(p, o, &ev, &emit);
    else if (is_str(tag, "BlockRemoved"))
        st = block_removed(p, o, &ev, &emit);
    else if (is_str(tag, "AllBlocksCleared"))
        ev.kind = CR_KV_CLEARED;
    else if (tag->type == MSGPACK_OBJECT_STR)
        emit = 0; /* a type a later release added: skipped, the batch kept */
    else
        return bad(p, "type must be a str, got %s", got(tag, buf));
    if (st != CR_OK)
        return st;
    if (!emit) {
        p->skipped++;
        return CR_OK;
    }
    if (p->b)
        p->b->events[p->events] = ev;
    p->events++;
    p->hashes += ev.n;
    p->tokens += ev.n_tokens;
    p->name_bytes += ev.space_len;
    return CR_OK;
}

static cr_status all_events(pass *p, const msgpack_object *events)
{
    for (uint32_t i = 0; i < events->via.array.size; i++)
        if (one_event(p, &events->via.array.ptr[i], i) != CR_OK)
            return CR_EINVAL;
    return CR_OK;
}

/* ---- the batch ------------------------------------------------------------ */

/* n x size bytes, at least one so that an empty array is a pointer too. */
static void *array_of(size_t n, size_t size) { return malloc((n ? n : 1) * size); }

static cr_status allocate(cr_kv_batch *b, const pass *sized, cr_error *err)
{
    b->events = array_of(sized->events, sizeof *b->events);
    b->hashes = array_of(sized->hashes, sizeof *b->hashes);
    b->tokens = array_of(sized->tokens, sizeof *b->tokens);
    b->names = array_of(sized->name_bytes, 1);
    if (b->events && b->hashes && b->tokens && b->names)
        return CR_OK;
    cr_kv_batch_free(b);
    return cr_fail(err, CR_ENOMEM, "out of memory for %zu events of %zu hashes and %zu tokens",
                   sized->events, sized->hashes, sized->tokens);
}

enum { B_TS, B_EVENTS, B_RANK };
static const char *const BATCH[] = {"ts", "events", "data_parallel_rank"};

/* The batch's fields checked; its events array at *events. */
static cr_status batch_fields(const pass *p, const msgpack_object *o, double *ts,
                              const msgpack_object **events)
{
    const msgpack_object *f[3];
    char buf[24];
    if (o->type != MSGPACK_OBJECT_ARRAY && o->type != MSGPACK_OBJECT_MAP)
        return bad(p, "the batch must be an array or a map, got %s", got(o, buf));
    if (fields(p, o, BATCH, 3, B_EVENTS + 1, f) != CR_OK)
        return CR_EINVAL;
    const msgpack_object *t = f[B_TS];
    *ts = t->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)t->via.u64
          : t->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double)t->via.i64
          : t->type == MSGPACK_OBJECT_FLOAT32 || t->type == MSGPACK_OBJECT_FLOAT64 ? t->via.f64
          : NAN;
    if (!isfinite(*ts))
        return bad(p, "ts must be a finite number, got %s", got(t, buf));
    const msgpack_object *rank = f[B_RANK];
    if (!is_nil(rank) && rank->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
        rank->type != MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return bad(p, "data_parallel_rank must be an int or nil, got %s", got(rank, buf));
    *events = f[B_EVENTS];
    if ((*events)->type != MSGPACK_OBJECT_ARRAY)
        return bad(p, "events must be an array, got %s", got(*events, buf));
    if ((*events)->via.array.size > CR_KV_MAX_EVENTS)
        return bad(p, "events has %u events, at most %d", (*events)->via.array.size,
                   CR_KV_MAX_EVENTS);
    return CR_OK;
}

static cr_status batch_of(const msgpack_object *o, cr_kv_batch *out, cr_error *err)
{
    pass sizing = {.err = err, .at = NO_EVENT};
    const msgpack_object *events = NULL;
    if (batch_fields(&sizing, o, &out->ts, &events) != CR_OK ||
        all_events(&sizing, events) != CR_OK)
        return CR_EINVAL;
    if (allocate(out, &sizing, err) != CR_OK)
        return CR_ENOMEM;
    /* the same checks on the same objects: it fails only where sizing did */
    pass filling = {.b = out, .err = err};
    if (all_events(&filling, events) != CR_OK) {
        cr_kv_batch_free(out);
        return CR_EINVAL;
    }
    out->n = filling.events;
    out->skipped = filling.skipped;
    return CR_OK;
}

cr_status cr_kv_decode(const uint8_t *data, size_t len, cr_kv_batch *out, cr_error *err)
{
    *out = (cr_kv_batch){0};
    if (check_bytes(data, len, err) != CR_OK)
        return CR_EINVAL;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack_next(&u, (const char *)data, len, &off);
    cr_status st;
    if (r == MSGPACK_UNPACK_SUCCESS)
        st = batch_of(&u.data, out, err);
    else if (r == MSGPACK_UNPACK_NOMEM_ERROR)
        st = cr_fail(err, CR_ENOMEM, "out of memory unpacking %zu bytes of msgpack", len);
    else /* check_bytes passed it: not expected */
        st = cr_fail(err, CR_EINVAL, "not msgpack (msgpack-c returned %d)", (int)r);
    msgpack_unpacked_destroy(&u);
    return st;
}

void cr_kv_batch_free(cr_kv_batch *b)
{
    free(b->events);
    free(b->hashes);
    free(b->tokens);
    free(b->names);
    *b = (cr_kv_batch){0};
}
