/* The state file's bytes (layout: core.h, "state"): the header, the four
 * sections in order, and the SHA-256 trailer. Decoding checks the magic
 * and version (so another version's reason is named), then the checksum,
 * then every section, each length against the bytes left. */
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "state.h"

static const char MAGIC[8] = "CRSTATE";
#define HEADER_BYTES CR_STATE_HEADER_BYTES
#define SHA_BYTES CR_STATE_SHA_BYTES
#define N_SECTIONS CR_STATE_SECTIONS
enum { SEC_CONFIG = 1, SEC_ESTIMATOR, SEC_TABLE, SEC_CALIBRATION };
static const char *const SECTION[N_SECTIONS + 1] = {"", "config", "estimator", "table",
                                                    "calibration"};

static const char *const FIELD[CR_STATE_N_FINGERPRINT] = {
    "estimator.clock",        "estimator.half_life",    "planner.n_shards",
    "inject.model_layers",    "inject.model_kv_heads",  "inject.model_head_dim",
    "inject.kv_dtype_bytes",  "inject.tensor_parallel", "inject.model_params_b",
    "inject.model_d_model"};

void cr_state_fingerprint_of(const cr_core_config *cfg, cr_state_fingerprint *out)
{
    const cr_inject_config *m = &cfg->inject;
    double v[CR_STATE_N_FINGERPRINT] = {
        cfg->estimator.clock,  cfg->estimator.half_life, cfg->planner.n_shards,
        m->model_layers,       m->model_kv_heads,        m->model_head_dim,
        m->kv_dtype_bytes,     m->tensor_parallel,       m->model_params_b,
        m->model_d_model};
    memcpy(out->v, v, sizeof v);
}

void cr_state_image_free(cr_state_image *im)
{
    free(im->owners);
    cr_table_free(im->table);
    memset(im, 0, sizeof *im);
}

static int sha256(const uint8_t *p, size_t len, uint8_t out[SHA_BYTES])
{
    unsigned n = 0;
    return EVP_Digest(p, len, out, &n, EVP_sha256(), NULL) == 1 && n == SHA_BYTES ? 0 : -1;
}

/* ---- encoding ---- */

/* Starts a section; returns where its length goes. */
static size_t section(cr_buf *b, uint32_t tag)
{
    cr_buf_u32(b, tag);
    size_t at = b->len;
    cr_buf_u64(b, 0);
    return at;
}

static void end_section(cr_buf *b, size_t at) { cr_buf_patch_u64(b, at, b->len - at - 8); }

static void put_config(cr_buf *b, const cr_state_fingerprint *fp)
{
    cr_buf_u32(b, CR_STATE_N_FINGERPRINT);
    for (int i = 0; i < CR_STATE_N_FINGERPRINT; i++) {
        size_t n = strlen(FIELD[i]);
        cr_buf_u8(b, (uint8_t)n);
        cr_buf_put(b, FIELD[i], n);
        cr_buf_f64(b, fp->v[i]);
    }
}

static void put_owners(cr_buf *b, const cr_state_image *im)
{
    cr_buf_u32(b, im->clock);
    cr_buf_u64(b, im->n_owners);
    cr_buf_reserve(b, 24 * im->n_owners);
    for (size_t i = 0; i < im->n_owners; i++) {
        cr_buf_u64(b, (uint64_t)im->owners[i].owner);
        cr_buf_f64(b, im->owners[i].count);
        cr_buf_f64(b, im->owners[i].t_last);
    }
}

cr_status cr_state_encode(const cr_state_fingerprint *fp, const cr_state_image *im,
                          cr_injector *inj, uint8_t **out, size_t *len, cr_error *err)
{
    cr_buf b = CR_BUF_INIT;
    cr_buf_put(&b, MAGIC, sizeof MAGIC);
    cr_buf_u32(&b, CR_STATE_VERSION);
    cr_buf_u32(&b, N_SECTIONS);
    cr_buf_f64(&b, im->written_at);
    cr_buf_f64(&b, im->written_clock);
    size_t at = section(&b, SEC_CONFIG);
    put_config(&b, fp);
    end_section(&b, at);
    at = section(&b, SEC_ESTIMATOR);
    put_owners(&b, im);
    end_section(&b, at);
    at = section(&b, SEC_TABLE);
    cr_buf_u64(&b, im->table ? im->generation : 0);
    if (im->table)
        cr_table_save(im->table, &b);
    end_section(&b, at);
    at = section(&b, SEC_CALIBRATION);
    cr_injector_save_calibration(inj, &b);
    end_section(&b, at);
    uint8_t sum[SHA_BYTES];
    if (!b.failed && sha256(b.p, b.len, sum) == 0)
        cr_buf_put(&b, sum, SHA_BYTES);
    else
        b.failed = 1;
    if (b.failed) {
        cr_buf_free(&b);
        return cr_fail(err, CR_ENOMEM, "out of memory encoding a snapshot of %zu owners",
                       im->n_owners);
    }
    *out = b.p;
    *len = b.len;
    return CR_OK;
}

