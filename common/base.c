/* Errors, the mixing hash, the clock and the number parser. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

cr_status cr_fail(cr_error *err, cr_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return st;
}

double cr_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec cr_timespec_of(double s)
{
    struct timespec ts = {0, 0};
    if (!(s > 0))
        return ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) { /* rounding at the top of a second */
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* strtod skips leading space and takes a prefix; we want the whole string.
 * ERANGE covers both overflow (1e999) and underflow (1e-400). */
int cr_parse_double(const char *s, double *out)
{
    char *end;
    if (!*s || *s == ' ' || (*s >= '\t' && *s <= '\r'))
        return -1;
    errno = 0;
    *out = strtod(s, &end);
    return *end == '\0' && errno == 0 && isfinite(*out) ? 0 : -1;
}

int cr_parse_i64(const char *s, int64_t *out)
{
    char *end;
    if (!*s || !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9')))
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    *out = v;
    return *end == '\0' && errno == 0 ? 0 : -1;
}
