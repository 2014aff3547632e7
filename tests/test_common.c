/* The shared vocabulary (common/): the strict number parsers, the mixing
 * hash, the clock conversion, refcounted values behind a published pointer
 * (single-threaded and with concurrent readers), the radix sort, and the
 * ticker. Nothing
 * here depends on how fast the machine is beyond generous bounds: waits for
 * a thread are on condition variables or the ticker's test hooks, and time
 * is only checked from below (a slow machine can only make an interval
 * longer) or against bounds of a second or more. Run under TSan in CI. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "cunit_main.h"
#include "ticker_test.h"

/* A wait no working test reaches: it only keeps a broken one from hanging. */
#define HANG_S 30.0
/* Slack for comparing a deadline with the clock read after it: the deadline
 * goes through a timespec (truncated to the nanosecond) and doubles. */
#define CLOCK_EPS 1e-6

/* ---- numbers ---------------------------------------------------------- */

static void test_parse_double(void)
{
    const struct {
        const char *s;
        int rc;
        double v;
    } cases[] = {
        /* clang-format off */
        {"8", 0, 8},        {"1.5", 0, 1.5},     {"-2.25", 0, -2.25},
        {"1e3", 0, 1000},   {"1e308", 0, 1e308}, {"0", 0, 0},
        {"-0", 0, -0.0},
        {" 8", -1, 0},      {"8 ", -1, 0},       {"\t8", -1, 0},
        {"8\n", -1, 0},     {"", -1, 0},         {"nan", -1, 0},
        {"NaN", -1, 0},     {"inf", -1, 0},      {"-inf", -1, 0},
        {"infinity", -1, 0},{"1e999", -1, 0},    {"-1e999", -1, 0},
        {"1e-400", -1, 0},  {"abc", -1, 0},      {"8abc", -1, 0},
        {"1.5.2", -1, 0},   {"-", -1, 0},        {".", -1, 0},
        /* clang-format on */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double v = 12345;
        int rc = cr_parse_double(cases[i].s, &v);
        CU_ASSERT_EQUAL(rc, cases[i].rc);
        if (rc != cases[i].rc)
            fprintf(stderr, "cr_parse_double(\"%s\") = %d\n", cases[i].s, rc);
        if (cases[i].rc == 0 && rc == 0) {
            CU_ASSERT_EQUAL(v, cases[i].v);
            CU_ASSERT_EQUAL(!!signbit(v), !!signbit(cases[i].v)); /* "-0" keeps its sign */
        }
    }
}

static void test_parse_i64(void)
{
    const struct {
        const char *s;
        int rc;
        int64_t v;
    } cases[] = {
        /* clang-format off */
        {"8", 0, 8},         {"-8", 0, -8},        {"+8", 0, 8},
        {"0", 0, 0},         {"-0", 0, 0},         {"007", 0, 7},
        {"9223372036854775807", 0, INT64_MAX},
        {"-9223372036854775808", 0, INT64_MIN},
        {"9223372036854775808", -1, 0},             /* INT64_MAX + 1 */
        {"-9223372036854775809", -1, 0},            /* INT64_MIN - 1 */
        {"99999999999999999999999", -1, 0},
        {" 8", -1, 0},       {"8 ", -1, 0},        {"\t8", -1, 0},
        {"", -1, 0},         {"-", -1, 0},         {"+", -1, 0},
        {"nan", -1, 0},      {"inf", -1, 0},       {"1e999", -1, 0},
        {"1e-400", -1, 0},   {"abc", -1, 0},       {"1.5", -1, 0},
        {"1e3", -1, 0},      {"0x10", -1, 0},      {"8abc", -1, 0},
        /* clang-format on */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t v = 12345;
        int rc = cr_parse_i64(cases[i].s, &v);
        CU_ASSERT_EQUAL(rc, cases[i].rc);
        if (rc != cases[i].rc)
            fprintf(stderr, "cr_parse_i64(\"%s\") = %d\n", cases[i].s, rc);
        if (cases[i].rc == 0 && rc == 0)
            CU_ASSERT_EQUAL(v, cases[i].v);
    }
}

