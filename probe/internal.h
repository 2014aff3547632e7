/* Internal to the probe library: the CUDA probe, snapshot assembly, the probe
 * with an injectable wait (which lets the prober's ticker interrupt a probe's
 * sleep), and the sysfs and NIC counter helpers. The pure parts shared with
 * tests are in probe_test.h. */
#ifndef CR_PROBE_INTERNAL_H
#define CR_PROBE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "probe.h"
#include "probe_test.h"

/* Loads library (dlopen) and probes every device into gpus (room for
 * CR_PROBE_MAX_GPUS), timing host-to-device copies when measure_h2d.
 * Returns 1 with *n set when the driver initialised (possibly 0 devices),
 * or 0 with reason filled. cuda.c, or cuda_stub.c in builds without cuda.h. */
int cr_cuda_probe(const char *library, int measure_h2d, cr_gpu_info *gpus, size_t *n, char *reason,
                  size_t reason_len);

/* One probe with an injectable wait (cr_ticker_wait with a ticker or NULL;
 * nonzero from it abandons the NIC sample); the snapshot holds one reference
 * and carries generation. */
const cr_node_snapshot *cr_probe_node(const cr_probe_config *cfg, cr_wait_fn wait, void *ctx,
                                      uint64_t generation, cr_error *err);

/* A snapshot holding one reference, copying the arrays given. NULL when out
 * of memory. */
cr_node_snapshot *cr_snapshot_new(const cr_gpu_info *gpus, size_t n_gpus, const cr_nic_info *nics,
                                  size_t n_nics);
/* A snapshot's embedded reference count (what cr_published holds), and the
 * snapshot a reference belongs to; NULL gives NULL both ways. Only for
 * snapshots from cr_snapshot_new. */
cr_ref *cr_snapshot_ref(const cr_node_snapshot *snap);
const cr_node_snapshot *cr_snapshot_of_ref(cr_ref *ref);

/* ---- sysfs text files (sysfs.c) ---- */

/* Formats a path; -1 when it does not fit in len. */
int cr_path_fmt(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Reads a small text file into buf, trailing whitespace stripped. -1 when it
 * is missing or the read fails (sysfs answers EINVAL for some attributes of
 * a down link). */
int cr_read_text(const char *path, char *buf, size_t len);

/* Reads a file holding one unsigned decimal number. */
int cr_read_u64(const char *path, uint64_t *v);

/* Calls fn for each entry of dir except "." and ".."; nothing when dir
 * cannot be opened. */
typedef void (*cr_dir_fn)(void *ctx, const char *dir, const char *name);
void cr_for_each_entry(const char *dir, cr_dir_fn fn, void *ctx);

/* ---- NIC counters (nic_sample.c) ---- */

struct cr_nic_counter {
    char *rx_path, *tx_path; /* owned */
    double unit_bytes;       /* bytes per counter unit: 1, or 4 for IB *_data */
    uint64_t rx, tx;         /* last sample */
    int valid;               /* the last sample read both counters */
};

/* Reads c's counters into c->rx, c->tx and c->valid. */
void cr_nic_counter_read(struct cr_nic_counter *c);

#endif
