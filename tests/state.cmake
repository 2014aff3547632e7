# The state file on its own (core/state*.c): round trip, decay by wall
# time, every flipped byte and truncation refused, other versions and
# configs refused; snapshots while threads record (TSan: "concurrency").
# Links libcrypto itself to re-seal edited files.
if(TARGET cacheroute_core)
  pkg_check_modules(TEST_LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
  cr_add_cunit_test(test_state SOURCES test_state.c LIBS cacheroute_core PkgConfig::TEST_LIBCRYPTO
                    LABELS concurrency)
endif()
