/* The KV-event subscriber following the endpoint set (kvevents.h,
 * "following the endpoint set"): an endpoint's kv_events parsed, a
 * data-parallel rank's endpoint as vLLM's offset_endpoint_port makes it,
 * which links a set wants (pure); and the links following a real core's
 * set through its members hook, from other threads while the figures are
 * read (run under ThreadSanitizer in the concurrency pass). Nothing
 * publishes here: a SUB link exists once connected (libzmq connects in the
 * background, to an ipc:// path nobody binds), which is all the following
 * is about; the events' way is the integration test's. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core_config.h"
#include "cunit_main.h"
#include "kvevents.h"

/* ---- addresses ------------------------------------------------------------------ */

static void test_address(void)
{
    cr_kv_engine e;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_kv_address_parse("tcp://10.0.0.5:5557", &e, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(e.endpoint, "tcp://10.0.0.5:5557");
    CU_ASSERT_STRING_EQUAL(e.replay, "");
    CU_ASSERT_EQUAL_FATAL(
        cr_kv_address_parse("tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558", &e, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(e.replay, "tcp://10.0.0.5:5558");
    CU_ASSERT_EQUAL(e.shard, 0);
    CU_ASSERT_EQUAL(cr_kv_address_parse("3=tcp://x:1", &e, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "ENDPOINT must be tcp://... or ipc://...");
    CU_ASSERT_EQUAL(cr_kv_address_parse("tcp://x:1,replay=", &e, &err), CR_EINVAL);
}

static void test_rank_endpoint(void)
{
    char out[CR_KV_ENDPOINT_MAX];
    cr_error err;
    static const struct {
        const char *base;
        uint32_t rank;
        const char *want;
    } ok[] = {
        {"tcp://10.0.0.5:5557", 0, "tcp://10.0.0.5:5557"},
        {"tcp://10.0.0.5:5557", 3, "tcp://10.0.0.5:5560"},
        {"tcp://[::1]:5557", 1, "tcp://[::1]:5558"},
        {"tcp://host:65534", 1, "tcp://host:65535"},
        {"ipc:///run/kv.sock", 2, "ipc:///run/kv.sock_dp2"},
        {"ipc:///run/kv.sock", 0, "ipc:///run/kv.sock"},
        {"tcp://host", 0, "tcp://host"}, /* rank 0 is the base as given */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CU_ASSERT_EQUAL(cr_kv_rank_endpoint(ok[i].base, ok[i].rank, out, &err), CR_OK);
        CU_ASSERT_STRING_EQUAL(out, ok[i].want);
    }
    CU_ASSERT_EQUAL(cr_kv_rank_endpoint("tcp://host:65535", 1, out, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "past 65535"));
    CU_ASSERT_EQUAL(cr_kv_rank_endpoint("tcp://host", 1, out, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "no port"));
    CU_ASSERT_EQUAL(cr_kv_rank_endpoint("tcp://host:55x", 1, out, &err), CR_EINVAL);
    char longest[CR_KV_ENDPOINT_MAX];
    memset(longest, 'p', sizeof longest - 1);
    memcpy(longest, "ipc://", 6);
    longest[sizeof longest - 1] = '\0'; /* 255 bytes: the most, then no room for _dp1 */
    CU_ASSERT_EQUAL(cr_kv_rank_endpoint(longest, 0, out, &err), CR_OK);
    CU_ASSERT_EQUAL(cr_kv_rank_endpoint(longest, 1, out, &err), CR_EINVAL);
}

/* ---- which links a set wants -------------------------------------------------- */

static cr_endpoints *set_of(const cr_endpoints *old, const cr_endpoint_spec *v, size_t n)
{
    cr_endpoints *e = NULL;
    cr_endpoints_change chg;
    cr_error err;
    CU_ASSERT_EQUAL(cr_endpoints_apply(old, v, n, 1.0, &e, &chg, &err), CR_OK);
    return e;
}

static void test_wanted(void)
{
    cr_endpoint_spec v[] = {
        {.id = "a", .address = "a:8000", .kv_events = "tcp://10.0.0.1:5557,replay=tcp://10.0.0.1:6000"},
        {.id = "b", .address = "b:8000"}, /* no KV events */
        {.id = "c", .address = "c:8000", .kv_events = "ipc:///run/c"},
        {.id = "d", .address = "d:8000", .kv_events = "http://nope"},
        {.id = "e", .address = "e:8000", .kv_events = "tcp://10.0.0.5:5557"},
    };
    cr_endpoints *e = set_of(NULL, v, 5);
    cr_kv_engine out[16];
    size_t refused, bad;
    cr_error err;
    /* one rank: a, c and e; d's address is bad */
    size_t n = cr_kv_wanted(e, 1, 0, out, 16, &refused, &bad, &err);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(refused, 0);
    CU_ASSERT_EQUAL(bad, 1);
    CU_ASSERT_STRING_EQUAL(err.msg,
                           "endpoint \"d\" kv_events: ENDPOINT must be tcp://... or ipc://...");
    CU_ASSERT_EQUAL(out[0].shard, 0);
    CU_ASSERT_STRING_EQUAL(out[0].replay, "tcp://10.0.0.1:6000");
    CU_ASSERT_EQUAL(out[1].shard, 2);
    CU_ASSERT_EQUAL(out[2].shard, 4);
    /* two ranks each, shard 2 taken by --kv-events: a's and e's, offset */
    n = cr_kv_wanted(e, 2, 1u << 2, out, 16, &refused, &bad, NULL);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    CU_ASSERT_EQUAL((out[1].shard << 8) | out[1].rank, (0u << 8) | 1);
    CU_ASSERT_STRING_EQUAL(out[1].endpoint, "tcp://10.0.0.1:5558");
    CU_ASSERT_STRING_EQUAL(out[1].replay, "tcp://10.0.0.1:6001");
    CU_ASSERT_EQUAL((out[3].shard << 8) | out[3].rank, (4u << 8) | 1);
    CU_ASSERT_STRING_EQUAL(out[3].endpoint, "tcp://10.0.0.5:5558");
    /* room for 3: an endpoint's ranks all or none, the rest refused */
    n = cr_kv_wanted(e, 2, 0, out, 3, &refused, &bad, NULL);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(refused, 4);
    /* c removed: GONE, not wanted */
    cr_endpoint_spec w[] = {v[0], v[1], v[4]};
    cr_endpoints *e2 = set_of(e, w, 3);
    n = cr_kv_wanted(e2, 1, 0, out, 16, &refused, &bad, NULL);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(out[1].shard, 4);
    CU_ASSERT_EQUAL(cr_kv_wanted(NULL, 1, 0, out, 16, &refused, &bad, NULL), 0);
    cr_endpoints_release(e);
    cr_endpoints_release(e2);
}

/* ---- following a core's set ---------------------------------------------------- */

typedef struct follower {
    _Atomic(cr_kv_subscriber *) kv; /* set after start, read by the hook */
    pthread_mutex_t lock;
    int subscribed, unsubscribed; /* reports, under lock */
    uint64_t refused;
    char last[CR_KV_ENDPOINT_MAX];
    atomic_int stop;
} follower;

static void members(void *ctx, const cr_core_members_event *ev)
{
    (void)ev;
    follower *f = ctx;
    cr_kv_endpoints_changed(atomic_load(&f->kv));
}

static void reported(void *ctx, const cr_kv_report *r)
{
    follower *f = ctx;
    pthread_mutex_lock(&f->lock);
    f->subscribed += r->kind == CR_KV_REPORT_SUBSCRIBED;
    f->unsubscribed += r->kind == CR_KV_REPORT_UNSUBSCRIBED;
    f->refused += r->kind == CR_KV_REPORT_REFUSED ? r->count : 0;
    if (r->kind == CR_KV_REPORT_SUBSCRIBED)
        snprintf(f->last, sizeof f->last, "%s", r->detail);
    pthread_mutex_unlock(&f->lock);
}

/* The figures read over and over, as a scrape does, from another thread. */
static void *scrape(void *arg)
{
    follower *f = arg;
    cr_kv_stats st[CR_KV_MAX_LINKS];
    while (!atomic_load(&f->stop))
        cr_kv_stats_read(atomic_load(&f->kv), st, CR_KV_MAX_LINKS);
    return NULL;
}

/* Waits up to 5 s until the subscriber shows shards (a bit each). */
static int shows(follower *f, uint32_t shards)
{
    for (int i = 0; i < 500; i++) {
        cr_kv_stats st[CR_KV_MAX_LINKS];
        size_t n = cr_kv_stats_read(atomic_load(&f->kv), st, CR_KV_MAX_LINKS);
        uint32_t got = 0;
        for (size_t k = 0; k < n; k++)
            got |= 1u << st[k].shard;
        if (got == shards)
            return 1;
        usleep(10000);
    }
    return 0;
}

static void set(cr_core *core, const cr_endpoint_spec *v, size_t n)
{
    cr_error err;
    CU_ASSERT_EQUAL(cr_core_set_endpoints(core, v, n, NULL, &err), CR_OK);
}

static void test_follows_the_set(void)
{
    follower f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    cr_core_config cfg;
    cr_test_core_config(&cfg, 4);
    cr_core_hooks hooks = {.members = members, .ctx = &f};
    cr_error err;
    cr_core *core = cr_core_new(&cfg, &hooks, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(core);
    char a[64], b[64], c[64], fixed[80];
    snprintf(a, sizeof a, "ipc:///tmp/cr-kv-follow-%d-a", (int)getpid());
    snprintf(b, sizeof b, "ipc:///tmp/cr-kv-follow-%d-b", (int)getpid());
    snprintf(c, sizeof c, "ipc:///tmp/cr-kv-follow-%d-c", (int)getpid());
    snprintf(fixed, sizeof fixed, "2=ipc:///tmp/cr-kv-follow-%d-static", (int)getpid());
    cr_kv_engine st;
    CU_ASSERT_EQUAL_FATAL(cr_kv_engine_parse(fixed, &st, &err), CR_OK);
    /* a set before the subscriber: it reads it at start */
    cr_endpoint_spec v[] = {{.id = "a", .address = "a:1", .kv_events = a},
                            {.id = "b", .address = "b:1", .kv_events = b},
                            {.id = "c", .address = "c:1", .kv_events = c}};
    set(core, v, 2);
    cr_kv_hooks kh = {.report = reported, .ctx = &f};
    cr_kv_options opt = {.dp_size = 2, .follow = 1};
    cr_kv_subscriber *s = cr_kv_start(&st, 1, &opt, core, &kh, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    atomic_store(&f.kv, s);
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, scrape, &f), 0);
    CU_ASSERT(shows(&f, 1u << 0 | 1u << 1 | 1u << 2));
    /* b leaves: its two ranks close; it and c (the static shard's slot,
     * which --kv-events keeps) join */
    set(core, (cr_endpoint_spec[]){v[0], v[2]}, 2);
    CU_ASSERT(shows(&f, 1u << 0 | 1u << 2));
    set(core, v, 3);
    CU_ASSERT(shows(&f, 1u << 0 | 1u << 1 | 1u << 2));
    /* a's address changes: its links are made again, to the new one */
    cr_endpoint_spec moved[] = {{.id = "a", .address = "a:1", .kv_events = c}, v[1], v[2]};
    set(core, moved, 3);
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&f.lock);
        int done = f.subscribed >= 8 && f.unsubscribed >= 4;
        pthread_mutex_unlock(&f.lock);
        if (done)
            break;
        usleep(10000);
    }
    atomic_store(&f.stop, 1);
    pthread_join(t, NULL);
    cr_kv_stop(s);
    cr_core_free(core);
    /* a and b two ranks each at start, b again, a again: c's slot never */
    CU_ASSERT_EQUAL(f.subscribed, 2 + 2 + 2 + 2);
    CU_ASSERT_EQUAL(f.unsubscribed, 2 + 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.last, "-c"));
}

/* CR_KV_MAX_LINKS links at most: five endpoints of CR_KV_MAX_DP ranks
 * want 320, the first four's 256 open, the fifth's ranks none (all or
 * none), refused and reported; when the first leaves, the fifth takes
 * its places. */
static void test_link_bound(void)
{
    follower f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    cr_core_config cfg;
    cr_test_core_config(&cfg, 8);
    cr_core_hooks hooks = {.members = members, .ctx = &f};
    cr_error err;
    cr_core *core = cr_core_new(&cfg, &hooks, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(core);
    char addr[5][64], id[5][4];
    cr_endpoint_spec v[5];
    for (int i = 0; i < 5; i++) {
        snprintf(addr[i], sizeof addr[i], "ipc:///tmp/cr-kv-bound-%d-%d", (int)getpid(), i);
        snprintf(id[i], sizeof id[i], "e%d", i);
        v[i] = (cr_endpoint_spec){.id = id[i], .address = "h:1", .kv_events = addr[i]};
    }
    cr_kv_hooks kh = {.report = reported, .ctx = &f};
    cr_kv_options opt = {.dp_size = CR_KV_MAX_DP, .follow = 1};
    cr_kv_subscriber *s = cr_kv_start(NULL, 0, &opt, core, &kh, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    atomic_store(&f.kv, s);
    set(core, v, 5);
    CU_ASSERT(shows(&f, 0xfu));
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&f.lock);
        int done = f.refused > 0;
        pthread_mutex_unlock(&f.lock);
        if (done)
            break;
        usleep(10000);
    }
    pthread_mutex_lock(&f.lock);
    CU_ASSERT_EQUAL(f.subscribed, CR_KV_MAX_LINKS);
    CU_ASSERT_EQUAL(f.refused, CR_KV_MAX_DP);
    pthread_mutex_unlock(&f.lock);
    set(core, v + 1, 4);
    CU_ASSERT(shows(&f, 0x1eu));
    cr_kv_stats st[CR_KV_MAX_LINKS];
    CU_ASSERT_EQUAL(cr_kv_stats_read(s, st, CR_KV_MAX_LINKS), 4);
    cr_kv_stop(s);
    cr_core_free(core);
    CU_ASSERT_EQUAL(f.subscribed, CR_KV_MAX_LINKS + CR_KV_MAX_DP);
    CU_ASSERT_EQUAL(f.unsubscribed, CR_KV_MAX_DP);
}

static void test_nothing_to_follow(void)
{
    cr_error err;
    CU_ASSERT_PTR_NULL(cr_kv_start(NULL, 0, &(cr_kv_options){0}, NULL, NULL, &err));
    cr_kv_endpoints_changed(NULL); /* ignored */
    CU_ASSERT_EQUAL(cr_kv_stats_read(NULL, NULL, 0), 0);
}

static const cr_test_case address_tests[] = {
    {"an endpoint's kv_events", test_address},
    {"a rank's endpoint", test_rank_endpoint},
    {"the links a set wants", test_wanted},
    {NULL, NULL},
};

static const cr_test_case follow_tests[] = {
    {"follows the set from other threads", test_follows_the_set},
    {"at most CR_KV_MAX_LINKS links", test_link_bound},
    {"nothing to follow", test_nothing_to_follow},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {{"kv_address", address_tests},
                                       {"kv_follow", follow_tests}};
CR_TEST_MAIN(suites)
