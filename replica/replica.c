/* The replica's life: start (the first contact, the seed), the thread, the
 * figures and the merged rates it offers, stop. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "replica_test.h"

#define OFFSET_SLACK_S 1e-3

double cr_replica_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cr_replica_clock(const cr_replica *r)
{
    return cr_replica_wall() + r->test_skew_s;
}

double cr_replica_offset(cr_replica *r)
{
    double fresh = cr_replica_clock(r) - cr_core_now(r->core);
    if (!r->offset_known || fabs(fresh - r->offset) > OFFSET_SLACK_S) {
        r->offset = fresh;
        r->offset_known = 1;
    }
    return r->offset;
}

void cr_replica_event_to(cr_replica *r, cr_replica_event_kind kind, const char *detail,
                         double skew_s, uint64_t generation)
{
    if (!r->hooks.event)
        return;
    cr_replica_event ev = {kind, detail ? detail : "", skew_s, generation};
    r->hooks.event(r->hooks.ctx, &ev);
}

int cr_replica_first_time(char *last, size_t len, const char *why)
{
    if (strcmp(why, last) == 0)
        return 0;
    snprintf(last, len, "%s", why);
    return 1;
}

/* The lease is renewed at least 3 times a TTL, so one lost renewal never
 * costs it. */
static double period_of(const cr_replica *r)
{
    double p = r->cfg.lease_ttl_s / 3;
    return p < r->cfg.sync_interval_s ? p : r->cfg.sync_interval_s;
}

static int stopping(cr_replica *r)
{
    pthread_mutex_lock(&r->lock);
    int stop = r->stop;
    pthread_mutex_unlock(&r->lock);
    return stop;
}

static void *run(void *arg)
{
    cr_replica *r = arg;
    double next_push = cr_mono_s() + r->cfg.sync_interval_s;
    while (!stopping(r)) {
        double now = cr_mono_s();
        int push_due = now >= next_push;
        if (push_due)
            next_push = now + r->cfg.sync_interval_s;
        cr_replica_sync(r, push_due);
        double until = cr_mono_s() + period_of(r);
        if (until > next_push)
            until = next_push;
        while (cr_mono_s() < until && !stopping(r)) {
            int got = cr_replica_wait(r, until);
            if (got < 0)
                break; /* woken: a sync now (a merged GetRates waits for one) */
            if (got && !r->stats.leader && r->link.ctx)
                cr_replica_fetch_table(r);
            if (got && r->link.ctx) /* a set published, or calls forwarded */
                cr_replica_members_sync(r);
        }
    }
    return NULL;
}

/* --replica-id, checked already by cr_replica_start; else the host name,
 * checked here as one. */
static cr_status resolve_id(cr_replica *r, const cr_replica_config *cfg, cr_error *err)
{
    if (cfg->replica_id && *cfg->replica_id) {
        snprintf(r->id, sizeof r->id, "%s", cfg->replica_id);
        return CR_OK;
    }
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        return cr_fail(err, CR_EINVAL, "--replica-id is empty and the host name is unknown");
    snprintf(r->id, sizeof r->id, "%s", host);
    cr_replica_config probe = *cfg;
    probe.replica_id = r->id;
    if (cr_replica_config_check(&probe, CR_CLOCK_SECONDS, err) != CR_OK)
        return cr_fail(err, CR_EINVAL, "the host name as --replica-id: %s", err->msg);
    return CR_OK;
}

static void make_keys(cr_replica *r, const char *cluster)
{
    snprintf(r->k_mine, sizeof r->k_mine, "cr:{%s}:r:%s", cluster, r->id);
    snprintf(r->k_set, sizeof r->k_set, "cr:{%s}:replicas", cluster);
    snprintf(r->k_lease, sizeof r->k_lease, "cr:{%s}:lease", cluster);
    snprintf(r->k_table, sizeof r->k_table, "cr:{%s}:table", cluster);
    snprintf(r->k_notify, sizeof r->k_notify, "cr:{%s}:notify", cluster);
    snprintf(r->k_members, sizeof r->k_members, "cr:{%s}:endpoints", cluster);
    snprintf(r->k_forward, sizeof r->k_forward, "cr:{%s}:forward", cluster);
}