/* ---- errors, hash, clock ---------------------------------------------------- */

static void test_fail(void)
{
    cr_error err;
    CU_ASSERT_EQUAL(cr_fail(&err, CR_EINVAL, "x must be > 0, got %g", -1.5), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "x must be > 0, got -1.5");
    char big[2 * CR_ERRLEN];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CU_ASSERT_EQUAL(cr_fail(&err, CR_ENOMEM, "%s", big), CR_ENOMEM);
    CU_ASSERT_EQUAL(strlen(err.msg), CR_ERRLEN - 1); /* truncated, terminated */
}

static void test_mix64(void)
{
    /* mix64(0) and mix64(0x9e3779b97f4a7c15) are the first two outputs of
     * the reference splitmix64 generator seeded with 0; the others are the
     * same finalizer computed independently (tests/integration/harness.py's
     * splitmix64). */
    const struct {
        uint64_t in, out;
    } cases[] = {
        {0, 0xe220a8397b1dcdafULL},
        {0x9e3779b97f4a7c15ULL, 0x6e789e6aa1b965f4ULL},
        {1, 0x910a2dec89025cc1ULL},
        {2, 0x975835de1c9756ceULL},
        {42, 0xbdd732262feb6e95ULL},
        {1ULL << 63, 0x481ec0a212a9f3dbULL},
        {UINT64_MAX, 0xe4d971771b652c20ULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CU_ASSERT_EQUAL(cr_mix64(cases[i].in), cases[i].out);
}

static void test_timespec_of(void)
{
    const struct {
        double s;
        time_t sec;
        long nsec;
    } cases[] = {
        {0, 0, 0},
        {-0.0, 0, 0},
        {-1, 0, 0},
        {-1e300, 0, 0},
        {NAN, 0, 0},
        {-INFINITY, 0, 0},
        {0.25, 0, 250000000L},
        {1.5, 1, 500000000L},
        {2, 2, 0},
        {3.75, 3, 750000000L},
        {1e9 + 0.5, 1000000000, 500000000L},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct timespec ts = cr_timespec_of(cases[i].s);
        CU_ASSERT_EQUAL(ts.tv_sec, cases[i].sec);
        CU_ASSERT_EQUAL(ts.tv_nsec, cases[i].nsec);
    }
    /* Just under a whole second: the nanoseconds never reach 10^9. */
    double under[] = {nextafter(1.0, 0), nextafter(2.0, 0), nextafter(1e6, 0), 0.9999999999};
    for (size_t i = 0; i < sizeof under / sizeof under[0]; i++) {
        struct timespec ts = cr_timespec_of(under[i]);
        CU_ASSERT(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
        double back = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
        CU_ASSERT(fabs(back - under[i]) <= 2e-9 * (1 + under[i]));
    }
    /* The clock goes through it and back to within a nanosecond or so. */
    double now = cr_mono_s();
    struct timespec ts = cr_timespec_of(now);
    CU_ASSERT(fabs((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - now) < 1e-6);
    CU_ASSERT(cr_mono_s() >= now);
}

/* ---- refcounted values and the published pointer --------------------------- */

typedef struct value {
    cr_ref ref;
    uint64_t id; /* the generation it is published as */
} value;

static atomic_int frees;           /* values freed by value_free */
static atomic_uint_fast64_t freed; /* bit id-1 set when value id was freed */

static void value_free(cr_ref *ref)
{
    value *v = (value *)ref; /* ref is the first member */
    if (v->id >= 1 && v->id <= 64)
        atomic_fetch_or(&freed, 1ULL << (v->id - 1));
    atomic_fetch_add(&frees, 1);
    free(v);
}

static value *value_new(uint64_t id)
{
    value *v = malloc(sizeof *v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    cr_ref_init(&v->ref, value_free);
    v->id = id;
    return v;
}

static void reset_frees(void)
{
    atomic_store(&frees, 0);
    atomic_store(&freed, 0);
}

/* ---- the radix sort ---- */

typedef struct sort_rec {
    uint64_t key;
    uint64_t at; /* input position: stability and the reference's tie-break */
} sort_rec;

static int by_key_then_at(const void *a, const void *b)
{
    const sort_rec *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* n records with keys from make(i), sorted by cr_sort_records, against
 * qsort with the input order as the tie-break (so: stable). */
static void check_sort(size_t n, uint64_t (*make)(size_t i))
{
    sort_rec *a = malloc((n + 1) * sizeof *a), *tmp = malloc((n + 1) * sizeof *tmp);
    sort_rec *want = malloc((n + 1) * sizeof *want);
    CU_ASSERT_FATAL(a && tmp && want);
    for (size_t i = 0; i < n; i++)
        a[i] = want[i] = (sort_rec){make(i), i};
    qsort(want, n, sizeof *want, by_key_then_at);
    sort_rec *got = cr_sort_records(a, tmp, n);
    CU_ASSERT_FATAL(got == a || got == tmp);
    CU_ASSERT(memcmp(got, want, n * sizeof *want) == 0);
    free(a);
    free(tmp);
    free(want);
}

static uint64_t key_random(size_t i) { return cr_mix64(i); }
static uint64_t key_few(size_t i) { return cr_mix64(i % 7); }   /* many ties */
static uint64_t key_same(size_t i) { return (void)i, 42; }
static uint64_t key_low(size_t i) { return cr_mix64(i) & 0xfff; } /* top bits all equal */
static uint64_t key_top(size_t i) { return cr_mix64(i) & ~UINT64_C(0) << 52; }
static uint64_t key_falling(size_t i) { return ~(uint64_t)i; }

static void test_sort_records(void)
{
    uint64_t (*makes[])(size_t) = {key_random, key_few, key_same, key_low, key_top, key_falling};
    size_t sizes[] = {0, 1, 2, 15, 16, 17, 300, 5000, 200000};
    for (size_t m = 0; m < sizeof makes / sizeof *makes; m++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
            check_sort(sizes[k], makes[m]);
    /* Strided int64 values, signed, sorted stably with their places. */
    struct {
        int64_t v;
        double pad;
    } e[] = {{5, 0}, {INT64_MIN, 0}, {-1, 0}, {5, 0}, {INT64_MAX, 0}, {-1, 0}};
    cr_sorted_i64 *s = cr_sort_i64(e, sizeof *e, 6);
    CU_ASSERT_FATAL(s != NULL);
    static const uint64_t at[] = {1, 2, 5, 0, 3, 4};
    for (int i = 0; i < 6; i++)
        CU_ASSERT(s[i].at == at[i] && s[i].key == cr_sort_key_i64(e[at[i]].v));
    free(s);
    s = cr_sort_i64(NULL, 8, 0);
    CU_ASSERT_PTR_NOT_NULL(s);
    free(s);
    /* Signed keys order as signed numbers. */
    CU_ASSERT(cr_sort_key_i64(INT64_MIN) < cr_sort_key_i64(-1));
    CU_ASSERT(cr_sort_key_i64(-1) < cr_sort_key_i64(0));
    CU_ASSERT(cr_sort_key_i64(0) < cr_sort_key_i64(INT64_MAX));
}

static void test_ref_counts(void)
{
    reset_frees();
    value *v = value_new(1);
    CU_ASSERT_EQUAL(atomic_load(&v->ref.n), 1);
    cr_ref_retain(&v->ref);
    cr_ref_retain(&v->ref);
    CU_ASSERT_EQUAL(atomic_load(&v->ref.n), 3);
    cr_ref_release(&v->ref);
    cr_ref_release(&v->ref);
    CU_ASSERT_EQUAL(atomic_load(&frees), 0);
    CU_ASSERT_EQUAL(v->id, 1); /* still alive */
    cr_ref_release(&v->ref);
    CU_ASSERT_EQUAL(atomic_load(&frees), 1);
    cr_ref_retain(NULL); /* ignored */
    cr_ref_release(NULL);
    CU_ASSERT_EQUAL(atomic_load(&frees), 1);
}

static void test_published_generations(void)
{
    reset_frees();
    cr_published p;
    cr_published_init(&p);
    uint64_t g = 99;
    CU_ASSERT_PTR_NULL(cr_published_acquire(&p, &g));
    CU_ASSERT_EQUAL(g, 0);
    CU_ASSERT_PTR_NULL(cr_published_acquire(&p, NULL));

    value *v1 = value_new(1), *v2 = value_new(2), *v3 = value_new(3);
    CU_ASSERT_EQUAL(cr_published_swap(&p, &v1->ref), 1);
    cr_ref *r = cr_published_acquire(&p, &g);
    CU_ASSERT_PTR_EQUAL(r, &v1->ref);
    CU_ASSERT_EQUAL(g, 1);
    cr_ref_release(r);
    CU_ASSERT_EQUAL(atomic_load(&frees), 0); /* the published pointer holds v1 */

    /* A reader holds v1 across the swap to v2: v1 survives it. */
    cr_ref *held = cr_published_acquire(&p, NULL);
    CU_ASSERT_PTR_EQUAL(held, &v1->ref);
    CU_ASSERT_EQUAL(cr_published_swap(&p, &v2->ref), 2);
    CU_ASSERT_EQUAL(atomic_load(&frees), 0);
    CU_ASSERT_EQUAL(((value *)held)->id, 1); /* readable: ASan would catch a free */
    r = cr_published_acquire(&p, &g);
    CU_ASSERT_PTR_EQUAL(r, &v2->ref);
    CU_ASSERT_EQUAL(g, 2);
    cr_ref_release(r);
    cr_ref_release(held); /* the last reference to v1 */
    CU_ASSERT_EQUAL(atomic_load(&frees), 1);
    CU_ASSERT_EQUAL(atomic_load(&freed), 1u << 0);

    /* Nobody holds v2: the swap to v3 frees it. */
    CU_ASSERT_EQUAL(cr_published_swap(&p, &v3->ref), 3);
    CU_ASSERT_EQUAL(atomic_load(&frees), 2);
    CU_ASSERT_EQUAL(atomic_load(&freed), (1u << 0) | (1u << 1));
    r = cr_published_acquire(&p, &g);
    CU_ASSERT_PTR_EQUAL(r, &v3->ref);
    CU_ASSERT_EQUAL(g, 3);

    /* destroy drops the published pointer's reference; ours keeps v3. */
    cr_published_destroy(&p);
    CU_ASSERT_EQUAL(atomic_load(&frees), 2);
    cr_ref_release(r);
    CU_ASSERT_EQUAL(atomic_load(&frees), 3);
    CU_ASSERT_EQUAL(atomic_load(&freed), 7u);
}

#define N_READERS 4
#define N_SWAPS 2000

typedef struct published_reader {
    cr_published *p;
    atomic_int *done;
    /* results, asserted by the main thread after the join */
    long reads;
    long mismatched; /* value's id != the generation acquire reported */
    long backwards;  /* generation went down */
    uint64_t last;
} published_reader;

static void *published_reader_main(void *arg)
{
    published_reader *a = arg;
    while (!atomic_load(a->done)) {
        uint64_t g;
        cr_ref *r = cr_published_acquire(a->p, &g);
        if (!r)
            continue; /* before the first swap */
        if (((value *)r)->id != g)
            a->mismatched++;
        if (g < a->last)
            a->backwards++;
        a->last = g;
        a->reads++;
        cr_ref_release(r);
    }
    return NULL;
}

/* Readers acquire and release while one writer swaps: every value is freed
 * exactly once, none while read (TSan and ASan watch), and each read sees a
 * whole value with its own generation. */
static void test_published_concurrent(void)
{
    reset_frees();
    cr_published p;
    cr_published_init(&p);
    atomic_int done;
    atomic_init(&done, 0);
    pthread_t th[N_READERS];
    published_reader args[N_READERS];
    for (int i = 0; i < N_READERS; i++) {
        args[i] = (published_reader){.p = &p, .done = &done};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, published_reader_main, &args[i]), 0);
    }
    int order_ok = 1;
    for (uint64_t i = 1; i <= N_SWAPS; i++)
        order_ok &= cr_published_swap(&p, &value_new(i)->ref) == i;
    atomic_store(&done, 1);
    for (int i = 0; i < N_READERS; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT(order_ok);
    for (int i = 0; i < N_READERS; i++) {
        CU_ASSERT_EQUAL(args[i].mismatched, 0);
        CU_ASSERT_EQUAL(args[i].backwards, 0);
        CU_ASSERT(args[i].last <= N_SWAPS);
    }
    CU_ASSERT_EQUAL(atomic_load(&frees), N_SWAPS - 1); /* all but the current */
    cr_published_destroy(&p);
    CU_ASSERT_EQUAL(atomic_load(&frees), N_SWAPS);
}

/* ---- ticker ------------------------------------------------------------------- */

#define MAX_CALLS 8

/* What a tick fn saw, guarded by lock; cond is signalled on each change. */
typedef struct tick_log {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls;
    int stop_after; /* calls beyond this only count */
    double started[MAX_CALLS], ended[MAX_CALLS];
    cr_ticker *seen;  /* the ticker fn was handed */
    double nap_s;     /* each call sleeps this long on the ticker (0: none) */
    int nap_rc;       /* what the last nap returned */
    int past_rc;      /* what a sleep to a passed deadline returned */
    int again_rc;     /* a second sleep after a stopped one */
    double again_s;   /* how long that second sleep took */
} tick_log;

static void log_init(tick_log *l)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    l->stop_after = MAX_CALLS;
    l->nap_rc = l->past_rc = l->again_rc = -1;
}

static void log_destroy(tick_log *l)
{
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->lock);
}

static void tick(void *ctx, cr_ticker *t)
{
    tick_log *l = ctx;
    double start = cr_mono_s();
    int past = cr_ticker_sleep_until(t, start - 1);
    int nap = -1, again = -1;
    double again_s = 0;
    if (l->nap_s > 0) {
        nap = cr_ticker_sleep_until(t, cr_mono_s() + l->nap_s);
        if (nap) { /* stopping: a further sleep must end at once */
            double t0 = cr_mono_s();
            again = cr_ticker_sleep_until(t, t0 + 3600);
            again_s = cr_mono_s() - t0;
        }
    }
    double end = cr_mono_s();
    pthread_mutex_lock(&l->lock);
    if (l->calls < MAX_CALLS) {
        l->started[l->calls] = start;
        l->ended[l->calls] = end;
    }
    l->calls++;
    l->seen = t;
    l->past_rc = past;
    l->nap_rc = nap;
    l->again_rc = again;
    l->again_s = again_s;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

/* Waits (on the log's condvar) until fn has been called n times; 0, or -1
 * after HANG_S. */
static int await_calls(tick_log *l, int n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the log's condvar is on the default clock */
    ts.tv_sec += (time_t)HANG_S;
    pthread_mutex_lock(&l->lock);
    int rc = 0;
    while (l->calls < n && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&l->cond, &l->lock, &ts);
    int ok = l->calls >= n;
    pthread_mutex_unlock(&l->lock);
    return ok ? 0 : -1;
}

static void test_ticker_calls(void)
{
    tick_log l;
    log_init(&l);
    l.nap_s = 0.03; /* a slow call: the interval must start after it */
    const double interval = 0.02;
    cr_error err;
    double t0 = cr_mono_s();
    cr_ticker *t = cr_ticker_start(interval, tick, &l, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(await_calls(&l, 3), 0);
    /* The ticker began (at least) a wait before each call and inside each. */
    CU_ASSERT(cr_ticker_test_waits(t, CR_TICKER_BETWEEN_CALLS) >= 3);
    CU_ASSERT(cr_ticker_test_waits(t, CR_TICKER_IN_CALL) >= 6); /* the passed one and the nap */
    cr_ticker_stop(t);

    pthread_mutex_lock(&l.lock);
    int calls = l.calls;
    CU_ASSERT(calls >= 3);
    CU_ASSERT_PTR_EQUAL(l.seen, t);
    CU_ASSERT_EQUAL(l.past_rc, 0); /* a passed deadline: 0 at once */
    /* The first call comes interval_s after the start, each next one
     * interval_s after the end of the previous call (lower bounds only). */
    CU_ASSERT(l.started[0] - t0 >= interval - CLOCK_EPS);
    for (int i = 0; i + 1 < calls && i + 1 < MAX_CALLS; i++) {
        CU_ASSERT(l.ended[i] - l.started[i] >= l.nap_s - CLOCK_EPS); /* the nap ran out */
        CU_ASSERT(l.started[i + 1] - l.ended[i] >= interval - CLOCK_EPS);
    }
    pthread_mutex_unlock(&l.lock);
    log_destroy(&l);
}

static void test_ticker_stops_mid_interval(void)
{
    tick_log l;
    log_init(&l);
    cr_error err;
    cr_ticker *t = cr_ticker_start(3600, tick, &l, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    /* The thread is in its hour-long wait before the first call. */
    CU_ASSERT_EQUAL(cr_ticker_test_await(t, CR_TICKER_BETWEEN_CALLS, 1, HANG_S), 0);
    CU_ASSERT_EQUAL(cr_ticker_test_waits(t, CR_TICKER_BETWEEN_CALLS), 1);
    CU_ASSERT_EQUAL(cr_ticker_test_waits(t, CR_TICKER_IN_CALL), 0);
    double t0 = cr_mono_s();
    cr_ticker_stop(t);
    CU_ASSERT(cr_mono_s() - t0 < 1.0);
    CU_ASSERT_EQUAL(l.calls, 0); /* joined: no lock needed */
    log_destroy(&l);
}

static void test_ticker_stops_mid_call(void)
{
    tick_log l;
    log_init(&l);
    l.nap_s = 3600; /* each call sleeps an hour on the ticker */
    cr_error err;
    cr_ticker *t = cr_ticker_start(0.001, tick, &l, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    /* The passed-deadline sleep is the first in-call wait, the nap the second. */
    CU_ASSERT_EQUAL(cr_ticker_test_await(t, CR_TICKER_IN_CALL, 2, HANG_S), 0);
    double t0 = cr_mono_s();
    cr_ticker_stop(t); /* the call in progress is finished first */
    CU_ASSERT(cr_mono_s() - t0 < 1.0);
    CU_ASSERT_EQUAL(l.calls, 1);
    CU_ASSERT_EQUAL(l.nap_rc, 1);   /* cut short: 1 */
    CU_ASSERT_EQUAL(l.again_rc, 1); /* once stopping, 1 at once */
    CU_ASSERT(l.again_s < 1.0);
    log_destroy(&l);
}

static void test_ticker_bad_interval(void)
{
    tick_log l;
    log_init(&l);
    const double bad[] = {0, -0.0, -1, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_error err = {"untouched"};
        CU_ASSERT_PTR_NULL(cr_ticker_start(bad[i], tick, &l, &err));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "interval_s"));
    }
    cr_error err;
    CU_ASSERT_PTR_NULL(cr_ticker_start(0, tick, &l, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "interval_s must be finite and > 0, got 0");
    CU_ASSERT_PTR_NULL(cr_ticker_start(-2.5, tick, &l, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "interval_s must be finite and > 0, got -2.5");
    CU_ASSERT_EQUAL(l.calls, 0);
    cr_ticker_stop(NULL); /* ignored */
    log_destroy(&l);
}

static void test_sleep_without_ticker(void)
{
    double deadline = cr_mono_s() + 0.01;
    CU_ASSERT_EQUAL(cr_ticker_sleep_until(NULL, deadline), 0);
    CU_ASSERT(cr_mono_s() >= deadline - CLOCK_EPS);
    deadline = cr_mono_s() + 0.01;
    CU_ASSERT_EQUAL(cr_ticker_wait(NULL, deadline), 0); /* the cr_wait_fn shape */
    CU_ASSERT(cr_mono_s() >= deadline - CLOCK_EPS);
    cr_wait_fn w = cr_ticker_wait;
    double t0 = cr_mono_s();
    CU_ASSERT_EQUAL(w(NULL, t0 - 5), 0); /* passed: at once */
    CU_ASSERT_EQUAL(w(NULL, NAN), 0);
    CU_ASSERT(cr_mono_s() - t0 < 1.0);
}

/* ---- files --------------------------------------------------------------- */

/* A regular file read whole (NUL after it); the size bound checked on
 * fstat before a byte is read; a file fstat calls empty (/proc's) read to
 * its end; a FIFO, a directory and a device refused at once, named; a
 * missing file: errno ENOENT. */
static void test_file_read(void)
{
    char dir[] = "/tmp/cr_file_XXXXXX", path[64], fifo[64];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("hello", f);
    fclose(f);
    char *text;
    size_t len;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_file_read(path, "--x F", 5, &text, &len, &err), CR_OK);
    CU_ASSERT_EQUAL(len, 5);
    CU_ASSERT_STRING_EQUAL(text, "hello");
    free(text);
    CU_ASSERT_EQUAL(cr_file_read(path, "--x F", 4, &text, &len, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "--x F: 5 bytes, at most 4");
    CU_ASSERT_PTR_NULL(text);
    CU_ASSERT_EQUAL(cr_file_read("/proc/self/stat", "stat", 65536, &text, &len, &err), CR_OK);
    CU_ASSERT(len > 0 && strlen(text) == len);
    free(text);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    CU_ASSERT_EQUAL(cr_file_read(fifo, "--x P", 5, &text, &len, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "--x P: cannot read: it must be a regular file, not a FIFO");
    CU_ASSERT_EQUAL(cr_file_read(dir, "D", 5, &text, &len, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "D: cannot read: it must be a regular file, not a directory");
    CU_ASSERT_EQUAL(cr_file_read("/dev/zero", "Z", 5, &text, &len, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "Z: cannot read: it must be a regular file, not a character "
                                    "device");
    struct stat st;
    CU_ASSERT_EQUAL(cr_file_open(fifo, "P", &st, &err), -1);
    CU_ASSERT_EQUAL(errno, EINVAL);
    unlink(fifo);
    unlink(path);
    CU_ASSERT_EQUAL(cr_file_open(path, "M", &st, &err), -1);
    CU_ASSERT_EQUAL(errno, ENOENT);
    CU_ASSERT_STRING_EQUAL(err.msg, "M: cannot read: No such file or directory");
    rmdir(dir);
}

static const cr_test_case number_tests[] = {
    {"parse double", test_parse_double},
    {"parse i64", test_parse_i64},
    {NULL, NULL},
};

static const cr_test_case base_tests[] = {
    {"cr_fail", test_fail},
    {"mix64 fixed values", test_mix64},
    {"timespec of", test_timespec_of},
    {"radix sort: stable, any keys", test_sort_records},
    {NULL, NULL},
};

static const cr_test_case published_tests[] = {
    {"ref counts", test_ref_counts},
    {"generations and held values", test_published_generations},
    {"concurrent readers", test_published_concurrent},
    {NULL, NULL},
};

static const cr_test_case ticker_tests[] = {
    {"calls, counted from the end of the last", test_ticker_calls},
    {"stop mid-interval", test_ticker_stops_mid_interval},
    {"stop mid-call sleep", test_ticker_stops_mid_call},
    {"bad interval", test_ticker_bad_interval},
    {"sleep without a ticker", test_sleep_without_ticker},
    {NULL, NULL},
};

static const cr_test_case file_tests[] = {
    {"read a given file", test_file_read},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {
    {"numbers", number_tests},
    {"files", file_tests},
    {"base", base_tests},
    {"published", published_tests},
    {"ticker", ticker_tests},
};
CR_TEST_MAIN(suites)
