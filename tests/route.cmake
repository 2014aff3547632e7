# Routes in motion: weighted arrivals and --route-by bounded and live on the
# core, in virtual time (one threaded case for TSan).
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_route SOURCES test_route.c LIBS cacheroute_core LABELS concurrency)
endif()
# Route and the ttft rule on the core, in virtual time.
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_ttft SOURCES test_ttft.c LIBS cacheroute_core)
endif()
# Routes and outcomes by caller: ids, quotas, bounded work (issue 30).
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_callers SOURCES test_callers.c LIBS cacheroute_core Threads::Threads
                    LABELS concurrency)
endif()
# Engines' KV events on the core's prefix index.
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_kv SOURCES test_kv.c LIBS cacheroute_core)
endif()
# vLLM's KV-event payloads decoded (kvevents/), and applied on the core;
# the test packs its payloads with msgpack-c.
if(TARGET cacheroute_kvevents)
  pkg_check_modules(TEST_MSGPACK REQUIRED IMPORTED_TARGET msgpack)
  cr_add_cunit_test(test_kv_decode SOURCES test_kv_decode.c
                    LIBS cacheroute_kvevents PkgConfig::TEST_MSGPACK)
endif()
# The engines' own load (scraped queues, index bound, adapters) on the
# core, in virtual time (one threaded case for TSan).
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_engine_load SOURCES test_engine_load.c LIBS cacheroute_core
                    Threads::Threads LABELS concurrency)
endif()
# The KV-event subscriber following the endpoint set: addresses, ranks, the
# links a set wants, and the following from other threads (concurrency).
if(TARGET cacheroute_kvevents)
  cr_add_cunit_test(test_kv_follow SOURCES test_kv_follow.c LIBS cacheroute_kvevents
                    LABELS concurrency)
endif()
if(TARGET test_kv_follow)
  # Debian's libzmq is not built with TSan: the integration suites' suppressions.
  set_tests_properties(test_kv_follow PROPERTIES
    ENVIRONMENT "TSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan.supp")
endif()