/* The first contact, before serving: the published table and our own
 * counts, so a restarted replica answers the cluster's routes at once. */
static cr_status first_contact(cr_replica *r, cr_error *err)
{
    if (cr_link_up(&r->link)) {
        cr_replica_fetch_table(r);
        cr_replica_fetch_members(r);
        cr_replica_seed(r);
    }
    if (r->link.ctx) {
        r->up_known = r->was_up = 1;
        r->stats.backend_up = 1;
        cr_replica_event_to(r, CR_REPLICA_BACKEND_UP, r->cfg.state_backend, 0, 0);
        return CR_OK;
    }
    if (r->cfg.backend_start == CR_BACKEND_REQUIRE)
        return cr_fail(err, CR_EINVAL,
                       "--state-backend %.100s: cannot reach Redis: %.100s "
                       "(--backend-start require)",
                       r->cfg.state_backend, r->link.why);
    r->up_known = 1;
    snprintf(r->down_why, sizeof r->down_why, "%s", r->link.why);
    cr_replica_event_to(r, CR_REPLICA_BACKEND_DOWN, r->link.why, 0, 0);
    return CR_OK;
}

/* replica_test.h's settings, read by each replica as it starts: 0 but in
 * tests. */
static _Atomic double test_skew_s, test_merge_demand_s;

void cr_replica_test_clock_skew(double s) { atomic_store(&test_skew_s, isfinite(s) ? s : 0); }

void cr_replica_test_merge_demand(double s)
{
    atomic_store(&test_merge_demand_s, isfinite(s) && s > 0 ? s : 0);
}

static cr_replica *fail(cr_replica *r)
{
    cr_link_close(&r->link);
    cr_replica_wake_close(r);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->merged_cond);
    free(r);
    return NULL;
}

cr_replica *cr_replica_start(const cr_replica_config *cfg, cr_core *core,
                             double replan_interval_s, const cr_replica_hooks *hooks,
                             cr_error *err)
{
    const cr_estimator_config *ec = cr_core_estimator_config(core);
    if (cr_replica_config_check(cfg, ec->clock, err) != CR_OK)
        return NULL;
    cr_replica *r = calloc(1, sizeof *r);
    if (!r) {
        cr_fail(err, CR_ENOMEM, "out of memory starting the replica");
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->merged_cond, &ca);
    pthread_condattr_destroy(&ca);
    r->wake_fd[0] = r->wake_fd[1] = -1;
    r->cfg = *cfg;
    r->core = core;
    r->half_life = ec->half_life;
    r->replan_interval_s = replan_interval_s;
    if (hooks)
        r->hooks = *hooks;
    r->stats.last_sync_age_s = -1;
    r->last_push_mono = -1;
    r->need_full = 1;
    r->last_plan = -1e300;
    cr_replica_parse_url(cfg->state_backend, &r->link.url, err);
    r->link.timeout_s = (double)cfg->backend_timeout_ms / 1e3;
    r->link.password_file = cfg->state_backend_password_file;
    r->test_skew_s = atomic_load(&test_skew_s);
    double demand = atomic_load(&test_merge_demand_s);
    r->merge_demand_s = demand > 0 ? demand : CR_REPLICA_MERGE_DEMAND_S;
    r->sub.url = r->link.url;
    r->sub.timeout_s = r->link.timeout_s;
    r->sub.password_file = r->link.password_file;
    if (cr_replica_wake_open(r) != 0) {
        cr_fail(err, CR_ENOMEM, "cannot open the replica's wake pipe");
        return fail(r);
    }
    if (resolve_id(r, cfg, err) != CR_OK)
        return fail(r);
    make_keys(r, cfg->cluster);
    if (cr_core_track_touched(core, (size_t)ec->max_owners, err) != CR_OK ||
        first_contact(r, err) != CR_OK)
        return fail(r);
    if (pthread_create(&r->thread, NULL, run, r) != 0) {
        cr_fail(err, CR_ENOMEM, "cannot start the replica's thread");
        return fail(r);
    }
    r->started = 1;
    return r;
}

