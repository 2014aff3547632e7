# The application core on its own (virtual time; one threaded case for TSan).
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_core SOURCES test_core.c LIBS cacheroute_core LABELS concurrency)
endif()
