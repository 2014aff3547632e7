#include "signals.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static const struct {
    int sig;
    const char *name;
    int event; /* cr_signal_event, or -1: drain and exit */
    const char *msg;
} SIGNALS[] = {
    {SIGTERM, "SIGTERM", -1, NULL},
    {SIGINT, "SIGINT", -1, NULL},
    {SIGQUIT, "SIGQUIT", -1, NULL},
    /* Every other signal whose default is to end the process and that no
     * fault raises: a stray one (an alarm, a CPU or file limit, a power
     * event) drains as SIGTERM does instead of killing mid-write. */
    {SIGALRM, "SIGALRM", -1, NULL},
    {SIGVTALRM, "SIGVTALRM", -1, NULL},
    {SIGPROF, "SIGPROF", -1, NULL},
    {SIGXCPU, "SIGXCPU", -1, NULL},
    {SIGXFSZ, "SIGXFSZ", -1, NULL},
    {SIGIO, "SIGIO", -1, NULL},
    {SIGPWR, "SIGPWR", -1, NULL},
    {SIGSTKFLT, "SIGSTKFLT", -1, NULL},
    {SIGHUP, "SIGHUP", CR_SIGNAL_RELOAD, "reload"},
    {SIGUSR1, "SIGUSR1", CR_SIGNAL_SNAPSHOT, "snapshot"},
    {SIGUSR2, "SIGUSR2", CR_SIGNAL_STATS, "stats"},
};
#define N_SIGNALS (sizeof SIGNALS / sizeof SIGNALS[0])

/* The real-time signals the C library leaves to programs end the process
 * by default too: they drain, named "SIGRTMIN+n". */
static int realtime(int sig) { return sig >= SIGRTMIN && sig <= SIGRTMAX; }

static void signal_set(sigset_t *set)
{
    sigemptyset(set);
    for (size_t i = 0; i < N_SIGNALS; i++)
        sigaddset(set, SIGNALS[i].sig);
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
        sigaddset(set, sig);
}

void cr_signals_block(void)
{
    sigset_t set;
    signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int cr_signals_on(cr_signal_hooks *h, cr_signal_event ev, const char *name, cr_signal_hook fn,
                  void *ctx)
{
    if (h->n[ev] >= CR_SIGNAL_MAX_HOOKS)
        return -1;
    int k = h->n[ev]++;
    h->hook[ev][k].name = name;
    h->hook[ev][k].fn = fn;
    h->hook[ev][k].ctx = ctx;
    return 0;
}

const char *cr_signal_name(int sig)
{
    static char rt[64][16]; /* by the main thread, the one that waits */
    for (size_t i = 0; i < N_SIGNALS; i++)
        if (SIGNALS[i].sig == sig)
            return SIGNALS[i].name;
    if (!realtime(sig) || sig - SIGRTMIN >= 64)
        return "unknown";
    snprintf(rt[sig - SIGRTMIN], sizeof rt[0], "SIGRTMIN+%d", sig - SIGRTMIN);
    return rt[sig - SIGRTMIN];
}

/* Logs the event with the names of its hooks, then runs them in order. */
static void run_hooks(const cr_signal_hooks *h, size_t i)
{
    int ev = SIGNALS[i].event;
    json_t *names = json_array();
    for (int k = 0; k < h->n[ev]; k++)
        json_array_append_new(names, json_string(h->hook[ev][k].name));
    cr_log(CR_LOG_INFO, SIGNALS[i].msg,
           json_pack("{s:s,s:o}", "signal", SIGNALS[i].name, "hooks", names));
    for (int k = 0; k < h->n[ev]; k++)
        h->hook[ev][k].fn(h->hook[ev][k].ctx);
}

int cr_signals_wait(const cr_signal_hooks *h)
{
    sigset_t set;
    signal_set(&set);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (realtime(sig))
            return sig;
        for (size_t i = 0; i < N_SIGNALS; i++) {
            if (SIGNALS[i].sig != sig)
                continue;
            if (SIGNALS[i].event < 0)
                return sig;
            run_hooks(h, i);
        }
    }
}

/* ---- the exit watchdog ---- */

static double watchdog_at; /* written before the thread starts */
static atomic_int watchdog_off;

static void *watchdog(void *arg)
{
    (void)arg;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double left = watchdog_at - ((double)now.tv_sec + (double)now.tv_nsec * 1e-9);
    if (left > 0) {
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    if (atomic_load(&watchdog_off))
        return NULL; /* the teardown finished: the process is ending on its own */
    cr_log(CR_LOG_WARN, "exiting: the teardown outlived the grace + 1 s", NULL);
    _exit(0);
    return NULL;
}

void cr_exit_watchdog(double at_mono_s)
{
    pthread_t t;
    pthread_attr_t a;
    watchdog_at = at_mono_s;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, watchdog, NULL) != 0)
        cr_log(CR_LOG_WARN, "cannot start the exit watchdog", NULL);
    pthread_attr_destroy(&a);
}

void cr_exit_watchdog_disarm(void) { atomic_store(&watchdog_off, 1); }