void cr_replica_stop(cr_replica *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_mutex_unlock(&r->lock);
    cr_replica_wake(r);
    if (r->started)
        pthread_join(r->thread, NULL);
    if (r->stats.leader && r->link.ctx) /* a successor need not wait for the TTL */
        cr_script_release(&r->link, r->k_lease, r->id);
    free(r->merged.rates);
    cr_replica_members_free(r);
    fail(r);
}

void cr_replica_reload(cr_replica *r)
{
    if (!r || !r->cfg.state_backend_password_file || !*r->cfg.state_backend_password_file)
        return;
    pthread_mutex_lock(&r->lock);
    r->reauth = 1;
    pthread_mutex_unlock(&r->lock);
}

void cr_replica_stats_read(cr_replica *r, cr_replica_stats *out)
{
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    out->last_sync_age_s = r->last_push_mono < 0 ? -1 : cr_mono_s() - r->last_push_mono;
    pthread_mutex_unlock(&r->lock);
}

static int cmp_rate(const void *key, const void *elem)
{
    int64_t x = *(const int64_t *)key, y = ((const cr_session_rate *)elem)->owner;
    return (x > y) - (x < y);
}

/* Copies the merged rates (listed, or all) decayed to now; r is locked. */
static cr_replica_answer copy_rates(cr_replica *r, const int64_t *owners, size_t n,
                                    cr_session_rate **out, size_t *n_out, cr_error *err)
{
    const cr_merged *m = &r->merged;
    size_t k = n ? n : m->n;
    double now = cr_replica_clock(r);
    *out = malloc((k ? k : 1) * sizeof **out);
    if (!*out) {
        cr_fail(err, CR_ENOMEM, "out of memory for %zu merged rates", k);
        return CR_REPLICA_NOMEM;
    }
    for (size_t i = 0; i < k; i++) {
        const cr_session_rate *s =
            n ? bsearch(&owners[i], m->rates, m->n, sizeof *m->rates, cmp_rate) : &m->rates[i];
        double rate = s ? cr_replica_decayed(s->rate, m->at, now, r->half_life) : 0;
        (*out)[i] = (cr_session_rate){n ? owners[i] : s->owner, rate};
    }
    *n_out = k;
    return CR_REPLICA_RATES;
}

cr_replica_answer cr_replica_rates(cr_replica *r, const int64_t *owners, size_t n,
                                   cr_session_rate **out, size_t *n_out,
                                   uint64_t *merged_owners, cr_error *err)
{
    cr_replica_answer a = CR_REPLICA_UNAVAILABLE;
    *out = NULL;
    *n_out = 0;
    pthread_mutex_lock(&r->lock);
    double now = cr_mono_s();
    r->merged_wanted_until = now + r->merge_demand_s;
    if (!r->merged.rates && r->stats.backend_up) {
        /* The first merged call waits for one merge, not failing every
         * client's first call: the thread is woken to merge at once. */
        double until = now + fmin(CR_REPLICA_FIRST_MERGE_WAIT_S,
                                  2 * r->cfg.sync_interval_s +
                                      2 * (double)r->cfg.backend_timeout_ms / 1e3);
        struct timespec ts = cr_timespec_of(until);
        cr_replica_wake(r);
        while (!r->merged.rates && r->stats.backend_up && cr_mono_s() < until)
            pthread_cond_timedwait(&r->merged_cond, &r->lock, &ts);
    }
    *merged_owners = r->merged.n;
    if (!r->stats.backend_up)
        cr_fail(err, CR_EINVAL, "the state backend %.100s is down: %.120s",
                r->cfg.state_backend, r->down_why);
    else if (!r->merged.rates)
        cr_fail(err, CR_EINVAL,
                "no merge of the replicas' counts yet; retry after --sync-interval (%g s)",
                r->cfg.sync_interval_s);
    else
        a = copy_rates(r, owners, n, out, n_out, err);
    pthread_mutex_unlock(&r->lock);
    return a;
}