/* ---- decoding ---- */

static cr_status get_config(cr_cursor *c, const cr_state_fingerprint *fp, cr_error *err)
{
    uint32_t n = cr_get_u32(c);
    if (n != CR_STATE_N_FINGERPRINT)
        return cr_fail(err, CR_EINVAL, "config has %u fields, version %d has %d", n,
                       CR_STATE_VERSION, CR_STATE_N_FINGERPRINT);
    for (int i = 0; i < CR_STATE_N_FINGERPRINT; i++) {
        uint8_t len = cr_get_u8(c);
        const uint8_t *name = cr_get_bytes(c, len);
        double v = cr_get_f64(c);
        if (c->failed)
            return cr_fail(err, CR_EINVAL, "config is truncated at field %d", i);
        if (len != strlen(FIELD[i]) || memcmp(name, FIELD[i], len) != 0)
            return cr_fail(err, CR_EINVAL, "config field %d (%u bytes) is not %s", i, len,
                           FIELD[i]);
        if (v != fp->v[i]) /* also refuses NaN */
            return cr_fail(err, CR_EINVAL, "other config: %s is %.17g in the file, %.17g now",
                           FIELD[i], v, fp->v[i]);
    }
    return CR_OK;
}

static cr_status get_owners(cr_cursor *c, cr_state_image *im, cr_error *err)
{
    im->clock = cr_get_u32(c);
    uint64_t n = cr_get_u64(c);
    if (c->failed || !cr_cursor_holds(c, n, 24))
        return cr_fail(err, CR_EINVAL, "estimator of %llu owners does not fit the %zu bytes left",
                       (unsigned long long)n, c->left);
    if (!(im->owners = malloc((n ? n : 1) * sizeof *im->owners)))
        return cr_fail(err, CR_ENOMEM, "out of memory restoring %llu owners",
                       (unsigned long long)n);
    im->n_owners = (size_t)n;
    for (size_t i = 0; i < im->n_owners; i++) {
        cr_estimator_entry *e = &im->owners[i];
        e->owner = (int64_t)cr_get_u64(c);
        e->count = cr_get_f64(c);
        e->t_last = cr_get_f64(c);
        if (i && e->owner <= e[-1].owner)
            return cr_fail(err, CR_EINVAL, "estimator owners[%zu] %lld must exceed the one "
                           "before, %lld", i, (long long)e->owner, (long long)e[-1].owner);
        if (!(isfinite(e->count) && e->count > 0) || !(isfinite(e->t_last) && e->t_last >= 0))
            return cr_fail(err, CR_EINVAL,
                           "estimator owners[%zu] needs a count finite and > 0 and an age "
                           "finite and >= 0, got %g, %g",
                           i, e->count, e->t_last);
    }
    return CR_OK;
}

static cr_status get_table(cr_cursor *c, cr_state_image *im, cr_error *err)
{
    im->generation = cr_get_u64(c);
    if (c->failed)
        return cr_fail(err, CR_EINVAL, "table section is truncated");
    if (im->generation > CR_CORE_MAX_GENERATION)
        return cr_fail(err, CR_EINVAL,
                       "table generation %llu is past the largest a table may have, %llu: "
                       "generations only move forward",
                       (unsigned long long)im->generation,
                       (unsigned long long)CR_CORE_MAX_GENERATION);
    return im->generation ? cr_table_load(c, &im->table, err) : CR_OK;
}

