/* The replay library (replay/): the Mooncake parser on good and malformed
 * input, owner keys and the Gini, the LRU prefix cache (eviction order, and
 * against a plain model), each baseline's rule on its own, the event loop
 * on small cases computed by hand, the KV path, replan churn and dips, the
 * generator (reproducible, multi-turn, bursty, on its Gini target, shared
 * documents), whole runs repeated, and the cacheroute policy's KV events
 * and hit predictions. Deterministic; nothing is timed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cunit_main.h"
#include "internal.h"
#include "replay.h"

#define EPS 1e-9

static const cr_owner_key PREFIX2 = {CR_OWNER_PREFIX, 2};

/* ---- the parser ------------------------------------------------------------ */

static const char GOOD[] =
    "{\"timestamp\": 5, \"input_length\": 1000, \"output_length\": 7, \"hash_ids\": [0, 1]}\n"
    "\n"
    "{\"timestamp\": 2.5, \"input_length\": 600, \"output_length\": 0, \"hash_ids\": [0, 2],"
    " \"extra\": [1, {}]}\r\n"
    "  {\"hash_ids\": [0, 1, 3], \"output_length\": 1, \"input_length\": 1500, \"timestamp\": 5}";

static void test_parse_good(void)
{
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_trace_parse("t", GOOD, strlen(GOOD), &PREFIX2, &t, &err),
                          CR_OK);
    CU_ASSERT_EQUAL_FATAL(t.n, 3);
    CU_ASSERT_EQUAL(t.n_blocks, 7);
    /* Sorted by time, the tie at 5 in file order. */
    CU_ASSERT_DOUBLE_EQUAL(t.reqs[0].t_ms, 2.5, 0);
    CU_ASSERT_EQUAL(t.reqs[0].input_tokens, 600);
    CU_ASSERT_EQUAL(t.reqs[1].output_tokens, 7);
    CU_ASSERT_EQUAL(t.reqs[2].n_blocks, 3);
    CU_ASSERT_EQUAL(t.blocks[t.reqs[2].first_block + 2], 3);
    CU_ASSERT_EQUAL(t.reqs[0].knowledge_tokens, 0);
    /* prefix:2: the two turns of [0, 1] share an owner, [0, 2] does not. */
    CU_ASSERT_EQUAL(t.reqs[1].owner, t.reqs[2].owner);
    CU_ASSERT_NOT_EQUAL(t.reqs[0].owner, t.reqs[1].owner);
    CU_ASSERT(t.reqs[0].owner >= 0 && t.reqs[1].owner >= 0);
    cr_replay_trace_free(&t);

    /* block:5 past a request's end is its last block; block:0 is one owner. */
    cr_owner_key b5 = {CR_OWNER_BLOCK, 5}, b0 = {CR_OWNER_BLOCK, 0};
    CU_ASSERT_EQUAL_FATAL(cr_replay_trace_parse("t", GOOD, strlen(GOOD), &b5, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(t.reqs[0].owner, 2);
    CU_ASSERT_EQUAL(t.reqs[1].owner, 1);
    CU_ASSERT_EQUAL(t.reqs[2].owner, 3);
    cr_replay_trace_free(&t);
    CU_ASSERT_EQUAL_FATAL(cr_replay_trace_parse("t", GOOD, strlen(GOOD), &b0, &t, &err), CR_OK);
    CU_ASSERT_DOUBLE_EQUAL(cr_replay_owner_gini(&t), 0, 0);
    cr_replay_trace_free(&t);
}

/* One bad line after a good one: the error names line 2 and the key. */
static void expect_bad(const char *line2, const char *msg)
{
    const char *good = "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 0, "
                       "\"hash_ids\": [0]}\n";
    size_t n1 = strlen(good), n2 = strlen(line2);
    char *text = malloc(n1 + n2 + 1);
    memcpy(text, good, n1);
    memcpy(text + n1, line2, n2 + 1);
    cr_replay_trace t = {(void *)1, 9, (void *)1, 9};
    cr_error err = {{0}};
    CU_ASSERT_EQUAL(cr_replay_trace_parse("x.jsonl", text, n1 + n2, &PREFIX2, &t, &err),
                    CR_EINVAL);
    char want[CR_ERRLEN];
    snprintf(want, sizeof want, "x.jsonl:2: %s", msg);
    if (strncmp(err.msg, want, strlen(want)) != 0)
        fprintf(stderr, "\n  got  \"%s\"\n  want \"%s...\"\n", err.msg, want);
    CU_ASSERT_EQUAL(strncmp(err.msg, want, strlen(want)), 0);
    CU_ASSERT(t.reqs == NULL && t.n == 0 && t.blocks == NULL);
    free(text);
}

#define LINE(ts, in, out, ids)                                                                   \
    "{\"timestamp\": " ts ", \"input_length\": " in ", \"output_length\": " out                \
    ", \"hash_ids\": " ids "}"

static void test_parse_malformed(void)
{
    const struct {
        const char *line, *msg;
    } cases[] = {
        {"{\"timestamp\": 0,", "bad JSON"},
        {"{\"a\": 1} {\"b\": 2}", "bad JSON"},
        {"{\"timestamp\": 0, \"timestamp\": 1}", "bad JSON"}, /* duplicate key */
        {"[1, 2]", "must be a JSON object, got an array"},
        {"{\"input_length\": 1, \"output_length\": 0, \"hash_ids\": [0]}",
         "missing key timestamp"},
        {"{\"timestamp\": 1, \"output_length\": 0, \"hash_ids\": [0]}",
         "missing key input_length"},
        {"{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": [0]}",
         "missing key output_length"},
        {"{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 0}",
         "missing key hash_ids"},
        {LINE("\"0\"", "1", "0", "[0]"), "timestamp must be a number, got a string"},
        {LINE("-1", "1", "0", "[0]"), "timestamp must be a number in [0, 2^53), got -1"},
        {LINE("1e300", "1", "0", "[0]"), "timestamp must be a number in [0, 2^53)"},
        {LINE("0", "-5", "0", "[0]"), "input_length must be an integer in [1, 2^32)"},
        {LINE("0", "0", "0", "[0]"), "input_length must be an integer in [1, 2^32)"},
        {LINE("0", "4294967296", "0", "[0]"), "input_length must be an integer in [1"},
        {LINE("0", "null", "0", "[0]"), "input_length must be an integer, got null"},
        {LINE("0", "1", "1.5", "[0]"), "output_length must be an integer in [0, 2^32)"},
        {LINE("0", "1", "true", "[0]"), "output_length must be an integer, got a boolean"},
        {LINE("0", "1", "0", "[]"), "hash_ids must not be empty"},
        {LINE("0", "1", "0", "{}"), "hash_ids must be an array, got an object"},
        {LINE("0", "1", "0", "[0, \"1\"]"), "hash_ids[1] must be an integer, got a string"},
        {LINE("0", "1", "0", "[0, -3]"), "hash_ids[1] must be an integer in [0, 2^53)"},
        {LINE("0", "1", "0", "[9007199254740992]"), "hash_ids[0] must be an integer in [0, 2^53)"},
        {LINE("0", "1", "0", "[1, 2, 100000000000000000000000000000]"),
         "hash_ids[2] must be an integer in [0, 2^53)"}, /* past int64 too */
        {LINE("0", "1", "0", "[0.5]"), "hash_ids[0] must be an integer in [0, 2^53)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_bad(cases[i].line, cases[i].msg);
}

static void test_parse_limits(void)
{
    /* A line one byte over the limit. */
    size_t n = CR_REPLAY_LINE_MAX + 1;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = '\0';
    char msg[64];
    snprintf(msg, sizeof msg, "line longer than %u bytes", CR_REPLAY_LINE_MAX);
    expect_bad(big, msg);
    free(big);

    /* A NUL inside a line is bad JSON, not the line's end. */
    const char nul[] = "{\"timestamp\": 0\0, \"input_length\": 1}\n";
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replay_trace_parse("n", nul, sizeof nul - 1, &PREFIX2, &t, &err),
                    CR_EINVAL);
    CU_ASSERT_EQUAL(strncmp(err.msg, "n:1: bad JSON", 13), 0);
    /* Nothing but blank lines: no requests. */
    CU_ASSERT_EQUAL(cr_replay_trace_parse("e", "\n  \n", 4, &PREFIX2, &t, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "e: no requests");
}

static void test_load_file(void)
{
    char path[] = "/tmp/test_replay_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(GOOD, f);
    fputs("\n{\"timestamp\": 9}\n", f);
    fclose(f);
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replay_trace_load(path, &PREFIX2, &t, &err), CR_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "%s:5: missing key input_length", path);
    CU_ASSERT_STRING_EQUAL(err.msg, want);

    f = fopen(path, "w");
    fputs(GOOD, f);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(cr_replay_trace_load(path, &PREFIX2, &t, &err), CR_OK);
    CU_ASSERT_EQUAL(t.n, 3);
    CU_ASSERT_EQUAL(t.reqs[2].input_tokens, 1500);
    cr_replay_trace_free(&t);
    unlink(path);
    CU_ASSERT_EQUAL(cr_replay_trace_load(path, &PREFIX2, &t, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "cannot open"));
}

static void test_owner_key_parse(void)
{
    cr_owner_key k;
    cr_error err;
    CU_ASSERT_EQUAL(cr_owner_key_parse("prefix:2", &k, &err), CR_OK);
    CU_ASSERT(k.kind == CR_OWNER_PREFIX && k.n == 2);
    CU_ASSERT_EQUAL(cr_owner_key_parse("block:0", &k, &err), CR_OK);
    CU_ASSERT(k.kind == CR_OWNER_BLOCK && k.n == 0);
    CU_ASSERT_EQUAL(cr_owner_key_parse(CR_REPLAY_OWNER_KEY_DEFAULT, &k, &err), CR_OK);
    const char *bad[] = {"prefix:0", "prefix:", "prefix:+1", "prefix:1x", "block:-1",
                         "block", "session:1", "prefix:4294967296", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(cr_owner_key_parse(bad[i], &k, &err), CR_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "owner key must be prefix:N"));
    }
}

static void test_gini(void)
{
    size_t even[] = {3, 3, 3}, one[] = {0, 0, 0, 9}, two[] = {1, 3};
    CU_ASSERT_DOUBLE_EQUAL(cr_replay_gini_of(even, 3), 0, EPS);
    CU_ASSERT_DOUBLE_EQUAL(cr_replay_gini_of(one, 4), 0.75, EPS);   /* (n - 1) / n */
    CU_ASSERT_DOUBLE_EQUAL(cr_replay_gini_of(two, 2), 0.25, EPS);   /* (-1 + 3) / (2 * 4) */
}

/* ---- the cache ------------------------------------------------------------- */

static void test_lru_order(void)
{
    cr_replay_cache c;
    cr_replay_cache_init(&c, 3);
    uint64_t abc[] = {1, 2, 3}, d[] = {4}, b[] = {2}, e[] = {5};
    uint32_t rank;
    CU_ASSERT_EQUAL(cr_replay_cache_insert(&c, abc, 3), 0);
    /* Inserted last to first: the prefix's head is the most recent. */
    CU_ASSERT(cr_replay_cache_rank(&c, 1, &rank) && rank == 0);
    CU_ASSERT(cr_replay_cache_rank(&c, 3, &rank) && rank == 2);
    CU_ASSERT_EQUAL(cr_replay_cache_prefix(&c, abc, 3), 3);
    cr_replay_cache_insert(&c, d, 1); /* evicts 3, the prefix's tail */
    CU_ASSERT_FALSE(cr_replay_cache_rank(&c, 3, NULL));
    CU_ASSERT_EQUAL(cr_replay_cache_prefix(&c, abc, 3), 2);
    cr_replay_cache_insert(&c, b, 1); /* 2, 4, 1 */
    cr_replay_cache_insert(&c, e, 1); /* evicts 1 */
    CU_ASSERT_FALSE(cr_replay_cache_rank(&c, 1, NULL));
    CU_ASSERT(cr_replay_cache_rank(&c, 5, &rank) && rank == 0);
    CU_ASSERT(cr_replay_cache_rank(&c, 2, &rank) && rank == 1);
    CU_ASSERT(cr_replay_cache_rank(&c, 4, &rank) && rank == 2);
    CU_ASSERT_EQUAL(cr_replay_cache_prefix(&c, abc, 3), 0);
    cr_replay_cache_free(&c);
}

/* Against a plain array LRU (most recent first) over a long random
 * workload, through growth, eviction and deletion runs in the slots. */
static void test_lru_model(void)
{
    enum { CAP = 200, OPS = 20000 };
    uint64_t model[CAP];
    uint32_t held = 0;
    cr_replay_cache c;
    cr_replay_cache_init(&c, CAP);
    cr_replay_rng g = {7};
    for (int op = 0; op < OPS; op++) {
        uint64_t id = cr_replay_rng_next(&g) % 400;
        uint32_t at = 0;
        while (at < held && model[at] != id)
            at++;
        CU_ASSERT_EQUAL(cr_replay_cache_prefix(&c, &id, 1), at < held);
        if (at == held && held < CAP)
            held++;
        memmove(model + 1, model, (at < held ? at : held - 1) * sizeof *model);
        model[0] = id;
        CU_ASSERT_EQUAL(cr_replay_cache_insert(&c, &id, 1), 0);
    }
    for (uint32_t i = 0; i < held; i++) {
        uint32_t rank = CAP;
        CU_ASSERT(cr_replay_cache_rank(&c, model[i], &rank) && rank == i);
    }
    CU_ASSERT_EQUAL(c.n, CAP);
    cr_replay_cache_free(&c);
}

/* A side table on the cache: use gives an id's node (fresh when the id was
 * not held), find gives it back while the id stays, and an eviction hands
 * the least recent id's node to the next new id, fresh. */
