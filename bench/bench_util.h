/* Timing and memory readings shared by the benchmarks. */
#ifndef CR_BENCH_UTIL_H
#define CR_BENCH_UTIL_H

#include <stdio.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A /proc/self/status field in bytes (VmRSS, VmHWM), or -1. */
static inline long bench_status_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            sscanf(line + n + 1, "%ld", &kb);
    if (f)
        fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Resets the peak RSS (VmHWM) to the current RSS; 0 on success. */
static inline int bench_reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

#endif
