/* The replica's pure parts (URL, option checks, the password file, the
 * pushed encoding, the exact merge, the table blob), the core's touched
 * set, and the lease and fence scripts and AUTH against a real
 * redis-server on a unix socket. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bytes.h"
#include "cunit_main.h"
#include "internal.h" /* replica/: the link and the scripts */

static void test_urls(void)
{
    cr_replica_url u;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replica_parse_url("redis://127.0.0.1:6379", &u, &err), CR_OK);
    CU_ASSERT(!u.is_unix && u.port == 6379 && u.db == 0 && !strcmp(u.host, "127.0.0.1"));
    CU_ASSERT_EQUAL(cr_replica_parse_url("redis://redis.ns.svc:1/15", &u, &err), CR_OK);
    CU_ASSERT(u.port == 1 && u.db == 15 && !strcmp(u.host, "redis.ns.svc"));
    CU_ASSERT_EQUAL(cr_replica_parse_url("unix:/run/r.sock", &u, &err), CR_OK);
    CU_ASSERT(u.is_unix && !strcmp(u.path, "/run/r.sock") && u.db == 0);
    CU_ASSERT_EQUAL(cr_replica_parse_url("unix:/run/r.sock?db=7", &u, &err), CR_OK);
    CU_ASSERT(u.is_unix && !strcmp(u.path, "/run/r.sock") && u.db == 7);
    const char *bad[] = {"", "redis:/h:1", "rediss://h:1", "redis://h", "redis://:1",
                         "redis://h:0", "redis://h:65536", "redis://h:1x", "redis://h:1/",
                         "redis://h:1/-1", "redis://h:1/2147483648", "redis://a@h:1",
                         "redis://[::1]:1", "unix:", "unix:?db=1", "unix:/s?db=", "unix:/s?x=1",
                         "unix:/s?db=1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(cr_replica_parse_url(bad[i], &u, &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--state-backend must be"));
        char quoted[64];
        snprintf(quoted, sizeof quoted, "got \"%s\"", bad[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, quoted));
    }
    char longpath[200] = "unix:";
    memset(longpath + 5, 'p', 150);
    CU_ASSERT_EQUAL(cr_replica_parse_url(longpath, &u, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "over 107 bytes"));
}

static void test_config_checks(void)
{
    cr_replica_config c;
    cr_error err;
    cr_replica_config_default(&c);
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_CALLS, &err), CR_OK); /* standalone */
    c.state_backend = "redis://h:1";
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_CALLS, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not linear"));
    c.replica_ttl_s = 4;
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "--replica-ttl must be at least --lease-ttl (5), got 4");
    c.replica_ttl_s = 60;
    c.replica_id = "a b";
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--replica-id"));
    char name[CR_REPLICA_ID_MAX + 2];
    memset(name, 'p', sizeof name - 1);
    name[sizeof name - 1] = 0;
    c.replica_id = name + 1; /* a pod name's longest, 253 */
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_OK);
    c.replica_id = name;
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "253"));
    c.replica_id = "";
    name[CR_REPLICA_CLUSTER_MAX + 1] = 0;
    c.cluster = name + 1;
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_OK);
    c.cluster = name;
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "128"));
    c.cluster = "x{y}";
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--cluster"));
}

/* A parse that must fail: CR_EINVAL naming the file and why, never the
 * secret, and *out wiped. */
static void auth_refused(const char *text, const char *why)
{
    cr_replica_auth a;
    cr_error err;
    memset(&a, 'x', sizeof a);
    CU_ASSERT_EQUAL(cr_replica_auth_parse(text, strlen(text), "/run/pw", &a, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--state-backend-password-file /run/pw: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, why));
    CU_ASSERT_PTR_NULL(strstr(err.msg, "s3cret"));
    CU_ASSERT(a.user[0] == '\0' && a.pass[0] == '\0');
}