static void test_lru_side_table(void)
{
    cr_replay_cache c;
    cr_replay_cache_init(&c, 2);
    uint32_t n1, n2, n3, again;
    CU_ASSERT_EQUAL(cr_replay_cache_find(&c, 1), CR_REPLAY_NIL);
    CU_ASSERT_EQUAL(cr_replay_cache_use(&c, 1, &n1), 1);
    CU_ASSERT_EQUAL(cr_replay_cache_use(&c, 2, &n2), 1);
    CU_ASSERT(n1 < 2 && n2 < 2 && n1 != n2);
    CU_ASSERT_EQUAL(cr_replay_cache_use(&c, 1, &again), 0); /* held: 2 is now the least recent */
    CU_ASSERT_EQUAL(again, n1);
    CU_ASSERT_EQUAL(cr_replay_cache_find(&c, 2), n2);
    CU_ASSERT_EQUAL(cr_replay_cache_use(&c, 3, &n3), 1);
    CU_ASSERT_EQUAL(n3, n2);
    CU_ASSERT_EQUAL(cr_replay_cache_find(&c, 2), CR_REPLAY_NIL);
    CU_ASSERT_EQUAL(cr_replay_cache_find(&c, 1), n1);
    cr_replay_cache_free(&c);
}

/* ---- the baselines ------------------------------------------------------------ */

static cr_replay_cluster cluster_of(uint32_t shards)
{
    cr_replay_cluster c;
    cr_replay_cluster_default(&c);
    c.shards = shards;
    return c;
}

static uint32_t route_once(const cr_replay_policy *p, int64_t owner, size_t first_block,
                           const uint32_t *queued, const double *backlog, uint32_t shards)
{
    cr_replay_request r = {.owner = owner, .first_block = first_block, .n_blocks = 1};
    cr_replay_view v = {.shards = shards, .backlog_ms = backlog, .queued = queued};
    return p->route(p->state, &r, &v);
}

static void test_sticky(void)
{
    enum { R = 8, OWNERS = 4000 };
    cr_replay_cluster c = cluster_of(R);
    cr_replay_policy p;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("sticky", &c, &p, &err), CR_OK);
    uint32_t queued[R] = {0, 90, 0, 0, 0, 0, 0, 0}; /* ignored */
    double backlog[R] = {0};
    unsigned per_shard[R] = {0};
    for (int64_t o = 0; o < OWNERS; o++) {
        uint32_t s = route_once(&p, o, 0, queued, backlog, R);
        per_shard[s]++;
        for (size_t k = 1; k < 4; k++) /* stable over requests and loads */
            CU_ASSERT_EQUAL(route_once(&p, o, k * 17, queued, backlog, R), s);
    }
    for (int s = 0; s < R; s++) /* spread: each within 35% of the mean */
        CU_ASSERT(per_shard[s] > OWNERS / R * 0.65 && per_shard[s] < OWNERS / R * 1.35);
    /* Small ids too (the generator's sessions, the hottest first): the
     * first 64 are as spread as any 64. */
    memset(per_shard, 0, sizeof per_shard);
    for (int64_t o = 0; o < 64; o++)
        per_shard[route_once(&p, o, 0, queued, backlog, R)]++;
    for (int s = 0; s < R; s++)
        CU_ASSERT(per_shard[s] >= 2 && per_shard[s] <= 16);
    p.free(p.state);
}

/* chwbl on R = 4 for one owner: the bound is ceil(1.25 (total + 1) / 4). */
static void test_chwbl(void)
{
    cr_replay_cluster c = cluster_of(4);
    cr_replay_policy p, sticky;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("chwbl", &c, &p, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("sticky", &c, &sticky, &err), CR_OK);
    double backlog[4] = {0};
    uint32_t q[4] = {0};
    uint32_t home = route_once(&sticky, 42, 0, q, backlog, 4);
    CU_ASSERT_EQUAL(route_once(&p, 42, 0, q, backlog, 4), home); /* idle: the ring's shard */

    /* total 15: the bound is ceil(1.25 * 16 / 4) = 5 exactly. */
    uint32_t other = (home + 1) % 4;
    q[home] = 4;
    q[other] = 11;
    CU_ASSERT_EQUAL(route_once(&p, 42, 0, q, backlog, 4), home); /* 4 < 5 */
    q[home] = 5;
    q[other] = 10;
    uint32_t next = route_once(&p, 42, 0, q, backlog, 4); /* 5 is the bound: move on */
    CU_ASSERT_NOT_EQUAL(next, home);

    /* The walk order: with the next one also at the bound, a third shard;
     * with only the next one at it, home again. */
    memset(q, 0, sizeof q);
    q[home] = 3; /* total 3: bound ceil(1.25 * 4 / 4) = 2 */
    CU_ASSERT_EQUAL(route_once(&p, 42, 0, q, backlog, 4), next);
    q[home] = 2;
    q[next] = 2; /* total 4: bound ceil(6.25 / 4) = 2 */
    uint32_t third = route_once(&p, 42, 0, q, backlog, 4);
    CU_ASSERT(third != home && third != next);
    q[home] = 0;
    q[next] = 3;
    CU_ASSERT_EQUAL(route_once(&p, 42, 0, q, backlog, 4), home);
    p.free(p.state);
    sticky.free(sticky.state);
}

static void test_flat_lb(void)
{
    cr_replay_cluster c = cluster_of(2);
    cr_replay_policy p;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("flat-lb", &c, &p, &err), CR_OK);
    double backlog[8] = {0};
    uint32_t q2a[2] = {5, 2}, q2b[2] = {2, 5};
    for (size_t k = 0; k < 100; k++) { /* two distinct of two: always the less queued */
        CU_ASSERT_EQUAL(route_once(&p, 1, k, q2a, backlog, 2), 1);
        CU_ASSERT_EQUAL(route_once(&p, 1, k, q2b, backlog, 2), 0);
    }
    p.free(p.state);

    c = cluster_of(8);
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("flat-lb", &c, &p, &err), CR_OK);
    uint32_t q[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    unsigned zero = 0;
    for (size_t k = 0; k < 4000; k++) {
        uint32_t s = route_once(&p, 1, k, q, backlog, 8);
        CU_ASSERT_NOT_EQUAL(s, 7); /* the most queued loses to any other */
        zero += s == 0;
        CU_ASSERT_EQUAL(route_once(&p, 99, k, q, backlog, 8), s); /* seeded by the request */
    }
    /* Shard 0 wins whenever drawn: P = 1 - (7/8)(6/7) = 1/4. */
    CU_ASSERT(zero > 4000 * 0.21 && zero < 4000 * 0.29);
    p.free(p.state);
}

static void test_least_loaded_and_random(void)
{
    cr_replay_cluster c = cluster_of(4);
    cr_replay_policy p, r1, r2;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("least-loaded", &c, &p, &err), CR_OK);
    uint32_t q[4] = {0};
    double b1[4] = {3, 1, 1, 2}, b2[4] = {0, 0, 0, 0}, b3[4] = {2, 2, 2, 0.5};
    CU_ASSERT_EQUAL(route_once(&p, 1, 0, q, b1, 4), 1); /* tie 1 and 2: the lower id */
    CU_ASSERT_EQUAL(route_once(&p, 1, 0, q, b2, 4), 0);
    CU_ASSERT_EQUAL(route_once(&p, 1, 0, q, b3, 4), 3);
    p.free(p.state);

    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("random", &c, &r1, &err), CR_OK);
    c.seed = 2;
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("random", &c, &r2, &err), CR_OK);
    unsigned per[4] = {0}, same = 0;
    for (size_t k = 0; k < 4000; k++) {
        uint32_t s = route_once(&r1, 1, k, q, b1, 4);
        per[s]++;
        same += s == route_once(&r2, 1, k, q, b1, 4);
        CU_ASSERT_EQUAL(route_once(&r1, 1, k, q, b1, 4), s);
    }
    for (int s = 0; s < 4; s++)
        CU_ASSERT(per[s] > 900 && per[s] < 1100);
    CU_ASSERT(same > 800 && same < 1200); /* another seed: independent choices */
    r1.free(r1.state);
    r2.free(r2.state);

    CU_ASSERT_EQUAL(cr_replay_baseline("round-robin", &c, &p, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "round-robin"));
    c.shards = 0;
    CU_ASSERT_EQUAL(cr_replay_baseline("sticky", &c, &p, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "shards"));
}

/* ---- hand-computed runs ------------------------------------------------------- */

/* Two sessions on two shards with caches of 3 blocks of 100 tokens;
 * prefill = 1 ms + 0.01 ms per token not cached (so 1 ms per block), no
 * noise. A: [10 11], [10 11 12], [10 11 12]; B: [20 21], [20 21 22]. */
static uint64_t hand_blocks[] = {10, 11, 20, 21, 10, 11, 12, 20, 21, 22, 10, 11, 12};
static cr_replay_request hand_reqs[] = {
    {.t_ms = 0, .input_tokens = 200, .n_blocks = 2, .first_block = 0, .owner = 1},
    {.t_ms = 1, .input_tokens = 200, .n_blocks = 2, .first_block = 2, .owner = 2},
    {.t_ms = 2, .input_tokens = 300, .n_blocks = 3, .first_block = 4, .owner = 1},
    {.t_ms = 4.5, .input_tokens = 300, .n_blocks = 3, .first_block = 7, .owner = 2},
    {.t_ms = 21, .input_tokens = 300, .n_blocks = 3, .first_block = 10, .owner = 1},
};
#define HAND_N 5

static cr_replay_trace hand_trace(void)
{
    return (cr_replay_trace){hand_reqs, HAND_N, hand_blocks, 13};
}

static cr_replay_cluster hand_cluster(void)
{
    cr_replay_cluster c = {.shards = 2, .shard_blocks = 3, .block_tokens = 100,
                           .truth = {.prefill = {.fixed_ms = 1, .ms_per_token = 0.01}}, .scale = 1, .seed = 1};
    return c;
}

/* A policy that records what its inner policy was shown and what came of
 * each request. */
typedef struct recorder {
    cr_replay_policy inner;
    size_t n;
    uint32_t queued[HAND_N][2];
    double backlog[HAND_N][2];
    cr_replay_outcome out[HAND_N];
    int kv; /* the kv hook's answer */
    size_t n_kv;                /* kv hook calls */
    uint32_t kv_hit[HAND_N];    /* the prefix hit each call was given */
    uint32_t kv_shard[HAND_N];  /* and the shard */
    double changed[2], at[2];
    size_t n_replans;
} recorder;

static uint32_t rec_route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    recorder *x = state;
    for (uint32_t k = 0; k < 2 && k < v->shards; k++) {
        x->queued[x->n][k] = v->queued[k];
        x->backlog[x->n][k] = v->backlog_ms[k];
    }
    return x->inner.route(x->inner.state, r, v);
}

static int rec_kv(void *state, const cr_replay_request *r, const cr_replay_view *v, uint32_t s,
                  uint32_t hit_tokens)
{
    recorder *x = state;
    (void)r;
    (void)v;
    if (x->n_kv < HAND_N) {
        x->kv_shard[x->n_kv] = s;
        x->kv_hit[x->n_kv++] = hit_tokens;
    }
    return x->kv;
}

static void rec_served(void *state, const cr_replay_request *r, const cr_replay_outcome *o)
{
    recorder *x = state;
    x->out[x->n++] = *o;
    if (x->inner.served)
        x->inner.served(x->inner.state, r, o);
}

static int rec_replans(void *state, size_t *n, const double **changed, const double **at)
{
    recorder *x = state;
    *n = x->n_replans;
    *changed = x->changed;
    *at = x->at;
    return 0;
}

/* Records what inner (taken over: x->inner.free frees it) is shown and
 * does, for up to HAND_N requests. */
static cr_replay_policy recording_of(recorder *x, cr_replay_policy inner)
{
    memset(x, 0, sizeof *x);
    x->inner = inner;
    return (cr_replay_policy){.name = inner.name, .state = x, .route = rec_route, .kv = rec_kv,
                              .served = rec_served, .replans = rec_replans};
}

static cr_replay_policy recording(recorder *x, const char *inner, const cr_replay_cluster *c)
{
    cr_replay_policy p;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replay_baseline(inner, c, &p, &err), CR_OK);
    return recording_of(x, p);
}

typedef struct expect {
    uint32_t shard, hit;
    double wait, ttft;
    uint32_t queued[2];
    double backlog[2];
} expect;

static void check_requests(const recorder *x, const expect *e, uint32_t sticky_shard)
{
    CU_ASSERT_EQUAL_FATAL(x->n, HAND_N);
    for (size_t i = 0; i < HAND_N; i++) {
        uint32_t k = sticky_shard; /* the shard the columns below are about */
        CU_ASSERT_EQUAL(x->out[i].shard, e[i].shard == 9 ? sticky_shard : e[i].shard);
        CU_ASSERT_EQUAL(x->out[i].hit_tokens, e[i].hit);
        CU_ASSERT_DOUBLE_EQUAL(x->out[i].queue_wait_ms, e[i].wait, EPS);
        CU_ASSERT_DOUBLE_EQUAL(x->out[i].ttft_ms, e[i].ttft, EPS);
        CU_ASSERT_DOUBLE_EQUAL(x->out[i].kv_ms, 0, 0);
        for (uint32_t s = 0; s < 2; s++) {
            uint32_t col = e[0].shard == 9 ? (s == k ? 0 : 1) : s;
            CU_ASSERT_EQUAL(x->queued[i][s], e[i].queued[col]);
            CU_ASSERT_DOUBLE_EQUAL(x->backlog[i][s], e[i].backlog[col], EPS);
        }
    }
}

/* least-loaded (backlog at arrival, ties by id):
 *   r0 t=0    backlog (0, 0)   -> 0, hit 0,   prefill 3, wait 0, ttft 3; 0 busy to 3
 *   r1 t=1    backlog (2, 0)   -> 1, hit 0,   prefill 3, wait 0, ttft 3; 1 busy to 4
 *   r2 t=2    backlog (1, 2)   -> 0, hit 200, prefill 2, wait 1, ttft 3; 0 busy to 5
 *   r3 t=4.5  backlog (.5, 0)  -> 1, hit 200, prefill 2, wait 0, ttft 2; 1 busy to 6.5
 *   r4 t=21   backlog (0, 0)   -> 0, hit 300, prefill 1, wait 0, ttft 1
 * hit ratio 700 / 1300; TTFTs 1 2 3 3 3: p50 3, p99 3, mean 2.4; work 6 and
 * 5 ms: imbalance 6 / 5.5. */
