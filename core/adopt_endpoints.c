/* The endpoint set with replicas (core.h, "replicas"): a follower adopts
 * its leader's set slot for slot; a new leader applies its own set onto
 * the cluster's. Both go through cr_members_publish, as every change
 * does. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

cr_status cr_members_keep_own(cr_core *c, const cr_endpoint_spec *v, size_t n, cr_error *err)
{
    cr_endpoint_spec *own = cr_endpoint_specs_copy(v, n);
    if (!own)
        return cr_fail(err, CR_ENOMEM, "out of memory keeping %zu endpoints", n);
    free(c->own);
    c->own = own;
    c->n_own = n;
    return CR_OK;
}

/* Reports ev (when something changed) and hands it to out. */
static cr_status done(cr_core *c, cr_status st, int changed, const cr_core_members_event *ev,
                      cr_core_members_event *out)
{
    if (st == CR_OK && changed)
        cr_members_report(c, ev);
    if (st == CR_OK && out)
        *out = *ev;
    return st;
}

cr_status cr_core_follow_endpoints(cr_core *c, int follow, cr_core_members_event *out,
                                   cr_error *err)
{
    cr_core_members_event ev = {.by = "lead"};
    cr_status st = CR_OK;
    int changed = 0;
    pthread_mutex_lock(&c->members_lock);
    atomic_store_explicit(&c->members_followed, follow, memory_order_relaxed);
    const cr_endpoints *old = cr_members_current(c);
    if (!follow && c->own) {
        cr_endpoints *e;
        st = cr_endpoints_apply(old, c->own, c->n_own, core_now(c), &e, &ev.change, err);
        if (st == CR_OK)
            st = cr_members_publish(c, old, e, &ev, err);
        changed = st == CR_OK;
    }
    if (!follow && !changed) /* its retries are this replica's again */
        atomic_store_explicit(&c->next_retry, old ? old->next_retry_s : INFINITY,
                              memory_order_relaxed);
    pthread_mutex_unlock(&c->members_lock);
    cr_endpoints_release(old);
    return done(c, st, changed, &ev, out);
}

cr_status cr_core_adopt_endpoints(cr_core *c, const cr_endpoint *slots, uint32_t n,
                                  uint64_t version, cr_core_members_event *out, cr_error *err)
{
    cr_core_members_event ev = {.by = "leader"};
    cr_endpoints *e = NULL;
    cr_status st;
    pthread_mutex_lock(&c->members_lock);
    const cr_endpoints *old = cr_members_current(c);
    if (version <= c->members_adopted)
        st = cr_fail(err, CR_ESTATE,
                     "the leader's endpoint set version %llu does not move forward from the "
                     "adopted %llu",
                     (unsigned long long)version, (unsigned long long)c->members_adopted);
    else
        st = cr_endpoints_adopt(old, slots, n, version, &e, &ev.change, err);
    if (st == CR_OK)
        st = cr_members_publish(c, old, e, &ev, err);
    if (st == CR_OK)
        c->members_adopted = version;
    pthread_mutex_unlock(&c->members_lock);
    cr_endpoints_release(old);
    return done(c, st, 1, &ev, out);
}
