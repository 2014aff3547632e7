/* The state file (core/state*.c): a snapshot restored by a second core
 * gives the same owners, table and calibration, its rates decayed by the
 * wall time recorded in the file; every byte of a small file flipped and
 * every truncation is refused; another version or configuration is
 * refused; a refused file is moved aside and the core starts empty.
 *
 * With CR_STATE_SEED_DIR set, also writes the fuzz seed corpus
 * (tests/fuzz/corpus/state/) there. */
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "cunit_main.h"

typedef struct vclock {
    double t;
} vclock;

static double vclock_now(void *ctx) { return ((vclock *)ctx)->t; }

/* The last state event, copied. */
typedef struct seen {
    int events;
    cr_state_result result;
    char error[2 * CR_ERRLEN], moved_to[4200], by[16];
    uint64_t owners, placements, generation;
} seen;

/* Snapshots report from the ticker's thread and the caller's. */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_state(void *ctx, const cr_core_state_event *ev)
{
    seen *s = ctx;
    pthread_mutex_lock(&seen_lock);
    s->events++;
    s->result = ev->result;
    snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "");
    snprintf(s->moved_to, sizeof s->moved_to, "%s", ev->moved_to ? ev->moved_to : "");
    snprintf(s->by, sizeof s->by, "%s", ev->by);
    s->owners = ev->owners;
    s->placements = ev->placements;
    s->generation = ev->generation;
    pthread_mutex_unlock(&seen_lock);
}

typedef struct fixture {
    vclock clock;
    seen seen;
    cr_core *core;
} fixture;

static char dir[64], path[128];
static double start_t = 1000; /* a new fixture's clock */

static void quiet_config(cr_core_config *cfg, const char *state_file)
{
    cr_core_config_default(cfg);
    cr_core_quiet_probe(&cfg->probe);
    cfg->replan_interval_s = 0;
    cfg->state_file = (char *)state_file;
}

static void open_config(fixture *f, const cr_core_config *cfg)
{
    memset(f, 0, sizeof *f);
    f->clock.t = start_t;
    cr_core_hooks hooks = {.state = on_state, .ctx = &f->seen};
    cr_clock_source clock = {vclock_now, &f->clock};
    cr_error err;
    f->core = cr_core_new(cfg, &hooks, &clock, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->core);
}

static void open_at(fixture *f, const char *state_file)
{
    cr_core_config cfg;
    quiet_config(&cfg, state_file);
    open_config(f, &cfg);
}

