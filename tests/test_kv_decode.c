/* vLLM's KV-event payloads (kvevents.h), packed here with msgpack-c: the
 * array-like and the map-like encodings decode to the same events; int,
 * negative int64 and bytes hashes; a nil parent; the CPU tier kept as
 * such, other tiers skipped; lora_name, then lora_id, as the namespace;
 * fields past the known ones ignored; every malformed payload refused with
 * an error naming where and what. Then decoded batches applied to a real core: its prefix index
 * holds the blocks, namespaced, and lets removed ones go. */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* the test's own XXH3, no library needed */
#include <xxhash.h>

#include "core.h"
#include "core_config.h"
#include "cunit_main.h"
#include "kvevents.h"

/* ---- writing payloads ------------------------------------------------------ */

typedef struct writer {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int map; /* 1: the map-like encoding, else the array-like */
} writer;

static void w_open(writer *w, int map)
{
    msgpack_sbuffer_init(&w->sb);
    msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
    w->map = map;
}

static void str(writer *w, const char *s)
{
    msgpack_pack_str_with_body(&w->pk, s, strlen(s));
}

/* A field's name: written only in the map-like encoding. */
static void key(writer *w, const char *name)
{
    if (w->map)
        str(w, name);
}

/* A batch of n events at ts 1.5 on rank 0; the events follow. */
static void batch(writer *w, uint32_t n)
{
    if (w->map)
        msgpack_pack_map(&w->pk, 3);
    else
        msgpack_pack_array(&w->pk, 3);
    key(w, "ts");
    msgpack_pack_double(&w->pk, 1.5);
    if (!w->map) { /* the array-like order: ts, events, rank */
        msgpack_pack_array(&w->pk, n);
        return;
    }
    key(w, "data_parallel_rank");
    msgpack_pack_int(&w->pk, 0);
    key(w, "events");
    msgpack_pack_array(&w->pk, n);
}

/* Ends an array-like batch with its rank (nothing for a map-like one,
 * which wrote it first). */
static void batch_end(writer *w)
{
    if (!w->map)
        msgpack_pack_nil(&w->pk);
}

/* An event of type with n fields after its tag. */
static void event(writer *w, const char *type, uint32_t n)
{
    if (w->map)
        msgpack_pack_map(&w->pk, n + 1);
    else
        msgpack_pack_array(&w->pk, n + 1);
    key(w, "type");
    str(w, type);
}

