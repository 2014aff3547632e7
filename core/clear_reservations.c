/* ClearReservations: the injector's reservation timelines dropped at the
 * core's now (an admin call). */
#include "internal.h"

cr_status cr_core_clear_reservations(cr_core *c, const cr_inject_clear *which,
                                     cr_inject_cleared *out, cr_error *err)
{
    const cr_node_snapshot *snap = cr_probe_acquire(c->probe);
    cr_status st = cr_injector_clear(c->injector, snap, which, core_now(c) * 1e3, out, err);
    cr_node_snapshot_release(snap);
    return st;
}
