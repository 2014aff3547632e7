/* Replicas at scale: three cores, each tracking the same N owners and
 * touched at T owners a second, each with a cr_replica over one Redis
 * (its own redis-server on a unix socket, or the URL given), for S seconds.
 * Reports the replicas' sync cost (CPU seconds a second of every thread but
 * the drivers, the Redis round trips a second, redis-server's own CPU), the
 * leader's merge time and the time to plan the merged N owners, then
 * cr_core_record throughput (batches of 1, one thread) of a core that
 * tracks touched owners, drained as a replica's push drains them, against
 * one that does not (alternating 1 s runs; the median of their ratios).
 *
 * usage: replica_bench [owners=1000000] [touched_per_s=100000] [seconds=10]
 *                      [url="": start redis-server] */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "replica.h"

#define REPLICAS 3
#define BATCH 1000

static uint64_t n_owners = 1000000, per_s = 100000;
static atomic_int stop;

static double cpu_self(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* utime + stime of pid, seconds; -1 when unreadable. */
static double cpu_of(pid_t pid)
{
    char path[64];
    unsigned long ut = 0, st = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f || fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                     &st) != 2) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static cr_core *core_new(void)
{
    cr_core_config cfg;
    cr_error err;
    cr_core_config_default(&cfg);
    cr_core_quiet_probe(&cfg.probe);
    cfg.replan_interval_s = 0;
    cfg.estimator.max_owners = n_owners;
    cr_core *c = cr_core_new(&cfg, NULL, NULL, &err);
    if (!c) {
        fprintf(stderr, "core: %s\n", err.msg);
        exit(1);
    }
    return c;
}

static void record_batch(cr_core *c, uint64_t *seed)
{
    int64_t b[BATCH];
    cr_error err;
    for (int j = 0; j < BATCH; j++)
        b[j] = (int64_t)(cr_mix64((*seed)++) % n_owners);
    cr_core_record(c, b, BATCH, NULL, 0, NULL, NULL, &err);
}

static void fill(cr_core *c)
{
    int64_t b[BATCH];
    cr_error err;
    for (uint64_t i = 0; i < n_owners; i += BATCH) {
        size_t k = n_owners - i < BATCH ? (size_t)(n_owners - i) : BATCH;
        for (size_t j = 0; j < k; j++)
            b[j] = (int64_t)(i + j);
        cr_core_record(c, b, k, NULL, 0, NULL, NULL, &err);
    }
}

typedef struct driver {
    pthread_t t;
    cr_core *core;
    double cpu;
    uint64_t seed;
} driver;

/* per_s owners a second, in batches paced every BATCH / per_s seconds. */
static void *drive(void *arg)
{
    driver *d = arg;
    double next = bench_now(), step = (double)BATCH / (double)per_s;
    while (!atomic_load(&stop)) {
        record_batch(d->core, &d->seed);
        next += step;
        double wait = next - bench_now();
        if (wait > 0)
            usleep((useconds_t)(wait * 1e6));
    }
    d->cpu = bench_thread_cpu();
    return NULL;
}

static pid_t start_redis(char *url, size_t len)
{
    char sock[64];
    snprintf(sock, sizeof sock, "/tmp/cr-replica-bench-%d.sock", (int)getpid());
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(126);
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
               "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 250 && access(sock, F_OK) != 0; i++)
        usleep(20000);
    snprintf(url, len, "unix:%s", sock);
    return pid;
}

static void on_event(void *ctx, const cr_replica_event *ev)
{
    static const char *const KIND[] = {"up", "down", "leader", "follower", "skewed",
                                       "unskewed", "refused", "error"};
    fprintf(stderr, "replica %s: %s %s\n", (const char *)ctx, KIND[ev->kind], ev->detail);
}

static cr_replica *replica_on(cr_core *c, const char *url, int i, double replan_s)
{
    cr_replica_config rc;
    static char ids[REPLICAS + 8][16];
    char *id = ids[i % (REPLICAS + 8)];
    cr_error err;
    cr_replica_config_default(&rc);
    snprintf(id, 16, "bench-%d", i);
    rc.state_backend = (char *)url;
    rc.replica_id = id;
    rc.cluster = "bench";
    rc.backend_timeout_ms = 10000; /* a loaded machine: a 24 MB full push takes a while */
    rc.lease_ttl_s = 30;
    cr_replica_hooks hooks = {on_event, id};
    cr_replica *r = cr_replica_start(&rc, c, replan_s, &hooks, &err);
    if (!r) {
        fprintf(stderr, "replica: %s\n", err.msg);
        exit(1);
    }
    return r;
}

/* cr_core_record batches of 1 for secs seconds: calls a second. */
static double record_rate(cr_core *c, double secs)
{
    uint64_t seed = 99, n = 0;
    cr_error err;
    double t0 = bench_now(), t;
    while ((t = bench_now()) - t0 < secs) {
        for (int k = 0; k < 1000; k++, n++) {
            int64_t o = (int64_t)(cr_mix64(seed++) % n_owners);
            cr_core_record(c, &o, 1, NULL, 0, NULL, NULL, &err);
        }
    }
    return (double)n / (t - t0);
}

