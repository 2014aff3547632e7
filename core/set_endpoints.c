/* SetEndpoints: the whole set replaced (endpoints.c publishes it), or
 * while following a leader checked and kept (adopt_endpoints.c). */
#include "internal.h"

cr_status cr_core_set_endpoints(cr_core *c, const cr_endpoint_spec *v, size_t n,
                                cr_core_members_event *out, cr_error *err)
{
    cr_core_members_event ev = {.by = "set"};
    pthread_mutex_lock(&c->members_lock);
    const cr_endpoints *old = cr_members_current(c);
    cr_endpoints *e;
    cr_status st = cr_endpoints_apply(old, v, n, core_now(c), &e, &ev.change, err);
    if (st == CR_OK && (st = cr_members_keep_own(c, v, n, err)) != CR_OK)
        cr_endpoints_release(e);
    if (st == CR_OK && (ev.followed = cr_members_followed(c)) != 0) {
        cr_endpoints_release(e); /* checked: the leader's set stays */
        ev.change = (cr_endpoints_change){0};
        ev.version = old ? old->version : 0;
        ev.n_slots = old ? old->n_slots : 0;
    } else if (st == CR_OK) {
        st = cr_members_publish(c, old, e, &ev, err);
    }
    pthread_mutex_unlock(&c->members_lock);
    cr_endpoints_release(old);
    if (st != CR_OK)
        return st;
    if (!ev.followed)
        cr_members_report(c, &ev);
    if (out)
        *out = ev;
    return CR_OK;
}
