/* DrainEndpoint: one endpoint drained or undrained, or while following a
 * leader checked only. */
#include <string.h>

#include "internal.h"

cr_status cr_core_drain_endpoint(cr_core *c, const char *id, int drain,
                                 cr_core_members_event *out, cr_error *err)
{
    cr_core_members_event ev = {.by = drain ? "drain" : "undrain", .id = id};
    cr_endpoint_state want = drain ? CR_ENDPOINT_DRAINING : CR_ENDPOINT_ACTIVE;
    pthread_mutex_lock(&c->members_lock);
    const cr_endpoints *old = cr_members_current(c);
    uint32_t slot = cr_endpoints_find(old, id);
    cr_status st = CR_OK;
    int same = 0;
    if (!old)
        st = cr_fail(err, CR_EINVAL, "no endpoints are set (--endpoints-file, SetEndpoints)");
    else if (slot == UINT32_MAX)
        st = cr_fail(err, CR_EINVAL, "endpoint \"%.128s\" is not in the set", id ? id : "");
    else if ((ev.followed = cr_members_followed(c)) != 0)
        same = 1; /* checked: the leader's set changes it */
    else if ((same = old->slot[slot].state == want) == 0)
        st = cr_members_set_state(c, old, slot, want, core_now(c), 0, &ev, err);
    if (same) { /* nothing to do here: the version stays */
        ev.version = old->version;
        ev.n_slots = old->n_slots;
    }
    pthread_mutex_unlock(&c->members_lock);
    cr_endpoints_release(old);
    if (st != CR_OK)
        return st;
    if (!same)
        cr_members_report(c, &ev);
    if (out)
        *out = ev;
    return CR_OK;
}
