/* cacheroute common: the words every component shares. Small and
 * dependency-free (libc and POSIX threads only), so that linking it pulls in
 * nothing else.
 *
 *   status and error   cr_status, cr_error: how every fallible call reports
 *   hashing            cr_mix64
 *   clock              cr_mono_s: the one monotonic clock
 *   numbers            cr_parse_double, cr_parse_i64: the one strict parser
 *   text               cr_utf8_sequence: the one UTF-8 check
 *   published pointer  cr_ref, cr_published: a refcounted value that one
 *                      writer replaces while readers keep what they took
 *   ticker             cr_ticker: a stoppable periodic thread
 *   files              cr_file_open, cr_file_read: how a file given by path
 *                      is read (never blocking on a FIFO)
 */
#ifndef CR_COMMON_H
#define CR_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---- status and error -------------------------------------------------- */

#define CR_ERRLEN 256

typedef enum cr_status {
    CR_OK = 0,
    CR_EINVAL, /* bad input; the error message names the field and value */
    CR_ENOMEM, /* allocation failed or the input is too large to handle */
    CR_ESTATE  /* the call is valid but not allowed in the current mode; the
                * message says which mode and what is allowed instead */
} cr_status;

/* Error text filled in by calls that can fail; meaningful only after a
 * failure. */
typedef struct cr_error {
    char msg[CR_ERRLEN];
} cr_error;

/* Formats err->msg and returns st, so a failure reads as one statement:
 * return cr_fail(err, CR_EINVAL, "x must be > 0, got %g", x); */