static void test_hand_least_loaded(void)
{
    cr_replay_trace t = hand_trace();
    cr_replay_cluster c = hand_cluster();
    recorder x;
    cr_replay_policy p = recording(&x, "least-loaded", &c);
    cr_replay_result res;
    cr_error err;
    x.changed[0] = 0.25, x.changed[1] = 0.75;
    x.at[0] = 0.002, x.at[1] = 0.021;
    x.n_replans = 2;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 0.002, &res, &err), CR_OK);
    const expect e[HAND_N] = {
        {0, 0, 0, 3, {0, 0}, {0, 0}},     {1, 0, 0, 3, {1, 0}, {2, 0}},
        {0, 200, 1, 3, {1, 1}, {1, 2}},   {1, 200, 0, 2, {1, 0}, {0.5, 0}},
        {0, 300, 0, 1, {0, 0}, {0, 0}},
    };
    check_requests(&x, e, 0);
    CU_ASSERT_STRING_EQUAL(res.policy, "least-loaded");
    CU_ASSERT_EQUAL(res.requests, HAND_N);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_ratio, 700.0 / 1300.0, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_p50_ms, 3, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_p99_ms, 3, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_mean_ms, 2.4, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.imbalance, 6 / 5.5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.kv_share, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_sorted_ms[0], 1, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_sorted_ms[1], 2, EPS);
    /* 2 ms windows: [0,2) 0/400, [2,4) 200/300, [4,6) 200/300, then empty
     * windows repeat it, and [20,22) 300/300: 11 windows to 21 ms. */
    CU_ASSERT_EQUAL_FATAL(res.n_windows, 11);
    CU_ASSERT_DOUBLE_EQUAL(res.window_s, 0.002, 0);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_series[0], 0, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_series[1], 2.0 / 3, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_series[2], 2.0 / 3, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_series[9], 2.0 / 3, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_series[10], 1, EPS);
    /* Replans at 2 ms (before 0/400, after 200/300: +2/3) and at 21 ms
     * (nothing in the 2 ms before: no dip). */
    CU_ASSERT_EQUAL(res.n_replans, 2);
    CU_ASSERT_DOUBLE_EQUAL(res.churn_mean, 0.5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.dip_mean, 2.0 / 3, EPS);
    cr_replay_result_free(&res);
    x.inner.free(x.inner.state);
}

/* The first owner after 1 that sticky puts on owner 1's shard. */
static int64_t sticky_mate(const cr_replay_policy *sticky, uint32_t *shard)
{
    uint32_t q[2] = {0};
    double b[2] = {0};
    *shard = route_once(sticky, 1, 0, q, b, 2);
    int64_t o = 2;
    while (route_once(sticky, o, 0, q, b, 2) != *shard)
        o++;
    return o;
}

/* sticky with both sessions on one shard S (the trace's B owner chosen so;
 * the columns of queued and backlog are S, then the other):
 *   r0 t=0    (0, 0)    hit 0    prefill 3  wait 0    ttft 3    S busy to 3;  cache 10 11
 *   r1 t=1    (1, 0)    hit 0    prefill 3  wait 2    ttft 5    to 6;  20 21 10 (11 out)
 *   r2 t=2    (2, 0)    hit 100  prefill 3  wait 4    ttft 7    to 9;  10 11 12
 *   r3 t=4.5  (2, 0)    hit 0    prefill 4  wait 4.5  ttft 8.5  to 13; 20 21 22
 *   r4 t=21   (0, 0)    hit 0    prefill 4  wait 0    ttft 4
 * backlogs at arrival 0, 2, 4, 4.5, 0. Hit ratio 100 / 1300; TTFTs 3 4 5 7
 * 8.5: p50 5, p99 8.5, mean 5.5; all 17 ms of work on S: imbalance 2. */
static void test_hand_sticky(void)
{
    cr_replay_cluster c = hand_cluster();
    recorder x;
    cr_replay_policy p = recording(&x, "sticky", &c);
    uint32_t s;
    int64_t mate = sticky_mate(&x.inner, &s);
    cr_replay_request reqs[HAND_N];
    memcpy(reqs, hand_reqs, sizeof reqs);
    reqs[1].owner = reqs[3].owner = mate;
    cr_replay_trace t = {reqs, HAND_N, hand_blocks, 13};
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
    const expect e[HAND_N] = {
        {9, 0, 0, 3, {0, 0}, {0, 0}},       {9, 0, 2, 5, {1, 0}, {2, 0}},
        {9, 100, 4, 7, {2, 0}, {4, 0}},     {9, 0, 4.5, 8.5, {2, 0}, {4.5, 0}},
        {9, 0, 0, 4, {0, 0}, {0, 0}},
    };
    check_requests(&x, e, s);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_ratio, 100.0 / 1300.0, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_p50_ms, 5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_p99_ms, 8.5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_mean_ms, 5.5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.imbalance, 2, EPS);
    CU_ASSERT_EQUAL(res.n_windows, 1);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_series[0], 100.0 / 1300.0, EPS);
    CU_ASSERT_EQUAL(res.n_replans, 0);
    cr_replay_result_free(&res);
    /* The same run with the first two requests as warm-up: the figures
     * over r2..r4 only (hits 100 of 900 tokens; TTFTs 7 8.5 4; 11 ms of
     * work, all on S), the same routes and outcomes. */
    c.warmup = 2;
    x.n = 0; /* the recorder's log starts again */
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
    check_requests(&x, e, s);
    CU_ASSERT_EQUAL(res.requests, 3);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_ratio, 100.0 / 900.0, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_p50_ms, 7, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_p99_ms, 8.5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_mean_ms, 6.5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(res.imbalance, 2, EPS);
    cr_replay_result_free(&res);
    c.warmup = 5; /* nothing left to measure */
    CU_ASSERT_EQUAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "warmup must be below the trace's 5 requests, got 5");
    x.inner.free(x.inner.state);
}

/* One request of 2 blocks plus 100 knowledge tokens (L = 300): as text,
 * prefill 1 + 3 = 4 ms; as KV, 1 + 2 = 3 ms of prefill and 0.5 + 0.01 *
 * 100 = 1.5 ms of KV: TTFT 4.5. */
static void test_knowledge_kv(void)
{
    cr_replay_request r = {.input_tokens = 300, .knowledge_tokens = 100, .n_blocks = 2};
    uint64_t ids[] = {1, 2};
    cr_replay_trace t = {&r, 1, ids, 2};
    cr_replay_cluster c = hand_cluster();
    c.truth.kv_fixed_ms = 0.5;
    c.truth.kv_ms_per_token = 0.01;
    for (int kv = 0; kv <= 1; kv++) {
        recorder x;
        cr_replay_policy p = recording(&x, "least-loaded", &c);
        x.kv = kv;
        cr_replay_result res;
        cr_error err;
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
        CU_ASSERT_EQUAL(x.out[0].used_kv, kv);
        CU_ASSERT_DOUBLE_EQUAL(x.out[0].prefill_ms, kv ? 3 : 4, EPS);
        CU_ASSERT_DOUBLE_EQUAL(x.out[0].kv_ms, kv ? 1.5 : 0, EPS);
        CU_ASSERT_DOUBLE_EQUAL(res.ttft_mean_ms, kv ? 4.5 : 4, EPS);
        CU_ASSERT_DOUBLE_EQUAL(res.kv_share, kv, 0);
        CU_ASSERT_DOUBLE_EQUAL(res.hit_ratio, 0, 0);
        cr_replay_result_free(&res);
        x.inner.free(x.inner.state);
    }
}

/* The kv hook is told the shard and the prefix hit the outcome then
 * reports: one session's two requests, [1 2] and [1 2 3], each with 50
 * knowledge tokens, both on shard 0 (least-loaded, idle shards, ties by
 * id): hits 0 and 200 tokens. */
static void test_kv_hook_sees_the_hit(void)
{
    cr_replay_request reqs[] = {
        {.t_ms = 0, .input_tokens = 250, .knowledge_tokens = 50, .n_blocks = 2, .owner = 1},
        {.t_ms = 100, .input_tokens = 350, .knowledge_tokens = 50, .n_blocks = 3,
         .first_block = 2, .owner = 1},
    };
    uint64_t ids[] = {1, 2, 1, 2, 3};
    cr_replay_trace t = {reqs, 2, ids, 5};
    cr_replay_cluster c = hand_cluster();
    recorder x;
    cr_replay_policy p = recording(&x, "least-loaded", &c);
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(x.n_kv, 2);
    for (size_t i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(x.kv_shard[i], 0);
        CU_ASSERT_EQUAL(x.kv_hit[i], x.out[i].hit_tokens);
    }
    CU_ASSERT_EQUAL(x.kv_hit[0], 0);
    CU_ASSERT_EQUAL(x.kv_hit[1], 200);
    cr_replay_result_free(&res);
    x.inner.free(x.inner.state);
}

/* a + b (l - s) + c (l^2 - s^2), and what a run charges without noise. */
static void test_prefill_ms(void)
{
    cr_prefill_cost k = {.fixed_ms = 1, .ms_per_token = 0.01, .ms_per_token2 = 1e-3};
    CU_ASSERT_DOUBLE_EQUAL(cr_prefill_ms(&k, 100, 300), 1 + 2 + 80, EPS);
    CU_ASSERT_DOUBLE_EQUAL(cr_prefill_ms(&k, 0, 0), 1, EPS);
    cr_replay_cluster c = hand_cluster();
    cr_replay_request r = {.input_tokens = 300, .n_blocks = 2};
    uint64_t ids[] = {1, 2};
    cr_replay_trace t = {&r, 1, ids, 2};
    recorder x;
    cr_replay_policy p = recording(&x, "least-loaded", &c);
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
    CU_ASSERT_DOUBLE_EQUAL(x.out[0].prefill_ms, cr_prefill_ms(&c.truth.prefill, 0, 300), 0);
    cr_replay_result_free(&res);
    x.inner.free(x.inner.state);
}

static uint32_t route_far(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    (void)state;
    (void)r;
    return v->shards;
}

static void test_run_rejects(void)
{
    cr_replay_trace t = hand_trace();
    cr_replay_cluster c = hand_cluster();
    cr_replay_policy p, far = {.name = "far", .route = route_far};
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("random", &c, &p, &err), CR_OK);
    c.scale = 0;
    CU_ASSERT_EQUAL(cr_replay_run(&t, &c, &p, 1, &res, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "scale"));
    c = hand_cluster();
    c.truth.noise = -1;
    CU_ASSERT_EQUAL(cr_replay_run(&t, &c, &p, 1, &res, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "truth.noise"));
    c = hand_cluster();
    CU_ASSERT_EQUAL(cr_replay_run(&t, &c, &p, 0, &res, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "window_s"));
    CU_ASSERT_EQUAL(cr_replay_run(&t, &c, &p, 1e-12, &res, &err), CR_EINVAL);
    CU_ASSERT_EQUAL(cr_replay_run(&t, &c, &far, 1, &res, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "policy far routed request 0 to shard 2 of 2");
    cr_replay_request reqs[HAND_N];
    memcpy(reqs, hand_reqs, sizeof reqs);
    reqs[3].t_ms = 0.5;
    cr_replay_trace bad = {reqs, HAND_N, hand_blocks, 13};
    CU_ASSERT_EQUAL(cr_replay_run(&bad, &c, &p, 1, &res, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "request 3"));
    memcpy(reqs, hand_reqs, sizeof reqs);
    reqs[4].first_block = 11;
    CU_ASSERT_EQUAL(cr_replay_run(&bad, &c, &p, 1, &res, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "outside the pool"));
    CU_ASSERT_PTR_NULL(res.hit_series);
    p.free(p.state);
}

/* ---- the generator ------------------------------------------------------------ */

static cr_replay_gen_config small_gen(void)
{
    cr_replay_gen_config g;
    cr_replay_gen_default(&g);
    g.n_requests = 20000;
    g.n_sessions = 200;
    g.rate_per_s = 1000;
    return g;
}

static int same_trace(const cr_replay_trace *a, const cr_replay_trace *b)
{
    return a->n == b->n && a->n_blocks == b->n_blocks &&
           !memcmp(a->reqs, b->reqs, a->n * sizeof *a->reqs) &&
           !memcmp(a->blocks, b->blocks, a->n_blocks * sizeof *a->blocks);
}

/* The same seed gives the same trace, another seed another, with shared
 * documents (drawn per session, per request) and without. */
static void test_gen_reproducible(void)
{
    cr_replay_gen_config configs[3] = {small_gen(), small_gen(), small_gen()};
    for (size_t i = 1; i < 3; i++) {
        configs[i].documents = 20;
        configs[i].document_blocks = 4;
        configs[i].document_per = i == 1 ? CR_REPLAY_DOC_PER_SESSION : CR_REPLAY_DOC_PER_REQUEST;
    }
    for (size_t i = 0; i < 3; i++) {
        cr_replay_gen_config g = configs[i];
        cr_replay_trace a, b, d;
        cr_error err;
        CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &a, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &b, &err), CR_OK);
        g.seed = 2;
        CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &d, &err), CR_OK);
        CU_ASSERT(same_trace(&a, &b));
        CU_ASSERT_FALSE(same_trace(&a, &d));
        cr_replay_trace_free(&a);
        cr_replay_trace_free(&b);
        cr_replay_trace_free(&d);
    }
}

/* Without documents their other settings change nothing: the trace is the
 * one from before they existed. */
static void test_gen_documents_off(void)
{
    cr_replay_gen_config g = small_gen(), h = small_gen();
    h.document_zipf = 3;
    h.document_per = CR_REPLAY_DOC_PER_REQUEST;
    cr_replay_trace a, b;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &a, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&h, &b, &err), CR_OK);
    CU_ASSERT(same_trace(&a, &b));
    cr_replay_trace_free(&a);
    cr_replay_trace_free(&b);
}

