/* cacheroute node probe: the GPUs (CUDA driver API) and NICs (sysfs) of this
 * node, published as immutable, refcounted snapshots.
 *
 * The CUDA driver is loaded at run time with dlopen(), never linked: a node
 * without a GPU or driver still probes (cuda_available = 0, with a reason)
 * and the sidecar serves on configured defaults. A build without cuda.h
 * reports "built without CUDA headers".
 *
 * Units: bandwidths follow the wire contract (proto/cacheroute/v1): NIC
 * speeds in gigabits per second, host-to-device copies in gigabytes per
 * second, G = 10^9 in both. Peaks are dense BF16 teraFLOP/s (10^12).
 *
 * Threads: a cr_probe probes on a thread of its own; readers take a
 * snapshot with cr_probe_acquire, read it without locks, and release it.
 * A swap never frees a snapshot someone still holds.
 */
#ifndef CR_PROBE_H
#define CR_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"  /* cr_status, cr_error */
#include "options.h" /* cr_option_table */

#define CR_PROBE_MAX_GPUS 64
#define CR_GPU_NAME_LEN 256
#define CR_GPU_UUID_LEN 41 /* "GPU-" + 36 + NUL */
#define CR_NIC_NAME_LEN 128
#define CR_PROBE_REASON_LEN 256
#define CR_PROBE_PATH_MAX 4000 /* bytes in sysfs_root and cuda_library */

typedef struct cr_gpu_info {
    uint32_t index; /* CUDA device ordinal */
    char name[CR_GPU_NAME_LEN];
    char uuid[CR_GPU_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint32_t sm_count;
    uint32_t cc_major, cc_minor;
    uint32_t clock_khz; /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE */
    uint64_t memory_total_bytes;
    double h2d_gbps;    /* best pinned copy, 10^9 B/s; 0 = not measured */
    double peak_tflops; /* dense BF16; 0 when !arch_known */
    int arch_known;     /* the peak table has this compute capability */
} cr_gpu_info;

typedef struct cr_nic_info {
    char name[CR_NIC_NAME_LEN]; /* "eth0", or "rdma:<device>/<port>" */
    double speed_gbps;          /* 0 = unknown */
    int up;                     /* operstate "up", or RDMA state ACTIVE */
    double utilization;         /* max(rx, tx) / speed over the last sample, 0..1 */
    int is_rdma;
} cr_nic_info;

typedef struct cr_node_snapshot {
    int cuda_available;
    char reason[CR_PROBE_REASON_LEN]; /* why not, when !cuda_available; else "" */
    size_t n_gpus;
    const cr_gpu_info *gpus;
    size_t n_nics;
    const cr_nic_info *nics; /* sorted by name (bytewise) */
    uint64_t generation;     /* 1 for a prober's first snapshot, +1 per re-probe */
} cr_node_snapshot;

typedef struct cr_probe_config {
    const char *sysfs_root;   /* --sysfs-root; NULL = "/sys" */
    const char *cuda_library; /* name passed to dlopen; NULL = "libcuda.so.1" */
    /* --nic: when n_nic_names > 0, exactly these interfaces (loopback and
     * virtual ones included, RDMA ports as "rdma:<dev>/<port>"); when 0,
     * every physical NIC and RDMA port. Names not present are left out. */
    const char *const *nic_names;
    size_t n_nic_names;
    double interval_s;   /* --probe-interval: re-probe period; 0 = start-up only */
    double nic_sample_s; /* seconds between the two counter samples; 0 = no
                          * utilization (reported 0); at most 10 */
    int measure_h2d;     /* time host-to-device copies: two 128 MiB buffers and six
                          * copies per GPU, a few hundred ms each */
    /* Optional: called with every snapshot a prober publishes (the first
     * one from cr_probe_start, the others from its thread), e.g. to log
     * it. The snapshot is valid for the duration of the call. */
    void (*on_snapshot)(void *ctx, const cr_node_snapshot *snap);
    void *on_snapshot_ctx;
} cr_probe_config;

/* The prober's option rows (--probe-interval, --nic, --sysfs-root), on
 * cr_probe_config; group "probe". A config filled from them owns its
 * --nic names and a --sysfs-root that is not the default (see
 * cr_options_release). */
extern const cr_option_table cr_probe_options;

/* The rows' defaults (all NICs among them), plus libcuda.so.1, a 1 s
 * counter sample, h2d timing on, no callback. */
void cr_probe_config_default(cr_probe_config *cfg);

/* Checks cfg (the rows' bounds, then the rest); CR_EINVAL with err naming
 * the field and value. */
cr_status cr_probe_config_check(const cr_probe_config *cfg, cr_error *err);

/* ---- snapshots ---------------------------------------------------------- */

/* Probes once, now, on the calling thread: NICs with nic_sample_s between
 * the two counter samples, and CUDA devices (h2d timed when
 * cfg->measure_h2d) inside that window. Returns a snapshot holding one
 * reference (generation 0), or NULL with err filled on a bad config
 * (CR_EINVAL) or out of memory. A missing driver or sysfs is not an error:
 * it shows in the snapshot. Thread-safe. */
const cr_node_snapshot *cr_node_probe(const cr_probe_config *cfg, cr_error *err);

/* Drops one reference to a snapshot from cr_node_probe or cr_probe_acquire;
 * the last one frees it. NULL is ignored. Thread-safe. Never call it on a
 * snapshot built by hand. */
void cr_node_snapshot_release(const cr_node_snapshot *snap);

/* ---- the prober --------------------------------------------------------- */

typedef struct cr_probe cr_probe;

/* Copies cfg (strings included), takes the first snapshot on the calling
 * thread (cr_node_probe's time: driver start-up plus the h2d timing, with
 * nic_sample_s running alongside), then, when interval_s > 0, re-probes
 * every interval_s (counted from the end of the last probe) on its own
 * thread.
 * Returns NULL with err filled on a bad config, out of memory, or when the
 * thread cannot start. */
cr_probe *cr_probe_start(const cr_probe_config *cfg, cr_error *err);

/* The newest snapshot, with a reference the caller must release. Never
 * blocks on a probe in progress (a short mutex guards the pointer only).
 * Thread-safe. */
const cr_node_snapshot *cr_probe_acquire(cr_probe *p);

/* Stops and joins the thread (promptly, even mid-interval; a CUDA probe
 * in progress is finished first) and frees the prober. Snapshots acquired
 * earlier stay valid until released. Call once, after every other call on
 * p has returned. NULL is ignored. */
void cr_probe_stop(cr_probe *p);

#endif
