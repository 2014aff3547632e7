/* Internal to the core: the state file's format (format.c) and its files
 * (file.c); state.c puts them together. What is kept and how a restore
 * goes: core.h ("state").
 *
 * The file, version 1, little-endian (bytes.h):
 *   header   8 bytes "CRSTATE\0", u32 version, u32 sections (4), f64 wall
 *            time written (Unix seconds), f64 the core's clock then
 *   sections each u32 tag, u64 length, payload, in this order:
 *            1 config: u32 count, then per field u8 name length, name,
 *              f64 value: the fingerprint below
 *            2 estimator: u32 clock, u64 owners, then per owner ascending
 *              i64 owner, f64 count, f64 age (seconds before the wall time
 *              written; 0 in calls mode)
 *            3 table: u64 generation (0: none installed), then, when not
 *              0, the table's section (planner.h)
 *            4 calibration: inject.h's section
 *   trailer  SHA-256 (OpenSSL) of every byte before it
 * The fingerprint is the configuration that makes a snapshot meaningless
 * when changed: estimator.clock and estimator.half_life (what a count
 * means), planner.n_shards (the shards routes go to), and the model shape
 * the prefill and KV fits were measured on (inject.model_layers,
 * model_kv_heads, model_head_dim, kv_dtype_bytes, tensor_parallel,
 * model_params_b, model_d_model, kv_bytes_per_token, 0 when unset).
 * Changing anything else (--max-owners, --qcap, cost-model flags) keeps
 * the state.
 *
 * Bounds: the loader reads the file whole (one allocation of its size, at
 * most CR_STATE_BASE_BYTES + CR_STATE_BYTES_PER_OWNER x --max-owners), once
 * its header and its sections' lengths, read alone, say the file is whole,
 * and checks every count against the bytes left before allocating for it. A snapshot builds the file in memory (24 B per
 * owner, 12 B per placement + 4 B per shard slot, under 1 KB a fit) and
 * holds it while writing. */
#ifndef CR_CORE_STATE_H
#define CR_CORE_STATE_H

#include "core.h"

#define CR_STATE_VERSION 1
#define CR_STATE_HEADER_BYTES 32
#define CR_STATE_SHA_BYTES 32
#define CR_STATE_SECTIONS 4
/* A restore reads at most this plus CR_STATE_BYTES_PER_OWNER per
 * --max-owners (24 B an owner, twice over for a table as large): a larger
 * file is refused unread. */
#define CR_STATE_BASE_BYTES ((uint64_t)256 << 20)
#define CR_STATE_BYTES_PER_OWNER 48

/* The fingerprint's fields, in file order (names: format.c). */
#define CR_STATE_N_FINGERPRINT 10
typedef struct cr_state_fingerprint {
    double v[CR_STATE_N_FINGERPRINT];
} cr_state_fingerprint;

void cr_state_fingerprint_of(const cr_core_config *cfg, cr_state_fingerprint *out);

/* Everything a state file holds, decoded. */
typedef struct cr_state_image {
    double written_at;  /* wall, Unix seconds */
    double written_clock; /* the writer's core clock */
    uint32_t clock;     /* cr_clock of the estimator */
    cr_estimator_entry *owners; /* ascending; t_last holds the age, seconds */
    size_t n_owners;
    uint64_t generation; /* 0: no table */
    cr_table *table;
    const uint8_t *calibration; /* the calibration section, checked, inside */
    size_t calibration_len;     /* the decoded bytes (not owned) */
} cr_state_image;

void cr_state_image_free(cr_state_image *im);

/* The file for im (owners' t_last as ages) with inj's calibration: a
 * malloc'd buffer in *out, *len bytes. CR_ENOMEM when out of memory. */
cr_status cr_state_encode(const cr_state_fingerprint *fp, const cr_state_image *im,
                          cr_injector *inj, uint8_t **out, size_t *len, cr_error *err);

/* Checks and decodes len bytes against fp into *im (the calibration
 * checked with inj, not applied: cr_injector_load_calibration on
 * im->calibration does that). CR_EINVAL naming the reason, CR_ENOMEM out
 * of memory; *im empty on error. Changes nothing. */
cr_status cr_state_decode(const cr_state_fingerprint *fp, const uint8_t *p, size_t len,
                          cr_injector *inj, cr_state_image *im, cr_error *err);

/* "config", "estimator", "table", "calibration" for tags 1..4. */
const char *cr_state_section_name(int tag);

/* Magic and version of the first len bytes of a file: CR_EINVAL naming
 * what is wrong ("bad magic", "foreign version"). */
cr_status cr_state_check_header(const uint8_t *p, size_t len, cr_error *err);

/* ---- files ---- */

/* Takes path's lock (path.lock, a POSIX write lock held until the process
 * ends, its pid written in it): the descriptor, or -1 with err, CR_ESTATE
 * naming the holder's pid when another process holds it. */
int cr_state_lock(const char *path, cr_error *err);

/* Removes path's temporaries left by a process killed mid-write
 * (path.tmp.<pid>.<n>); call with the lock held. */
void cr_state_sweep_temporaries(const char *path);

/* Writes len bytes to path atomically (a temporary of this process's own
 * beside it, created O_EXCL | O_NOFOLLOW through the folder's descriptor,
 * fsync, rename, fsync of the folder), sleeping stall_s after half of them
 * (test hook; 0 none). CR_ENOMEM with err naming the path and errno's text
 * on failure. */
cr_status cr_state_write_file(const char *path, const uint8_t *p, size_t len, double stall_s,
                              cr_error *err);

/* Reads path whole into a malloc'd *out of *len bytes. *missing = 1 (and
 * CR_OK, *out NULL) when it does not exist. CR_EINVAL when it is not a
 * regular file (never blocking on a FIFO), holds more than ceiling bytes,
 * has a header or section lengths that do not add up to its size, or
 * cannot be read. */
cr_status cr_state_read_file(const char *path, uint64_t ceiling, uint8_t **out, size_t *len,
                             int *missing, cr_error *err);

/* Renames path to path.corrupt into moved (its size); 0, or -1 with err. */
int cr_state_move_aside(const char *path, char *moved, size_t size, cr_error *err);

#endif