cr_status cr_fail(cr_error *err, cr_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- hashing ------------------------------------------------------------ */

/* A stable 64-bit mix (the splitmix64 finalizer): the same on every platform
 * and run, for fallback shards and hash tables. Pure. Inline: every hash
 * table probe starts with it. */
static inline uint64_t cr_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* ---- sorting ------------------------------------------------------------ */

#define CR_SORT_RECORD_BYTES 16

/* Sorts n records of CR_SORT_RECORD_BYTES bytes each, every one led by a
 * uint64_t key (native byte order), by key ascending and stable (equal
 * keys keep their order), through tmp (room for n records, not overlapping
 * records). Returns the sorted array, records or tmp (the other then holds
 * garbage), or NULL when out of memory, with nothing moved. A radix sort:
 * two passes over memory for any keys (sort.c). No state: thread-safe. */
void *cr_sort_records(void *records, void *tmp, size_t n);

/* The key that orders int64 values as cr_sort_records orders keys. */
uint64_t cr_sort_key_i64(int64_t v);

/* A cr_sort_records record of an int64 value: its key and its index. */
typedef struct cr_sorted_i64 {
    uint64_t key; /* cr_sort_key_i64 of the value */
    uint64_t at;  /* where the value was */
} cr_sorted_i64;

/* The n int64 values stored at base, base + stride, ... (each value at the
 * start of its stride-byte element, as an owner leads its struct), sorted
 * by value, stable: a malloc'd array of n records (the caller frees it),
 * or NULL when out of memory. */
cr_sorted_i64 *cr_sort_i64(const void *base, size_t stride, size_t n);

/* ---- clock ---------------------------------------------------------------- */

/* Seconds on CLOCK_MONOTONIC (arbitrary epoch; never jumps). Thread-safe. */
double cr_mono_s(void);

/* A cr_mono_s time as an absolute timespec, for waits on condition variables
 * created with CLOCK_MONOTONIC. Negative times give 0. */
struct timespec cr_timespec_of(double s);

/* Seconds on some clock the caller chooses; components that keep time take
 * one of these, so tests and the replay tool can run them in virtual time. */
typedef struct cr_clock_source {
    double (*now)(void *ctx);
    void *ctx;
} cr_clock_source;

/* ---- files ---------------------------------------------------------------- */

/* Every file the sidecar is given to read (the endpoints file, the state
 * file, TLS, token and password files, the model config) is opened here:
 * O_RDONLY | O_NONBLOCK | O_CLOEXEC, so a FIFO or a device never blocks
 * the open (a start, a reload or a poller waited on one for ever, deaf to
 * signals), then fstat'd, and anything but a regular file refused. label
 * names the file in messages: its path, or "--tls-cert PATH". */
struct stat;

/* An fd open on path for reading, *st its fstat; or -1 with errno as open
 * left it (ENOENT: missing) or EINVAL (not a regular file) and err "LABEL:
 * cannot read: WHY" (the system's reason, or "it must be a regular file,
 * not a FIFO"). */
int cr_file_open(const char *path, const char *label, struct stat *st, cr_error *err);

/* The whole of path, at most max bytes, in one malloc'd block *out (the
 * caller frees it) with a NUL after its *len bytes. CR_EINVAL as
 * cr_file_open, "LABEL: N bytes, at most MAX" (its size, checked before a
 * byte is read), "LABEL: more than MAX bytes" (it grew as it was read) or
 * "LABEL: cannot read: WHY"; CR_ENOMEM. */
cr_status cr_file_read(const char *path, const char *label, size_t max, char **out,
                       size_t *len, cr_error *err);

/* ---- numbers --------------------------------------------------------------- */

/* Parses the whole of s as a finite number: no leading or trailing space, no
 * overflow or underflow, no nan or inf. Returns 0, or -1 (*out unspecified). */
int cr_parse_double(const char *s, double *out);

/* Parses the whole of s as a decimal int64 (optional sign, no space). Returns
 * 0, or -1 on anything else or overflow. */
int cr_parse_i64(const char *s, int64_t *out);

/* ---- text ------------------------------------------------------------------ */

/* The length of the well-formed UTF-8 sequence that s[0] (a byte >= 0x80)
 * leads, with avail bytes from s on, or 0 when it leads none (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF). Pure. Inline: the
 * wire's strings and the picker's JSON bodies call it per character. */
static inline size_t cr_utf8_sequence(const uint8_t *s, size_t avail)
{
    uint8_t c = s[0], lo = 0x80, hi = 0xbf; /* the second byte's range */
    size_t k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    if (c < 0xc2 || c > 0xf4 || avail < k)
        return 0;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return k;
}

/* ---- published pointer ----------------------------------------------------- */

/* A reference count embedded in a value that readers share. The value is
 * freed by fn when the last reference goes. */
typedef struct cr_ref {
    atomic_size_t n;
    void (*free_fn)(struct cr_ref *ref);
} cr_ref;

/* Sets the count to 1 (the caller's). */
void cr_ref_init(cr_ref *ref, void (*free_fn)(cr_ref *ref));
/* Adds a reference; the caller must already hold one. NULL is ignored. */
void cr_ref_retain(cr_ref *ref);
/* Drops a reference; the last one frees. NULL is ignored. Thread-safe. */
void cr_ref_release(cr_ref *ref);

/* The current value of something that one writer replaces now and then (an
 * installed table, a probe snapshot) while many readers use it: a reader
 * takes a reference, reads without locks, releases; a swap never frees a
 * value a reader still holds, and no reader sees half a value. The mutex
 * guards the pointer swap only. Each publish gets the next generation
 * (1 for the first). */
typedef struct cr_published {
    pthread_mutex_t lock;
    cr_ref *current;
    uint64_t generation;
} cr_published;

void cr_published_init(cr_published *p);
/* Releases the current value. No other call may be running. */
void cr_published_destroy(cr_published *p);
/* The current value with a reference taken (NULL before the first publish),
 * and its generation (0 then) when generation is not NULL. Thread-safe. */
cr_ref *cr_published_acquire(cr_published *p, uint64_t *generation);
/* Makes value current, taking over the caller's reference, and releases the
 * old one. Returns value's generation. Thread-safe. */
uint64_t cr_published_swap(cr_published *p, cr_ref *value);
/* cr_published_swap giving value the generation g (>= 1) instead of the
 * next one, for restoring a saved value; later swaps count on from g. */
void cr_published_swap_as(cr_published *p, cr_ref *value, uint64_t g);

/* ---- ticker ------------------------------------------------------------------ */

/* A thread that calls fn(ctx, ticker) every interval_s seconds, counted from
 * the end of the previous call (so a slow call never piles up calls), until
 * stopped. fn may wait with cr_ticker_sleep_until, which stop cuts short. */
typedef struct cr_ticker cr_ticker;
typedef void (*cr_tick_fn)(void *ctx, cr_ticker *ticker);

/* Starts the thread; the first call comes interval_s after the start.
 * interval_s must be finite and > 0. Returns NULL with err filled when the
 * interval is bad, memory runs out or the thread cannot start. */
cr_ticker *cr_ticker_start(double interval_s, cr_tick_fn fn, void *ctx, cr_error *err);

/* Sleeps until deadline_s (cr_mono_s time). Returns 1 as soon as the ticker
 * is stopping (even mid-sleep), 0 when the deadline passed. With t NULL it
 * sleeps plainly and returns 0 (work done before a ticker exists). Matches
 * the cr_wait_fn shape below, with ctx the ticker. */
int cr_ticker_sleep_until(cr_ticker *t, double deadline_s);

/* A wait a long piece of work can be cut short by: returns nonzero to stop. */
typedef int (*cr_wait_fn)(void *ctx, double deadline_s);
int cr_ticker_wait(void *ticker, double deadline_s); /* cr_ticker_sleep_until as a cr_wait_fn */

/* Stops the thread promptly (a call in progress is finished first), joins
 * it and frees the ticker. NULL is ignored. Not from fn itself. */
void cr_ticker_stop(cr_ticker *t);

#endif