static cr_status get_section(cr_cursor *c, int tag, const cr_state_fingerprint *fp,
                             cr_injector *inj, cr_state_image *im, cr_error *err)
{
    uint32_t got = cr_get_u32(c);
    uint64_t len = cr_get_u64(c);
    if (c->failed || got != (uint32_t)tag || len > c->left)
        return cr_fail(err, CR_EINVAL, "section %d (%s) must follow with tag %d and a length "
                       "within the %zu bytes left, got tag %u length %llu",
                       tag, SECTION[tag], tag, c->left, got, (unsigned long long)len);
    cr_cursor sub = cr_cursor_of(cr_get_bytes(c, (size_t)len), (size_t)len);
    cr_status st = tag == SEC_CONFIG      ? get_config(&sub, fp, err)
                   : tag == SEC_ESTIMATOR ? get_owners(&sub, im, err)
                   : tag == SEC_TABLE     ? get_table(&sub, im, err)
                                          : cr_injector_load_calibration(inj, &sub, 0, err);
    if (tag == SEC_CALIBRATION) {
        im->calibration = c->p - len;
        im->calibration_len = (size_t)len;
    }
    if (st == CR_OK && (sub.failed || sub.left))
        st = cr_fail(err, CR_EINVAL, "section %s has %zu bytes past its end", SECTION[tag],
                     sub.left);
    return st;
}

const char *cr_state_section_name(int tag)
{
    return tag >= 1 && tag <= N_SECTIONS ? SECTION[tag] : "unknown";
}

cr_status cr_state_check_header(const uint8_t *p, size_t len, cr_error *err)
{
    if (len < HEADER_BYTES)
        return cr_fail(err, CR_EINVAL, "truncated: %zu bytes, a state file has at least %d",
                       len, HEADER_BYTES + SHA_BYTES);
    if (memcmp(p, MAGIC, sizeof MAGIC) != 0)
        return cr_fail(err, CR_EINVAL, "not a cacheroute state file (bad magic)");
    cr_cursor c = cr_cursor_of(p + sizeof MAGIC, 8);
    uint32_t version = cr_get_u32(&c);
    if (version != CR_STATE_VERSION)
        return cr_fail(err, CR_EINVAL, "foreign version %u, this build reads %d", version,
                       CR_STATE_VERSION);
    return CR_OK;
}

/* Magic, version, size and checksum: what says the bytes are a whole file
 * of this version at all. */
static cr_status check_frame(const uint8_t *p, size_t len, cr_error *err)
{
    if (len < HEADER_BYTES + SHA_BYTES)
        return cr_fail(err, CR_EINVAL, "truncated: %zu bytes, a state file has at least %d",
                       len, HEADER_BYTES + SHA_BYTES);
    cr_status st = cr_state_check_header(p, len, err);
    if (st != CR_OK)
        return st;
    cr_cursor c = cr_cursor_of(p + sizeof MAGIC + 4, 4);
    uint32_t sections = cr_get_u32(&c);
    uint8_t sum[SHA_BYTES];
    if (sha256(p, len - SHA_BYTES, sum) != 0)
        return cr_fail(err, CR_ENOMEM, "cannot compute SHA-256");
    if (memcmp(sum, p + len - SHA_BYTES, SHA_BYTES) != 0)
        return cr_fail(err, CR_EINVAL, "checksum mismatch: the file is corrupt or truncated");
    if (sections != N_SECTIONS)
        return cr_fail(err, CR_EINVAL, "%u sections, version %d has %d", sections,
                       CR_STATE_VERSION, N_SECTIONS);
    return CR_OK;
}

cr_status cr_state_decode(const cr_state_fingerprint *fp, const uint8_t *p, size_t len,
                          cr_injector *inj, cr_state_image *im, cr_error *err)
{
    memset(im, 0, sizeof *im);
    cr_status st = check_frame(p, len, err);
    if (st != CR_OK)
        return st;
    cr_cursor c = cr_cursor_of(p + 16, len - 16 - SHA_BYTES);
    im->written_at = cr_get_f64(&c);
    im->written_clock = cr_get_f64(&c);
    if (!isfinite(im->written_at) || !isfinite(im->written_clock))
        st = cr_fail(err, CR_EINVAL, "written times must be finite, got %g, %g", im->written_at,
                     im->written_clock);
    for (int tag = SEC_CONFIG; st == CR_OK && tag <= SEC_CALIBRATION; tag++)
        st = get_section(&c, tag, fp, inj, im, err);
    if (st == CR_OK && im->clock != (uint32_t)fp->v[0])
        st = cr_fail(err, CR_EINVAL, "estimator clock %u differs from the config's %g",
                     im->clock, fp->v[0]);
    if (st == CR_OK && c.left)
        st = cr_fail(err, CR_EINVAL, "%zu bytes after the last section", c.left);
    if (st != CR_OK)
        cr_state_image_free(im);
    return st;
}