/* The document of a generated prompt (0 without documents), or -1 when it
 * does not open with the system prompt then one whole document. */
static int64_t doc_of(const cr_replay_gen_config *g, const uint64_t *ids)
{
    uint32_t sys = g->system_blocks, d_blocks = g->document_blocks;
    for (uint32_t j = 0; j < sys; j++)
        if (ids[j] != j)
            return -1;
    if (g->documents == 0)
        return 0;
    uint64_t at = ids[sys] - sys; /* the document's first block, from 0 */
    if (ids[sys] < sys || at % d_blocks != 0 || at / d_blocks >= g->documents)
        return -1;
    for (uint32_t j = 1; j < d_blocks; j++)
        if (ids[sys + j] != ids[sys] + j)
            return -1;
    return (int64_t)(at / d_blocks);
}

/* A session's own block id of a generated trace as its number from the
 * counter, and through *doc the document it follows: the ids start past
 * every document's, one per number and document. UINT64_MAX for an id
 * below them. */
static uint64_t own_number(const cr_replay_gen_config *g, uint64_t id, uint64_t *doc)
{
    uint64_t start = g->system_blocks + (uint64_t)g->documents * g->document_blocks;
    uint64_t stride = g->documents ? g->documents : 1;
    if (id < start)
        return UINT64_MAX;
    *doc = (id - start) % stride;
    return (id - start) / stride;
}

/* Whether a and b are the same n own blocks, behind whichever documents. */
static int same_own(const cr_replay_gen_config *g, const uint64_t *a, const uint64_t *b, size_t n)
{
    uint64_t d;
    for (size_t i = 0; i < n; i++)
        if (own_number(g, a[i], &d) != own_number(g, b[i], &d))
            return 0;
    return 1;
}

/* What walking a generated trace (owners by session) found. */
typedef struct gen_walk {
    size_t bad, restarts;
    size_t kept, switched; /* turns on their last prompt's document, or not */
    size_t *per_doc;       /* requests per document (one count without) */
} gen_walk;

/* Every prompt opens with the system prompt and one document, then its
 * session's own blocks: those of its last prompt plus a turn (behind this
 * prompt's document), or a fresh start; no session's own blocks appear in
 * another's or in a document. */
static void walk_sessions(const cr_replay_gen_config *g, const cr_replay_trace *t, gen_walk *w)
{
    uint32_t head = g->system_blocks + g->document_blocks;
    size_t *last = malloc(g->n_sessions * sizeof *last);
    int64_t *owner_of_block = calloc(t->n_blocks + 1, sizeof *owner_of_block);
    w->per_doc = calloc(g->documents ? g->documents : 1, sizeof *w->per_doc);
    for (size_t k = 0; k < g->n_sessions; k++)
        last[k] = SIZE_MAX;
    for (size_t i = 0; i < t->n; i++) {
        const cr_replay_request *r = &t->reqs[i];
        const uint64_t *ids = t->blocks + r->first_block;
        int64_t d = doc_of(g, ids);
        w->bad += i > 0 && r->t_ms < t->reqs[i - 1].t_ms;
        w->bad += r->n_blocks > g->max_blocks || r->owner < 0 || (size_t)r->owner >= g->n_sessions;
        w->bad += r->input_tokens != r->n_blocks * 512 + g->knowledge_tokens ||
                  r->knowledge_tokens != g->knowledge_tokens;
        if (d < 0 || r->n_blocks <= head) {
            w->bad++;
            continue;
        }
        w->per_doc[d]++;
        size_t p = last[r->owner];
        const cr_replay_request *q = p == SIZE_MAX ? NULL : &t->reqs[p];
        const uint64_t *was = q ? t->blocks + q->first_block : NULL;
        int cont = q && r->n_blocks == q->n_blocks + g->turn_blocks &&
                   same_own(g, ids + head, was + head, q->n_blocks - head);
        int fresh = r->n_blocks == head + g->first_blocks &&
                    (!q || q->n_blocks + g->turn_blocks > g->max_blocks);
        w->bad += !cont && !fresh;
        w->restarts += fresh && q;
        w->kept += cont && doc_of(g, was) == d;
        w->switched += cont && doc_of(g, was) != d;
        for (uint32_t j = head; j < r->n_blocks; j++) { /* a number behind this document */
            uint64_t behind, own = own_number(g, ids[j], &behind);
            if (own >= t->n_blocks || behind != (uint64_t)d) {
                w->bad++;
                continue;
            }
            int64_t *o = &owner_of_block[own];
            w->bad += *o && *o != r->owner + 1;
            *o = r->owner + 1;
        }
        last[r->owner] = i;
    }
    free(last);
    free(owner_of_block);
}

static void test_gen_sessions(void)
{
    cr_replay_gen_config g = small_gen();
    g.knowledge_tokens = 300;
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(t.n, g.n_requests);
    gen_walk w = {0};
    walk_sessions(&g, &t, &w);
    CU_ASSERT_EQUAL(w.bad, 0);
    CU_ASSERT(w.restarts > 0);
    CU_ASSERT(w.kept > 0 && w.switched == 0);
    /* 20000 arrivals at 1000/s. */
    CU_ASSERT_DOUBLE_EQUAL(t.reqs[t.n - 1].t_ms / 1000, 20, 1);
    free(w.per_doc);
    cr_replay_trace_free(&t);
}

static cr_replay_gen_config docs_gen(cr_replay_doc_per per)
{
    cr_replay_gen_config g = small_gen();
    g.documents = 50;
    g.document_blocks = 3;
    g.document_zipf = 1.1;
    g.document_per = per;
    return g;
}

/* The shape of a shared-document trace, and the documents' popularity:
 * per session, every turn keeps its conversation's document; per request,
 * a session's turns move between documents and each document's share of
 * requests is its Zipf weight. Either way document 0 gets the most. */
static void test_gen_documents(void)
{
    const cr_replay_doc_per pers[] = {CR_REPLAY_DOC_PER_SESSION, CR_REPLAY_DOC_PER_REQUEST};
    for (size_t m = 0; m < 2; m++) {
        cr_replay_gen_config g = docs_gen(pers[m]);
        cr_replay_trace t;
        cr_error err;
        CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
        gen_walk w = {0};
        walk_sessions(&g, &t, &w);
        CU_ASSERT_EQUAL(w.bad, 0);
        CU_ASSERT(w.restarts > 0 && w.kept > 0);
        /* Per request, a turn's draw repeats its last one's about 1 time in 10. */
        int per_session = pers[m] == CR_REPLAY_DOC_PER_SESSION;
        CU_ASSERT(per_session ? w.switched == 0 : w.switched > w.kept);
        double sum = 0;
        for (uint32_t d = 0; d < g.documents; d++)
            sum += pow(d + 1, -g.document_zipf);
        size_t top = 0;
        for (uint32_t d = 1; d < g.documents; d++)
            top = w.per_doc[d] > w.per_doc[top] ? d : top;
        CU_ASSERT_EQUAL(top, 0);
        CU_ASSERT(w.per_doc[0] > 2 * w.per_doc[9] && w.per_doc[9] > w.per_doc[g.documents - 1]);
        /* Per request: 20000 draws, a standard error below 0.003. */
        if (pers[m] == CR_REPLAY_DOC_PER_REQUEST)
            CU_ASSERT_DOUBLE_EQUAL((double)w.per_doc[0] / (double)t.n, 1 / sum, 0.01);
        free(w.per_doc);
        cr_replay_trace_free(&t);
    }
}

/* Owners by document: each request's owner is its document, and the
 * prompts are the ones owners by session give. */
static void test_gen_document_owners(void)
{
    cr_replay_gen_config g = docs_gen(CR_REPLAY_DOC_PER_SESSION);
    cr_replay_trace a, b;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &a, &err), CR_OK);
    g.owners = CR_REPLAY_OWNER_DOCUMENT;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &b, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(a.n, b.n);
    CU_ASSERT_EQUAL_FATAL(a.n_blocks, b.n_blocks);
    CU_ASSERT(!memcmp(a.blocks, b.blocks, a.n_blocks * sizeof *a.blocks));
    size_t bad = 0;
    for (size_t i = 0; i < b.n; i++)
        bad += b.reqs[i].owner != doc_of(&g, b.blocks + b.reqs[i].first_block) ||
               b.reqs[i].first_block != a.reqs[i].first_block;
    CU_ASSERT_EQUAL(bad, 0);
    cr_replay_trace_free(&a);
    cr_replay_trace_free(&b);
}

static void test_gen_gini(void)
{
    const double targets[] = {0.76, 0.5, 0.9};
    for (size_t i = 0; i < 3; i++) {
        cr_replay_gen_config g;
        cr_replay_gen_default(&g);
        g.gini = targets[i];
        cr_replay_trace t;
        cr_error err;
        CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
        CU_ASSERT_DOUBLE_EQUAL(cr_replay_owner_gini(&t), targets[i], 0.03);
        cr_replay_trace_free(&t);
    }
    /* An exponent given: 0 is near even; drift spreads a session over ranks. */
    cr_replay_gen_config g = small_gen();
    g.gini = -1;
    g.zipf_s = 0;
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    CU_ASSERT(cr_replay_owner_gini(&t) < 0.1);
    cr_replay_trace_free(&t);
    g.zipf_s = 1.2;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    double still = cr_replay_owner_gini(&t);
    cr_replay_trace_free(&t);
    g.drift_per_s = 20;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    CU_ASSERT(cr_replay_owner_gini(&t) < still - 0.2);
    cr_replay_trace_free(&t);
}

static void test_gen_bursts(void)
{
    cr_replay_gen_config g = small_gen();
    g.burst_on_s = 1;
    g.burst_off_s = 3;
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    size_t off = 0;
    for (size_t i = 0; i < t.n; i++)
        off += fmod(t.reqs[i].t_ms / 1000, 4) >= 1;
    CU_ASSERT_EQUAL(off, 0);
    /* The mean rate is kept over whole cycles: 20000 at 1000/s are 5 s of
     * "on" at 4000/s, so the last falls in the fifth "on" (16 s to 17 s)
     * or at the sixth's start. */
    double last = t.reqs[t.n - 1].t_ms / 1000;
    CU_ASSERT((last >= 16 && last < 17) || (last >= 20 && last < 20.1));
    cr_replay_trace_free(&t);
}

static void expect_gen_error(const cr_replay_gen_config *g, const char *field)
{
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replay_generate(g, &t, &err), CR_EINVAL);
    CU_ASSERT_EQUAL(strncmp(err.msg, field, strlen(field)), 0);
    CU_ASSERT_PTR_NULL(t.reqs);
}

static void test_gen_rejects(void)
{
    const char *field[] = {"n_requests",    "n_sessions",      "gini",          "zipf_s",
                           "rate_per_s",    "burst_on_s",      "first_blocks",  "max_blocks",
                           "drift_per_s",   "document_blocks", "documents",     "document_zipf",
                           "document_zipf", "max_blocks",      "document_per",  "owners",
                           "owners",        "documents"};
    enum { N = sizeof field / sizeof field[0] };
    cr_replay_gen_config bad[N];
    for (size_t i = 0; i < N; i++)
        bad[i] = small_gen();
    bad[0].n_requests = 0;
    bad[1].n_sessions = 0;
    bad[2].gini = 1;
    bad[3].gini = -1;
    bad[3].zipf_s = -0.5;
    bad[4].rate_per_s = 0;
    bad[5].burst_on_s = -1;
    bad[6].first_blocks = 0;
    bad[7].max_blocks = 5; /* below 2 + 4 */
    bad[8].drift_per_s = INFINITY;
    bad[9].documents = 10; /* without their blocks */
    bad[10].document_blocks = 4; /* without documents */
    bad[11].document_zipf = -1;
    bad[12].document_zipf = NAN;
    bad[13].documents = 10; /* 2 + 27 + 4 blocks past 32: no turn would fit */
    bad[13].document_blocks = 27;
    bad[14].document_per = (cr_replay_doc_per)2;
    bad[15].owners = (cr_replay_gen_owner)7;
    bad[16].owners = CR_REPLAY_OWNER_DOCUMENT; /* without documents */
    bad[17].n_requests = (size_t)1 << 40; /* block ids past 2^63 */
    bad[17].documents = 1u << 20;
    bad[17].document_blocks = 1;
    for (size_t i = 0; i < N; i++)
        expect_gen_error(&bad[i], field[i]);
}

/* ---- whole runs ----------------------------------------------------------------- */

static int same_result(const cr_replay_result *a, const cr_replay_result *b)
{
    return !strcmp(a->policy, b->policy) && a->requests == b->requests &&
           a->hit_ratio == b->hit_ratio && a->ttft_p50_ms == b->ttft_p50_ms &&
           a->ttft_p99_ms == b->ttft_p99_ms && a->ttft_mean_ms == b->ttft_mean_ms &&
           a->imbalance == b->imbalance && a->n_windows == b->n_windows &&
           !memcmp(a->hit_series, b->hit_series, a->n_windows * sizeof *a->hit_series) &&
           !memcmp(a->ttft_sorted_ms, b->ttft_sorted_ms, a->requests * sizeof(double));
}

/* Each baseline twice over the same generated trace with noise, the second
 * time on a policy made anew: identical results. And with a cache that
 * holds everything a session needs, sticky hits more than random. */