static void test_auth_parse(void)
{
    cr_replica_auth a;
    cr_error err;
    const char *one[] = {"s3cret", "s3cret\n", "s3cret\r\n", "  s3cret \t\n\n", "s3cret"};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        CU_ASSERT_EQUAL(cr_replica_auth_parse(one[i], strlen(one[i]), "f", &a, &err), CR_OK);
        CU_ASSERT_STRING_EQUAL(a.user, "");
        CU_ASSERT_STRING_EQUAL(a.pass, "s3cret");
    }
    const char two[] = "svc-cr \t p@ss:w%rd\xc3\xa9\n";
    CU_ASSERT_EQUAL(cr_replica_auth_parse(two, strlen(two), "f", &a, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(a.user, "svc-cr");
    CU_ASSERT_STRING_EQUAL(a.pass, "p@ss:w%rd\xc3\xa9"); /* bytes as they are, UTF-8 too */
    cr_replica_auth_clear(&a);
    CU_ASSERT(a.user[0] == '\0' && a.pass[0] == '\0');
    auth_refused("", "empty");
    auth_refused(" \t\r\n\n", "empty");
    auth_refused("u s3cret more", "three words or more");
    auth_refused("s3cret\nother", "more than one line");
    auth_refused("s3cret\rother", "more than one line");
    auth_refused("s3\x01" "cret", "a control character");
    auth_refused("s3cret\x7f", "a control character");
    static char big[CR_REPLICA_AUTH_MAX + 2];
    memset(big, 'p', CR_REPLICA_AUTH_MAX);
    CU_ASSERT_EQUAL(cr_replica_auth_parse(big, CR_REPLICA_AUTH_MAX, "f", &a, &err), CR_OK);
    CU_ASSERT_EQUAL(strlen(a.pass), CR_REPLICA_AUTH_MAX);
    big[CR_REPLICA_AUTH_MAX] = 'p';
    auth_refused(big, "over 4096 bytes");
}

/* A file holding text; its path in path (64 bytes). */
static void write_file(char *path, const char *text)
{
    snprintf(path, 64, "/tmp/cr-test-redis-pw-XXXXXX");
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void test_auth_read(void)
{
    char path[64];
    cr_replica_auth a;
    cr_error err;
    write_file(path, "ops s3cret\n");
    CU_ASSERT_EQUAL(cr_replica_auth_read(path, &a, &err), CR_OK);
    CU_ASSERT(!strcmp(a.user, "ops") && !strcmp(a.pass, "s3cret"));
    unlink(path);
    CU_ASSERT_EQUAL(cr_replica_auth_read(path, &a, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "cannot read: No such file"));
    CU_ASSERT_EQUAL(cr_replica_auth_read("/tmp", &a, &err), CR_EINVAL); /* a directory */
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/tmp: cannot read"));
    write_file(path, "\n");
    CU_ASSERT_EQUAL(cr_replica_auth_read(path, &a, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "empty"));
    unlink(path);
    static char big[CR_REPLICA_AUTH_MAX + 100];
    memset(big, 's', sizeof big - 1);
    write_file(path, big); /* far over: not read whole */
    CU_ASSERT_EQUAL(cr_replica_auth_read(path, &a, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "over 4096 bytes"));
    CU_ASSERT_PTR_NULL(strstr(err.msg, "sss"));
    unlink(path);
    /* Checked with a backend only; judged by the config check. */
    cr_replica_config c;
    cr_replica_config_default(&c);
    c.state_backend_password_file = path;
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_OK);
    c.state_backend = "redis://h:1";
    CU_ASSERT_EQUAL(cr_replica_config_check(&c, CR_CLOCK_SECONDS, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--state-backend-password-file"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
}

static void test_encoding(void)
{
    cr_estimator_entry e[3] = {{-1234567890123LL, 0.1 + 0.2, 1764547200.123456},
                               {7, 5e-324, -1},
                               {INT64_MAX, 1e300, 0}},
                       *back;
    uint8_t *p;
    size_t len, n;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replica_chunk_encode(e, 3, &p, &len, &err), CR_OK);
    CU_ASSERT_EQUAL(len, 12 + 3 * CR_REPLICA_ENTRY_BYTES);
    /* Little-endian, as bytes.h reads it. */
    cr_cursor c = cr_cursor_of(p, len);
    CU_ASSERT_EQUAL(cr_get_u32(&c), CR_REPLICA_CHUNK_VERSION);
    CU_ASSERT_EQUAL(cr_get_u64(&c), 3);
    CU_ASSERT_EQUAL((int64_t)cr_get_u64(&c), e[0].owner);
    CU_ASSERT_EQUAL_FATAL(cr_replica_chunk_decode(p, len, &back, &n, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT(memcmp(back, e, sizeof e) == 0); /* bit for bit */
    free(back);
    for (size_t cut = 0; cut < len; cut++) {
        CU_ASSERT_EQUAL(cr_replica_chunk_decode(p, cut, &back, &n, &err), CR_EINVAL);
        CU_ASSERT_PTR_NULL(back);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "must hold 72 bytes, got 71"));
    p[0] = 2;
    CU_ASSERT_EQUAL(cr_replica_chunk_decode(p, len, &back, &n, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "version 1, got 2"));
    free(p);
    const double counts[] = {0, -1, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++) {
        cr_estimator_entry b[3];
        memcpy(b, e, sizeof b);
        b[1].count = counts[i];
        CU_ASSERT_EQUAL_FATAL(cr_replica_chunk_encode(b, 3, &p, &len, &err), CR_OK);
        CU_ASSERT_EQUAL(cr_replica_chunk_decode(p, len, &back, &n, &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "owners[1] 7: count must be finite and > 0"));
        free(p);
    }
    e[2].t_last = NAN;
    CU_ASSERT_EQUAL_FATAL(cr_replica_chunk_encode(e, 3, &p, &len, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_replica_chunk_decode(p, len, &back, &n, &err), CR_EINVAL);
    free(p);
    CU_ASSERT_EQUAL(cr_replica_chunk_encode(e, CR_REPLICA_CHUNK_MAX + 1, &p, &len, &err),
                    CR_EINVAL);
    /* A count the bytes do not hold is refused before anything is allocated. */
    uint8_t huge[12] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    CU_ASSERT_EQUAL(cr_replica_chunk_decode(huge, sizeof huge, &back, &n, &err), CR_EINVAL);
}

/* Pushes in order: each owner's last one is its state. */
static void test_keep_latest(void)
{
    cr_estimator_entry v[] = {{5, 1, 10}, {3, 1, 10}, {5, 2, 11}, {9, 1, 10}, {3, 4, 12},
                              {5, 3, 12}};
    CU_ASSERT_EQUAL(cr_replica_keep_latest(v, 6), 3);
    CU_ASSERT(v[0].owner == 3 && v[0].count == 4 && v[0].t_last == 12);
    CU_ASSERT(v[1].owner == 5 && v[1].count == 3 && v[1].t_last == 12);
    CU_ASSERT(v[2].owner == 9 && v[2].count == 1);
    CU_ASSERT_EQUAL(cr_replica_keep_latest(v, 0), 0);
    CU_ASSERT_EQUAL(cr_replica_keep_latest(NULL, 0), 0); /* an empty list decodes to NULL */
    /* Signed order, the extremes included, and the last push of each. */
    cr_estimator_entry w[] = {{INT64_MAX, 1, 1}, {-1, 1, 1}, {INT64_MIN, 1, 1}, {0, 1, 1},
                              {-1, 2, 2},        {INT64_MIN, 3, 3}};
    CU_ASSERT_EQUAL_FATAL(cr_replica_keep_latest(w, 6), 4);
    CU_ASSERT(w[0].owner == INT64_MIN && w[0].count == 3);
    CU_ASSERT(w[1].owner == -1 && w[1].count == 2);
    CU_ASSERT(w[2].owner == 0 && w[3].owner == INT64_MAX);
}

static cr_estimator *estimator(double h)
{
    cr_estimator_config cfg;
    cr_error err;
    cr_estimator_config_default(&cfg);
    cfg.half_life = h;
    return cr_estimator_new(&cfg, &err);
}

/* Arrivals split at random over three estimators merge to the rates of one
 * estimator that saw them all, to rounding. */
static void test_merge_is_exact(void)
{
    const double H = 7.5;
    cr_estimator *all = estimator(H), *part[3] = {estimator(H), estimator(H), estimator(H)};
    srand(13);
    double t = 100;
    for (int i = 0; i < 5000; i++) {
        int64_t owner = rand() % 50 - 10;
        t += (rand() % 1000) * 1e-4;
        double w = 1 + rand() % 3;
        cr_estimator_record_weighted(all, owner, w, t);
        cr_estimator_record_weighted(part[rand() % 3], owner, w, t);
    }
    cr_estimator_entry v[200];
    size_t n = 0;
    for (int p = 0; p < 3; p++) {
        size_t k;
        cr_estimator_entry *e = cr_estimator_export(part[p], &k);
        memcpy(v + n, e, k * sizeof *e);
        n += k;
        free(e);
    }
    double at = t + 3.25;
    cr_session_rate *merged;
    size_t m;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replica_merge(v, n, at, H, &merged, &m, &err), CR_OK);
    size_t k;
    cr_session_rate *want = cr_estimator_rates(all, at, &k);
    CU_ASSERT_EQUAL_FATAL(m, k);
    for (size_t i = 0; i < m; i++) {
        CU_ASSERT_EQUAL(merged[i].owner, want[i].owner);
        CU_ASSERT(fabs(merged[i].rate - want[i].rate) <= 1e-12 * want[i].rate);
    }
    /* The one formula, bit for bit. */
    CU_ASSERT_EQUAL(cr_replica_decayed(v[0].count, v[0].t_last, at, H),
                    v[0].count * exp2(-(at - v[0].t_last) / H));
    CU_ASSERT_EQUAL(cr_replica_decayed(2.0, at + 1, at, H), 2.0); /* never grown */
    free(merged);
    /* issue 30: foreign counts of 1e300 and 1e308 merge to the plan's bound */
    cr_estimator_entry huge[3] = {{.owner = 5, .count = 1e300, .t_last = at},
                                  {.owner = 5, .count = 1e308, .t_last = at},
                                  {.owner = 6, .count = 1e308, .t_last = at}};
    CU_ASSERT_EQUAL_FATAL(cr_replica_merge(huge, 3, at, H, &merged, &m, &err), CR_OK);
    CU_ASSERT_EQUAL(m, 2);
    CU_ASSERT_EQUAL(merged[0].rate, CR_PLAN_MAX_RATE);
    CU_ASSERT_EQUAL(merged[1].rate, CR_PLAN_MAX_RATE);
    free(merged);
    free(want);
    cr_estimator_free(all);
    for (int p = 0; p < 3; p++)
        cr_estimator_free(part[p]);
}

static void test_table_blob(void)
{
    cr_planner_config pc = {4, 10, 2};
    cr_session_rate rates[] = {{1, 30}, {2, 5}, {3, 1}, {9, 12}};
    cr_table *t, *back;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_planner_plan(&pc, rates, 4, &t, &err), CR_OK);
    uint8_t *blob;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(cr_replica_table_encode(t, &blob, &len, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_replica_table_decode(blob, len, &back, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_table_n_placements(back), cr_table_n_placements(t));
    for (size_t i = 0; i < cr_table_n_placements(t); i++) {
        const cr_placement *a = cr_table_placement(t, i), *b = cr_table_placement(back, i);
        CU_ASSERT(a->owner == b->owner && a->kb == b->kb &&
                  a->preferred_shard == b->preferred_shard);
    }
    cr_table_free(back);
    blob[0] = 9; /* another version */
    CU_ASSERT_EQUAL(cr_replica_table_decode(blob, len, &back, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "version 1, got 9"));
    blob[0] = 1;
    for (size_t cut = 0; cut < len; cut++)
        CU_ASSERT_EQUAL(cr_replica_table_decode(blob, cut, &back, &err), CR_EINVAL);
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, blob, len);
    longer[len] = 0;
    CU_ASSERT_EQUAL(cr_replica_table_decode(longer, len + 1, &back, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "1 bytes past its end"));
    free(longer);
    free(blob);
    cr_table_free(t);
}

static double vnow = 50;
static double vclock(void *ctx)
{
    (void)ctx;
    return vnow;
}

static cr_core *core_new(void)
{
    cr_core_config cfg;
    cr_error err;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cr_clock_source clock = {vclock, NULL};
    return cr_core_new(&cfg, NULL, &clock, &err);
}

/* The touched set hands out each owner once with its raw state, then is
 * empty; past its bound it says so and the take is every owner. */
static void test_touched(void)
{
    cr_core *c = core_new();
    cr_error err;
    size_t n;
    int all;
    CU_ASSERT_PTR_NULL(cr_core_touched_take(c, &n, &all)); /* not tracking: nothing */
    CU_ASSERT_EQUAL(cr_core_track_touched(c, 40, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_core_track_touched(c, 40, &err), CR_EINVAL);
    int64_t owners[] = {5, 6, 5, 7, 5};
    CU_ASSERT_EQUAL(cr_core_record(c, owners, 5, NULL, 0, NULL, NULL, &err), CR_OK);
    cr_estimator_entry *v = cr_core_touched_take(c, &n, &all);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT(v[0].owner == 5 && v[1].owner == 6 && v[2].owner == 7); /* ascending */
    CU_ASSERT_EQUAL(all, 0);
    for (size_t i = 0; i < n; i++) {
        cr_estimator_entry e;
        CU_ASSERT(v[i].t_last == vnow && v[i].owner >= 5 && v[i].owner <= 7);
        CU_ASSERT(v[i].count == (v[i].owner == 5 ? 3 : 1) * M_LN2 / 20);
        (void)e;
    }
    free(v);
    CU_ASSERT_PTR_NULL(cr_core_touched_take(c, &n, &all));
    CU_ASSERT_EQUAL(n, 0);
    int64_t many[400];
    for (int i = 0; i < 400; i++)
        many[i] = 1000 + i;
    CU_ASSERT_EQUAL(cr_core_record(c, many, 400, NULL, 0, NULL, NULL, &err), CR_OK);
    v = cr_core_touched_take(c, &n, &all);
    CU_ASSERT_EQUAL(all, 1);
    CU_ASSERT_EQUAL(n, 403); /* every tracked owner */
    free(v);
    CU_ASSERT_PTR_NULL(cr_core_touched_take(c, &n, &all));
    CU_ASSERT_EQUAL(all, 0);
    int64_t signed_owners[] = {-3, 2, -3, INT64_MIN};
    CU_ASSERT_EQUAL(cr_core_record(c, signed_owners, 4, NULL, 0, NULL, NULL, &err), CR_OK);
    v = cr_core_touched_take(c, &n, &all);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT(v[0].owner == INT64_MIN && v[1].owner == -3 && v[2].owner == 2);
    free(v);
    cr_core_free(c);
}

typedef struct recorder {
    pthread_t t;
    cr_core *core;
    int64_t base;
} recorder;

static atomic_int recorders_done;

static void *record_many(void *arg)
{
    recorder *r = arg;
    cr_error err;
    for (int64_t i = 0; i < 20000; i++) {
        int64_t o = r->base + i % 500;
        cr_core_record(r->core, &o, 1, NULL, 0, NULL, NULL, &err);
    }
    atomic_fetch_add(&recorders_done, 1);
    return NULL;
}

/* Threads recording while the owners are taken: every owner is handed out
 * by some take, none is lost (TSan: the "concurrency" label). */
static void test_touched_concurrent(void)
{
    cr_core *c = core_new();
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_core_track_touched(c, 100000, &err), CR_OK);
    recorder r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (recorder){.core = c, .base = i * 1000};
        pthread_create(&r[i].t, NULL, record_many, &r[i]);
    }
    static unsigned char seen[4000];
    memset(seen, 0, sizeof seen);
    int all_seen = 0, finished = 0;
    while (!finished) {
        finished = atomic_load(&recorders_done) == 4; /* then one more take */
        size_t n;
        int all;
        cr_estimator_entry *v = cr_core_touched_take(c, &n, &all);
        CU_ASSERT_EQUAL(all, 0);
        for (size_t i = 0; i < n; i++)
            seen[v[i].owner] = 1;
        free(v);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(r[i].t, NULL);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 500; k++)
            all_seen += seen[i * 1000 + k];
    CU_ASSERT_EQUAL(all_seen, 2000);
    cr_core_free(c);
}

/* ---- against a real redis-server ---- */

static pid_t redis_pid;
static char redis_sock[64];

/* With pass, the default user needs AUTH pass (requirepass). */
static int redis_start(const char *pass)
{
    snprintf(redis_sock, sizeof redis_sock, "/tmp/cr-test-replica-%d.sock", (int)getpid());
    redis_pid = fork();
    if (redis_pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(126);
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", redis_sock,
               "--save", "", "--appendonly", "no", pass ? "--requirepass" : (char *)NULL, pass,
               (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        if (access(redis_sock, F_OK) == 0)
            return 0;
        usleep(20000);
    }
    return -1;
}

static void redis_stop(void)
{
    kill(redis_pid, SIGKILL);
    waitpid(redis_pid, NULL, 0);
    unlink(redis_sock);
}

static long long hget_generation(cr_link *l)
{
    redisReply *r = cr_link_cmd(l, "HGET cr:{u}:table generation");
    long long g = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return g;
}

/* A link to the test's Redis, AUTHing from password_file when not NULL. */
static cr_link link_to_redis(const char *password_file)
{
    cr_link l = {.timeout_s = 1.0, .password_file = password_file};
    cr_error err;
    char url[96];
    snprintf(url, sizeof url, "unix:%s", redis_sock);
    CU_ASSERT_EQUAL(cr_replica_parse_url(url, &l.url, &err), CR_OK);
    return l;
}

/* Up within 2.5 s of tries (a fresh redis-server may not listen yet). */
static int link_wait(cr_link *l)
{
    int up = 0;
    for (int i = 0; i < 50 && !(up = cr_link_up(l)); i++) {
        l->next_try = 0;
        usleep(50000);
    }
    return up;
}

/* The lease is one replica's at a time; a leader whose lease went to
 * another can no longer publish, and its refused publish changes nothing. */
static void test_lease_and_fence(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the sidecar does (replica.h) */
    CU_ASSERT_EQUAL_FATAL(redis_start(NULL), 0);
    cr_link l = link_to_redis(NULL);
    CU_ASSERT_TRUE_FATAL(link_wait(&l));
    const char *lease = "cr:{u}:lease";
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "a", 0, 5), 1);
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "b", 0, 5), 0);
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "b", 1, 5), 0); /* b cannot renew a's */
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "a", 1, 5), 1);
    cr_publish_keys ka = {lease, "cr:{u}:table", "cr:{u}:notify", "a"};
    cr_publish_keys kb = {lease, "cr:{u}:table", "cr:{u}:notify", "b"};
    const uint8_t blob[] = "table-1";
    CU_ASSERT_EQUAL(cr_script_publish(&l, &ka, blob, 7, 0), 1);
    CU_ASSERT_EQUAL(cr_script_publish(&l, &kb, blob, 7, 0), 0); /* not b's lease */
    /* a's lease expires and b takes it: a is deposed. */
    freeReplyObject(cr_link_cmd(&l, "DEL %s", lease));
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "b", 0, 5), 1);
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "a", 1, 5), 0);
    CU_ASSERT_EQUAL(cr_script_publish(&l, &ka, (const uint8_t *)"stale", 5, 0), 0);
    CU_ASSERT_EQUAL(hget_generation(&l), 1);
    redisReply *r = cr_link_cmd(&l, "HGET cr:{u}:table blob");
    CU_ASSERT(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "table-1"));
    freeReplyObject(r);
    CU_ASSERT_EQUAL(cr_script_publish(&l, &kb, blob, 7, 0), 2);
    /* Above what the publisher installed, even past Redis's own count. */
    CU_ASSERT_EQUAL(cr_script_publish(&l, &kb, blob, 7, 40), 41);
    CU_ASSERT_EQUAL(hget_generation(&l), 41);
    cr_script_release(&l, lease, "a"); /* not a's: stays */
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "a", 0, 5), 0);
    cr_script_release(&l, lease, "b");
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "a", 0, 5), 1);
    /* Redis gone: the link says so and backs off instead of blocking. */
    redis_stop();
    CU_ASSERT_EQUAL(cr_script_lease(&l, lease, "a", 1, 5), -1);
    CU_ASSERT_PTR_NULL(l.ctx);
    CU_ASSERT_EQUAL(cr_link_up(&l), 0);
    CU_ASSERT(l.backoff > 0);
    cr_link_close(&l);
}


