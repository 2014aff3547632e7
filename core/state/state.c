/* State that survives a restart: restore at cr_core_new, snapshots by the
 * ticker, on request and at stop (the format: state_format.c; the files:
 * state_file.c; the contract: core.h, "state"). Snapshots are serialized
 * by state_lock; each reads the estimator, the table and the injector
 * through their own locks, so calls keep running while one is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bytes.h"
#include "core_test.h"
#include "internal.h"
#include "state.h"


static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void report(cr_core *c, cr_core_state_event *ev, double t0)
{
    ev->path = c->state_path;
    ev->seconds = cr_mono_s() - t0;
    if (c->hooks.state)
        c->hooks.state(c->hooks.ctx, ev);
}

/* ---- snapshot ---- */

/* The owners with their ages at now (the image's t_last), the table
 * borrowed from held. */
static cr_status take_image(cr_core *c, cr_state_image *im, cr_installed **held,
                            cr_error *err)
{
    memset(im, 0, sizeof *im);
    im->owners = cr_estimator_export(c->estimator, &im->n_owners);
    if (!im->owners)
        return cr_fail(err, CR_ENOMEM, "out of memory copying the estimator");
    im->written_clock = core_now(c);
    im->written_at = wall_s();
    const cr_estimator_config *ec = cr_estimator_get_config(c->estimator);
    im->clock = (uint32_t)ec->clock;
    for (size_t i = 0; i < im->n_owners; i++) {
        double age = im->written_clock - im->owners[i].t_last; /* a racing arrival: 0 */
        im->owners[i].t_last = ec->clock == CR_CLOCK_SECONDS && age > 0 ? age : 0;
    }
    *held = cr_core_acquire(c, &im->generation);
    im->table = *held ? (*held)->table : NULL;
    return CR_OK;
}

/* cr_core_test_snapshot_stall's seconds: 0 but in tests. */
static _Atomic double stall_s_set;

void cr_core_test_snapshot_stall(double s)
{
    atomic_store(&stall_s_set, s > 0 && s < 3600 ? s : 0);
}

static double stall_s(void) { return atomic_load(&stall_s_set); }

static cr_status snapshot(cr_core *c, const char *by, cr_error *err)
{
    double t0 = cr_mono_s();
    cr_state_image im;
    cr_installed *held = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    pthread_mutex_lock(&c->state_lock);
    cr_status st = take_image(c, &im, &held, err);
    if (st == CR_OK)
        st = cr_state_encode(&c->fingerprint, &im, c->injector, &bytes, &len, err);
    if (st == CR_OK)
        st = cr_state_write_file(c->state_path, bytes, len, stall_s(), err);
    pthread_mutex_unlock(&c->state_lock);
    cr_core_state_event ev = {
        .result = st == CR_OK ? CR_STATE_WRITTEN : CR_STATE_FAILED,
        .by = by,
        .error = st == CR_OK ? NULL : err->msg,
        .bytes = len,
        .owners = im.n_owners,
        .placements = im.table ? cr_table_n_placements(im.table) : 0,
        .generation = im.generation,
    };
    free(im.owners);
    cr_installed_release(held);
    free(bytes);
    report(c, &ev, t0);
    return st;
}

cr_status cr_core_snapshot(cr_core *c, cr_error *err)
{
    if (!c->state_path)
        return cr_fail(err, CR_EINVAL, "no state file: --state-file is empty");
    return snapshot(c, "call", err);
}

static void snapshot_tick(void *ctx, cr_ticker *ticker)
{
    (void)ticker;
    cr_error err;
    snapshot(ctx, "ticker", &err); /* reported to hooks->state */
}

cr_status cr_state_start(cr_core *c, cr_error *err)
{
    c->started = 1;
    if (!c->state_path || c->snapshot_interval_s <= 0)
        return CR_OK;
    c->snapshotter = cr_ticker_start(c->snapshot_interval_s, snapshot_tick, c, err);
    return c->snapshotter ? CR_OK : CR_ENOMEM;
}

void cr_state_stop(cr_core *c)
{
    cr_ticker_stop(c->snapshotter);
    c->snapshotter = NULL;
    if (c->state_path && c->started && !c->final_snapshot) {
        cr_error err;
        c->final_snapshot = 1;
        snapshot(c, "stop", &err);
    }
}

/* ---- restore ---- */

/* Keeps the max highest-rate owners (rates at the snapshot), by owner. */
static int by_rate_desc(const void *a, const void *b)
{
    const cr_estimator_entry *x = a, *y = b;
    return (x->count < y->count) - (x->count > y->count);
}

static int by_owner(const void *a, const void *b)
{
    int64_t x = ((const cr_estimator_entry *)a)->owner, y = ((const cr_estimator_entry *)b)->owner;
    return (x > y) - (x < y);
}