static void test_runs_repeat(void)
{
    cr_replay_gen_config g = small_gen();
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    cr_replay_cluster c = cluster_of(16);
    c.shard_blocks = 1024;
    const char *names[] = {"flat-lb", "sticky", "chwbl", "least-loaded", "random"};
    double hit[5];
    for (size_t i = 0; i < 5; i++) {
        cr_replay_policy p, q;
        cr_replay_result a, b, d;
        CU_ASSERT_EQUAL_FATAL(cr_replay_baseline(names[i], &c, &p, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(cr_replay_baseline(names[i], &c, &q, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &a, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &b, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &q, 1.0, &d, &err), CR_OK);
        CU_ASSERT(same_result(&a, &b));
        CU_ASSERT(same_result(&a, &d));
        CU_ASSERT_EQUAL(a.requests, t.n);
        CU_ASSERT(a.ttft_p50_ms <= a.ttft_p99_ms && a.imbalance >= 1);
        hit[i] = a.hit_ratio;
        cr_replay_result_free(&a);
        cr_replay_result_free(&b);
        cr_replay_result_free(&d);
        p.free(p.state);
        q.free(q.state);
    }
    CU_ASSERT(hit[1] > hit[4] + 0.1);
    cr_replay_trace_free(&t);
}

/* ---- cacheroute's KV events ------------------------------------------------------ */

static cr_replay_policy make_cacheroute(cr_replay_kv_events events, const cr_replay_cluster *c)
{
    cr_core_config cfg;
    cr_core_config_default(&cfg);
    cr_replay_policy p;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_cacheroute_policy(&cfg, CR_REPLAY_WEIGHT_REQUESTS,
                                                      CR_REPLAY_CALL_ROUTE, events, c, &p, &err),
                          CR_OK);
    return p;
}

/* One shard caching 3 blocks of 100 tokens: A [1], B [1], C [2 3], D [4]
 * right behind C (queued while C is prefilled), E [1]. D's dispatch makes
 * the cache evict block 1 (the least recently used), while the core's
 * index, a CLOCK whose hand gives 1 (touched by B) a second chance, ages
 * out 3 instead: without events E is predicted block 1's 100 tokens and
 * hits none. With events the eviction's REMOVED takes 1 out of the index
 * (C's STORED, at its prefill's end, puts 3 back, which the cache still
 * holds), so every prediction is the truth. */
static uint64_t evict_blocks[] = {1, 1, 2, 3, 4, 1};
static cr_replay_request evict_reqs[] = {
    {.t_ms = 0, .input_tokens = 100, .n_blocks = 1, .first_block = 0, .owner = 1},
    {.t_ms = 1000, .input_tokens = 100, .n_blocks = 1, .first_block = 1, .owner = 1},
    {.t_ms = 2000, .input_tokens = 200, .n_blocks = 2, .first_block = 2, .owner = 2},
    {.t_ms = 2001, .input_tokens = 100, .n_blocks = 1, .first_block = 4, .owner = 3},
    {.t_ms = 5000, .input_tokens = 100, .n_blocks = 1, .first_block = 5, .owner = 1},
};

static double evict_error(cr_replay_kv_events events)
{
    cr_replay_trace t = {evict_reqs, 5, evict_blocks, 6};
    cr_replay_cluster c = hand_cluster();
    c.shards = 1;
    cr_replay_policy p = make_cacheroute(events, &c);
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
    CU_ASSERT_EQUAL(res.requests, 5);
    CU_ASSERT_DOUBLE_EQUAL(res.hit_ratio, 100.0 / 600.0, EPS); /* B's block 1 only */
    double e = res.hit_error_tokens;
    CU_ASSERT_DOUBLE_EQUAL(res.hit_error_share, e * 5 / 600.0, EPS);
    cr_replay_result_free(&res);
    p.free(p.state);
    return e;
}

static void test_cacheroute_kv_events_evict(void)
{
    CU_ASSERT_DOUBLE_EQUAL(evict_error(CR_REPLAY_KV_EVENTS_OFF), 100.0 / 5, EPS);
    CU_ASSERT_DOUBLE_EQUAL(evict_error(CR_REPLAY_KV_EVENTS_ON), 0, EPS);
    CU_ASSERT_DOUBLE_EQUAL(evict_error(CR_REPLAY_KV_EVENTS_DISPATCH), 0, EPS);
}

/* The hooks by hand, nothing in the simulator between them: a block the
 * shard reports evicted leaves the prediction at once. */
static void test_cacheroute_kv_events_hooks(void)
{
    uint64_t pool[] = {1, 2, 3, 9, 1, 2, 3};
    cr_replay_request a = {.input_tokens = 300, .n_blocks = 3, .first_block = 0, .owner = 1};
    cr_replay_request b = {.input_tokens = 100, .n_blocks = 1, .first_block = 3, .owner = 2};
    cr_replay_request c = {.input_tokens = 300, .n_blocks = 3, .first_block = 4, .owner = 1};
    cr_replay_cluster cl = hand_cluster();
    cl.shards = 1;
    cl.shard_blocks = 8;
    cr_replay_policy p = make_cacheroute(CR_REPLAY_KV_EVENTS_ON, &cl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p.evicted);
    cr_replay_view v = {.shards = 1, .blocks = pool};
    uint32_t k, tokens;
    p.tick(p.state, 0);
    k = p.route(p.state, &a, &v);
    CU_ASSERT(p.predicted(p.state, &tokens) && tokens == 0);
    p.served(p.state, &a, &(cr_replay_outcome){.shard = k, .prefill_ms = 4});
    p.tick(p.state, 1); /* A's prefill is over: STORED [1 2 3] */
    k = p.route(p.state, &b, &v);
    p.evicted(p.state, k, 2); /* B's dispatch evicts block 2 */
    p.served(p.state, &b, &(cr_replay_outcome){.shard = k, .prefill_ms = 2});
    p.tick(p.state, 2);
    CU_ASSERT_EQUAL(p.route(p.state, &c, &v), k);
    CU_ASSERT(p.predicted(p.state, &tokens) && tokens == 100); /* block 1 only */
    p.free(p.state);
}

/* With caches that never evict, the two hash chains and the events leave
 * every route, outcome and prediction as they were. */
static void test_cacheroute_kv_events_same_routes(void)
{
    cr_replay_gen_config g = small_gen();
    g.n_requests = 4000;
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    cr_replay_cluster c = cluster_of(4);
    c.shard_blocks = t.n_blocks; /* every block a request can name */
    cr_replay_result res[2];
    for (int on = 0; on < 2; on++) {
        cr_replay_policy p = make_cacheroute(on ? CR_REPLAY_KV_EVENTS_ON : CR_REPLAY_KV_EVENTS_OFF,
                                             &c);
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res[on], &err), CR_OK);
        p.free(p.state);
    }
    CU_ASSERT(same_result(&res[0], &res[1]));
    CU_ASSERT(isfinite(res[0].hit_error_tokens));
    CU_ASSERT_EQUAL(res[0].hit_error_tokens, res[1].hit_error_tokens);
    for (int on = 0; on < 2; on++)
        cr_replay_result_free(&res[on]);
    cr_replay_trace_free(&t);
}

/* ---- the peers ------------------------------------------------------------------- */

static cr_replay_policy make_peer(const char *name, const cr_replay_cluster *c)
{
    cr_replay_policy p;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_peer(name, c, &p, &err), CR_OK);
    return p;
}

/* Runs t through peer name, recording; the result is freed, the policy
 * with it. */
static void run_peer(const char *name, const cr_replay_trace *t, const cr_replay_cluster *c,
                     recorder *x)
{
    cr_replay_policy p = recording_of(x, make_peer(name, c));
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(t, c, &p, 1.0, &res, &err), CR_OK);
    CU_ASSERT_STRING_EQUAL(res.policy, name);
    cr_replay_result_free(&res);
    x->inner.free(x->inner.state);
}

/* Asks p alone for a shard: a request of the n blocks ids (block 100
 * tokens unless tokens is given) at now, with these requests in flight. */
static uint32_t ask(const cr_replay_policy *p, const uint64_t *ids, uint32_t n, uint32_t tokens,
                    double now, const uint32_t *queued, uint32_t shards)
{
    cr_replay_request r = {.input_tokens = tokens ? tokens : 100 * n, .n_blocks = n};
    double backlog[4] = {0};
    cr_replay_view v = {.shards = shards, .now_s = now, .backlog_ms = backlog, .queued = queued,
                        .blocks = ids};
    return p->route(p->state, &r, &v);
}

/* llmd-scorer: 2 queue + 2 kv + 3 prefix over a 50 ms snapshot. Two
 * shards of 16 blocks of 100 tokens; prefill 10 ms + 1 ms a token. r0
 * [1 2] at 0 is a tie (all scores 4): drawn, call its shard A; it runs to
 * 210 ms.
 *   r1 [3..8] at 60: new snapshot: waiting (0, 0) (A's one is in service),
 *      held (2, 0): A 2 + 1.75 = 3.75, B 2 + 2 = 4 -> B, runs to 670
 *   r2 [9] at 70: the 60 ms snapshot, so B still looks empty -> B (a fresh
 *      one, held (2, 6), would give B 2 + 1.25 = 3.25 and A)
 *   r3 [3..8] at 120: new snapshot: waiting (0, 1) (B holds r1 and r2):
 *      queue A 1, B 0; held (2, 7): kv A 1.75, B 1.125; prefix B 6/6:
 *      A 2 + 1.75 = 3.75 loses to B 0 + 1.125 + 3 = 4.125 -> B, hit 600:
 *      the prefix outweighs the queue
 *   r4 [11] at 130: no prefix: A 3.75, B 1.125 -> A */
static void test_peer_llmd(void)
{
    uint64_t ids[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6, 7, 8, 11};
    cr_replay_request reqs[HAND_N] = {
        {.t_ms = 0, .input_tokens = 200, .n_blocks = 2, .first_block = 0},
        {.t_ms = 60, .input_tokens = 600, .n_blocks = 6, .first_block = 2},
        {.t_ms = 70, .input_tokens = 100, .n_blocks = 1, .first_block = 8},
        {.t_ms = 120, .input_tokens = 600, .n_blocks = 6, .first_block = 9},
        {.t_ms = 130, .input_tokens = 100, .n_blocks = 1, .first_block = 15},
    };
    cr_replay_trace t = {reqs, HAND_N, ids, 16};
    cr_replay_cluster c = hand_cluster();
    c.shard_blocks = 16;
    c.truth = (cr_replay_cost){.prefill = {.fixed_ms = 10, .ms_per_token = 1}};
    recorder x;
    run_peer("llmd-scorer", &t, &c, &x);
    uint32_t a = x.out[0].shard, b = 1 - a;
    const uint32_t want[HAND_N] = {a, b, b, b, a}, hit[HAND_N] = {0, 0, 0, 600, 0};
    for (size_t i = 0; i < HAND_N; i++) {
        CU_ASSERT_EQUAL(x.out[i].shard, want[i]);
        CU_ASSERT_EQUAL(x.out[i].hit_tokens, hit[i]);
    }
    CU_ASSERT(x.queued[3][a] == 1 && x.queued[3][b] == 2);
}

/* sglang-cache-aware on two workers, asked directly (100-token blocks):
 * the 0.3 threshold, the longest holder, the imbalance override. */
static void test_peer_sglang(void)
{
    cr_replay_cluster c = hand_cluster();
    cr_replay_policy p = make_peer("sglang-cache-aware", &c);
    uint64_t a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, b[] = {20, 21, 22, 23},
             d[] = {20, 21, 22, 30, 31, 32, 33, 34, 35, 36}, e[] = {20, 21, 22, 40};
    uint32_t q00[] = {0, 0}, q10[] = {1, 0}, q05[] = {0, 5};
    CU_ASSERT_EQUAL(ask(&p, a, 10, 0, 0, q00, 2), 0);     /* empty: least loaded, lowest */
    CU_ASSERT_EQUAL(ask(&p, b, 4, 0, 0.001, q10, 2), 1);  /* no match: least loaded */
    /* 3 of 10 blocks is 0.3, not over it: the least loaded. */
    CU_ASSERT_EQUAL(ask(&p, d, 10, 0, 0.002, q05, 2), 0);
    /* 3 of 4 is: blocks 20 21 22 are held by 1 (since 1 ms) and 0 (since
     * 2 ms); the longest holder, though it is the busier. */
    CU_ASSERT_EQUAL(ask(&p, e, 4, 0, 0.003, q05, 2), 1);
    /* Over the imbalance (max - min > 64 and max > 1.5 min): the least
     * loaded; at it, the tree's worker (1, which holds 40 the longest). */
    const uint32_t loads[][2] = {{0, 65}, {0, 64}, {100, 166}, {110, 166}, {120, 185}, {130, 195}};
    const uint32_t want[] = {0, 1, 0, 1, 0, 1};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CU_ASSERT_EQUAL(ask(&p, e, 4, 0, 0.004 + 0.001 * i, loads[i], 2), want[i]);
    p.free(p.state);
}

/* sglang's eviction: with blocks of 2^20 tokens a worker keeps 2^24 / 2^20
 * = 16 blocks, at the 120 s timer, or at once past 32. */
static void test_peer_sglang_evicts(void)
{
    cr_replay_cluster c = hand_cluster();
    c.block_tokens = 1u << 20;
    cr_replay_policy p = make_peer("sglang-cache-aware", &c);
    uint64_t ids[200];
    for (uint32_t i = 0; i < 200; i++)
        ids[i] = i;
    const uint32_t B = 1u << 20; /* a block's tokens */
    uint32_t q00[] = {0, 0}, q50[] = {5, 0}, q05[] = {0, 5};
    CU_ASSERT_EQUAL(ask(&p, ids + 1, 4, 4 * B, 0, q00, 2), 0);   /* 1..4 on 0 */
    CU_ASSERT_EQUAL(ask(&p, ids + 1, 4, 4 * B, 1, q50, 2), 0);   /* matched, used at 1 s */
    CU_ASSERT_EQUAL(ask(&p, ids + 10, 20, 20 * B, 2, q50, 2), 1); /* 10..29 on 1 */
    CU_ASSERT_EQUAL(ask(&p, ids + 30, 20, 20 * B, 3, q05, 2), 0); /* 30..49 on 0: 24 held */
    /* At 121 s the timer takes 0's oldest leaves: 4 3 2 1 (used at 1 s),
     * then 49 48 47 46; so 1..4 match nothing (the least loaded, 1)... */
    CU_ASSERT_EQUAL(ask(&p, ids + 1, 4, 4 * B, 121, q50, 2), 1);
    /* ...and 30..45 are still 0's. */
    CU_ASSERT_EQUAL(ask(&p, ids + 30, 16, 16 * B, 122, q50, 2), 0);
    /* 40 new blocks put 0 at 56 > 32: evicted at once to 16, its least
     * recent first: 30..45 (122 s), then 139 down to 116. */
    CU_ASSERT_EQUAL(ask(&p, ids + 100, 40, 40 * B, 124, q05, 2), 0);
    CU_ASSERT_EQUAL(ask(&p, ids + 100, 16, 16 * B, 125, q50, 2), 0);
    CU_ASSERT_EQUAL(ask(&p, ids + 30, 3, 3 * B, 126, q50, 2), 1);
    CU_ASSERT_EQUAL(ask(&p, ids + 116, 3, 3 * B, 127, q05, 2), 0); /* 116 gone: least loaded */
    p.free(p.state);
}

