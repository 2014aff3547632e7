/* The test build of the sidecar (cacheroute-sidecar-hooked): the real
 * sidecar's main (server/main.c) with the components' test hooks set,
 * before main runs, from CACHEROUTE_TEST_* variables, so the integration
 * suites can stall a snapshot or skew a replica's clock in a real process.
 * The hooks are the components' test APIs (core_test.h, replica_test.h);
 * the production binary has no way to reach them.
 *   CACHEROUTE_TEST_SNAPSHOT_STALL_S  seconds a snapshot sleeps half-written
 *   CACHEROUTE_TEST_CLOCK_SKEW_S      seconds added to a replica's wall clock
 *   CACHEROUTE_TEST_MERGE_DEMAND_S    a merged GetRates' merge demand
 *   CACHEROUTE_TEST_CGROUP_ROOT,      a cgroup hierarchy and the process's own
 *   CACHEROUTE_TEST_SELF_CGROUP       cgroups file, both given or neither */
#include <stdlib.h>

#include "common.h"
#include "memory_test.h"
#include "core_test.h"
#include "replica_test.h"

/* name's value when it parses as a finite number, else 0. */
static double seconds(const char *name)
{
    const char *v = getenv(name);
    double s;
    return v && cr_parse_double(v, &s) == 0 ? s : 0;
}

__attribute__((constructor)) static void set_hooks(void)
{
    cr_core_test_snapshot_stall(seconds("CACHEROUTE_TEST_SNAPSHOT_STALL_S"));
    cr_replica_test_clock_skew(seconds("CACHEROUTE_TEST_CLOCK_SKEW_S"));
    cr_replica_test_merge_demand(seconds("CACHEROUTE_TEST_MERGE_DEMAND_S"));
    const char *root = getenv("CACHEROUTE_TEST_CGROUP_ROOT");
    const char *self = getenv("CACHEROUTE_TEST_SELF_CGROUP");
    if (root && self)
        cr_memory_test_cgroup(root, self);
}
