/* What each signal means to the sidecar. The main thread takes them all
 * with sigwait (every thread, gRPC's included, has them blocked), so none
 * can kill the process without a drain:
 *
 *   SIGTERM, SIGINT, SIGQUIT  drain and exit (cr_signals_wait returns);
 *                             so do SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU,
 *                             SIGXFSZ, SIGIO, SIGPWR, SIGSTKFLT and the
 *                             real-time signals, whose default would end
 *                             the process without one
 *   SIGHUP                    reload: run the reload hooks (certificates,
 *                             the admin token, the Redis password)
 *   SIGUSR1                   snapshot: run the snapshot hooks (state file)
 *   SIGUSR2                   log the current figures (the stats hook)
 *
 * Once a drain has begun the signals stay blocked: a second one changes
 * nothing. */
#ifndef CR_SIGNALS_H
#define CR_SIGNALS_H

#include <signal.h>

typedef enum cr_signal_event {
    CR_SIGNAL_RELOAD,   /* SIGHUP */
    CR_SIGNAL_SNAPSHOT, /* SIGUSR1 */
    CR_SIGNAL_STATS,    /* SIGUSR2 */
    CR_SIGNAL_N_EVENTS
} cr_signal_event;

#define CR_SIGNAL_MAX_HOOKS 8 /* per event */

/* Runs on the main thread, between calls being served; must not block for
 * long (the next signal waits for it). */
typedef void (*cr_signal_hook)(void *ctx);

typedef struct cr_signal_hooks {
    struct {
        const char *name; /* logged with the event: "tls" */
        cr_signal_hook fn;
        void *ctx;
    } hook[CR_SIGNAL_N_EVENTS][CR_SIGNAL_MAX_HOOKS];
    int n[CR_SIGNAL_N_EVENTS];
} cr_signal_hooks;

/* Blocks every signal above in the calling thread (so in threads it starts
 * later) and ignores SIGPIPE; call first thing in main. */
void cr_signals_block(void);

/* Adds fn(ctx) to what ev runs, after the hooks added before it. Returns 0,
 * or -1 when CR_SIGNAL_MAX_HOOKS are there already. Not thread-safe: add
 * hooks before cr_signals_wait. */
int cr_signals_on(cr_signal_hooks *h, cr_signal_event ev, const char *name, cr_signal_hook fn,
                  void *ctx);

/* Waits for signals, logging each ("reload", "snapshot", "stats") and
 * running its hooks, until one that ends the process; returns that one. */
int cr_signals_wait(const cr_signal_hooks *h);

/* "SIGTERM", "SIGRTMIN+3" */
const char *cr_signal_name(int sig);

/* Ends the process with _exit(0) at at_mono_s (cr_mono_s time) unless it
 * has ended by then: armed once the state is saved, so no teardown step
 * (gRPC core's own shutdown waits on its pollers) can outlive the promised
 * exit. Call once. */
void cr_exit_watchdog(double at_mono_s);
/* The teardown is done: the watchdog lets the process end on its own (a
 * sanitizer's report at exit included). */
void cr_exit_watchdog_disarm(void);

#endif