/* dynamo-kv sees a worker's blocks when its prefill completes. Two
 * shards of 16 blocks of 100 tokens; prefill 10 ms + 0.1 ms a token. r0
 * [1 2 3 4] of 350 tokens at 0: cost 350 on both, equal caches: drawn,
 * call its shard A; it completes at 45 ms.
 *   r1 [1..8] (800) at 10: r0 not complete, no overlap: A 350 + 800 =
 *      1150, B 800 -> B (A's true cache holds 1..4 already: a router
 *      reading it would say A 750); completes at 100
 *   r2 [1 2 3 4 9] (450) at 50: r0 complete: A 0 + 450 - 400 = 50, B 800
 *      + 450 -> A, hit 400; completes at 65
 *   r3 [20] (100) at 200: both 100; A's shadow holds 5 blocks, B's 8: A
 *   r4 [21] (100) at 300: the same, with 6 blocks on A: A */
static void test_peer_dynamo(void)
{
    uint64_t ids[] = {1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 9, 20, 21};
    cr_replay_request reqs[HAND_N] = {
        {.t_ms = 0, .input_tokens = 350, .n_blocks = 4, .first_block = 0},
        {.t_ms = 10, .input_tokens = 800, .n_blocks = 8, .first_block = 4},
        {.t_ms = 50, .input_tokens = 450, .n_blocks = 5, .first_block = 12},
        {.t_ms = 200, .input_tokens = 100, .n_blocks = 1, .first_block = 17},
        {.t_ms = 300, .input_tokens = 100, .n_blocks = 1, .first_block = 18},
    };
    cr_replay_trace t = {reqs, HAND_N, ids, 19};
    cr_replay_cluster c = hand_cluster();
    c.shard_blocks = 16;
    c.truth = (cr_replay_cost){.prefill = {.fixed_ms = 10, .ms_per_token = 0.1}};
    recorder x;
    run_peer("dynamo-kv", &t, &c, &x);
    uint32_t a = x.out[0].shard, b = 1 - a;
    const uint32_t want[HAND_N] = {a, b, a, a, a}, hit[HAND_N] = {0, 0, 400, 0, 0};
    for (size_t i = 0; i < HAND_N; i++) {
        CU_ASSERT_EQUAL(x.out[i].shard, want[i]);
        CU_ASSERT_EQUAL(x.out[i].hit_tokens, hit[i]);
    }
}

/* aibrix-prefix on three pods, asked directly: the first three requests
 * spread (a least loaded pod, drawn; call them X, Y, Z), then the table
 * and the mean + 1 std bound decide. */
static void test_peer_aibrix(void)
{
    cr_replay_cluster c = hand_cluster();
    c.shards = 3;
    cr_replay_policy p = make_peer("aibrix-prefix", &c);
    uint64_t one[] = {1}, two[] = {2}, three[] = {3}, y2[] = {2, 20}, x2[] = {1, 10},
             x3[] = {1, 10, 11}, z3[] = {1, 10, 12};
    uint32_t q[3] = {0, 0, 0};
    uint32_t X = ask(&p, one, 1, 0, 0, q, 3);
    q[X] = 1;
    uint32_t Y = ask(&p, two, 1, 0, 0.001, q, 3);
    CU_ASSERT_NOT_EQUAL(Y, X);
    q[Y] = 1;
    uint32_t Z = 3 - X - Y; /* the only one left at 0 */
    CU_ASSERT_EQUAL(ask(&p, three, 1, 0, 0.002, q, 3), Z);
    q[Z] = 1;
    /* Loads (1, 1, 1): bound 1 + 0. */
    CU_ASSERT_EQUAL(ask(&p, y2, 2, 0, 0.003, q, 3), Y);
    q[Y] = 2; /* (X, Y, Z) = (1, 2, 1): mean 4/3, std 0.47 */
    CU_ASSERT_EQUAL(ask(&p, x2, 2, 0, 0.004, q, 3), X);
    q[X] = 2; /* (2, 2, 1): bound 5/3 + 0.47 = 2.14 */
    CU_ASSERT_EQUAL(ask(&p, x3, 3, 0, 0.005, q, 3), X);
    q[X] = 3; /* (3, 2, 1): bound 2 + 0.82: X, the only match, is over it */
    CU_ASSERT_EQUAL(ask(&p, z3, 3, 0, 0.006, q, 3), Z);
    q[Z] = 2; /* (3, 2, 2): X matches 3 of 3 but is over 2.80; Z matches 2 */
    CU_ASSERT_EQUAL(ask(&p, x3, 3, 0, 0.007, q, 3), Z);
    /* Past an imbalance of 8 the match is ignored: a least loaded pod. */
    uint32_t skew[3];
    skew[X] = 9, skew[Y] = 1, skew[Z] = 0;
    CU_ASSERT_EQUAL(ask(&p, y2, 2, 0, 0.008, skew, 3), Z);
    /* 1 was used at 7 ms: still matched 1199 s on (X 1 of 2, the only
     * holder of it all), expired 1201 s after that (Y, the least loaded). */
    q[X] = 1, q[Y] = 0, q[Z] = 1;
    uint64_t x9[] = {1, 10, 11, 99};
    CU_ASSERT_EQUAL(ask(&p, x9, 4, 0, 1199.007, q, 3), X);
    CU_ASSERT_EQUAL(ask(&p, x9, 4, 0, 2400.008, q, 3), Y);
    /* Y, its only holder, over mean + std (5 > 5/3 + 2.36): X or Z, drawn;
     * call it W, and the third V. */
    uint32_t busy[3];
    busy[X] = 0, busy[Y] = 5, busy[Z] = 0;
    uint32_t W = ask(&p, x9, 4, 0, 2400.009, busy, 3), V = 3 - W - Y;
    CU_ASSERT(W == X || W == Z);
    /* Y and W match all 4: the one with fewer in flight (bound 1.14). */
    busy[Y] = 1, busy[W] = 0, busy[V] = 1;
    CU_ASSERT_EQUAL(ask(&p, x9, 4, 0, 2400.010, busy, 3), W);
    busy[Y] = 0, busy[W] = 1;
    CU_ASSERT_EQUAL(ask(&p, x9, 4, 0, 2400.011, busy, 3), Y);
    /* More matched before fewer in flight: 200 201 202 to X (the least
     * loaded), 200 201 205 to Y (X, 5 in flight, over 2 + 2.16); then X
     * matches 3, Y 2, both under the bound (1.14): X. */
    uint64_t m3[] = {200, 201, 202}, m2[] = {200, 201, 205};
    busy[X] = 0, busy[Y] = 1, busy[Z] = 1;
    CU_ASSERT_EQUAL(ask(&p, m3, 3, 0, 2401, busy, 3), X);
    busy[X] = 5, busy[Y] = 0, busy[Z] = 1;
    CU_ASSERT_EQUAL(ask(&p, m2, 3, 0, 2401.001, busy, 3), Y);
    busy[X] = 1, busy[Y] = 0, busy[Z] = 1;
    CU_ASSERT_EQUAL(ask(&p, m3, 3, 0, 2401.002, busy, 3), X);
    p.free(p.state);
}

/* min-ttft-exact: backlog + the true prefill at the true hit. Two shards;
 * prefill 1 ms + 0.01 ms a token (1 ms a block):
 *   r0 [1..5] (500) at 0: 6 on both -> 0 (ties: the lower), busy to 6
 *   r1 [1..6] (600) at 2: shard 0 4 + 1 + 1 = 6 (r0's blocks, though r0
 *      is still running), shard 1 7 -> 0, TTFT 6, busy to 8
 *   r2 [1..7] (700) at 3: 0: 5 + 2 = 7, 1: 8 -> 0, TTFT 7, busy to 10
 *   r3 [1 2 20..25] (800) at 4: 0: 6 + 1 + 6 = 13, 1: 9 -> 1, TTFT 9 */
static void test_peer_exact(void)
{
    uint64_t ids[] = {1, 2, 3, 4, 5, 6, 7, 1, 2, 20, 21, 22, 23, 24, 25};
    cr_replay_request reqs[HAND_N] = {
        {.t_ms = 0, .input_tokens = 500, .n_blocks = 5, .first_block = 0},
        {.t_ms = 2, .input_tokens = 600, .n_blocks = 6, .first_block = 0},
        {.t_ms = 3, .input_tokens = 700, .n_blocks = 7, .first_block = 0},
        {.t_ms = 4, .input_tokens = 800, .n_blocks = 8, .first_block = 7},
        {.t_ms = 100, .input_tokens = 200, .n_blocks = 2, .first_block = 7},
    };
    cr_replay_trace t = {reqs, HAND_N, ids, 15};
    cr_replay_cluster c = hand_cluster();
    c.shard_blocks = 16;
    recorder x;
    run_peer("min-ttft-exact", &t, &c, &x);
    /* r4 [1 2] at 100, both idle: both hit 2 blocks: 1 on both -> 0. */
    const uint32_t want[HAND_N] = {0, 0, 0, 1, 0}, hit[HAND_N] = {0, 500, 600, 0, 200};
    const double ttft[HAND_N] = {6, 6, 7, 9, 1};
    for (size_t i = 0; i < HAND_N; i++) {
        CU_ASSERT_EQUAL(x.out[i].shard, want[i]);
        CU_ASSERT_EQUAL(x.out[i].hit_tokens, hit[i]);
        CU_ASSERT_DOUBLE_EQUAL(x.out[i].ttft_ms, ttft[i], EPS);
    }
}

static void test_peer_rejects(void)
{
    cr_replay_cluster c = hand_cluster();
    cr_replay_policy p;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replay_peer("llm-d", &c, &p, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "\"llm-d\" ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "min-ttft-exact, round-robin)")); /* the names it knows */
    c.shards = 0;
    CU_ASSERT_EQUAL(cr_replay_peer("min-ttft-exact", &c, &p, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "shards"));
}

/* Each peer on the hand trace and on a generated one with noise: run
 * twice on one policy (the second run starts it afresh) and once on a new
 * one, identical results. */
/* round-robin: shard 0, 1, ... in turn, and again from 0 on a second run
 * (its clock goes back). */
static void test_peer_round_robin(void)
{
    cr_replay_trace t = hand_trace();
    cr_replay_cluster c = hand_cluster();
    cr_replay_policy rr = make_peer("round-robin", &c);
    cr_error err;
    for (int run = 0; run < 2; run++) {
        recorder x;
        cr_replay_policy p = recording_of(&x, rr);
        cr_replay_result res;
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(x.n, HAND_N);
        for (size_t i = 0; i < HAND_N; i++)
            CU_ASSERT_EQUAL(x.out[i].shard, i % c.shards);
        cr_replay_result_free(&res);
    }
    rr.free(rr.state);
}

static void test_peers_repeat(void)
{
    static const char *const names[] = {"llmd-scorer", "sglang-cache-aware", "dynamo-kv",
                                        "aibrix-prefix", "min-ttft-exact", "round-robin"};
    cr_replay_gen_config g = small_gen();
    g.n_requests = 5000;
    cr_replay_trace gen, hand = hand_trace();
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &gen, &err), CR_OK);
    cr_replay_cluster big = cluster_of(16), small = hand_cluster();
    big.shard_blocks = 256;
    const struct {
        const cr_replay_trace *t;
        const cr_replay_cluster *c;
    } cases[] = {{&hand, &small}, {&gen, &big}};
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            cr_replay_policy p = make_peer(names[i], cases[k].c),
                             q = make_peer(names[i], cases[k].c);
            cr_replay_result a, b, d;
            CU_ASSERT_EQUAL_FATAL(cr_replay_run(cases[k].t, cases[k].c, &p, 1.0, &a, &err), CR_OK);
            CU_ASSERT_EQUAL_FATAL(cr_replay_run(cases[k].t, cases[k].c, &p, 1.0, &b, &err), CR_OK);
            CU_ASSERT_EQUAL_FATAL(cr_replay_run(cases[k].t, cases[k].c, &q, 1.0, &d, &err), CR_OK);
            CU_ASSERT(same_result(&a, &b));
            CU_ASSERT(same_result(&a, &d));
            CU_ASSERT(a.hit_ratio > 0);
            cr_replay_result_free(&a);
            cr_replay_result_free(&b);
            cr_replay_result_free(&d);
            p.free(p.state);
            q.free(q.state);
        }
    cr_replay_trace_free(&gen);
}


/* ---- membership events ------------------------------------------------------------ */

/* Parses text for shards initial endpoints, which must succeed. */
static cr_replay_events events_of(const char *text, uint32_t shards)
{
    cr_replay_events e;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_events_parse("ev", text, strlen(text), shards, &e, &err),
                          CR_OK);
    return e;
}

static void expect_bad_events(const char *text, uint32_t shards, const char *msg)
{
    cr_replay_events e = {(void *)1, 9, 9, 9};
    cr_error err = {{0}};
    CU_ASSERT_EQUAL(cr_replay_events_parse("ev.txt", text, strlen(text), shards, &e, &err),
                    CR_EINVAL);
    if (strcmp(err.msg, msg) != 0)
        fprintf(stderr, "\n  got  \"%s\"\n  want \"%s\"\n", err.msg, msg);
    CU_ASSERT_STRING_EQUAL(err.msg, msg);
    CU_ASSERT(e.ev == NULL && e.n == 0); /* nothing kept */
}