/* AUTH right after connecting: the password or USER PASSWORD from the
 * file, read again at each connect; a refusal fails the link with Redis's
 * error and never the password. */
static void test_auth(void)
{
    signal(SIGPIPE, SIG_IGN);
    CU_ASSERT_EQUAL_FATAL(redis_start("s3cret"), 0);
    char good[64], wrong[64];
    write_file(good, "s3cret\n");
    write_file(wrong, "nope-s3cret-not\n");
    cr_link l = link_to_redis(good);
    CU_ASSERT_TRUE_FATAL(link_wait(&l));
    redisReply *r = cr_link_cmd(&l, "PING");
    CU_ASSERT(r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG"));
    freeReplyObject(r);
    /* An ACL user, "USER PASSWORD". */
    r = cr_link_cmd(&l, "ACL SETUSER cr on >us3r-pw ~cr:* +@all");
    CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    cr_link_close(&l);
    char user[64];
    write_file(user, "cr us3r-pw\n");
    cr_link u = link_to_redis(user);
    CU_ASSERT_TRUE(link_wait(&u));
    r = cr_link_cmd(&u, "ACL WHOAMI");
    CU_ASSERT(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "cr"));
    freeReplyObject(r);
    cr_link_close(&u);
    /* A wrong password: down, why names AUTH, backed off; never the password. */
    cr_link w = link_to_redis(wrong);
    CU_ASSERT_EQUAL(cr_link_up(&w), 0);
    CU_ASSERT_PTR_NULL(w.ctx);
    CU_ASSERT_PTR_NOT_NULL(strstr(w.why, "state backend refused AUTH: WRONGPASS"));
    CU_ASSERT_PTR_NULL(strstr(w.why, "s3cret"));
    CU_ASSERT(w.backoff > 0);
    /* The file is read again at the next connect: fixed, it connects. */
    w.password_file = good;
    CU_ASSERT_TRUE(link_wait(&w));
    /* Re-AUTH on the open connection (SIGHUP): a wrong one drops it. */
    w.password_file = wrong;
    cr_link_reauth(&w);
    CU_ASSERT_PTR_NULL(w.ctx);
    CU_ASSERT_PTR_NOT_NULL(strstr(w.why, "refused AUTH"));
    /* An unreadable file: down, naming the file. */
    unlink(wrong);
    w.next_try = 0;
    CU_ASSERT_EQUAL(cr_link_up(&w), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(w.why, wrong));
    CU_ASSERT_PTR_NOT_NULL(strstr(w.why, "cannot read"));
    /* No AUTH at all: connected, but every command is refused. */
    cr_link n = link_to_redis(NULL);
    CU_ASSERT_TRUE(link_wait(&n));
    r = cr_link_cmd(&n, "PING");
    CU_ASSERT(r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOAUTH", 6));
    freeReplyObject(r);
    cr_link_close(&n);
    cr_link_close(&w);
    unlink(good);
    unlink(user);
    redis_stop();
}

static const cr_test_case pure_tests[] = {
    {"backend URLs", test_urls},
    {"config checks", test_config_checks},
    {"password file contents", test_auth_parse},
    {"password file reads", test_auth_read},
    {"pushed chunks", test_encoding},
    {"each owner's last push", test_keep_latest},
    {"merge is exact", test_merge_is_exact},
    {"table blob", test_table_blob},
    {"touched owners", test_touched},
    {"touched owners, threads racing the take", test_touched_concurrent},
    {NULL, NULL},
};

static const cr_test_case redis_tests[] = {
    {"lease and fence", test_lease_and_fence},
    {"AUTH", test_auth},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"replica", pure_tests}, {"redis", redis_tests}};

CR_TEST_MAIN(suites)
