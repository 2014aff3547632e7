# The fleet as named endpoints: sets, the endpoints file, the core's
# drains, removals, joins and failure detector in virtual time, the
# router's members (one threaded case for TSan: routes while the set
# changes).
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_endpoints SOURCES test_endpoints.c LIBS cacheroute_core
                    LABELS concurrency)
endif()