static void ints(writer *w, const int64_t *v, size_t n)
{
    msgpack_pack_array(&w->pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_int64(&w->pk, v[i]);
}

/* A BlockStored: n blocks of BS tokens; parent NULL = nil; lora_id < 0 =
 * nil; medium and lora_name NULL = nil. */
typedef struct stored {
    const int64_t *hashes;
    size_t n;
    const int64_t *parent;
    const int64_t *tokens;
    size_t n_tokens;
    int64_t block_size, lora_id;
    const char *medium, *lora_name;
} stored;

static void nil_or_str(writer *w, const char *s)
{
    if (s)
        str(w, s);
    else
        msgpack_pack_nil(&w->pk);
}

static void block_stored(writer *w, const stored *s)
{
    event(w, "BlockStored", 7);
    key(w, "block_hashes");
    ints(w, s->hashes, s->n);
    key(w, "parent_block_hash");
    if (s->parent)
        msgpack_pack_int64(&w->pk, *s->parent);
    else
        msgpack_pack_nil(&w->pk);
    key(w, "token_ids");
    ints(w, s->tokens, s->n_tokens);
    key(w, "block_size");
    msgpack_pack_int64(&w->pk, s->block_size);
    key(w, "lora_id");
    if (s->lora_id >= 0)
        msgpack_pack_int64(&w->pk, s->lora_id);
    else
        msgpack_pack_nil(&w->pk);
    key(w, "medium");
    nil_or_str(w, s->medium);
    key(w, "lora_name");
    nil_or_str(w, s->lora_name);
}

static void block_removed(writer *w, const int64_t *hashes, size_t n, const char *medium)
{
    event(w, "BlockRemoved", 2);
    key(w, "block_hashes");
    ints(w, hashes, n);
    key(w, "medium");
    nil_or_str(w, medium);
}

/* Decodes w's payload, then frees w's buffer. */
static cr_status decode(writer *w, cr_kv_batch *b, cr_error *err)
{
    cr_status st = cr_kv_decode((const uint8_t *)w->sb.data, w->sb.size, b, err);
    msgpack_sbuffer_destroy(&w->sb);
    return st;
}

/* ---- both encodings --------------------------------------------------------- */

#define BS 2
static const int64_t H3[] = {11, -5, INT64_MIN}, TOK3[] = {1, 2, 3, 4, 5, 6};
static const int64_t PARENT = 10;

/* Six events: stored (namespaced by name), stored on the CPU (its own
 * tier), removed, removed from a disk (skipped), cleared, stored (by
 * lora_id, no parent, medium GPU). */
static void six_events(writer *w)
{
    batch(w, 6);
    block_stored(w, &(stored){H3, 3, &PARENT, TOK3, 6, BS, 3, NULL, "lora-a"});
    block_stored(w, &(stored){H3, 3, NULL, TOK3, 6, BS, -1, "CPU", NULL});
    block_removed(w, H3, 2, NULL);
    block_removed(w, H3, 1, "DISK");
    event(w, "AllBlocksCleared", 0);
    block_stored(w, &(stored){H3, 1, NULL, TOK3, 2, BS, 42, "GPU", ""});
    batch_end(w);
}

static void check_six(const cr_kv_batch *b)
{
    CU_ASSERT_EQUAL_FATAL(b->n, 5);
    CU_ASSERT_EQUAL(b->skipped, 1);
    CU_ASSERT_DOUBLE_EQUAL(b->ts, 1.5, 0);
    /* the CPU tier's event, then the rest as if it were not there */
    CU_ASSERT_TRUE(b->events[1].kind == CR_KV_STORED && b->events[1].tier == CR_KV_CPU &&
                   b->events[1].n == 3 && !b->events[1].has_parent);
    cr_kv_event e[4] = {b->events[0], b->events[2], b->events[3], b->events[4]};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(e[i].tier, CR_KV_GPU);
    CU_ASSERT_EQUAL(e[0].kind, CR_KV_STORED);
    CU_ASSERT_EQUAL(e[0].n, 3);
    CU_ASSERT_EQUAL(e[0].engine[0], 11);
    CU_ASSERT_EQUAL(e[0].engine[1], (uint64_t)-5); /* two's complement */
    CU_ASSERT_EQUAL(e[0].engine[2], 1ull << 63);
    CU_ASSERT_TRUE(e[0].has_parent && e[0].parent == 10);
    CU_ASSERT_EQUAL(e[0].n_tokens, 6);
    CU_ASSERT_EQUAL(e[0].tokens[5], 6);
    CU_ASSERT_EQUAL(e[0].block_size, BS);
    CU_ASSERT_TRUE(e[0].space_len == 6 && !memcmp(e[0].space, "lora-a", 6)); /* name wins */
    CU_ASSERT_EQUAL(e[0].shard, 0);
    CU_ASSERT_TRUE(e[1].kind == CR_KV_REMOVED && e[1].n == 2 && e[1].engine[1] == (uint64_t)-5);
    CU_ASSERT_EQUAL(e[2].kind, CR_KV_CLEARED);
    CU_ASSERT_TRUE(e[3].kind == CR_KV_STORED && e[3].n == 1 && !e[3].has_parent);
    CU_ASSERT_TRUE(e[3].space_len == 2 && !memcmp(e[3].space, "42", 2)); /* empty name: the id */
}

static void test_array_like(void)
{
    writer w;
    cr_kv_batch b;
    cr_error err;
    w_open(&w, 0);
    six_events(&w);
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    check_six(&b);
    cr_kv_batch_free(&b);
}

static void test_map_like(void)
{
    writer w;
    cr_kv_batch b;
    cr_error err;
    w_open(&w, 1);
    six_events(&w);
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    check_six(&b);
    cr_kv_batch_free(&b);
}

/* ---- the fields' other forms -------------------------------------------------- */

/* Bytes hashes (bin and str) are their XXH3-64; so is a bytes parent. */
static void test_bytes_hashes(void)
{
    static const char sha[32] = "0123456789abcdef0123456789abcdef";
    writer w;
    w_open(&w, 1);
    batch(&w, 1);
    event(&w, "BlockStored", 4);
    key(&w, "block_hashes");
    msgpack_pack_array(&w.pk, 2);
    msgpack_pack_bin_with_body(&w.pk, sha, 32);
    msgpack_pack_str_with_body(&w.pk, "abc", 3);
    key(&w, "parent_block_hash");
    msgpack_pack_bin_with_body(&w.pk, sha, 16);
    key(&w, "token_ids");
    ints(&w, TOK3, 4);
    key(&w, "block_size");
    msgpack_pack_int(&w.pk, BS);
    cr_kv_batch b;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(b.n, 1);
    CU_ASSERT_EQUAL(b.events[0].engine[0], XXH3_64bits(sha, 32));
    CU_ASSERT_EQUAL(b.events[0].engine[1], XXH3_64bits("abc", 3));
    CU_ASSERT_EQUAL(b.events[0].parent, XXH3_64bits(sha, 16));
    CU_ASSERT_EQUAL(b.events[0].space_len, 0); /* absent lora fields: no namespace */
    cr_kv_batch_free(&b);
}

/* A map-like BlockStored of one block with lora_name (NULL: absent) and
 * extra_keys written by keys (NULL: absent). */
static void salted(writer *w, const char *lora, void (*keys)(writer *w))
{
    event(w, "BlockStored", 4 + (lora != NULL) + (keys != NULL));
    key(w, "block_hashes");
    ints(w, H3, 1);
    key(w, "parent_block_hash");
    msgpack_pack_nil(&w->pk);
    key(w, "token_ids");
    ints(w, TOK3, BS);
    key(w, "block_size");
    msgpack_pack_int(&w->pk, BS);
    if (lora) {
        key(w, "lora_name");
        str(w, lora);
    }
    if (keys) {
        key(w, "extra_keys");
        keys(w);
    }
}

static void salt_only(writer *w) /* [["salt-1"], nil] */
{
    msgpack_pack_array(&w->pk, 2);
    msgpack_pack_array(&w->pk, 1);
    str(w, "salt-1");
    msgpack_pack_nil(&w->pk);
}

static void lora_and_salt(writer *w) /* [["a", "salt-2"]] */
{
    msgpack_pack_array(&w->pk, 1);
    msgpack_pack_array(&w->pk, 2);
    str(w, "a");
    str(w, "salt-2");
}

static void lora_only(writer *w) /* [["a"]] */
{
    msgpack_pack_array(&w->pk, 1);
    msgpack_pack_array(&w->pk, 1);
    str(w, "a");
}

static void media_then_salt(writer *w) /* [[["img", 3], bin, "s"]] */
{
    msgpack_pack_array(&w->pk, 1);
    msgpack_pack_array(&w->pk, 3);
    msgpack_pack_array(&w->pk, 2);
    str(w, "img");
    msgpack_pack_int(&w->pk, 3);
    msgpack_pack_bin_with_body(&w->pk, "emb", 3);
    str(w, "s");
}

static void not_a_list(writer *w) { msgpack_pack_int(&w->pk, 5); }

/* vLLM's cache salt, in a request's first block's extra_keys, joins the
 * namespace: alone, or after the LoRA adapter with a 0x1f between; the
 * adapter's own entry is not taken for a salt; multimodal keys and
 * embedding bytes are passed over; extra_keys not a list is refused. */
static void test_cache_salt_namespace(void)
{
    writer w;
    cr_kv_batch b;
    cr_error err;
    w_open(&w, 1);
    batch(&w, 5);
    salted(&w, NULL, salt_only);
    salted(&w, "a", lora_and_salt);
    salted(&w, "a", lora_only);
    salted(&w, NULL, media_then_salt);
    salted(&w, "b", NULL);
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(b.n, 5);
    static const char *const want[] = {"salt-1", "a\x1fsalt-2", "a", "s", "b"};
    for (int i = 0; i < 5; i++)
        CU_ASSERT_TRUE(b.events[i].space_len == strlen(want[i]) &&
                       !memcmp(b.events[i].space, want[i], strlen(want[i])));
    cr_kv_batch_free(&b);
    w_open(&w, 1);
    batch(&w, 1);
    salted(&w, NULL, not_a_list);
    CU_ASSERT_EQUAL(decode(&w, &b, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "extra_keys must be a list or nil, got"));
}

/* Older releases' shorter arrays (no medium, no lora_name), newer ones'
 * fields past the known (group_idx, extra_keys, ...), a negative lora_id,
 * unknown map keys: all read. */
static void test_short_and_long_events(void)
{
    writer w;
    w_open(&w, 0);
    msgpack_pack_array(&w.pk, 4); /* a rank and one more field */
    msgpack_pack_int(&w.pk, 7);
    msgpack_pack_array(&w.pk, 3);
    event(&w, "BlockStored", 5); /* to lora_id: no medium, no lora_name */
    ints(&w, H3, 1);
    msgpack_pack_nil(&w.pk);
    ints(&w, TOK3, 2);
    msgpack_pack_int(&w.pk, BS);
    msgpack_pack_int(&w.pk, -3);
    event(&w, "BlockRemoved", 3); /* with group_idx */
    ints(&w, H3, 1);
    str(&w, "GPU");
    msgpack_pack_int(&w.pk, 0);
    msgpack_pack_array(&w.pk, 1); /* AllBlocksCleared, nothing more */
    str(&w, "AllBlocksCleared");
    msgpack_pack_int(&w.pk, 2);
    str(&w, "a later field");
    cr_kv_batch b;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(b.n, 3);
    CU_ASSERT_TRUE(b.events[0].space_len == 2 && !memcmp(b.events[0].space, "-3", 2));
    CU_ASSERT_EQUAL(b.events[1].kind, CR_KV_REMOVED);
    CU_ASSERT_DOUBLE_EQUAL(b.ts, 7, 0); /* an int ts */
    cr_kv_batch_free(&b);

    w_open(&w, 1);
    batch(&w, 1);
    event(&w, "BlockRemoved", 3);
    key(&w, "group_idx");
    msgpack_pack_int(&w.pk, 1);
    key(&w, "block_hashes");
    ints(&w, H3, 2);
    msgpack_pack_int(&w.pk, 5); /* a key not a str: ignored */
    msgpack_pack_map(&w.pk, 1);
    str(&w, "x");
    msgpack_pack_array(&w.pk, 0);
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    CU_ASSERT_TRUE(b.n == 1 && b.events[0].n == 2);
    cr_kv_batch_free(&b);
}

/* ---- refusals ----------------------------------------------------------------- */

/* Decoding len bytes of data fails with CR_EINVAL and an error containing
 * want; out stays empty. */
static void refused(const void *data, size_t len, const char *want)
{
    cr_kv_batch b;
    cr_error err;
    CU_ASSERT_EQUAL(cr_kv_decode(data, len, &b, &err), CR_EINVAL);
    CU_ASSERT_TRUE(b.events == NULL && b.n == 0 && b.hashes == NULL);
    if (!strstr(err.msg, want)) {
        fprintf(stderr, "\n  error '%s' does not say '%s'\n", err.msg, want);
        CU_FAIL("the error names the field");
    }
}

/* As refused(), on w's payload (freed). */
static void refused_w(writer *w, const char *want)
{
    refused(w->sb.data, w->sb.size, want);
    msgpack_sbuffer_destroy(&w->sb);
}

static void test_bytes_refused(void)
{
    writer w;
    w_open(&w, 0);
    six_events(&w);
    refused(w.sb.data, w.sb.size - 1, "truncated");
    msgpack_sbuffer_write(&w.sb, "\x00", 1);
    msgpack_sbuffer_write(&w.sb, "\x00", 1);
    refused(w.sb.data, w.sb.size, "2 trailing bytes");
    msgpack_sbuffer_destroy(&w.sb);
    refused("", 0, "truncated");
    refused("\xc1", 1, "not msgpack: byte 0xc1 at offset 0");
    refused("\x93\xcb\x00", 3, "truncated"); /* a float cut short */
    refused("\xdd\xff\xff\xff\xff\x90", 6, "claims 4294967295 items"); /* before allocating */
    refused("\xdf\x7f\xff\xff\xff", 5, "claims 4294967294 items");
    uint8_t deep[64];
    memset(deep, 0x91, sizeof deep - 1); /* [[[[...nil...]]]] */
    deep[63] = 0xc0;
    refused(deep, sizeof deep, "nested deeper than 31");
    /* 31 deep is msgpack-c's too: decoded, then refused for its shape */
    refused(deep + 32, 32, "events is missing");
    refused("\x05", 1, "the batch must be an array or a map, got 5");
}

/* A one-event batch whose BlockStored has a field replaced by value
 * (packed by pack), in the encoding map. */
static void stored_with(writer *w, int map, const char *field, void (*pack)(writer *))
{
    static const char *const names[] = {"block_hashes", "parent_block_hash", "token_ids",
                                        "block_size", "lora_id", "medium", "lora_name"};
    w_open(w, map);
    batch(w, 2);
    event(w, "AllBlocksCleared", 0);
    event(w, "BlockStored", 7);
    for (int k = 0; k < 7; k++) {
        key(w, names[k]);
        if (!strcmp(names[k], field))
            pack(w);
        else if (k == 0)
            ints(w, H3, 2);
        else if (k == 2)
            ints(w, TOK3, 4);
        else if (k == 3)
            msgpack_pack_int(&w->pk, BS);
        else
            msgpack_pack_nil(&w->pk);
    }
    batch_end(w);
}

static void pack_str_x(writer *w) { str(w, "x"); }
static void pack_float(writer *w) { msgpack_pack_double(&w->pk, 2.0); }
static void pack_int(writer *w) { msgpack_pack_int(&w->pk, 3); }
static void pack_hashes_float(writer *w)
{
    msgpack_pack_array(&w->pk, 2);
    msgpack_pack_int(&w->pk, 1);
    msgpack_pack_float(&w->pk, 1.0f);
}
static void pack_tokens_neg(writer *w)
{
    static const int64_t t[] = {1, 2, -7, 4};
    ints(w, t, 4);
}
static void pack_tokens_short(writer *w) { ints(w, TOK3, 3); }
static void pack_too_many_hashes(writer *w)
{
    msgpack_pack_array(&w->pk, CR_KV_MAX_HASHES + 1);
    for (int i = 0; i <= CR_KV_MAX_HASHES; i++)
        msgpack_pack_int(&w->pk, i);
}
static void pack_long_name(writer *w)
{
    char name[CR_CORE_NAMESPACE_MAX + 1];
    memset(name, 'n', sizeof name);
    msgpack_pack_str_with_body(&w->pk, name, sizeof name);
}

static void test_fields_refused(void)
{
    static const struct {
        const char *field;
        void (*pack)(writer *);
        const char *want;
    } cases[] = {
        {"block_size", pack_str_x, "event 1: block_size must be an int in 1..1048576, got str"},
        {"block_size", pack_float, "event 1: block_size must be an int in 1..1048576, got float"},
        {"block_hashes", pack_int, "event 1: block_hashes must be an array, got 3"},
        {"block_hashes", pack_hashes_float,
         "event 1: block_hashes[1] must be an int or bytes, got float"},
        {"block_hashes", pack_too_many_hashes, "event 1: block_hashes has 65537 hashes, at most "
         "65536"},
        {"parent_block_hash", pack_float, "event 1: parent_block_hash must be an int, bytes or "
         "nil, got float"},
        {"token_ids", pack_str_x, "event 1: token_ids must be an array, got str"},
        {"token_ids", pack_tokens_neg, "event 1: token_ids[2] must be an int in 0..4294967295, "
         "got -7"},
        {"token_ids", pack_tokens_short, "event 1: token_ids has 3 tokens, 2 blocks of 2 need 4"},
        {"lora_id", pack_str_x, "event 1: lora_id must be an int or nil, got str"},
        {"lora_name", pack_int, "event 1: lora_name must be a str or nil, got 3"},
        {"lora_name", pack_long_name, "event 1: lora_name must be at most 256 bytes, got 257"},
        {"medium", pack_int, "event 1: medium must be a str or nil, got 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int map = 0; map < 2; map++) {
            writer w;
            stored_with(&w, map, cases[i].field, cases[i].pack);
            refused_w(&w, cases[i].want);
        }
}

static void test_shapes_refused(void)
{
    writer w;
    w_open(&w, 1);
    batch(&w, 1);
    event(&w, "BlockStored", 2); /* no token_ids, no block_size */
    key(&w, "block_hashes");
    ints(&w, H3, 1);
    key(&w, "block_hashes");
    ints(&w, H3, 1);
    refused_w(&w, "event 0: block_hashes given twice");

    w_open(&w, 1);
    batch(&w, 1);
    event(&w, "BlockRemoved", 0);
    refused_w(&w, "event 0: block_hashes is missing");

    w_open(&w, 0);
    batch(&w, 2);
    event(&w, "AllBlocksCleared", 0);
    event(&w, "BlockStored", 3); /* an array-like one cut after parent, token_ids */
    ints(&w, H3, 1);
    msgpack_pack_nil(&w.pk);
    ints(&w, TOK3, 2);
    batch_end(&w);
    refused_w(&w, "event 1: block_size is missing");

    /* A type a later engine release adds is skipped, not the batch refused. */
    w_open(&w, 0);
    batch(&w, 2);
    event(&w, "BlockMoved", 0);
    event(&w, "AllBlocksCleared", 0);
    batch_end(&w);
    cr_kv_batch b;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    CU_ASSERT_TRUE(b.n == 1 && b.skipped == 1 && b.events[0].kind == CR_KV_CLEARED);
    cr_kv_batch_free(&b);

    w_open(&w, 1);
    batch(&w, 2);
    event(&w, "AllBlocksCleared", 0);
    msgpack_pack_map(&w.pk, 0);
    refused_w(&w, "event 1: type is missing");

    w_open(&w, 0);
    batch(&w, 1);
    msgpack_pack_int(&w.pk, 9);
    batch_end(&w);
    refused_w(&w, "event 0: must be an array or a map, got 9");
}

static void test_batch_refused(void)
{
    writer w;
    w_open(&w, 0);
    batch(&w, CR_KV_MAX_EVENTS + 1);
    for (int i = 0; i <= CR_KV_MAX_EVENTS; i++)
        event(&w, "AllBlocksCleared", 0);
    batch_end(&w);
    refused_w(&w, "events has 10001 events, at most 10000");

    w_open(&w, 0);
    msgpack_pack_array(&w.pk, 2);
    str(&w, "now");
    msgpack_pack_array(&w.pk, 0);
    refused_w(&w, "ts must be a finite number, got str");

    w_open(&w, 0);
    msgpack_pack_array(&w.pk, 3);
    msgpack_pack_int(&w.pk, 1);
    msgpack_pack_array(&w.pk, 0);
    str(&w, "rank");
    refused_w(&w, "data_parallel_rank must be an int or nil, got str");

    w_open(&w, 1);
    msgpack_pack_map(&w.pk, 2);
    str(&w, "ts");
    msgpack_pack_int(&w.pk, 1);
    str(&w, "events");
    msgpack_pack_map(&w.pk, 0);
    refused_w(&w, "events must be an array, got map");

    w_open(&w, 1);
    msgpack_pack_map(&w.pk, 1);
    str(&w, "ts");
    msgpack_pack_int(&w.pk, 1);
    refused_w(&w, "events is missing");
}

/* Sanitizers' shadow memory needs the address space a limit would take. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

/* A batch of one BlockStored event of one hash and n one-byte tokens,
 * packed by hand (msgpack-c's writer is not needed for 16 MiB of 0x01);
 * *len its bytes. */
static uint8_t *many_tokens(uint32_t n, size_t *len)
{
    static const uint8_t head[] = {0x93, 0x01, 0x91, 0x98, 0xab, 'B', 'l', 'o', 'c', 'k', 'S',
                                   't', 'o', 'r', 'e', 'd', 0x91, 0x07, 0xc0, 0xdd};
    static const uint8_t tail[] = {0x01, 0xc0, 0xc0, 0xc0, 0xc0}; /* block_size 1, ..., rank */
    *len = sizeof head + 4 + n + sizeof tail;
    uint8_t *p = malloc(*len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memcpy(p, head, sizeof head);
    for (int i = 0; i < 4; i++)
        p[sizeof head + i] = (uint8_t)(n >> (24 - 8 * i));
    memset(p + sizeof head + 4, 0x01, n);
    memcpy(p + sizeof head + 4 + n, tail, sizeof tail);
    return p;
}

/* R3-4: the counts are refused in the byte walk, before msgpack-c makes
 * 24 B of every item: a token_ids of 2^24 + 1 one-byte ints (16 MiB, 400
 * MB of objects) is refused for its count in a child left 128 MiB of
 * address space, where building the objects first ran out of memory.
 * (Under a sanitizer, whose shadow memory needs the address space, the
 * refusal only.) */
static void test_counts_refused_before_objects(void)
{
    size_t len;
    uint8_t *p = many_tokens(CR_KV_MAX_TOKENS + 1, &len);
#ifdef UNDER_SANITIZER
    refused(p, len, "event 0: token_ids has 16777217 tokens"); /* no limit: the message only */
#else
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        FILE *f = fopen("/proc/self/status", "r");
        char line[128];
        long kb = -1;
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "VmSize:", 7))
                kb = atol(line + 7);
        if (f)
            fclose(f);
        struct rlimit lim = {.rlim_cur = (rlim_t)kb * 1024 + (128u << 20)};
        lim.rlim_max = lim.rlim_cur;
        if (kb < 0 || setrlimit(RLIMIT_AS, &lim) != 0)
            _exit(4);
        cr_kv_batch b;
        cr_error err;
        cr_status st = cr_kv_decode(p, len, &b, &err);
        _exit(st == CR_EINVAL && strstr(err.msg, "event 0: token_ids has 16777217 tokens")
                  ? 0 : st == CR_ENOMEM ? 2 : 3);
    }
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fprintf(stderr, "\n  the child exited %d (2: out of memory)\n", WEXITSTATUS(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
#endif
    free(p);
    /* within the bound it decodes */
    p = many_tokens(1, &len);
    cr_kv_batch b;
    cr_error err;
    CU_ASSERT_EQUAL(cr_kv_decode(p, len, &b, &err), CR_OK);
    CU_ASSERT_EQUAL(b.n, 1);
    cr_kv_batch_free(&b);
    free(p);
}

/* An empty batch decodes to no events (and arrays freed as any). */
static void test_empty_batch(void)
{
    writer w;
    cr_kv_batch b;
    cr_error err;
    w_open(&w, 1);
    batch(&w, 0);
    CU_ASSERT_EQUAL_FATAL(decode(&w, &b, &err), CR_OK);
    CU_ASSERT_TRUE(b.n == 0 && b.skipped == 0);
    cr_kv_batch_free(&b);
    cr_kv_batch_free(&b); /* emptied: a second free is harmless */
}

/* ---- on a core ------------------------------------------------------------------ */

#define SHARDS 4
#define BT 4 /* tokens a block */

typedef cr_test_kv_core fixture;

static void open_core(fixture *f)
{
    cr_test_kv_core_open(f, SHARDS, BT, 1000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

/* Blocks [first, first + n) of prompt p, engine hashes -(1000 p + i) (the
 * older releases' negative int64s), as one BlockStored. */
static void store_prompt(writer *w, uint32_t p, uint32_t first, uint32_t n, const char *name)
{
    int64_t h[8], tok[8 * BT], parent = -(1000 * (int64_t)p + first - 1);
    for (uint32_t i = 0; i < n; i++) {
        h[i] = -(1000 * (int64_t)p + first + i);
        for (uint32_t t = 0; t < BT; t++)
            tok[i * BT + t] = cr_test_kv_token(p, first + i, t);
    }
    block_stored(w, &(stored){h, n, first ? &parent : NULL, tok, n * BT, BT, -1, "GPU", name});
}

/* The payload decoded, its events sent to shard, applied. */
static cr_kv_applied apply(fixture *f, writer *w, uint32_t shard)
{
    cr_kv_batch b;
    cr_kv_applied out = {0};
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(decode(w, &b, &err), CR_OK);
    for (size_t i = 0; i < b.n; i++)
        b.events[i].shard = shard;
    CU_ASSERT_EQUAL(cr_core_kv_events(f->core, b.events, b.n, &out, &err), CR_OK);
    cr_kv_batch_free(&b);
    return out;
}

/* Route's cached tokens for prompt p's first n blocks. */
static uint32_t cached(fixture *f, uint32_t p, uint32_t n, const char *space, uint32_t *shard)
{
    cr_route_answer a;
    CU_ASSERT_EQUAL_FATAL(cr_test_kv_core_route(f, p, n, space, &a), CR_OK);
    *shard = a.shard;
    return a.cached_tokens;
}

static void test_applied_to_core(void)
{
    fixture f;
    writer w;
    uint32_t shard;
    open_core(&f);
    for (uint32_t map = 0; map < 2; map++) { /* prompts 7, 9 array-like; 8, 10 map-like */
        w_open(&w, (int)map);
        batch(&w, 3);
        store_prompt(&w, 7 + map, 0, 3, NULL);
        store_prompt(&w, 7 + map, 3, 2, NULL); /* a child of the first */
        store_prompt(&w, 9 + map, 0, 2, "lora-a");
        batch_end(&w);
        cr_kv_applied a = apply(&f, &w, 2);
        CU_ASSERT_EQUAL(a.stored, 7);
        CU_ASSERT_EQUAL(a.orphans, 0);
    }
    cr_route_stats st;
    cr_core_route_stats_read(f.core, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.index_blocks, 14); /* before any Route adds its own */
    for (uint32_t p = 7; p <= 8; p++) {
        CU_ASSERT_EQUAL(cached(&f, p, 6, NULL, &shard), 5 * BT);
        CU_ASSERT_EQUAL(shard, 2);
        CU_ASSERT_EQUAL(cached(&f, p + 2, 2, "lora-a", &shard), 2 * BT);
        CU_ASSERT_EQUAL(cached(&f, p + 2, 2, "lora-b", &shard), 0);
    }
    /* prompt 7's third block removed: hits stop at the hole */
    w_open(&w, 1);
    batch(&w, 1);
    block_removed(&w, (const int64_t[]){-7002}, 1, "GPU");
    CU_ASSERT_EQUAL(apply(&f, &w, 2).removed, 1);
    CU_ASSERT_EQUAL(cached(&f, 7, 5, NULL, &shard), 2 * BT);
    cr_core_free(f.core);
}

/* ---- --kv-events values ------------------------------------------------------- */

static void test_engine_values(void)
{
    cr_kv_engine e;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_kv_engine_parse("7=tcp://vllm-7:5557", &e, &err), CR_OK);
    CU_ASSERT_EQUAL(e.shard, 7);
    CU_ASSERT_STRING_EQUAL(e.endpoint, "tcp://vllm-7:5557");
    CU_ASSERT_STRING_EQUAL(e.replay, "");
    CU_ASSERT_EQUAL_FATAL(
        cr_kv_engine_parse("63=ipc:///run/kv.sock,replay=tcp://[::1]:5558", &e, &err), CR_OK);
    CU_ASSERT_EQUAL(e.shard, 63);
    CU_ASSERT_STRING_EQUAL(e.endpoint, "ipc:///run/kv.sock");
    CU_ASSERT_STRING_EQUAL(e.replay, "tcp://[::1]:5558");
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"tcp://x:1", "must be SHARD=ENDPOINT[,replay=ENDPOINT]"},
        {"64=tcp://x:1", "SHARD must be a decimal in 0..63"},
        {"-1=tcp://x:1", "SHARD must be a decimal in 0..63"},
        {"007=tcp://x:1", "SHARD must be a decimal in 0..63"},
        {"=tcp://x:1", "SHARD must be a decimal in 0..63"},
        {"1=http://x:1", "ENDPOINT must be tcp://... or ipc://..."},
        {"1=tcp://", "ENDPOINT must be tcp://... or ipc://..."},
        {"1=tcp://x:1,other=tcp://y:2", "only ,replay=ENDPOINT may follow ENDPOINT"},
        {"1=tcp://x:1,replay=udp://y", "replay=ENDPOINT must be tcp://... or ipc://..."},
        {"1=tcp://x y:1", "ENDPOINT must be 1..255 bytes without spaces"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(cr_kv_engine_parse(bad[i].text, &e, &err), CR_EINVAL);
        CU_ASSERT_STRING_EQUAL(err.msg, bad[i].why);
    }
    char longest[CR_KV_ENDPOINT_MAX + 8] = "1=tcp://";
    memset(longest + 8, 'h', CR_KV_ENDPOINT_MAX - 1 - 6);
    longest[CR_KV_ENDPOINT_MAX + 1] = '\0'; /* "tcp://" + 249 bytes: 255, the most */
    CU_ASSERT_EQUAL(cr_kv_engine_parse(longest, &e, &err), CR_OK);
    longest[CR_KV_ENDPOINT_MAX + 1] = 'h'; /* one more */
    longest[CR_KV_ENDPOINT_MAX + 2] = '\0';
    CU_ASSERT_EQUAL(cr_kv_engine_parse(longest, &e, &err), CR_EINVAL);
}

static const cr_test_case decode_tests[] = {
    {"array-like", test_array_like},
    {"map-like", test_map_like},
    {"bytes hashes", test_bytes_hashes},
    {"cache salt in the namespace", test_cache_salt_namespace},
    {"short and long events", test_short_and_long_events},
    {"empty batch", test_empty_batch},
    {"bytes refused", test_bytes_refused},
    {"fields refused", test_fields_refused},
    {"shapes refused", test_shapes_refused},
    {"batch refused", test_batch_refused},
    {"counts refused before msgpack-c's objects", test_counts_refused_before_objects},
    {NULL, NULL},
};

static const cr_test_case core_tests[] = {
    {"applied to a core", test_applied_to_core},
    {NULL, NULL},
};

static const cr_test_case engine_tests[] = {
    {"--kv-events values", test_engine_values},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {
    {"kv_decode", decode_tests}, {"kv_decode_core", core_tests}, {"kv_engines", engine_tests}};
CR_TEST_MAIN(suites)
