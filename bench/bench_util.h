/* Timing and memory readings shared by the benchmarks. */
#ifndef CR_BENCH_UTIL_H
#define CR_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The decimal after argv's `name` (as "--blocks 1024"), else def. */
static inline uint64_t bench_flag(int argc, char **argv, const char *name, uint64_t def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return strtoull(argv[i + 1], NULL, 10);
    return def;
}

/* Whether argv holds `name` (a switch, as "--array"). */
static inline int bench_has(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

/* This thread's CPU time, seconds: a shared machine's other work does not
 * count in it, though its cache traffic still does. */
static inline double bench_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
