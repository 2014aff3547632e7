/* SetEndpoints: the whole set replaced (endpoints.c publishes it). */
#include "internal.h"

cr_status cr_core_set_endpoints(cr_core *c, const cr_endpoint_spec *v, size_t n,
                                cr_core_members_event *out, cr_error *err)
{
    cr_core_members_event ev = {.by = "set"};
    pthread_mutex_lock(&c->members_lock);
    const cr_endpoints *old = cr_members_current(c);
    cr_endpoints *e;
    cr_status st = cr_endpoints_apply(old, v, n, core_now(c), &e, &ev.change, err);
    if (st == CR_OK)
        st = cr_members_publish(c, old, e, &ev, err);
    pthread_mutex_unlock(&c->members_lock);
    cr_endpoints_release(old);
    if (st != CR_OK)
        return st;
    cr_members_report(c, &ev);
    if (out)
        *out = ev;
    return CR_OK;
}
