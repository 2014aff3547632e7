/* Test hooks of the replica, for its tests and the test build of the
 * sidecar (tests/hooks/): never called by production code. Process-wide,
 * read by each replica as it starts. Thread-safe. */
#ifndef CR_REPLICA_TEST_H
#define CR_REPLICA_TEST_H

/* Adds s seconds (finite) to later replicas' wall clocks, for the skew
 * test. */
void cr_replica_test_clock_skew(double s);

/* Later replicas keep merges coming s seconds (finite, > 0; else the
 * default) after a merged GetRates instead of CR_REPLICA_MERGE_DEMAND_S,
 * for the pacing test. */
void cr_replica_test_merge_demand(double s);

#endif