static uint8_t *slurp(const char *p, size_t *len)
{
    FILE *fp = fopen(p, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fseek(fp, 0, SEEK_END);
    *len = (size_t)ftell(fp);
    rewind(fp);
    uint8_t *b = malloc(*len ? *len : 1);
    CU_ASSERT_EQUAL_FATAL(fread(b, 1, *len, fp), *len);
    fclose(fp);
    return b;
}

static void spill(const char *p, const uint8_t *b, size_t len)
{
    FILE *fp = fopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    CU_ASSERT_EQUAL(fwrite(b, 1, len, fp), len);
    fclose(fp);
}

/* The trailer recomputed after an edit, so only the edit is judged. */
static void reseal(uint8_t *b, size_t len)
{
    unsigned n;
    EVP_Digest(b, len - 32, b + len - 32, &n, EVP_sha256(), NULL);
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static double get_f64(const uint8_t *p)
{
    uint64_t v = get_u64(p);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

static void put_f64(uint8_t *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}


/* Where section tag (1..4) starts (its payload) and how long it is. */
static const uint8_t *section(const uint8_t *b, int tag, size_t *len)
{
    const uint8_t *p = b + 32;
    for (int t = 1;; t++) {
        uint64_t n = get_u64(p + 4);
        if (t == tag) {
            *len = (size_t)n;
            return p + 12;
        }
        p += 12 + n;
    }
}

/* Owners with arrivals at several times, two installs, and outcomes that
 * feed a prefill fit, an h2d fit and a link fit. */
static void fill(fixture *f, int n_owners)
{
    cr_error err;
    for (int k = 0; k < n_owners; k++) {
        int64_t owner = (int64_t)(k * 7919 % 1000) - 300;
        for (int j = 0; j <= k % 5; j++) {
            f->clock.t += 0.25;
            CU_ASSERT_EQUAL_FATAL(cr_core_record(f->core, &owner, 1, NULL, 0, NULL, NULL, &err),
                                  CR_OK);
        }
    }
    for (int i = 0; i < 2; i++) {
        cr_core_plan_request req = {.from_estimator = 1, .install = 1, .has_n_shards = 1,
                                    .n_shards = 4, .has_qcap = 1, .qcap = 0.05};
        cr_core_plan_result res;
        CU_ASSERT_EQUAL_FATAL(cr_core_plan(f->core, &req, &res, &err), CR_OK);
        cr_core_plan_result_free(&res);
    }
    for (int i = 0; i < 6; i++) {
        cr_outcome o = {.has = CR_OUT_PREFILL | CR_OUT_PREFILLED_FROM | CR_OUT_PREFILLED_TO |
                               CR_OUT_TRANSFER_MS | CR_OUT_TRANSFER_BYTES | CR_OUT_LOAD,
                        .source = "kvstore-a",
                        .prefill_ms = 40.0 + 10 * i,
                        .prefilled_from = 0,
                        .prefilled_to = 1000 + 500 * (uint32_t)i,
                        .transfer_ms = 20.0 + i,
                        .transfer_bytes = 100000000 + 1000000 * (uint64_t)i,
                        .load_ms = 5.0 + i};
        cr_outcome_counts counts;
        CU_ASSERT_EQUAL_FATAL(cr_core_report(f->core, &o, 1, &counts, &err), CR_OK);
    }
    f->clock.t += 3;
}

static void snapshot(fixture *f)
{
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_snapshot(f->core, &err), CR_OK);
    CU_ASSERT_EQUAL(f->seen.result, CR_STATE_WRITTEN);
    CU_ASSERT_STRING_EQUAL(f->seen.by, "call");
}

/* A written small file's bytes. */
static uint8_t *small_file(size_t *len, int n_owners)
{
    fixture f;
    unlink(path);
    open_at(&f, path);
    fill(&f, n_owners);
    snapshot(&f);
    cr_core_free(f.core);
    return slurp(path, len);
}

/* Every owner's rate in b is its rate in a times [lo, hi]. */
static void expect_rates_within(cr_core *a, cr_core *b, double lo, double hi)
{
    cr_session_rate *ra, *rb;
    size_t na, nb;
    uint64_t ta, tb;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_rates(a, NULL, 0, &ra, &na, &ta, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_core_rates(b, NULL, 0, &rb, &nb, &tb, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(na, nb);
    CU_ASSERT(na > 0);
    for (size_t i = 0; i < na; i++) {
        CU_ASSERT_EQUAL(ra[i].owner, rb[i].owner);
        CU_ASSERT(rb[i].rate >= ra[i].rate * lo && rb[i].rate <= ra[i].rate * hi);
    }
    free(ra);
    free(rb);
}

/* Every owner's rate in b is its rate in a times ratio, within tolerance. */
static void expect_rates(cr_core *a, cr_core *b, double ratio, double tolerance)
{
    expect_rates_within(a, b, ratio * (1 - tolerance), ratio * (1 + tolerance));
}

static void expect_same_table(cr_core *a, cr_core *b)
{
    cr_core_plan_result x, y;
    cr_core_current(a, &x);
    cr_core_current(b, &y);
    CU_ASSERT_EQUAL(x.generation, y.generation);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y.table);
    size_t n = cr_table_n_placements(x.table);
    CU_ASSERT_EQUAL_FATAL(cr_table_n_placements(y.table), n);
    CU_ASSERT_EQUAL(cr_table_n_shards(x.table), cr_table_n_shards(y.table));
    CU_ASSERT_EQUAL(cr_table_imbalance(x.table), cr_table_imbalance(y.table));
    CU_ASSERT(memcmp(cr_table_expected_load(x.table), cr_table_expected_load(y.table),
                     cr_table_n_shards(x.table) * sizeof(double)) == 0);
    for (size_t i = 0; i < n; i++) {
        const cr_placement *p = cr_table_placement(x.table, i), *q = cr_table_placement(y.table, i);
        CU_ASSERT_EQUAL(p->owner, q->owner);
        CU_ASSERT_EQUAL(p->kb, q->kb);
        CU_ASSERT_EQUAL(p->preferred_shard, q->preferred_shard);
        CU_ASSERT(memcmp(cr_table_shards(x.table, p), cr_table_shards(y.table, q),
                         p->kb * sizeof(uint32_t)) == 0);
        CU_ASSERT_PTR_EQUAL(cr_table_find(y.table, q->owner), q);
    }
    cr_core_plan_result_free(&x);
    cr_core_plan_result_free(&y);
}

static void expect_same_calibration(cr_core *a, cr_core *b)
{
    cr_loop_stats sa, sb;
    cr_inject_calibration ga, gb;
    cr_core_loop_stats_read(a, &sa, NULL, 0, &ga, 1);
    cr_core_loop_stats_read(b, &sb, NULL, 0, &gb, 1);
    CU_ASSERT_EQUAL(ga.samples, 6);
    CU_ASSERT(memcmp(&ga, &gb, sizeof ga) == 0);
}

static void test_round_trip(void)
{
    fixture a, b;
    unlink(path);
    open_at(&a, path);
    CU_ASSERT_EQUAL(a.seen.result, CR_STATE_NONE);
    fill(&a, 40);
    snapshot(&a);
    /* Stamped in the future, as by a wall clock set back: no time passed,
     * so b, restoring at a's now, must read a's state exactly. */
    size_t len;
    uint8_t *first = slurp(path, &len);
    put_f64(first + 16, get_f64(first + 16) + 1e6);
    reseal(first, len);
    spill(path, first, len);
    start_t = a.clock.t;
    open_at(&b, path);
    start_t = 1000;
    if (b.seen.result != CR_STATE_RESTORED)
        fprintf(stderr, "\nrestore: %s\n", b.seen.error);
    CU_ASSERT_EQUAL_FATAL(b.seen.result, CR_STATE_RESTORED);
    CU_ASSERT_EQUAL(b.seen.generation, 2);
    expect_rates(a.core, b.core, 1.0, 1e-12);
    expect_same_table(a.core, b.core);
    expect_same_calibration(a.core, b.core);
    /* b's own snapshot: the config, table and calibration byte for byte,
     * the owners and counts too, their ages as they were. */
    snapshot(&b);
    size_t len2, n1, n2;
    uint8_t *second = slurp(path, &len2);
    CU_ASSERT_EQUAL_FATAL(len2, len);
    for (int tag = 1; tag <= 4; tag++) {
        const uint8_t *s1 = section(first, tag, &n1), *s2 = section(second, tag, &n2);
        CU_ASSERT_EQUAL_FATAL(n1, n2);
        if (tag != 2) {
            CU_ASSERT(memcmp(s1, s2, n1) == 0);
            continue;
        }
        for (size_t at = 12; at < n1; at += 24) {
            CU_ASSERT(memcmp(s1 + at, s2 + at, 16) == 0); /* owner and count */
            CU_ASSERT_DOUBLE_EQUAL(get_f64(s2 + at + 16), get_f64(s1 + at + 16), 1e-9);
        }
    }
    /* Installs count on from the restored generation. */
    cr_core_plan_request req = {.from_estimator = 1, .install = 1};
    cr_core_plan_result res;
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_plan(b.core, &req, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.generation, 3);
    cr_core_plan_result_free(&res);
    free(first);
    free(second);
    cr_core_free(a.core);
    cr_core_free(b.core);
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The file says it was written 40 s (two half-lives) earlier: every rate
 * reads a quarter, decayed further by the real time between snapshot and
 * restore (measured: a loaded machine under sanitizers took seconds). */
static void test_decay_by_wall_time(void)
{
    fixture a, b;
    unlink(path);
    open_at(&a, path);
    fill(&a, 20);
    double before = wall_s();
    snapshot(&a);
    size_t len;
    uint8_t *bytes = slurp(path, &len);
    put_f64(bytes + 16, get_f64(bytes + 16) - 40);
    reseal(bytes, len);
    spill(path, bytes, len);
    start_t = a.clock.t;
    open_at(&b, path);
    start_t = 1000;
    double took = wall_s() - before;
    CU_ASSERT_EQUAL_FATAL(b.seen.result, CR_STATE_RESTORED);
    /* 1e-9 of slack each way: the file holds wall times, not their differences */
    expect_rates_within(a.core, b.core, 0.25 * exp2(-(took + 1e-3) / 20.0) * (1 - 1e-9),
                        0.25 * (1 + 1e-9));
    free(bytes);
    cr_core_free(a.core);
    cr_core_free(b.core);
}

/* A file refused at restore: moved aside, the core empty. */
static void expect_rejected(const uint8_t *bytes, size_t len, const char *why)
{
    char moved[160];
    snprintf(moved, sizeof moved, "%s.corrupt", path);
    unlink(moved);
    spill(path, bytes, len);
    fixture f;
    open_at(&f, path);
    CU_ASSERT_EQUAL(f.seen.result, CR_STATE_REJECTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.seen.error, why));
    if (!strstr(f.seen.error, why))
        fprintf(stderr, "\nexpected \"%s\" in \"%s\"\n", why, f.seen.error);
    CU_ASSERT_STRING_EQUAL(f.seen.moved_to, moved);
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    CU_ASSERT_EQUAL(access(moved, F_OK), 0);
    cr_core_stats st;
    cr_core_stats_read(f.core, &st);
    CU_ASSERT_EQUAL(st.tracked_owners, 0);
    CU_ASSERT_EQUAL(st.generation, 0);
    cr_core_free(f.core);
}

static void test_every_byte_flipped(void)
{
    size_t len;
    uint8_t *bytes = small_file(&len, 3);
    fixture f;
    open_at(&f, "");
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_state_check(f.core, bytes, len, &err), CR_OK);
    for (size_t i = 0; i < len; i++) {
        bytes[i] ^= 0xff;
        CU_ASSERT_EQUAL(cr_core_state_check(f.core, bytes, len, &err), CR_EINVAL);
        for (int bit = 0; bit < 8; bit += 7) { /* the lowest and highest bit too */
            bytes[i] ^= 0xff ^ (1u << bit);
            CU_ASSERT_EQUAL(cr_core_state_check(f.core, bytes, len, &err), CR_EINVAL);
            bytes[i] ^= 0xff ^ (1u << bit);
        }
        bytes[i] ^= 0xff;
    }
    bytes[len / 2] ^= 0x10;
    expect_rejected(bytes, len, "checksum mismatch");
    bytes[0] ^= 0x10;
    expect_rejected(bytes, len, "bad magic");
    free(bytes);
    cr_core_free(f.core);
}

static void test_every_truncation(void)
{
    size_t len;
    uint8_t *bytes = small_file(&len, 3);
    fixture f;
    open_at(&f, "");
    cr_error err;
    for (size_t n = 0; n < len; n++)
        CU_ASSERT_EQUAL(cr_core_state_check(f.core, bytes, n, &err), CR_EINVAL);
    expect_rejected(bytes, 10, "truncated");
    expect_rejected(bytes, len - 1, "runs past the end of the file");
    expect_rejected(bytes, 0, "truncated");
    free(bytes);
    cr_core_free(f.core);
}

static void test_foreign_version(void)
{
    size_t len;
    uint8_t *bytes = small_file(&len, 3);
    bytes[8] = 2;
    reseal(bytes, len);
    expect_rejected(bytes, len, "foreign version 2, this build reads 1");
    free(bytes);
}

static void expect_other_config(void (*change)(cr_core_config *), const char *why)
{
    size_t len;
    uint8_t *bytes = small_file(&len, 3);
    spill(path, bytes, len);
    cr_core_config cfg;
    quiet_config(&cfg, path);
    change(&cfg);
    fixture f;
    open_config(&f, &cfg);
    CU_ASSERT_EQUAL(f.seen.result, CR_STATE_REJECTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.seen.error, why));
    cr_core_stats st;
    cr_core_stats_read(f.core, &st);
    CU_ASSERT_EQUAL(st.tracked_owners, 0);
    cr_core_free(f.core);
    free(bytes);
}

static void half_life_30(cr_core_config *c) { c->estimator.half_life = 30; }
static void calls_clock(cr_core_config *c) { c->estimator.clock = CR_CLOCK_CALLS; }
static void shards_16(cr_core_config *c) { c->planner.n_shards = 16; }
static void layers_80(cr_core_config *c) { c->inject.model_layers = 80; }
static void qcap_9(cr_core_config *c) { c->planner.qcap = 9; }

static void test_other_config(void)
{
    expect_other_config(half_life_30, "other config: estimator.half_life is 20 in the file, 30");
    expect_other_config(calls_clock, "other config: estimator.clock is 0 in the file, 1 now");
    expect_other_config(shards_16, "other config: planner.n_shards is 8 in the file, 16 now");
    expect_other_config(layers_80, "other config: inject.model_layers is 32 in the file, 80");
    /* Not in the fingerprint: restored. */
    size_t len;
    uint8_t *bytes = small_file(&len, 3);
    cr_core_config cfg;
    quiet_config(&cfg, path);
    qcap_9(&cfg);
    fixture f;
    open_config(&f, &cfg);
    CU_ASSERT_EQUAL(f.seen.result, CR_STATE_RESTORED);
    cr_core_free(f.core);
    free(bytes);
}

/* Counts a sealed file claims that its bytes cannot hold: refused before
 * anything is allocated for them (ASan would report a huge allocation). */
static void test_lengths_checked(void)
{
    size_t len, n;
    uint8_t *bytes = small_file(&len, 3);
    uint8_t *owners = (uint8_t *)section(bytes, 2, &n) + 4;
    uint8_t saved[8];
    memcpy(saved, owners, 8);
    memset(owners, 0xff, 8); /* 2^64 - 1 owners */
    reseal(bytes, len);
    expect_rejected(bytes, len, "does not fit");
    memcpy(owners, saved, 8);
    memset(bytes + 32 + 4, 0x7f, 8); /* the config section's length */
    reseal(bytes, len);
    expect_rejected(bytes, len, "section 1 (config)");
    free(bytes);
}

static void test_missing_and_no_file(void)
{
    fixture f;
    unlink(path);
    open_at(&f, path);
    CU_ASSERT_EQUAL(f.seen.events, 1);
    CU_ASSERT_EQUAL(f.seen.result, CR_STATE_NONE);
    cr_core_stop(f.core); /* never started: nothing written */
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    cr_core_free(f.core);
    open_at(&f, "");
    cr_error err;
    CU_ASSERT_EQUAL(f.seen.events, 0);
    CU_ASSERT_EQUAL(cr_core_snapshot(f.core, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--state-file"));
    cr_core_free(f.core);
}

/* A started core writes at stop, once; a failed write keeps the old file. */
static void test_final_snapshot(void)
{
    fixture f;
    cr_error err;
    unlink(path);
    cr_core_config cfg;
    quiet_config(&cfg, path);
    cfg.snapshot_interval_s = 0;
    open_config(&f, &cfg);
    fill(&f, 5);
    CU_ASSERT_EQUAL_FATAL(cr_core_start(f.core, &err), CR_OK);
    cr_core_stop(f.core);
    CU_ASSERT_EQUAL(f.seen.result, CR_STATE_WRITTEN);
    CU_ASSERT_STRING_EQUAL(f.seen.by, "stop");
    CU_ASSERT_EQUAL(f.seen.owners, 5);
    int events = f.seen.events;
    cr_core_stop(f.core);
    CU_ASSERT_EQUAL(f.seen.events, events);
    cr_core_free(f.core);
    CU_ASSERT_EQUAL(f.seen.events, events);
    /* Its folder gone after the start: the write fails, naming the path. */
    char gone[200], moved[200], bad[220];
    snprintf(gone, sizeof gone, "%s/gone", dir);
    snprintf(moved, sizeof moved, "%s/moved", dir);
    snprintf(bad, sizeof bad, "%s/state", gone);
    CU_ASSERT_EQUAL_FATAL(mkdir(gone, 0700), 0);
    open_at(&f, bad);
    CU_ASSERT_EQUAL_FATAL(rename(gone, moved), 0);
    CU_ASSERT_EQUAL(cr_core_snapshot(f.core, &err), CR_ENOMEM);
    CU_ASSERT_EQUAL(f.seen.result, CR_STATE_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/gone/state"));
    cr_core_free(f.core);
    snprintf(bad, sizeof bad, "%s/state.lock", moved);
    unlink(bad);
    rmdir(moved);
}

/* More owners than --max-owners: the highest rates are kept. */
static void test_fewer_max_owners(void)
{
    fixture a, b;
    unlink(path);
    open_at(&a, path);
    cr_error err;
    for (int64_t owner = 1; owner <= 10; owner++)
        for (int64_t j = 0; j < owner; j++)
            CU_ASSERT_EQUAL(cr_core_record(a.core, &owner, 1, NULL, 0, NULL, NULL, &err), CR_OK);
    snapshot(&a);
    cr_core_config cfg;
    quiet_config(&cfg, path);
    cfg.estimator.max_owners = 4;
    open_config(&b, &cfg);
    CU_ASSERT_EQUAL_FATAL(b.seen.result, CR_STATE_RESTORED);
    cr_session_rate *r;
    size_t n;
    uint64_t tracked;
    CU_ASSERT_EQUAL_FATAL(cr_core_rates(b.core, NULL, 0, &r, &n, &tracked, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(r[i].owner, 7 + (int64_t)i);
    free(r);
    cr_core_free(a.core);
    cr_core_free(b.core);
}

/* Snapshots (the ticker's every 5 ms, and calls) while two threads record:
 * every file written is whole, and the last one, taken after the threads
 * ended, holds every owner. Bounded: 2 x 200 batches. For TSan. */
typedef struct recorder {
    cr_core *core;
    int64_t base;
} recorder;

static void *record_batches(void *arg)
{
    recorder *r = arg;
    int64_t owners[50];
    cr_error err;
    for (int b = 0; b < 200; b++) {
        for (int i = 0; i < 50; i++)
            owners[i] = r->base + (b * 50 + i) % 5000;
        cr_core_record(r->core, owners, 50, NULL, 0, NULL, NULL, &err);
    }
    return NULL;
}

static void test_snapshots_while_recording(void)
{
    fixture f;
    cr_error err;
    unlink(path);
    cr_core_config cfg;
    quiet_config(&cfg, path);
    cfg.snapshot_interval_s = 0.005;
    open_config(&f, &cfg);
    CU_ASSERT_EQUAL_FATAL(cr_core_start(f.core, &err), CR_OK);
    recorder r[2] = {{f.core, 0}, {f.core, 1000000}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, record_batches, &r[i]);
    for (int i = 0; i < 10; i++) {
        CU_ASSERT_EQUAL(cr_core_snapshot(f.core, &err), CR_OK);
        size_t len;
        uint8_t *b = slurp(path, &len);
        CU_ASSERT_EQUAL(cr_core_state_check(f.core, b, len, &err), CR_OK);
        free(b);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    cr_core_stop(f.core); /* the final snapshot, after every arrival */
    CU_ASSERT_EQUAL(f.seen.result, CR_STATE_WRITTEN);
    CU_ASSERT_EQUAL(f.seen.owners, 10000);
    fixture g;
    open_at(&g, path);
    CU_ASSERT_EQUAL(g.seen.result, CR_STATE_RESTORED);
    CU_ASSERT_EQUAL(g.seen.owners, 10000);
    cr_core_free(g.core);
    cr_core_free(f.core);
}

/* The fuzz seeds: an empty state, owners only, everything. */
static void test_write_seeds(void)
{
    const char *out = getenv("CR_STATE_SEED_DIR");
    if (!out)
        return;
    static const int owners[3] = {0, 4, 12};
    for (int i = 0; i < 3; i++) {
        fixture f;
        unlink(path);
        open_at(&f, path);
        if (i == 1) {
            int64_t o[4] = {1, 2, 3, -9};
            cr_error err;
            CU_ASSERT_EQUAL(cr_core_record(f.core, o, 4, NULL, 0, NULL, NULL, &err), CR_OK);
        } else if (i == 2) {
            fill(&f, owners[i]);
        }
        snapshot(&f);
        cr_core_free(f.core);
        size_t len;
        uint8_t *b = slurp(path, &len);
        char seed[512];
        snprintf(seed, sizeof seed, "%s/seed-%d.state", out, i);
        spill(seed, b, len);
        free(b);
    }
}

static int setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/cr-test-state-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/state", dir);
    return 0;
}

static void teardown(void)
{
    char p[200];
    unlink(path);
    snprintf(p, sizeof p, "%s.corrupt", path);
    unlink(p);
    snprintf(p, sizeof p, "%s.lock", path);
    unlink(p);
    rmdir(dir);
}

static const cr_test_case state_tests[] = {
    {"round trip: owners, table, generation, calibration", test_round_trip},
    {"rates decay by the wall time in the file", test_decay_by_wall_time},
    {"every byte flipped is refused", test_every_byte_flipped},
    {"every truncation is refused", test_every_truncation},
    {"a foreign version is refused", test_foreign_version},
    {"another config is refused, naming the field", test_other_config},
    {"counts are checked against the bytes left", test_lengths_checked},
    {"no file: a clean start; no state file: nothing", test_missing_and_no_file},
    {"the final snapshot at stop, once; a failed write", test_final_snapshot},
    {"fewer max owners keeps the highest rates", test_fewer_max_owners},
    {"snapshots while two threads record", test_snapshots_while_recording},
    {"fuzz seeds (CR_STATE_SEED_DIR)", test_write_seeds},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"state", state_tests}};

int main(void)
{
    if (setup() != 0)
        return 2;
    int rc = cr_run_suites(suites, (int)(sizeof suites / sizeof suites[0]));
    teardown();
    return rc;
}
