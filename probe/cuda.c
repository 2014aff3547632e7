/* GPUs through the CUDA driver API, resolved with dlopen/dlsym so that the
 * sidecar has no link-time dependency on libcuda and starts on nodes without
 * a GPU or driver.
 *
 * The H2D measurement briefly retains each device's primary context (a few
 * hundred MiB of device memory while it lasts) and releases it afterwards,
 * so the sidecar holds no GPU memory between probes. A device too full for
 * the buffers reports h2d_gbps = 0 and the cost model falls back. */
#include "internal.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define H2D_BYTES ((size_t)128 << 20)
#define H2D_REPS 5 /* timed copies after one warm-up; the best one counts */

typedef struct cuda_api {
    CUresult (*init)(unsigned int);
    CUresult (*get_error_name)(CUresult, const char **);
    CUresult (*device_get_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_get_name)(char *, int, CUdevice);
    CUresult (*device_get_uuid)(CUuuid *, CUdevice);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*device_total_mem)(size_t *, CUdevice);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*primary_ctx_release)(CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*ctx_synchronize)(void);
    CUresult (*mem_host_alloc)(void **, size_t, unsigned int);
    CUresult (*mem_free_host)(void *);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*memcpy_htod)(CUdeviceptr, const void *, size_t);
} cuda_api;

/* Raw export names: cuda.h #defines cuMemAlloc to cuMemAlloc_v2 and so on,
 * but dlsym sees the exports themselves. `alt` is the pre-11.4 name. */
static const struct {
    const char *name, *alt;
    size_t offset;
} SYMBOLS[] = {
    {"cuInit", NULL, offsetof(cuda_api, init)},
    {"cuGetErrorName", NULL, offsetof(cuda_api, get_error_name)},
    {"cuDeviceGetCount", NULL, offsetof(cuda_api, device_get_count)},
    {"cuDeviceGet", NULL, offsetof(cuda_api, device_get)},
    {"cuDeviceGetName", NULL, offsetof(cuda_api, device_get_name)},
    {"cuDeviceGetUuid_v2", "cuDeviceGetUuid", offsetof(cuda_api, device_get_uuid)},
    {"cuDeviceGetAttribute", NULL, offsetof(cuda_api, device_get_attribute)},
    {"cuDeviceTotalMem_v2", NULL, offsetof(cuda_api, device_total_mem)},
    {"cuDevicePrimaryCtxRetain", NULL, offsetof(cuda_api, primary_ctx_retain)},
    {"cuDevicePrimaryCtxRelease_v2", NULL, offsetof(cuda_api, primary_ctx_release)},
    {"cuCtxSetCurrent", NULL, offsetof(cuda_api, ctx_set_current)},
    {"cuCtxSynchronize", NULL, offsetof(cuda_api, ctx_synchronize)},
    {"cuMemHostAlloc", NULL, offsetof(cuda_api, mem_host_alloc)},
    {"cuMemFreeHost", NULL, offsetof(cuda_api, mem_free_host)},
    {"cuMemAlloc_v2", NULL, offsetof(cuda_api, mem_alloc)},
    {"cuMemFree_v2", NULL, offsetof(cuda_api, mem_free)},
    {"cuMemcpyHtoD_v2", NULL, offsetof(cuda_api, memcpy_htod)},
};

/* The library stays loaded once found: libcuda cannot be unloaded safely
 * after cuInit, and dlopen of a loaded library only bumps a count. */
static int load(cuda_api *api, const char *library, char *reason, size_t len)
{
    void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(reason, len, "dlopen %s failed: %s", library, dlerror());
        return 0;
    }
    for (size_t i = 0; i < sizeof SYMBOLS / sizeof SYMBOLS[0]; i++) {
        void *sym = dlsym(lib, SYMBOLS[i].name);
        if (!sym && SYMBOLS[i].alt)
            sym = dlsym(lib, SYMBOLS[i].alt);
        if (!sym) {
            snprintf(reason, len, "%s lacks %s (driver too old?)", library, SYMBOLS[i].name);
            dlclose(lib);
            return 0;
        }
        /* POSIX guarantees void * and function pointers share a representation. */
        memcpy((char *)api + SYMBOLS[i].offset, &sym, sizeof sym);
    }
    return 1;
}

static int fail(const cuda_api *api, const char *what, CUresult rc, char *reason, size_t len)
{
    const char *name = NULL;
    if (api->get_error_name(rc, &name) != CUDA_SUCCESS || !name)
        name = "unknown error";
    snprintf(reason, len, "%s failed: %s (%d)", what, name, (int)rc);
    return 0;
}

