# The application core on its own (virtual time; one threaded case each for
# TSan), and its closed loop (receipts, outcomes, served hits).
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_core SOURCES test_core.c LIBS cacheroute_core cacheroute_answer
                    LABELS concurrency)
  cr_add_cunit_test(test_core_loop SOURCES test_core_loop.c LIBS cacheroute_core
                    LABELS concurrency)
endif()
