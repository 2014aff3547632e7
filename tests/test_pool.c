/* The server's job pool and its bounded drain (what a shutdown past the
 * grace relies on): every queued job runs, a drain gives up on a job that
 * outlives its time without joining it, and a later drain finishes. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "cunit_main.h"
#include "pool.h"

static atomic_int ran;

static void count(void *arg)
{
    (void)arg;
    atomic_fetch_add(&ran, 1);
}

typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int open, entered;
} gate;

/* Blocks until the test opens the gate. */
static void wait_at_gate(void *arg)
{
    gate *g = arg;
    pthread_mutex_lock(&g->lock);
    g->entered = 1;
    pthread_cond_broadcast(&g->cond);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void test_drain_runs_every_job(void)
{
    atomic_store(&ran, 0);
    cr_pool *p = cr_pool_new(3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    for (int i = 0; i < 100; i++)
        CU_ASSERT_EQUAL(cr_pool_submit(p, count, NULL), 0);
    CU_ASSERT_EQUAL(cr_pool_drain_for(p, 30), 0);
    CU_ASSERT_EQUAL(atomic_load(&ran), 100);
    CU_ASSERT_EQUAL(cr_pool_submit(p, count, NULL), -1); /* drained: refused */
    cr_pool_free(p);
}

static void test_drain_gives_up_on_a_stuck_job(void)
{
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    cr_pool *p = cr_pool_new(2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(cr_pool_submit(p, wait_at_gate, &g), 0);
    pthread_mutex_lock(&g.lock);
    while (!g.entered)
        pthread_cond_wait(&g.cond, &g.lock);
    pthread_mutex_unlock(&g.lock);
    /* The job holds one thread: the drain returns at its deadline, having
     * joined the idle thread only. */
    CU_ASSERT_EQUAL(cr_pool_drain_for(p, 0.05), -1);
    CU_ASSERT_EQUAL(cr_pool_drain_for(p, 0), -1);
    pthread_mutex_lock(&g.lock);
    g.open = 1;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    CU_ASSERT_EQUAL(cr_pool_drain_for(p, 30), 0);
    cr_pool_free(p); /* drains again: nothing left to join */
}

static const cr_test_case POOL[] = {
    {"drain runs every queued job", test_drain_runs_every_job},
    {"drain gives up on a stuck job, a later one finishes", test_drain_gives_up_on_a_stuck_job},
    {NULL, NULL},
};

static const cr_test_suite SUITES[] = {{"pool", POOL}};
CR_TEST_MAIN(SUITES)