#define TRY(name, call)                                                                            \
    do {                                                                                           \
        if ((rc = (call)) != CUDA_SUCCESS) {                                                       \
            *what = (name);                                                                        \
            return rc;                                                                             \
        }                                                                                          \
    } while (0)

static CUresult describe(const cuda_api *api, int ordinal, CUdevice *dev, cr_gpu_info *g,
                         const char **what)
{
    CUresult rc;
    CUuuid uuid;
    size_t mem;
    int sm, major, minor, khz;
    memset(g, 0, sizeof *g);
    TRY("cuDeviceGet", api->device_get(dev, ordinal));
    TRY("cuDeviceGetName", api->device_get_name(g->name, (int)sizeof g->name - 1, *dev));
    TRY("cuDeviceGetUuid", api->device_get_uuid(&uuid, *dev));
    TRY("cuDeviceTotalMem", api->device_total_mem(&mem, *dev));
    TRY("cuDeviceGetAttribute",
        api->device_get_attribute(&sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, *dev));
    TRY("cuDeviceGetAttribute",
        api->device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *dev));
    TRY("cuDeviceGetAttribute",
        api->device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *dev));
    TRY("cuDeviceGetAttribute",
        api->device_get_attribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, *dev));
    g->index = (uint32_t)ordinal;
    cr_gpu_format_uuid((const unsigned char *)uuid.bytes, g->uuid);
    g->memory_total_bytes = mem;
    g->sm_count = (uint32_t)sm;
    g->cc_major = (uint32_t)major;
    g->cc_minor = (uint32_t)minor;
    g->clock_khz = (uint32_t)khz;
    cr_gpu_set_peak(g);
    return CUDA_SUCCESS;
}

/* Copies from pinned memory are synchronous, and the context sync inside
 * the timed span makes sure of it. */
static double best_copy(const cuda_api *api, CUdeviceptr dst, const void *src)
{
    double best = 0;
    for (int rep = 0; rep <= H2D_REPS; rep++) {
        double t0 = cr_mono_s();
        if (api->memcpy_htod(dst, src, H2D_BYTES) != CUDA_SUCCESS ||
            api->ctx_synchronize() != CUDA_SUCCESS)
            return 0;
        double gbps = (double)H2D_BYTES / (cr_mono_s() - t0) / 1e9;
        if (rep > 0 && gbps > best)
            best = gbps;
    }
    return best;
}

static double measure_h2d(const cuda_api *api, CUdevice dev)
{
    CUcontext ctx;
    void *host = NULL;
    CUdeviceptr buf = 0;
    double gbps = 0;
    if (api->primary_ctx_retain(&ctx, dev) != CUDA_SUCCESS)
        return 0;
    if (api->ctx_set_current(ctx) == CUDA_SUCCESS &&
        api->mem_host_alloc(&host, H2D_BYTES, 0) == CUDA_SUCCESS &&
        api->mem_alloc(&buf, H2D_BYTES) == CUDA_SUCCESS) {
        memset(host, 0x5a, H2D_BYTES); /* fault the pages in before timing */
        gbps = best_copy(api, buf, host);
    }
    if (buf)
        api->mem_free(buf);
    if (host)
        api->mem_free_host(host);
    api->ctx_set_current(NULL);
    api->primary_ctx_release(dev);
    return gbps;
}

int cr_cuda_probe(const char *library, int measure_h2d_flag, cr_gpu_info *gpus, size_t *n,
                  char *reason, size_t reason_len)
{
    cuda_api api;
    CUresult rc;
    const char *what;
    int count = 0;
    *n = 0;
    if (!load(&api, library, reason, reason_len))
        return 0;
    if ((rc = api.init(0)) != CUDA_SUCCESS)
        return fail(&api, "cuInit", rc, reason, reason_len);
    if ((rc = api.device_get_count(&count)) != CUDA_SUCCESS)
        return fail(&api, "cuDeviceGetCount", rc, reason, reason_len);
    if (count > CR_PROBE_MAX_GPUS)
        count = CR_PROBE_MAX_GPUS;
    for (int i = 0; i < count; i++) {
        CUdevice dev;
        if ((rc = describe(&api, i, &dev, &gpus[i], &what)) != CUDA_SUCCESS)
            return fail(&api, what, rc, reason, reason_len);
        if (measure_h2d_flag)
            gpus[i].h2d_gbps = measure_h2d(&api, dev);
    }
    *n = (size_t)count;
    reason[0] = '\0';
    return 1;
}
