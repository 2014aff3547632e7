/* Node probe: sysfs NIC discovery and utilization on fake trees built under
 * a mkdtemp directory, the BF16 peak table, UUID text, the no-driver path,
 * and the prober's thread (start, re-probe, stop), run under TSan in CI.
 *
 * No sleep decides an outcome: the prober tests wait for its ticker's thread
 * to reach a given wait (probe_test.h's cr_probe_test_ticker with
 * ticker_test.h's cr_ticker_test_await), and time is only checked against
 * bounds of half a second or more. */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cunit_main.h"
#include "probe.h"
#include "probe_test.h" /* the pure parts, and the prober's ticker */
#include "ticker_test.h"

#ifdef CR_TEST_FAKE_CUDA
#include <dlfcn.h>
#endif

#define BOGUS_CUDA "libcuda-does-not-exist.so.1"
/* A wait no working test reaches: it only keeps a broken one from hanging. */
#define HANG_S 60.0

static char root[64];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int close_rel(double got, double want)
{
    return got == want || fabs(got - want) <= 1e-9 * fabs(want);
}

/* mkdir -p of root/rel's parent directories. */
static void make_parents(const char *path)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        CU_ASSERT_FATAL(mkdir(buf, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
}

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    make_parents(path);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fputs("\n", f);
    fclose(f);
}

static void putf(const char *rel, unsigned long long v)
{
    char text[32];
    snprintf(text, sizeof text, "%llu", v);
    put(rel, text);
}

/* A net interface as the kernel lays it out: class/net/<if> with attributes,
 * and for a physical one a `device` symlink into the devices tree. speed
 * NULL leaves the attribute out (unreadable). */
static void add_if(const char *name, const char *speed, const char *operstate, int physical)
{
    char rel[256], target[512], link[512];
    snprintf(rel, sizeof rel, "class/net/%s/operstate", name);
    put(rel, operstate);
    snprintf(rel, sizeof rel, "class/net/%s/type", name);
    put(rel, strcmp(name, "lo") == 0 ? "772" : "1");
    if (speed) {
        snprintf(rel, sizeof rel, "class/net/%s/speed", name);
        put(rel, speed);
    }
    snprintf(rel, sizeof rel, "class/net/%s/statistics/rx_bytes", name);
    put(rel, "0");
    snprintf(rel, sizeof rel, "class/net/%s/statistics/tx_bytes", name);
    put(rel, "0");
    if (physical) {
        snprintf(rel, sizeof rel, "devices/pci0000:00/%s/vendor", name);
        put(rel, "0x15b3");
        snprintf(target, sizeof target, "../../../devices/pci0000:00/%s", name);
        snprintf(link, sizeof link, "%s/class/net/%s/device", root, name);
        CU_ASSERT_FATAL(symlink(target, link) == 0);
    }
}

static void add_ib_port(const char *dev, int port, const char *rate, const char *state)
{
    char rel[256];
    snprintf(rel, sizeof rel, "class/infiniband/%s/ports/%d/rate", dev, port);
    put(rel, rate);
    snprintf(rel, sizeof rel, "class/infiniband/%s/ports/%d/state", dev, port);
    put(rel, state);
    snprintf(rel, sizeof rel, "class/infiniband/%s/ports/%d/counters/port_rcv_data", dev, port);
    put(rel, "0");
    snprintf(rel, sizeof rel, "class/infiniband/%s/ports/%d/counters/port_xmit_data", dev, port);
    put(rel, "0");
}