static void sync_cost(const char *url, pid_t redis, double secs)
{
    cr_core *cores[REPLICAS];
    cr_replica *reps[REPLICAS];
    driver d[REPLICAS];
    for (int i = 0; i < REPLICAS; i++) {
        cores[i] = core_new();
        fill(cores[i]); /* every owner once */
        reps[i] = replica_on(cores[i], url, i, 5.0);
    }
    sleep(3); /* the first, full pushes */
    double cpu0 = cpu_self(), r0 = cpu_of(redis), t0 = bench_now(), main0 = bench_thread_cpu();
    uint64_t trips0 = 0;
    for (int i = 0; i < REPLICAS; i++) {
        cr_replica_stats st;
        cr_replica_stats_read(reps[i], &st);
        trips0 += st.round_trips;
        d[i] = (driver){.core = cores[i], .seed = 1000003ULL * (i + 1)};
        pthread_create(&d[i].t, NULL, drive, &d[i]);
    }
    usleep((useconds_t)(secs * 1e6));
    atomic_store(&stop, 1);
    double drivers = 0;
    for (int i = 0; i < REPLICAS; i++) {
        pthread_join(d[i].t, NULL);
        drivers += d[i].cpu;
    }
    double wall = bench_now() - t0, cpu = cpu_self() - cpu0 - drivers - (bench_thread_cpu() - main0);
    double rcpu = redis > 0 ? cpu_of(redis) - r0 : -1;
    uint64_t trips = 0, pushed = 0, pushes = 0;
    cr_replica_stats lead = {0};
    for (int i = 0; i < REPLICAS; i++) {
        cr_replica_stats st;
        cr_replica_stats_read(reps[i], &st);
        trips += st.round_trips;
        pushed += st.pushed_owners;
        pushes += st.pushes;
        if (st.leader)
            lead = st;
    }
    printf("sync: %d replicas x %llu owners, %llu touched/s each, %.1f s: replica threads "
           "%.3f CPU s/s in all, redis-server %.3f CPU s/s, %.1f round trips/s in all, "
           "%.0f owners a push\n",
           REPLICAS, (unsigned long long)n_owners, (unsigned long long)per_s, wall, cpu / wall,
           rcpu / wall, (double)(trips - trips0) / wall, (double)pushed / (double)pushes);
    printf("merge: the leader's last merge of %d hashes took %.3f s (%llu replicas seen)\n",
           REPLICAS, lead.merge_seconds, (unsigned long long)lead.replicas_seen);
    cr_session_rate *rates = NULL;
    size_t n = 0;
    uint64_t merged = 0;
    cr_error err;
    for (int i = 0; i < REPLICAS && !rates; i++)
        if (cr_replica_rates(reps[i], NULL, 0, &rates, &n, &merged, &err) != CR_REPLICA_RATES)
            rates = NULL;
    if (rates) {
        cr_table *t;
        double p0 = bench_now();
        cr_status st = cr_core_cluster_plan(cores[0], rates, n, &t, &err);
        printf("plan: %zu merged owners planned in %.3f s%s\n", n, bench_now() - p0,
               st == CR_OK ? "" : " (failed)");
        if (st == CR_OK)
            cr_table_free(t);
        free(rates);
    }
    for (int i = 0; i < REPLICAS; i++) {
        cr_replica_stop(reps[i]);
        cr_core_free(cores[i]);
    }
}

typedef struct drainer {
    pthread_t t;
    cr_core *core;
    uint64_t takes, owners;
} drainer;

/* The sync thread's part of the hot path's cost: a take (and a lookup of
 * each distinct owner) every 0.25 s, as a push at --sync-interval 0.25. */
static void *drain(void *arg)
{
    drainer *d = arg;
    while (!atomic_load(&stop)) {
        usleep(250000);
        size_t n;
        int all;
        free(cr_core_touched_take(d->core, &n, &all));
        d->takes++;
        d->owners += n;
    }
    return NULL;
}

#define RUNS 9

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One core tracking touched owners (room for 16 M a take, so the loop's
 * millions a second never overflow it) against one that does not. */
static void record_on_off(void)
{
    cr_core *off = core_new(), *on = core_new();
    cr_error err;
    if (cr_core_track_touched(on, (size_t)1 << 24, &err) != CR_OK)
        exit(1);
    drainer d = {.core = on};
    atomic_store(&stop, 0);
    pthread_create(&d.t, NULL, drain, &d);
    double ratio[RUNS];
    for (int k = 0; k < RUNS; k++) {
        double a = record_rate(off, 1), b = record_rate(on, 1);
        ratio[k] = b / a;
        printf("record: run %d: touched off %.0f calls/s, on %.0f calls/s (%.3fx)\n", k + 1, a,
               b, ratio[k]);
    }
    atomic_store(&stop, 1);
    pthread_join(d.t, NULL);
    qsort(ratio, RUNS, sizeof *ratio, by_value);
    printf("record: median of %d on/off ratios %.3fx (%llu takes, %.0f owners each)\n", RUNS,
           ratio[RUNS / 2], (unsigned long long)d.takes,
           d.takes ? (double)d.owners / (double)d.takes : 0.0);
    cr_core_free(on);
    cr_core_free(off);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    double secs = 10;
    if (argc > 1)
        n_owners = strtoull(argv[1], NULL, 10);
    if (argc > 2)
        per_s = strtoull(argv[2], NULL, 10);
    if (argc > 3)
        secs = atof(argv[3]);
    char url[128] = "";
    pid_t redis = -1;
    if (argc > 4 && *argv[4])
        snprintf(url, sizeof url, "%s", argv[4]);
    else
        redis = start_redis(url, sizeof url);
    sync_cost(url, redis, secs);
    record_on_off();
    if (redis > 0) {
        kill(redis, SIGKILL);
        waitpid(redis, NULL, 0);
        unlink(url + 5);
    }
    return 0;
}