static void test_events_parse(void)
{
    cr_replay_events e = events_of("# a comment\n\n 1.5 join x \t# late\n2 drain e0\n2 fail x\n"
                                   "3e1 join e01\n",
                                   2);
    CU_ASSERT_EQUAL_FATAL(e.n, 4);
    CU_ASSERT_EQUAL(e.shards, 2);
    CU_ASSERT_EQUAL(e.slots, 4);
    CU_ASSERT_DOUBLE_EQUAL(e.ev[0].at_s, 1.5, 0);
    CU_ASSERT_EQUAL(e.ev[0].kind, CR_REPLAY_JOIN);
    CU_ASSERT_EQUAL(e.ev[0].slot, 2);
    CU_ASSERT_EQUAL(e.ev[1].slot, 0);
    CU_ASSERT_EQUAL(e.ev[2].kind, CR_REPLAY_FAIL);
    CU_ASSERT_EQUAL(e.ev[2].slot, 2); /* the joined x */
    CU_ASSERT_EQUAL(e.ev[3].slot, 3); /* "e01" is not e1 */
    char id[16];
    cr_replay_endpoint_id(&e, 1, id, sizeof id);
    CU_ASSERT_STRING_EQUAL(id, "e1");
    cr_replay_endpoint_id(&e, 3, id, sizeof id);
    CU_ASSERT_STRING_EQUAL(id, "e01");
    cr_replay_events_free(&e);
    /* a mark changes nothing: no slot, any label, the set as it was */
    e = events_of("1 mark quiet\n2 drain e0\n3 mark e0\n4 fail e1\n", 3);
    CU_ASSERT_EQUAL_FATAL(e.n, 4);
    CU_ASSERT_EQUAL(e.ev[0].kind, CR_REPLAY_MARK);
    CU_ASSERT_EQUAL(e.ev[0].slot, UINT32_MAX);
    CU_ASSERT_STRING_EQUAL(e.ev[0].id, "quiet");
    CU_ASSERT_EQUAL(e.ev[2].kind, CR_REPLAY_MARK);
    CU_ASSERT_EQUAL(e.slots, 3);
    cr_replay_events_free(&e);
    e = events_of("", 3); /* none: valid */
    CU_ASSERT_EQUAL(e.n, 0);
    CU_ASSERT_EQUAL(e.slots, 3);
    cr_replay_events_free(&e);
}

static void test_events_errors(void)
{
    expect_bad_events("1 join x\n2 boot y\n", 2,
                      "ev.txt:2: unknown kind \"boot\" (join, drain, fail, mark)");
    expect_bad_events("\n\n1 drain e2\n", 2, "ev.txt:3: drain of unknown endpoint \"e2\"");
    expect_bad_events("1 fail zz\n", 2, "ev.txt:1: fail of unknown endpoint \"zz\"");
    expect_bad_events("1 join e1\n", 2, "ev.txt:1: join of endpoint \"e1\", which is already serving");
    expect_bad_events("1 join x\n2 join x\n", 2,
                      "ev.txt:2: join of endpoint \"x\", which is already serving");
    expect_bad_events("1 fail e0\n2 join e0\n", 2,
                      "ev.txt:2: join of endpoint \"e0\", which has left (ids are not reused)");
    expect_bad_events("1 drain e0\n2 fail e0\n", 3,
                      "ev.txt:2: fail of endpoint \"e0\", which is not serving");
    expect_bad_events("2 join x\n1 drain e0\n", 2,
                      "ev.txt:2: time 1 is before the previous event's 2");
    expect_bad_events("1 drain e0\n2 fail e1\n", 2,
                      "ev.txt:2: fail of endpoint \"e1\" would leave none serving");
    expect_bad_events("-1 join x\n", 2,
                      "ev.txt:1: time must be a finite number of seconds >= 0, got \"-1\"");
    expect_bad_events("inf join x\n", 2,
                      "ev.txt:1: time must be a finite number of seconds >= 0, got \"inf\"");
    expect_bad_events("1 join\n", 2, "ev.txt:1: want AT_S KIND ENDPOINT, got fewer fields");
    expect_bad_events("1 join x y\n", 2, "ev.txt:1: want AT_S KIND ENDPOINT, got more fields");
    char text[CR_REPLAY_EVENTS_MAX * 16 + 64] = "", want[64];
    size_t used = 0;
    for (int i = 0; i <= CR_REPLAY_EVENTS_MAX; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%d join j%d\n", i, i);
    snprintf(want, sizeof want, "ev.txt:%d: more than %d events", CR_REPLAY_EVENTS_MAX + 1,
             CR_REPLAY_EVENTS_MAX);
    expect_bad_events(text, 2, want);
    char id[CR_REPLAY_ENDPOINT_ID_MAX + 16];
    snprintf(id, sizeof id, "1 join %0*d\n", CR_REPLAY_ENDPOINT_ID_MAX + 1, 7);
    snprintf(want, sizeof want, "ev.txt:1: endpoint id must be at most %d bytes, got %d",
             CR_REPLAY_ENDPOINT_ID_MAX, CR_REPLAY_ENDPOINT_ID_MAX + 1);
    expect_bad_events(id, 2, want);
    /* The file: a path that cannot be read names itself; a good one loads. */
    cr_replay_events e;
    cr_error err;
    CU_ASSERT_EQUAL(cr_replay_events_load("/nonexistent/ev.txt", 2, &e, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/ev.txt: cannot read: "));
    char path[] = "/tmp/cr-replay-events-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(write(fd, "5 join x\n6 fail y\n", 18), 18);
    close(fd);
    CU_ASSERT_EQUAL(cr_replay_events_load(path, 2, &e, &err), CR_EINVAL);
    snprintf(want, sizeof want, "%s:2: fail of unknown endpoint \"y\"", path);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    unlink(path);
}

/* One request of one 100-token block per owner (owner = its index), at
 * t_ms[i]: a trace over evt_reqs and evt_blocks. */
#define EVT_MAX 16
static cr_replay_request evt_reqs[EVT_MAX];
static uint64_t evt_blocks[EVT_MAX];

static cr_replay_trace evt_trace(const double *t_ms, const int64_t *owner, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        evt_blocks[i] = 100 + i;
        evt_reqs[i] = (cr_replay_request){.t_ms = t_ms[i], .input_tokens = 100, .n_blocks = 1,
                                          .first_block = i, .owner = owner ? owner[i] : (int64_t)i};
    }
    return (cr_replay_trace){evt_reqs, n, evt_blocks, n};
}

/* least-loaded on the hand cluster over n requests at t (ms, owner = index)
 * with events (text), recorded into *x; its routes are checked against
 * want[0..n). The result for the caller (cr_replay_result_free). */
static cr_replay_result least_loaded_with(const double *t, size_t n, const char *events,
                                          const uint32_t *want)
{
    cr_replay_trace tr = evt_trace(t, NULL, n);
    cr_replay_events e = events_of(events, 2);
    cr_replay_cluster c = hand_cluster();
    c.events = &e;
    recorder x;
    cr_replay_policy p = recording(&x, "least-loaded", &c);
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&tr, &c, &p, 1.0, &res, &err), CR_OK);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(x.out[i].shard, want[i]);
    x.inner.free(x.inner.state);
    cr_replay_events_free(&e);
    return res;
}

/* least-loaded on the hand cluster, idle between requests: ties go to
 * shard 0 until it is drained at 2.5 s, then to shard 1. Nothing fails. */
static void test_events_drain(void)
{
    const double t[] = {0, 1000, 2000, 3000, 4000};
    const uint32_t want[] = {0, 0, 0, 1, 1};
    cr_replay_result res = least_loaded_with(t, 5, "2.5 drain e0\n", want);
    CU_ASSERT_EQUAL(res.requests, 5);
    CU_ASSERT_EQUAL(res.failed_requests, 0);
    CU_ASSERT_EQUAL_FATAL(res.n_events, 1);
    CU_ASSERT_EQUAL(res.events[0].moved, 0); /* every owner has one request */
    CU_ASSERT_EQUAL(res.events[0].forced, 0);
    cr_replay_result_free(&res);
}

/* One owner's three requests at once on its sticky shard (3 ms each): a
 * fail at 3.5 ms loses the one in service and the one waiting; its next
 * request goes to the other shard, cold. The lost two are failed requests,
 * out of the TTFTs and the hit ratio. */
static void test_events_fail(void)
{
    const double t[] = {0, 0, 0, 10};
    const int64_t owner[] = {7, 7, 7, 7};
    cr_replay_trace tr = evt_trace(t, owner, 4);
    for (size_t i = 1; i < 4; i++) /* the same block: later ones hit, where served */
        evt_blocks[i] = evt_blocks[0];
    cr_replay_cluster c = hand_cluster();
    c.truth.prefill.ms_per_token = 0.02; /* 3 ms cold, 1 ms on a hit */
    cr_replay_policy sticky;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_baseline("sticky", &c, &sticky, &err), CR_OK);
    uint32_t home = route_once(&sticky, 7, 0, (uint32_t[2]){0}, (double[2]){0}, 2);
    sticky.free(sticky.state);
    char text[32];
    snprintf(text, sizeof text, "0.0035 fail e%u\n", home);
    cr_replay_events e = events_of(text, 2);
    c.events = &e;
    recorder x;
    cr_replay_policy p = recording(&x, "sticky", &c);
    cr_replay_result res;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&tr, &c, &p, 1.0, &res, &err), CR_OK);
    for (size_t i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(x.out[i].shard, home);
    CU_ASSERT_EQUAL(x.out[3].shard, 1 - home);
    CU_ASSERT_EQUAL(res.failed_requests, 2);
    CU_ASSERT_EQUAL(res.requests, 2);
    CU_ASSERT_DOUBLE_EQUAL(res.ttft_p99_ms, 3, EPS); /* both served ones cold */
    CU_ASSERT_DOUBLE_EQUAL(res.hit_ratio, 0, EPS);   /* the hits were the lost ones' */
    CU_ASSERT_EQUAL_FATAL(res.n_events, 1);
    CU_ASSERT_EQUAL(res.events[0].moved, 1);
    CU_ASSERT_EQUAL(res.events[0].forced, 1);
    CU_ASSERT_DOUBLE_EQUAL(res.events[0].p99_before_ms, 3, EPS); /* the served one of 0..4 ms */
    CU_ASSERT(isnan(res.events[0].recovered_s)); /* the trace ends within 30 s */
    cr_replay_result_free(&res);
    x.inner.free(x.inner.state);
    cr_replay_events_free(&e);
}

/* Three requests at once after x joins: least-loaded fills the two busy
 * shards' idle moments first, then the new one. */
static void test_events_join(void)
{
    const double t[] = {0, 2000, 2000, 2000};
    const uint32_t want[] = {0, 0, 1, 2};
    cr_replay_result res = least_loaded_with(t, 4, "1 join x\n", want);
    CU_ASSERT_EQUAL(res.failed_requests, 0);
    cr_replay_result_free(&res);
}

/* A policy that checks every route against the view it was given. */
typedef struct guard {
    cr_replay_policy inner;
    size_t bad, routed, per_shard[16];
} guard;

static uint32_t guard_route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    guard *g = state;
    uint32_t k = g->inner.route(g->inner.state, r, v);
    g->bad += k >= v->shards || !v->usable || !v->usable[k];
    g->per_shard[k < 16 ? k : 15]++;
    g->routed++;
    return k;
}

static void guard_served(void *state, const cr_replay_request *r, const cr_replay_outcome *o)
{
    guard *g = state;
    if (g->inner.served)
        g->inner.served(g->inner.state, r, o);
}

static void guard_tick(void *state, double now)
{
    guard *g = state;
    if (g->inner.tick)
        g->inner.tick(g->inner.state, now);
}

static void guard_members(void *state, const uint8_t *usable, uint32_t n_slots,
                          const cr_replay_member_event *ev)
{
    guard *g = state;
    if (g->inner.members)
        g->inner.members(g->inner.state, usable, n_slots, ev);
}

static cr_replay_policy guarding(guard *g, cr_replay_policy inner)
{
    memset(g, 0, sizeof *g);
    g->inner = inner;
    return (cr_replay_policy){.name = inner.name, .state = g, .route = guard_route,
                              .served = guard_served, .tick = guard_tick,
                              .members = guard_members};
}

static cr_replay_policy any_policy(const char *name, const cr_replay_cluster *c)
{
    cr_replay_policy p;
    cr_error err;
    if (!strcmp(name, "cacheroute"))
        return make_cacheroute(CR_REPLAY_KV_EVENTS_OFF, c);
    if (cr_replay_baseline(name, c, &p, &err) != CR_OK)
        p = make_peer(name, c);
    return p;
}

static const char *const ALL_POLICIES[] = {
    "cacheroute", "flat-lb", "sticky", "chwbl", "least-loaded", "random", "llmd-scorer",
    "sglang-cache-aware", "dynamo-kv", "aibrix-prefix", "min-ttft-exact", "round-robin"};
#define N_ALL_POLICIES (sizeof ALL_POLICIES / sizeof ALL_POLICIES[0])

/* Every policy over a generated trace (5 s) while two shards join, one
 * drains and one fails: each routes only to serving shards (the guard
 * sees every view; the run would also fail), the joined shards get
 * traffic, the drained and failed ones none after their events, and a
 * second run over the same policy gives the same result. */