/* The tree most tests use. */
static void build_tree(void)
{
    snprintf(root, sizeof root, "/tmp/cr_sysfs_XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
    add_if("eth10", "10000", "up", 1);
    add_if("eth25", "25000", "up", 1);
    add_if("eth100", "100000", "up", 1);
    add_if("ethunk", "-1", "up", 1);
    add_if("ethdown", "25000", "down", 1);
    add_if("ethnospeed", NULL, "up", 1);
    add_if("veth0", "10000", "up", 0);
    add_if("lo", NULL, "unknown", 0);
    add_ib_port("mlx5_0", 1, "100 Gb/sec (4X EDR)", "4: ACTIVE");
    add_ib_port("mlx5_0", 2, "400 Gb/sec (4X NDR)", "1: DOWN");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(void)
{
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const cr_nic_info *find_nic(const cr_nic_info *nics, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(nics[i].name, name) == 0)
            return &nics[i];
    }
    return NULL;
}

/* clang-format off */
static const struct {
    const char *name;
    double speed_gbps;
    int up, is_rdma;
} DEFAULT_SET[] = {
    /* sorted bytewise; veth0 (no device link) and lo are not here */
    {"eth10", 10, 1, 0},     {"eth100", 100, 1, 0}, {"eth25", 25, 1, 0},
    {"ethdown", 25, 0, 0},   {"ethnospeed", 0, 1, 0}, {"ethunk", 0, 1, 0},
    {"rdma:mlx5_0/1", 100, 1, 1}, {"rdma:mlx5_0/2", 400, 0, 1},
};
/* clang-format on */

static void test_scan_default_set(void)
{
    build_tree();
    cr_nic_set set;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_nic_scan(root, NULL, 0, 0, &set, &err), CR_OK);
    size_t want = sizeof DEFAULT_SET / sizeof DEFAULT_SET[0];
    CU_ASSERT_EQUAL_FATAL(set.n, want);
    for (size_t i = 0; i < want; i++) {
        CU_ASSERT_STRING_EQUAL(set.nics[i].name, DEFAULT_SET[i].name);
        CU_ASSERT_EQUAL(set.nics[i].speed_gbps, DEFAULT_SET[i].speed_gbps);
        CU_ASSERT_EQUAL(set.nics[i].up, DEFAULT_SET[i].up);
        CU_ASSERT_EQUAL(set.nics[i].is_rdma, DEFAULT_SET[i].is_rdma);
        CU_ASSERT_EQUAL(set.nics[i].utilization, 0);
    }
    cr_nic_set_free(&set);
    remove_tree();
}

static void test_scan_wanted_names(void)
{
    build_tree();
    const char *wanted[] = {"veth0", "lo", "eth25", "rdma:mlx5_0/2", "eth9"};
    cr_nic_set set;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_nic_scan(root, wanted, 5, 0, &set, &err), CR_OK);
    CU_ASSERT_EQUAL_FATAL(set.n, 4); /* eth9 does not exist */
    CU_ASSERT_STRING_EQUAL(set.nics[0].name, "eth25");
    CU_ASSERT_STRING_EQUAL(set.nics[1].name, "lo");
    CU_ASSERT_STRING_EQUAL(set.nics[2].name, "rdma:mlx5_0/2");
    CU_ASSERT_STRING_EQUAL(set.nics[3].name, "veth0");
    CU_ASSERT_EQUAL(set.nics[3].speed_gbps, 10);
    CU_ASSERT_EQUAL(set.nics[1].speed_gbps, 0);
    CU_ASSERT_EQUAL(set.nics[1].up, 0); /* operstate "unknown" */
    cr_nic_set_free(&set);
    remove_tree();
}

static void test_scan_missing_root(void)
{
    cr_nic_set set;
    cr_error err;
    CU_ASSERT_EQUAL(cr_nic_scan("/nonexistent/cacheroute", NULL, 0, 0, &set, &err), CR_OK);
    CU_ASSERT_EQUAL(set.n, 0);
    cr_nic_sample(&set, 1);
    cr_nic_set_free(&set);
}

static void set_counters(const char *name, unsigned long long rx, unsigned long long tx)
{
    char rel[256];
    int ib = strncmp(name, "mlx5", 4) == 0;
    snprintf(rel, sizeof rel,
             ib ? "class/infiniband/%s/counters/port_rcv_data" : "class/net/%s/statistics/rx_bytes",
             name);
    putf(rel, rx);
    snprintf(rel, sizeof rel,
             ib ? "class/infiniband/%s/counters/port_xmit_data"
                : "class/net/%s/statistics/tx_bytes",
             name);
    putf(rel, tx);
}

