#include "signals.h"

#include <pthread.h>
#include <string.h>

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
    {SIGHUP, "SIGHUP", CR_SIGNAL_RELOAD, "reload"},
    {SIGUSR1, "SIGUSR1", CR_SIGNAL_SNAPSHOT, "snapshot"},
    {SIGUSR2, "SIGUSR2", CR_SIGNAL_STATS, "stats"},
};
#define N_SIGNALS (sizeof SIGNALS / sizeof SIGNALS[0])

static void signal_set(sigset_t *set)
{
    sigemptyset(set);
    for (size_t i = 0; i < N_SIGNALS; i++)
        sigaddset(set, SIGNALS[i].sig);
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
    for (size_t i = 0; i < N_SIGNALS; i++)
        if (SIGNALS[i].sig == sig)
            return SIGNALS[i].name;
    return "unknown";
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
        for (size_t i = 0; i < N_SIGNALS; i++) {
            if (SIGNALS[i].sig != sig)
                continue;
            if (SIGNALS[i].event < 0)
                return sig;
            run_hooks(h, i);
        }
    }
}
