/* The memory the sidecar may use: its cgroup's limit, and defaults of the
 * bounds on what clients can make it hold that fit it. A pod's limit is
 * its container's cgroup limit, so the chart's resources.limits.memory
 * reaches the sidecar this way. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"
#include "kvevents.h"
#include "memory_test.h"

static char cgroup_root[PATH_MAX] = "/sys/fs/cgroup";
static char self_cgroup[PATH_MAX] = "/proc/self/cgroup";

void cr_memory_test_cgroup(const char *root, const char *self)
{
    snprintf(cgroup_root, sizeof cgroup_root, "%s", root);
    snprintf(self_cgroup, sizeof self_cgroup, "%s", self);
}

/* A limit file's number; 0 for "max", a v1 "unlimited" (2^62 and more), or
 * anything unreadable. */
static uint64_t read_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    char text[64] = "";
    if (!f)
        return 0;
    if (!fgets(text, sizeof text, f))
        text[0] = '\0';
    fclose(f);
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || v >= (1ull << 62))
        return 0;
    return (uint64_t)v;
}

/* The smallest limit set on dir or any folder above it, up to root; 0 when
 * none is. */
static uint64_t lowest_up(const char *root, const char *path, const char *file)
{
    char dir[PATH_MAX], at[PATH_MAX + 64];
    uint64_t lowest = 0;
    snprintf(dir, sizeof dir, "%s", path);
    for (;;) {
        snprintf(at, sizeof at, "%s%s/%s", root, dir, file);
        uint64_t v = read_limit(at);
        if (v && (!lowest || v < lowest))
            lowest = v;
        char *slash = strrchr(dir, '/');
        if (!slash || !dir[0])
            return lowest;
        *slash = '\0';
    }
}

uint64_t cr_memory_limit(void)
{
    FILE *f = fopen(self_cgroup, "r");
    char line[PATH_MAX + 64];
    uint64_t v2 = 0, v1 = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *path = strrchr(line, ':');
        if (!path)
            continue;
        *path++ = '\0';
        if (!strcmp(line, "0:") && !v2) /* "0::/path": the unified hierarchy */
            v2 = lowest_up(cgroup_root, path, "memory.max");
        else if (strstr(line, ":memory") && !v1) { /* v1's memory controller */
            char root[PATH_MAX + 8];
            snprintf(root, sizeof root, "%s/memory", cgroup_root);
            v1 = lowest_up(root, path, "memory.limit_in_bytes");
        }
    }
    if (f)
        fclose(f);
    return v2 ? v2 : v1;
}

void cr_memory_defaults(uint64_t limit, long *quota_bytes, long *pending_reply_bytes,
                        long *decode_bytes, long *max_message_bytes, long *kv_frame_bytes)
{
    if (!limit)
        return;
    uint64_t quarter = limit / 4, eighth = limit / 8;
    *quota_bytes = (long)(quarter > (16u << 20) ? quarter : (16u << 20));
    *pending_reply_bytes = (long)(quarter > (1u << 20) ? quarter : (1u << 20));
    *decode_bytes = (long)(quarter > (1u << 20) ? quarter : (1u << 20));
    if (eighth < (uint64_t)*max_message_bytes)
        *max_message_bytes = (long)(eighth > 65536 ? eighth : 65536);
    *kv_frame_bytes = (long)cr_kv_frame_bound(limit);
}

uint64_t cr_memory_bounds(long quota_bytes, long pending_reply_bytes, long decode_bytes,
                          long kv_frame_bytes, const cr_core_config *c)
{
    return (uint64_t)quota_bytes + (uint64_t)pending_reply_bytes + (uint64_t)decode_bytes +
           CR_MEMORY_PER_OWNER * c->estimator.max_owners +
           CR_MEMORY_PER_RECEIPT * c->receipts + CR_MEMORY_PER_ROUTE * c->route.inflight_max +
           (1 + CR_KV_DECODE_BYTES_PER_BYTE) * (uint64_t)kv_frame_bytes;
}