static void test_utilization_from_two_samples(void)
{
    build_tree();
    set_counters("eth10", 1000, 5000);
    set_counters("eth25", 7, 0);
    set_counters("eth100", 1ull << 40, 0);
    set_counters("ethunk", 0, 0);
    set_counters("mlx5_0/ports/1", 0, 0);
    cr_nic_set set;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_nic_scan(root, NULL, 0, 100.0, &set, &err), CR_OK);
    /* Over 2 s: eth10 rx 1.25e9 B = 1e10 b -> 5 Gb/s of 10 = 0.5 (tx 1 Gb/s
     * loses the max); eth25 tx 1e10 B = 40 Gb/s -> clamped to 1; eth100's rx
     * counter went backwards -> 0; ethunk has no speed -> 0; the IB port's
     * 2.5e8 units of 4 B = 8e9 b -> 4 Gb/s of 100 = 0.04. */
    set_counters("eth10", 1000 + 1250000000ull, 5000 + 250000000ull);
    set_counters("eth25", 7, 10000000000ull);
    set_counters("eth100", 5, 0);
    set_counters("ethunk", 1ull << 30, 1ull << 30);
    set_counters("mlx5_0/ports/1", 250000000ull, 1000);
    cr_nic_sample(&set, 102.0);
    const struct {
        const char *name;
        double u;
    } want[] = {
        {"eth10", 0.5}, {"eth25", 1}, {"eth100", 0}, {"ethunk", 0}, {"rdma:mlx5_0/1", 0.04}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cr_nic_info *n = find_nic(set.nics, set.n, want[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(n);
        CU_ASSERT(close_rel(n->utilization, want[i].u));
    }
    /* No time between samples: no rate. */
    cr_nic_sample(&set, 102.0);
    CU_ASSERT_EQUAL(find_nic(set.nics, set.n, "eth10")->utilization, 0);
    cr_nic_set_free(&set);
    remove_tree();
}

static void test_parse_rate(void)
{
    const struct {
        const char *text;
        int rc;
        double gbps;
    } cases[] = {
        /* clang-format off */
        {"100 Gb/sec (4X EDR)", 0, 100}, {"400 Gb/sec (4X NDR)", 0, 400},
        {"2.5 Gb/sec (1X SDR)", 0, 2.5}, {"56 Gb/sec (4X FDR)", 0, 56},
        {"200 Gb/sec", 0, 200},          {"", -1, 0},
        {"fast", -1, 0},                 {"100 Mb/sec", -1, 0},
        {"-5 Gb/sec", -1, 0},            {"nan Gb/sec", -1, 0},
        /* clang-format on */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double g = -1;
        CU_ASSERT_EQUAL(cr_nic_parse_rate(cases[i].text, &g), cases[i].rc);
        CU_ASSERT_EQUAL(g, cases[i].gbps);
    }
}

static void test_peak_table(void)
{
    const struct {
        uint32_t sm, khz, major, minor;
        int known;
        double tflops;
    } cases[] = {
        /* A100 SXM: 108 SMs x 1.41e9 Hz x 2048 = 311.86944e12 */
        {108, 1410000, 8, 0, 1, 311.86944},
        /* H100 SXM: 132 x 1.98e9 x 4096 = 1070.53056e12 */
        {132, 1980000, 9, 0, 1, 1070.53056},
        /* H100 PCIe: 114 x 1.755e9 x 4096 = 819.48672e12 */
        {114, 1755000, 9, 0, 1, 819.48672},
        /* B200: 148 x 1.965e9 x 8192 = 2382.39744e12 */
        {148, 1965000, 10, 0, 1, 2382.39744},
        /* V100 (no BF16), T4, A10 and L40S (SKU-dependent rates), RTX 50 */
        {80, 1530000, 7, 0, 0, 0},
        {40, 1590000, 7, 5, 0, 0},
        {72, 1695000, 8, 6, 0, 0},
        {142, 2520000, 8, 9, 0, 0},
        {170, 2600000, 12, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_gpu_info g = {.sm_count = cases[i].sm,
                         .clock_khz = cases[i].khz,
                         .cc_major = cases[i].major,
                         .cc_minor = cases[i].minor};
        cr_gpu_set_peak(&g);
        CU_ASSERT_EQUAL(g.arch_known, cases[i].known);
        CU_ASSERT(close_rel(g.peak_tflops, cases[i].tflops));
        CU_ASSERT_EQUAL(cr_gpu_bf16_flop_per_clock_sm(cases[i].major, cases[i].minor) != 0,
                        cases[i].known);
    }
}

static void test_uuid_format(void)
{
    unsigned char b[16];
    char out[CR_GPU_UUID_LEN];
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)(i * 17 + 10);
    cr_gpu_format_uuid(b, out);
    CU_ASSERT_STRING_EQUAL(out, "GPU-0a1b2c3d-4e5f-7081-92a3-b4c5d6e7f809");
    CU_ASSERT_EQUAL(strlen(out), CR_GPU_UUID_LEN - 1);
}

static void test_probe_config_check(void)
{
    cr_probe_config cfg;
    cr_error err;
    cr_probe_config_default(&cfg);
    CU_ASSERT_EQUAL(cr_probe_config_check(&cfg, &err), CR_OK);
    CU_ASSERT_EQUAL(cfg.interval_s, 300);
    cfg.interval_s = -1;
    CU_ASSERT_EQUAL(cr_probe_config_check(&cfg, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "interval_s must be in 0..1e+09, got -1");
    cfg.interval_s = NAN;
    CU_ASSERT_EQUAL(cr_probe_config_check(&cfg, &err), CR_EINVAL);
    cfg.interval_s = 1;
    cfg.nic_sample_s = 11;
    CU_ASSERT_EQUAL(cr_probe_config_check(&cfg, &err), CR_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "nic_sample_s"));
    cfg.nic_sample_s = 0;
    const char *names[] = {"eth0", ""};
    cfg.nic_names = names;
    cfg.n_nic_names = 2;
    CU_ASSERT_PTR_NULL(cr_probe_start(&cfg, &err));
    CU_ASSERT_STRING_EQUAL(err.msg, "nic_names[1] must be 1..127 bytes, got 0");
}

/* No NIC counter wait, so probes take milliseconds. */
static cr_probe_config probe_config(const char *sysfs, const char *cuda, double interval_s)
{
    cr_probe_config cfg;
    cr_probe_config_default(&cfg);
    cfg.sysfs_root = sysfs;
    cfg.cuda_library = cuda;
    cfg.interval_s = interval_s;
    cfg.nic_sample_s = 0;
    return cfg;
}

static cr_probe_config fast_config(double interval_s)
{
    return probe_config(root, BOGUS_CUDA, interval_s);
}

static void test_node_probe_without_driver(void)
{
    build_tree();
    cr_probe_config cfg = fast_config(0);
    cr_error err;
    const cr_node_snapshot *s = cr_node_probe(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->cuda_available, 0);
    CU_ASSERT(strlen(s->reason) > 0);
    CU_ASSERT_EQUAL(s->n_gpus, 0);
    CU_ASSERT_EQUAL(s->n_nics, sizeof DEFAULT_SET / sizeof DEFAULT_SET[0]);
    cr_node_snapshot_release(s);
    remove_tree();
}

static void test_prober_stops_mid_interval(void)
{
    build_tree();
    cr_probe_config cfg = fast_config(3600);
    cr_error err;
    cr_probe *p = cr_probe_start(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const cr_node_snapshot *s = cr_probe_acquire(p);
    CU_ASSERT_EQUAL(s->generation, 1);
    /* The thread is in its hour-long wait (the first, before any re-probe). */
    cr_ticker *t = cr_probe_test_ticker(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(cr_ticker_test_await(t, CR_TICKER_BETWEEN_CALLS, 1, HANG_S), 0);
    CU_ASSERT_EQUAL(cr_ticker_test_waits(t, CR_TICKER_IN_CALL), 0); /* no re-probe began */
    double t0 = now_s();
    cr_probe_stop(p);
    CU_ASSERT(now_s() - t0 < 1.0);
    CU_ASSERT_EQUAL(s->n_nics, sizeof DEFAULT_SET / sizeof DEFAULT_SET[0]); /* still held */
    cr_node_snapshot_release(s);
    remove_tree();
}

static void test_prober_stops_mid_sample(void)
{
    build_tree();
    cr_probe_config cfg = fast_config(0.001);
    cfg.nic_sample_s = 1; /* start takes 1 s; then each re-probe waits 1 s */
    cr_error err;
    cr_probe *p = cr_probe_start(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    /* The first re-probe is in its NIC sampling wait (the only wait inside
     * a probe), which the stop must cut short. */
    cr_ticker *t = cr_probe_test_ticker(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(cr_ticker_test_await(t, CR_TICKER_IN_CALL, 1, HANG_S), 0);
    const cr_node_snapshot *s = cr_probe_acquire(p);
    CU_ASSERT_EQUAL(s->generation, 1); /* that re-probe is not done */
    cr_node_snapshot_release(s);
    double t0 = now_s();
    cr_probe_stop(p);
    CU_ASSERT(now_s() - t0 < 0.5);
    remove_tree();
}

#ifdef CR_TEST_FAKE_CUDA
/* The success path of the CUDA probe, against tests/fixtures/fake_libcuda.c. */
static void test_cuda_fake_driver(void)
{
    cr_probe_config cfg = probe_config("/nonexistent/cacheroute", CR_TEST_FAKE_CUDA, 0);
    cr_error err;
    const cr_node_snapshot *s = cr_node_probe(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->cuda_available, 1);
    CU_ASSERT_STRING_EQUAL(s->reason, "");
    CU_ASSERT_EQUAL_FATAL(s->n_gpus, 2);
    const cr_gpu_info *h = &s->gpus[0], *a = &s->gpus[1];
    CU_ASSERT_STRING_EQUAL(h->name, "Fake H100");
    CU_ASSERT_STRING_EQUAL(h->uuid, "GPU-00102030-4050-6070-8090-a0b0c0d0e0f0");
    CU_ASSERT(h->index == 0 && h->sm_count == 132 && h->cc_major == 9 && h->cc_minor == 0);
    CU_ASSERT_EQUAL(h->clock_khz, 1980000);
    CU_ASSERT_EQUAL(h->memory_total_bytes, 80ull << 30);
    CU_ASSERT(h->arch_known && close_rel(h->peak_tflops, 1070.53056));
    CU_ASSERT(h->h2d_gbps > 0); /* host memcpy speed, whatever it is here */
    CU_ASSERT_STRING_EQUAL(a->uuid, "GPU-01112131-4151-6171-8191-a1b1c1d1e1f1");
    CU_ASSERT(a->index == 1 && a->sm_count == 108 && a->cc_major == 8);
    CU_ASSERT(a->arch_known && close_rel(a->peak_tflops, 311.86944));
    CU_ASSERT_EQUAL(a->h2d_gbps, 0); /* no room for the buffers: not measured */
    cr_node_snapshot_release(s);
    /* Every context retained and buffer allocated was given back. */
    void *lib = dlopen(CR_TEST_FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lib);
    int (*leaks)(void);
    *(void **)&leaks = dlsym(lib, "fake_cuda_leaks");
    CU_ASSERT_PTR_NOT_NULL_FATAL(leaks);
    CU_ASSERT_EQUAL(leaks(), 0);
    dlclose(lib);
}
#endif

#ifdef CR_TEST_CUDA_STUB
/* NVIDIA's link stub exports the real driver's symbols, so every name the
 * probe resolves is checked against a genuine export table; its cuInit
 * always fails, which must read as "no CUDA", not as a crash. */
static void test_cuda_stub_driver(void)
{
    cr_probe_config cfg = probe_config("/nonexistent/cacheroute", CR_TEST_CUDA_STUB, 0);
    cr_error err;
    const cr_node_snapshot *s = cr_node_probe(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->cuda_available, 0);
    CU_ASSERT_EQUAL(s->n_gpus, 0);
    CU_ASSERT_EQUAL(strncmp(s->reason, "cuInit failed", 13), 0);
    cr_node_snapshot_release(s);
}
#endif

/* Blocks until the prober has finished (and, memory allowing, published) at
 * least one re-probe that began after this call: the wait count c read now
 * means the (c+1)-th wait begins later, so the probe after it starts after
 * now, and the (c+2)-th wait begins once that probe is published. 0, or -1
 * after HANG_S. */
static int await_fresh_probe(cr_probe *p)
{
    cr_ticker *t = cr_probe_test_ticker(p);
    if (!t)
        return -1;
    uint64_t c = cr_ticker_test_waits(t, CR_TICKER_BETWEEN_CALLS);
    return cr_ticker_test_await(t, CR_TICKER_BETWEEN_CALLS, c + 2, HANG_S);
}

#define READER_ROUNDS 10

/* A reader's results; the main thread asserts on them after the join
 * (CUnit is not thread-safe). */
typedef struct reader_arg {
    cr_probe *p;
    uint64_t max_generation; /* of the snapshots taken after a re-probe */
    int rounds;              /* snapshots held across a re-probe */
    int await_failed;        /* the re-probe never came */
    int changed;             /* a held snapshot changed under its holder */
    int missing_eth10;
    int not_newer; /* the snapshot after the re-probe was not newer */
} reader_arg;

/* Holds each snapshot across a re-probe (the published one is replaced
 * while held) and checks it stays intact. */
static void *reader(void *arg)
{
    reader_arg *a = arg;
    for (int i = 0; i < READER_ROUNDS; i++) {
        const cr_node_snapshot *s = cr_probe_acquire(a->p);
        size_t n = s->n_nics;
        uint64_t gen = s->generation;
        const cr_nic_info *e = find_nic(s->nics, s->n_nics, "eth10");
        int up = e ? e->up : -1;
        if (await_fresh_probe(a->p) != 0) {
            a->await_failed++;
            cr_node_snapshot_release(s);
            break;
        }
        e = find_nic(s->nics, s->n_nics, "eth10");
        if (s->n_nics != n || s->generation != gen || (e ? e->up : -1) != up)
            a->changed++;
        if (!e)
            a->missing_eth10++;
        const cr_node_snapshot *now = cr_probe_acquire(a->p);
        if (now->generation <= gen)
            a->not_newer++;
        if (now->generation > a->max_generation)
            a->max_generation = now->generation;
        cr_node_snapshot_release(now);
        cr_node_snapshot_release(s);
        a->rounds++;
    }
    return NULL;
}

static void test_prober_reprobe_while_held(void)
{
    build_tree();
    cr_probe_config cfg = fast_config(0.002);
    cr_error err;
    cr_probe *p = cr_probe_start(&cfg, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const cr_node_snapshot *first = cr_probe_acquire(p);
    put("class/net/eth10/operstate", "down");
    /* A re-probe that began after the write: it sees eth10 down. */
    CU_ASSERT_EQUAL_FATAL(await_fresh_probe(p), 0);
    const cr_node_snapshot *later = cr_probe_acquire(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(later);
    CU_ASSERT(later->generation > first->generation);
    const cr_nic_info *e = find_nic(later->nics, later->n_nics, "eth10");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(e->up, 0);
    CU_ASSERT_EQUAL(find_nic(first->nics, first->n_nics, "eth10")->up, 1); /* the old view */
    pthread_t th[4];
    reader_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (reader_arg){.p = p};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(args[i].await_failed, 0);
        CU_ASSERT_EQUAL(args[i].rounds, READER_ROUNDS);
        CU_ASSERT_EQUAL(args[i].changed, 0);
        CU_ASSERT_EQUAL(args[i].missing_eth10, 0);
        CU_ASSERT_EQUAL(args[i].not_newer, 0);
    }
    CU_ASSERT(args[0].max_generation > later->generation);
    cr_probe_stop(p);
    cr_node_snapshot_release(first);
    cr_node_snapshot_release(later);
    remove_tree();
}

static const cr_test_case nic_tests[] = {
    {"scan: default set", test_scan_default_set},
    {"scan: wanted names", test_scan_wanted_names},
    {"scan: missing root", test_scan_missing_root},
    {"utilization from two samples", test_utilization_from_two_samples},
    {"IB rate strings", test_parse_rate},
    {NULL, NULL},
};

static const cr_test_case device_tests[] = {
    {"BF16 peak table", test_peak_table},
    {"UUID text", test_uuid_format},
    {NULL, NULL},
};

static const cr_test_case prober_tests[] = {
    {"config checks", test_probe_config_check},
    {"probe without a driver", test_node_probe_without_driver},
#ifdef CR_TEST_FAKE_CUDA
    {"probe a fake driver", test_cuda_fake_driver},
#endif
#ifdef CR_TEST_CUDA_STUB
    {"probe NVIDIA's stub driver", test_cuda_stub_driver},
#endif
    {"stop mid-interval", test_prober_stops_mid_interval},
    {"stop mid-sample", test_prober_stops_mid_sample},
    {"re-probe while snapshots are held", test_prober_reprobe_while_held},
    {NULL, NULL},
};

static const cr_test_suite suites[] = {
    {"nic", nic_tests},
    {"device", device_tests},
    {"prober", prober_tests},
};
CR_TEST_MAIN(suites)