static void test_events_every_policy(void)
{
    cr_replay_gen_config g = small_gen();
    g.n_requests = 5000;
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    cr_replay_events e = events_of("1 join x\n1.5 join y\n2.5 drain e1\n3.5 fail x\n", 4);
    cr_replay_cluster c = cluster_of(4);
    c.shard_blocks = 256;
    c.events = &e;
    for (size_t i = 0; i < N_ALL_POLICIES; i++) {
        guard gd;
        cr_replay_policy p = guarding(&gd, any_policy(ALL_POLICIES[i], &c));
        cr_replay_result a, b;
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &a, &err), CR_OK);
        CU_ASSERT_EQUAL(gd.bad, 0);
        CU_ASSERT_EQUAL(gd.routed, t.n);
        if (gd.per_shard[4] == 0 || gd.per_shard[5] == 0)
            fprintf(stderr, "\n  %s: joined shards got %zu and %zu\n", ALL_POLICIES[i],
                    gd.per_shard[4], gd.per_shard[5]);
        CU_ASSERT(gd.per_shard[4] > 0 && gd.per_shard[5] > 0);
        CU_ASSERT_EQUAL_FATAL(a.n_events, 4);
        CU_ASSERT(a.events[2].forced <= a.events[2].moved);
        CU_ASSERT(a.events[3].forced <= a.events[3].moved);
        CU_ASSERT_EQUAL(a.requests + a.failed_requests, t.n);
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &b, &err), CR_OK);
        if (!same_result(&a, &b) || a.failed_requests != b.failed_requests)
            fprintf(stderr, "\n  %s: a second run differs\n", ALL_POLICIES[i]);
        CU_ASSERT(same_result(&a, &b));
        CU_ASSERT_EQUAL(a.failed_requests, b.failed_requests);
        cr_replay_result_free(&a);
        cr_replay_result_free(&b);
        gd.inner.free(gd.inner.state);
    }
    cr_replay_events_free(&e);
    cr_replay_trace_free(&t);
}

/* sticky's ring without a drained shard moves only the drained shard's
 * owners: moved is forced, the consistent-hash minimum. */
static void test_events_sticky_moves_forced(void)
{
    cr_replay_gen_config g = small_gen();
    g.n_requests = 5000;
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    cr_replay_events e = events_of("2.5 drain e1\n", 4);
    cr_replay_cluster c = cluster_of(4);
    c.events = &e;
    cr_replay_policy p = any_policy("sticky", &c);
    cr_replay_result a;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &a, &err), CR_OK);
    CU_ASSERT(a.events[0].forced > 0);
    CU_ASSERT_EQUAL(a.events[0].moved, a.events[0].forced);
    CU_ASSERT(isfinite(a.hit_ratio_events));
    cr_replay_result_free(&a);
    p.free(p.state);
    cr_replay_events_free(&e);
    cr_replay_trace_free(&t);
}

/* sglang-cache-aware's hit ratio on the run below, as the tree before
 * events gave it (0c7f6b0: cacheroute-replay --generate --requests 5000
 * --sessions 200 --rate 1000 --shards 4 --shard-blocks 256, 12 digits). */
#define PINNED_SGLANG_HIT 0.787676637257

/* Without events a run is what it was before events existed: the same as
 * with a file of none (cacheroute is then given its endpoints, which
 * changes none of its routes), and a figure pinned from before the
 * change. */
static void test_events_none_as_before(void)
{
    cr_replay_gen_config g = small_gen();
    g.n_requests = 5000;
    cr_replay_trace t;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_generate(&g, &t, &err), CR_OK);
    cr_replay_events none = events_of("# nothing happens\n", 4);
    /* marks change nothing either: only measured (forced 0 at each) */
    cr_replay_events marks = events_of("1 mark a\n2.5 mark b\n", 4);
    cr_replay_cluster c = cluster_of(4), with = c, marked = c;
    c.shard_blocks = with.shard_blocks = marked.shard_blocks = 256;
    with.events = &none;
    marked.events = &marks;
    for (size_t i = 0; i < N_ALL_POLICIES; i++) {
        cr_replay_policy p = any_policy(ALL_POLICIES[i], &c), q = any_policy(ALL_POLICIES[i], &with);
        cr_replay_policy r = any_policy(ALL_POLICIES[i], &marked);
        cr_replay_result a, b, m;
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &a, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &with, &q, 1.0, &b, &err), CR_OK);
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &marked, &r, 1.0, &m, &err), CR_OK);
        CU_ASSERT(same_result(&a, &b));
        CU_ASSERT(same_result(&a, &m));
        CU_ASSERT(a.events == NULL && a.n_events == 0 && a.failed_requests == 0);
        CU_ASSERT(b.n_events == 0 && isnan(b.hit_ratio_events));
        CU_ASSERT_EQUAL_FATAL(m.n_events, 2);
        CU_ASSERT(m.events[0].forced == 0 && m.events[1].forced == 0 && m.failed_requests == 0);
        if (!strcmp(ALL_POLICIES[i], "sticky")) /* its ring moves no one without a change */
            CU_ASSERT(m.events[0].moved == 0 && m.events[1].moved == 0);
        if (!strcmp(ALL_POLICIES[i], "sglang-cache-aware"))
            CU_ASSERT_DOUBLE_EQUAL(a.hit_ratio, PINNED_SGLANG_HIT, 1e-11);
        cr_replay_result_free(&a);
        cr_replay_result_free(&b);
        cr_replay_result_free(&m);
        p.free(p.state);
        q.free(q.state);
        r.free(r.state);
    }
    cr_replay_events_free(&none);
    cr_replay_events_free(&marks);
    cr_replay_trace_free(&t);
}

/* ---- foreign traffic and scrapes ----------------------------------------------- */

/* A policy that sends every request to shard 0 and checks what it is
 * shown: no foreign request, and its own queue only (the foreign traffic
 * goes round-robin over every shard). */
typedef struct to_zero {
    const cr_replay_cluster *c;
    size_t routed, foreign_seen, others_queued;
    size_t scraped_elsewhere; /* scrapes that showed work on shards 1.. */
} to_zero;

static uint32_t zero_route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    to_zero *z = state;
    z->routed++;
    z->foreign_seen += cr_replay_foreign(z->c, r->first_block); /* the trace's index */
    for (uint32_t k = 1; k < v->shards; k++) {
        z->others_queued += v->queued[k];
        if (v->scrape)
            z->scraped_elsewhere += v->scrape->waiting[k] + v->scrape->running[k] > 0;
    }
    return 0;
}

/* A trace of n one-block requests 1 ms apart whose first_block is their
 * index (so a policy can tell which it is given). */
static cr_replay_trace indexed_trace(size_t n)
{
    cr_replay_trace t = {calloc(n, sizeof *t.reqs), n, calloc(n, sizeof *t.blocks), n};
    for (size_t i = 0; t.reqs && t.blocks && i < n; i++) {
        t.reqs[i] = (cr_replay_request){.t_ms = (double)i, .input_tokens = 512, .n_blocks = 1,
                                        .first_block = i, .owner = (int64_t)(i % 7)};
        t.blocks[i] = i % 50;
    }
    return t;
}

static void test_foreign_share(void)
{
    cr_replay_trace t = indexed_trace(4000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t.reqs);
    cr_replay_cluster c = cluster_of(4);
    c.foreign_share = 0.3;
    c.scrape_interval_s = 0.1;
    size_t foreign = 0;
    for (size_t i = 0; i < t.n; i++)
        foreign += cr_replay_foreign(&c, i);
    CU_ASSERT(foreign > 1100 && foreign < 1300); /* 0.3 of 4000, +- 4 std */
    for (int run = 0; run < 2; run++) {
        to_zero z = {.c = &c};
        cr_replay_policy p = {.name = "to-zero", .state = &z, .route = zero_route};
        cr_replay_result res;
        cr_error err;
        CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
        CU_ASSERT_EQUAL(z.routed, t.n - foreign); /* the same share each run */
        CU_ASSERT_EQUAL(z.foreign_seen, 0);       /* never routed by the policy */
        CU_ASSERT_EQUAL(z.others_queued, 0);      /* nor counted in its queues */
        CU_ASSERT(z.scraped_elsewhere > 0);       /* but seen through the scrapes */
        CU_ASSERT_EQUAL(res.foreign_requests, foreign);
        CU_ASSERT_EQUAL(res.requests, t.n - foreign);
        cr_replay_result_free(&res);
    }
    cr_replay_cluster d = c;
    d.seed = 2;
    size_t same = 0;
    for (size_t i = 0; i < t.n; i++)
        same += cr_replay_foreign(&c, i) && cr_replay_foreign(&d, i);
    CU_ASSERT(same < foreign / 2); /* another seed, another draw */
    d.foreign_share = 0;
    for (size_t i = 0; i < t.n; i++)
        CU_ASSERT_FALSE(cr_replay_foreign(&d, i));

    cr_error err;
    d = c;
    d.foreign_share = 1;
    CU_ASSERT_EQUAL(cr_replay_cluster_check(&d, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "foreign_share"));
    d.foreign_share = 0.3;
    d.scrape_interval_s = -1;
    CU_ASSERT_EQUAL(cr_replay_cluster_check(&d, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "scrape_interval_s"));
    cr_replay_events ev = {.shards = 4, .slots = 4};
    d = c;
    d.events = &ev;
    CU_ASSERT_EQUAL(cr_replay_cluster_check(&d, &err), CR_EINVAL);
    free(t.reqs);
    free(t.blocks);
}

/* The hand trace (owner 1 to shard 0, owner 2 to shard 1: least-loaded's
 * routes, test_hand_least_loaded) scraped every 2 ms: r0 at 0 sees the
 * scrape at 0 (empty); r1 at 1 the same one; r2 at 2 the one at 2 (r0 and
 * r1 in service, 2 blocks each); r3 at 4.5 the one at 4 (r2 in service on
 * 0, r1 done at 4 on 1); r4 at 21 the one at 20 (all done, 3 blocks each). */
typedef struct scrape_rec {
    size_t n;
    cr_replay_scrape at[HAND_N];
    uint32_t w[HAND_N][2], run[HAND_N][2], held[HAND_N][2];
} scrape_rec;

static uint32_t scrape_route(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    scrape_rec *x = state;
    x->at[x->n] = *v->scrape;
    for (uint32_t k = 0; k < 2; k++) {
        x->w[x->n][k] = v->scrape->waiting[k];
        x->run[x->n][k] = v->scrape->running[k];
        x->held[x->n][k] = v->scrape->blocks_held[k];
    }
    x->n++;
    return (uint32_t)(r->owner - 1);
}

static void test_scrape_hand(void)
{
    cr_replay_trace t = hand_trace();
    cr_replay_cluster c = hand_cluster();
    c.scrape_interval_s = 0.002;
    scrape_rec x = {0};
    cr_replay_policy p = {.name = "by-owner", .state = &x, .route = scrape_route};
    cr_replay_result res;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_replay_run(&t, &c, &p, 1.0, &res, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(x.n, HAND_N);
    const uint64_t seq[HAND_N] = {1, 1, 2, 3, 4};
    const double at_ms[HAND_N] = {0, 0, 2, 4, 20};
    const uint32_t run[HAND_N][2] = {{0, 0}, {0, 0}, {1, 1}, {1, 0}, {0, 0}};
    const uint32_t held[HAND_N][2] = {{0, 0}, {0, 0}, {2, 2}, {3, 2}, {3, 3}};
    for (size_t i = 0; i < HAND_N; i++) {
        CU_ASSERT_EQUAL(x.at[i].seq, seq[i]);
        CU_ASSERT_DOUBLE_EQUAL(x.at[i].at_s * 1000, at_ms[i], EPS);
        for (uint32_t k = 0; k < 2; k++) {
            CU_ASSERT_EQUAL(x.w[i][k], 0);
            CU_ASSERT_EQUAL(x.run[i][k], run[i][k]);
            CU_ASSERT_EQUAL(x.held[i][k], held[i][k]);
        }
    }
    cr_replay_result_free(&res);
}

static const cr_test_case replay_tests[] = {
    {"parse good", test_parse_good},
    {"parse malformed", test_parse_malformed},
    {"parse limits", test_parse_limits},
    {"load a file", test_load_file},
    {"owner key parse", test_owner_key_parse},
    {"gini", test_gini},
    {"lru order", test_lru_order},
    {"lru against a model", test_lru_model},
    {"lru side table", test_lru_side_table},
    {"sticky", test_sticky},
    {"chwbl", test_chwbl},
    {"flat-lb", test_flat_lb},
    {"least-loaded and random", test_least_loaded_and_random},
    {"hand: least-loaded", test_hand_least_loaded},
    {"hand: sticky", test_hand_sticky},
    {"knowledge as text and as kv", test_knowledge_kv},
    {"kv hook sees the hit", test_kv_hook_sees_the_hit},
    {"true prefill", test_prefill_ms},
    {"run rejects", test_run_rejects},
    {"gen reproducible", test_gen_reproducible},
    {"gen documents off", test_gen_documents_off},
    {"gen sessions", test_gen_sessions},
    {"gen documents", test_gen_documents},
    {"gen document owners", test_gen_document_owners},
    {"gen gini", test_gen_gini},
    {"gen bursts", test_gen_bursts},
    {"gen rejects", test_gen_rejects},
    {"runs repeat", test_runs_repeat},
    {"cacheroute: kv events remove evicted blocks", test_cacheroute_kv_events_evict},
    {"cacheroute: kv event hooks", test_cacheroute_kv_events_hooks},
    {"cacheroute: kv events change no route", test_cacheroute_kv_events_same_routes},
    {"peer: llmd-scorer", test_peer_llmd},
    {"peer: sglang-cache-aware", test_peer_sglang},
    {"peer: sglang evicts", test_peer_sglang_evicts},
    {"peer: dynamo-kv", test_peer_dynamo},
    {"peer: aibrix-prefix", test_peer_aibrix},
    {"peer: min-ttft-exact", test_peer_exact},
    {"peer rejects", test_peer_rejects},
    {"peer: round-robin", test_peer_round_robin},
    {"peers repeat", test_peers_repeat},
    {"events: parse", test_events_parse},
    {"events: parse errors name file:line", test_events_errors},
    {"events: a drained shard takes no more requests", test_events_drain},
    {"events: a fail's queued requests are failed", test_events_fail},
    {"events: a joined shard takes requests", test_events_join},
    {"events: no policy routes to a shard not serving", test_events_every_policy},
    {"events: sticky moves only the forced", test_events_sticky_moves_forced},
    {"events: none is as before", test_events_none_as_before},
    {"foreign traffic: a seeded share, never routed", test_foreign_share},
    {"scrapes: the engines' queues at each grid point", test_scrape_hand},
    {NULL, NULL},
};
static const cr_test_suite suites[] = {{"replay", replay_tests}};
CR_TEST_MAIN(suites)