static void keep_highest(cr_state_image *im, const cr_estimator_config *ec)
{
    if (im->n_owners <= ec->max_owners)
        return;
    for (size_t i = 0; i < im->n_owners; i++) /* count becomes the rate at the snapshot */
        im->owners[i].count *= ec->clock == CR_CLOCK_SECONDS
                                   ? exp2(-im->owners[i].t_last / ec->half_life)
                                   : 1.0;
    qsort(im->owners, im->n_owners, sizeof *im->owners, by_rate_desc);
    im->n_owners = (size_t)ec->max_owners;
    for (size_t i = 0; i < im->n_owners; i++) {
        im->owners[i].t_last = 0; /* the rate is now as of the snapshot */
        if (!(im->owners[i].count > 0))
            im->owners[i].count = 0x1p-1022; /* decayed past doubles: the smallest count */
    }
    qsort(im->owners, im->n_owners, sizeof *im->owners, by_owner);
}

/* Owners, calibration, then the table: only the install cannot fail, so a
 * failure before it leaves what the caller resets. */
static cr_status apply(cr_core *c, cr_state_image *im, double *age, cr_error *err)
{
    const cr_estimator_config *ec = cr_estimator_get_config(c->estimator);
    double now = core_now(c), elapsed = wall_s() - im->written_at;
    *age = elapsed = elapsed > 0 ? elapsed : 0; /* a clock set back: no time passed */
    keep_highest(im, ec);
    for (size_t i = 0; i < im->n_owners; i++)
        im->owners[i].t_last = now - elapsed - im->owners[i].t_last;
    cr_status st = cr_estimator_import(c->estimator, im->owners, im->n_owners, err);
    cr_cursor cal = cr_cursor_of(im->calibration, im->calibration_len);
    if (st == CR_OK)
        st = cr_injector_load_calibration(c->injector, &cal, 1, err);
    cr_installed *held = NULL;
    if (st == CR_OK && im->table && !(held = cr_installed_new(im->table)))
        st = cr_fail(err, CR_ENOMEM, "out of memory installing the restored table");
    im->table = NULL; /* taken, or freed by cr_installed_new */
    if (held)
        cr_published_swap_as(&c->table, &held->ref, im->generation);
    return st;
}

/* Fresh estimator and injector after a failed apply; -1 when even those
 * cannot be made. */
static int reset(cr_core *c, const cr_core_config *cfg, cr_error *err)
{
    cr_estimator_free(c->estimator);
    cr_injector_free(c->injector);
    c->injector = NULL;
    return (c->estimator = cr_estimator_new(&cfg->estimator, err)) &&
                   (c->injector = cr_injector_new(&cfg->inject, err))
               ? 0
               : -1;
}

int cr_state_restore(cr_core *c, const cr_core_config *cfg)
{
    double t0 = cr_mono_s();
    uint8_t *bytes = NULL;
    size_t len = 0;
    int missing = 0;
    cr_error err;
    cr_state_image im = {0};
    cr_core_state_event ev = {.result = CR_STATE_RESTORED, .by = "start"};
    uint64_t ceiling =
        CR_STATE_BASE_BYTES + CR_STATE_BYTES_PER_OWNER * cfg->estimator.max_owners;
    cr_status st = cr_state_read_file(c->state_path, ceiling, &bytes, &len, &missing, &err);
    if (st == CR_OK && !missing &&
        (st = cr_state_decode(&c->fingerprint, bytes, len, c->injector, &im, &err)) == CR_OK) {
        ev.owners = im.n_owners;
        ev.placements = im.table ? cr_table_n_placements(im.table) : 0;
        ev.generation = im.table ? im.generation : 0;
        st = apply(c, &im, &ev.age_s, &err);
        if (st != CR_OK && reset(c, cfg, &err) != 0)
            return -1;
    }
    char moved[4200], why[2 * CR_ERRLEN + 4];
    ev.bytes = len;
    if (missing)
        ev.result = CR_STATE_NONE;
    if (st != CR_OK) {
        ev = (cr_core_state_event){.result = CR_STATE_REJECTED, .by = "start", .bytes = len};
        cr_error mv;
        ev.moved_to = cr_state_move_aside(c->state_path, moved, sizeof moved, &mv) == 0 ? moved
                                                                                      : NULL;
        snprintf(why, sizeof why, "%s%s%s", err.msg, ev.moved_to ? "" : "; ",
                 ev.moved_to ? "" : mv.msg);
        ev.error = why;
    }
    cr_state_image_free(&im);
    free(bytes);
    report(c, &ev, t0);
    return 0;
}

cr_status cr_core_state_check(cr_core *c, const void *bytes, size_t len, cr_error *err)
{
    cr_state_image im;
    cr_status st = cr_state_decode(&c->fingerprint, bytes, len, c->injector, &im, err);
    cr_state_image_free(&im);
    return st;
}
