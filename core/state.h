/* Internal to the core: the state file's format (state_format.c) and its
 * files (state_file.c); core/state.c puts them together. The layout is
 * documented in core.h ("state"). */
#ifndef CR_CORE_STATE_H
#define CR_CORE_STATE_H

#include "core.h"

/* The fingerprint's fields, in file order (names: state_format.c). */
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

/* ---- files ---- */

/* Writes len bytes to path atomically (path.tmp, fsync, rename, fsync of
 * the folder), sleeping stall_s after half of them (test hook; 0 none).
 * CR_ENOMEM with err naming the path and errno's text on failure. */
cr_status cr_state_write_file(const char *path, const uint8_t *p, size_t len, double stall_s,
                              cr_error *err);

/* Reads path whole into a malloc'd *out of *len bytes. *missing = 1 (and
 * CR_OK, *out NULL) when it does not exist. CR_EINVAL when it cannot be
 * read or exceeds CR_STATE_MAX_BYTES. */
cr_status cr_state_read_file(const char *path, uint8_t **out, size_t *len, int *missing,
                             cr_error *err);

/* Renames path to path.corrupt into moved (its size); 0, or -1 with err. */
int cr_state_move_aside(const char *path, char *moved, size_t size, cr_error *err);

#endif
