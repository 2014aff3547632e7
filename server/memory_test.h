/* Test hooks of the sidecar's memory limit (memory.c), for its tests and
 * the test build of the sidecar (tests/hooks/): never called by production
 * code. */
#ifndef CR_MEMORY_TEST_H
#define CR_MEMORY_TEST_H

/* Reads the cgroup hierarchy under root and the process's own cgroups
 * from self (a file like /proc/self/cgroup) instead of the real ones. Call
 * before cr_config_load. */
void cr_memory_test_cgroup(const char *root, const char *self);

#endif
