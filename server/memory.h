/* The memory the sidecar may use: its cgroup's limit, and the defaults of
 * the bounds on what clients can make it hold that fit it (memory.c).
 * Below the configuration (config.c), which sizes its defaults with it. */
#ifndef CR_MEMORY_H
#define CR_MEMORY_H

#include <stdint.h>

#include "core.h"

/* The process's cgroup memory limit, bytes (the lowest set on its cgroup
 * or one above it, v2 or v1); 0 when none is set. */
uint64_t cr_memory_limit(void);

/* With a limit (not 0), the defaults of the bounds on what clients can make
 * the sidecar hold, sized to it: --memory-quota-bytes (*quota_bytes),
 * --max-pending-reply-bytes (*pending_reply_bytes) and --max-decode-bytes
 * (*decode_bytes) a quarter of it each,
 * --max-message-bytes (*max_message_bytes) at most an eighth,
 * --kv-events-max-frame-bytes (*kv_frame_bytes) cr_kv_frame_bound's. Flags
 * and variables still win. */
void cr_memory_defaults(uint64_t limit, long *quota_bytes, long *pending_reply_bytes,
                        long *decode_bytes, long *max_message_bytes, long *kv_frame_bytes);

/* What the configured bounds let the sidecar hold at most, bytes: gRPC
 * core's quota (--memory-quota-bytes), answers not yet read
 * (--max-pending-reply-bytes), requests decoded (--max-decode-bytes), and
 * core's estimator owners, receipts and
 * outstanding routes (the figures below, rounded up from
 * bench/README.md's) and one KV-event frame decoded (kv_frame_bytes: the
 * frame bound with --kv-events, else 0). */
#define CR_MEMORY_PER_OWNER 48   /* estimator: 28 B measured, tables grow by half */
#define CR_MEMORY_PER_RECEIPT 800 /* receipts: 797 B each */
#define CR_MEMORY_PER_ROUTE 80    /* outstanding routes: 56 B, a ttft session 16, its id 8 */
uint64_t cr_memory_bounds(long quota_bytes, long pending_reply_bytes, long decode_bytes,
                          long kv_frame_bytes, const cr_core_config *core);

#endif
