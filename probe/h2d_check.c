/* cr_h2d_check: a deliberately plain host-to-device bandwidth measurement,
 * to cross-check the probe on a GPU machine.
 *
 *   usage: cr_h2d_check [DEVICE [MIB [ITERS]]]      defaults: 0 256 20
 *
 * Pinned host memory from cuMemAllocHost, a context of its own from
 * cuCtxCreate, one untimed copy, then ITERS back-to-back cuMemcpyHtoD calls
 * timed as a whole: total bytes / total time, no best-of. It shares no code
 * with the probe on purpose. It then runs the probe (cr_node_probe) and
 * prints both; exit status 0 when they agree within 20%, 1 when not, 2 when
 * either could not run. Like the sidecar, it loads libcuda with dlopen. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe.h"

static CUresult (*p_init)(unsigned int);
static CUresult (*p_device_get)(CUdevice *, int);
static CUresult (*p_ctx_create)(CUcontext *, unsigned int, CUdevice);
static CUresult (*p_ctx_destroy)(CUcontext);
static CUresult (*p_mem_alloc_host)(void **, size_t);
static CUresult (*p_mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_memcpy_htod)(CUdeviceptr, const void *, size_t);
static CUresult (*p_ctx_synchronize)(void);

#define SYM(var, name)                                                                             \
    if (!(*(void **)&(var) = dlsym(lib, name))) {                                                  \
        fprintf(stderr, "cr_h2d_check: %s not found\n", name);                                     \
        return -1;                                                                                 \
    }

static int resolve(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "cr_h2d_check: %s\n", dlerror());
        return -1;
    }
    SYM(p_init, "cuInit");
    SYM(p_device_get, "cuDeviceGet");
    SYM(p_ctx_create, "cuCtxCreate_v2");
    SYM(p_ctx_destroy, "cuCtxDestroy_v2");
    SYM(p_mem_alloc_host, "cuMemAllocHost_v2");
    SYM(p_mem_alloc, "cuMemAlloc_v2");
    SYM(p_memcpy_htod, "cuMemcpyHtoD_v2");
    SYM(p_ctx_synchronize, "cuCtxSynchronize");
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Returns GB/s (10^9 B/s), or -1. Memory is left to process exit. */
static double simple_h2d(int device, size_t bytes, int iters)
{
    CUdevice dev;
    CUcontext ctx;
    void *host;
    CUdeviceptr buf;
    if (resolve() || p_init(0) || p_device_get(&dev, device) || p_ctx_create(&ctx, 0, dev) ||
        p_mem_alloc_host(&host, bytes) || p_mem_alloc(&buf, bytes))
        return -1;
    memset(host, 1, bytes);
    if (p_memcpy_htod(buf, host, bytes) || p_ctx_synchronize())
        return -1;
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
        if (p_memcpy_htod(buf, host, bytes))
            return -1;
    }
    if (p_ctx_synchronize())
        return -1;
    double gbps = (double)bytes * iters / (now_s() - t0) / 1e9;
    p_ctx_destroy(ctx);
    return gbps;
}

int main(int argc, char **argv)
{
    int device = argc > 1 ? atoi(argv[1]) : 0;
    long mib = argc > 2 ? atol(argv[2]) : 256;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    if (device < 0 || mib < 1 || iters < 1) {
        fprintf(stderr, "usage: cr_h2d_check [DEVICE [MIB [ITERS]]]\n");
        return 2;
    }
    double simple = simple_h2d(device, (size_t)mib << 20, iters);
    if (simple <= 0) {
        fprintf(stderr, "cr_h2d_check: the plain copy loop failed on device %d\n", device);
        return 2;
    }
    printf("plain loop: device %d, pinned, %ld MiB x %d: %.2f GB/s\n", device, mib, iters, simple);

    cr_probe_config cfg;
    cr_probe_config_default(&cfg);
    cfg.nic_sample_s = 0;
    cr_error err;
    const cr_node_snapshot *snap = cr_node_probe(&cfg, &err);
    if (!snap || (size_t)device >= snap->n_gpus || snap->gpus[device].h2d_gbps <= 0) {
        fprintf(stderr, "cr_h2d_check: probe gave no h2d for device %d: %s\n", device,
                snap ? snap->reason : err.msg);
        cr_node_snapshot_release(snap);
        return 2;
    }
    double probed = snap->gpus[device].h2d_gbps;
    double off = (probed - simple) / simple;
    printf("probe:      device %d (%s): %.2f GB/s, %+.1f%% from the plain loop\n", device,
           snap->gpus[device].name, probed, 100 * off);
    cr_node_snapshot_release(snap);
    return off > 0.2 || off < -0.2 ? 1 : 0;
}
