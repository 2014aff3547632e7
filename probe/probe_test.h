/* Private to the probe library and its tests (on no other component's include
 * path): the pure parts of the probe that the tests check directly (the
 * peak table, UUID text, NIC scan and sampling on a fake sysfs tree), and the
 * prober's test hook. The scan, parse and table functions are pure (or touch
 * only the files named) and are safe from any thread.
 */
#ifndef CR_PROBE_TEST_H
#define CR_PROBE_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "probe.h"
#include "ticker_test.h" /* cr_ticker_test_await and _waits, for the hook below */

/* ---- pure parts ---------------------------------------------------------- */

/* Dense BF16 FLOP per clock per SM for compute capability major.minor, or 0
 * when the table has no trustworthy number (see device.c for sources). */
uint32_t cr_gpu_bf16_flop_per_clock_sm(uint32_t cc_major, uint32_t cc_minor);

/* Fills info->peak_tflops = sm_count * clock_khz * 10^3 * flop_per_clock_sm
 * / 10^12 and info->arch_known from sm_count, clock_khz, cc_major, cc_minor;
 * unknown architectures get arch_known = 0, peak 0. */
void cr_gpu_set_peak(cr_gpu_info *info);

/* Formats the driver's 16 UUID bytes as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-
 * xxxxxxxxxxxx" (lowercase hex) into out. */
void cr_gpu_format_uuid(const unsigned char bytes[16], char out[CR_GPU_UUID_LEN]);

/* Parses an InfiniBand port rate such as "100 Gb/sec (4X EDR)" into *gbps.
 * Returns 0, or -1 (and *gbps = 0) when text is not "<number> Gb/sec...". */
int cr_nic_parse_rate(const char *text, double *gbps);

/* The NICs of one scan and their last counter sample. nics is sorted by name;
 * counters is private to the scanner. */
typedef struct cr_nic_set {
    cr_nic_info *nics;
    size_t n;
    struct cr_nic_counter *counters;
    double sampled_at_s;
} cr_nic_set;

/* Lists <root>/class/net/<if> (skipping loopback and interfaces without a
 * `device` link unless wanted names them) and the ports of
 * <root>/class/infiniband/<dev>/ports/<n>, reads speed and state, and takes
 * the first counter sample, stamped now_s (seconds on any monotonic clock).
 * Utilization is 0 until cr_nic_sample. A missing root gives an empty set.
 * Returns CR_ENOMEM (err filled, *out empty) only when out of memory; free
 * the set with cr_nic_set_free either way. */
cr_status cr_nic_scan(const char *root, const char *const *wanted, size_t n_wanted, double now_s,
                      cr_nic_set *out, cr_error *err);

/* Re-reads the counters and sets each utilization from the bytes moved since
 * the previous sample: max(rx, tx) bits / (now_s - previous) / speed, clamped
 * to 0..1; 0 when the speed is unknown, time did not advance, or a counter
 * went backwards or is unreadable. */
void cr_nic_sample(cr_nic_set *set, double now_s);

void cr_nic_set_free(cr_nic_set *set);

/* ---- test hook ------------------------------------------------------------ */

/* The ticker that re-probes for p (NULL when cfg.interval_s was 0), for
 * ticker_test.h's cr_ticker_test_await: CR_TICKER_BETWEEN_CALLS counts the
 * waits between probes (the k-th begins once k - 1 re-probes have finished,
 * each published before its wait begins); CR_TICKER_IN_CALL counts the NIC
 * sampling waits inside re-probes. Valid until cr_probe_stop. */
cr_ticker *cr_probe_test_ticker(cr_probe *p);

#endif
