/* GetNodeProfile: the prober's latest snapshot and GPU 0's cost model
 * against it. */
#include "internal.h"

cr_status cr_core_profile(cr_core *c, const cr_node_snapshot **snap, cr_inject_model *model,
                          cr_error *err)
{
    *snap = cr_probe_acquire(c->probe);
    return cr_injector_model(c->injector, *snap, 0, model, err);
}
