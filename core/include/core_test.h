/* Test hooks of the core, for its tests and the test build of the sidecar
 * (tests/hooks/): never called by production code. Process-wide, so they
 * reach a core that a program builds itself. Thread-safe. */
#ifndef CR_CORE_TEST_H
#define CR_CORE_TEST_H

/* Every later snapshot sleeps s seconds (0 < s < 3600; anything else: 0,
 * none) after writing half of PATH.tmp, so a test can kill the process
 * mid-write. */
void cr_core_test_snapshot_stall(double s);

#endif
