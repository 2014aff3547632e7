# Integration suites: the real cacheroute-sidecar and cacheroute binaries on
# 127.0.0.1, driven by Debian's python3-grpcio (/usr/bin/python3, not a pyenv
# one). Stubs are generated at run time from proto/ and /usr/share/grpc-proto.
# One ctest per file so they run in parallel (ctest -j); each file starts its
# own sidecars on port 0 and kills them when done.
if(TARGET cacheroute-sidecar AND TARGET cacheroute)
  # The sidecar with its test hooks settable from CACHEROUTE_TEST_*
  # variables (tests/hooks/): the suites start it for tests that set one.
  add_executable(cacheroute-sidecar-hooked ${CMAKE_SOURCE_DIR}/server/main.c
                                           hooks/sidecar_hooks.c)
  target_link_libraries(cacheroute-sidecar-hooked PRIVATE cacheroute_server)
  foreach(suite rpc errors health_reflection config lifecycle cli injection observability
                outcomes abuse state tls resources stream replicas kv_events dashboard route
                endpoints epp epp_demo discover k8s scrape)
    add_test(NAME integration_${suite}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_${suite}.py
                     --sidecar $<TARGET_FILE:cacheroute-sidecar>
                     --sidecar-hooked $<TARGET_FILE:cacheroute-sidecar-hooked>
                     --cli $<TARGET_FILE:cacheroute>
                     --plan-dump $<TARGET_FILE:plan_dump>
                     --proto-dir ${CMAKE_SOURCE_DIR}/proto)
    set_tests_properties(integration_${suite} PROPERTIES LABELS "integration" TIMEOUT 300)
  endforeach()
  # Under ThreadSanitizer the suites that load the sidecar from many threads
  # also run in the "concurrency" pass. Races reported inside Debian's
  # uninstrumented gRPC are suppressed (tsan.supp); races in our code are not.
  if(CR_SANITIZE STREQUAL "thread")
    foreach(suite rpc lifecycle health_reflection observability outcomes tls stream replicas
                  kv_events route endpoints epp discover k8s scrape)
      set_tests_properties(integration_${suite} PROPERTIES
        LABELS "integration;concurrency"
        ENVIRONMENT "TSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan.supp")
    endforeach()
  endif()
endif()
# cacheroute-replay: the real tool on its own (determinism, errors, a
# hand-computed replay, plots) and its cacheroute routes against a real
# sidecar's over gRPC; it needs the replay binary on top of the others.
if(TARGET cacheroute-replay AND TARGET cacheroute-sidecar AND TARGET cacheroute)
  add_test(NAME integration_replay
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_replay.py
                   --replay $<TARGET_FILE:cacheroute-replay>
                   --sidecar $<TARGET_FILE:cacheroute-sidecar>
                   --cli $<TARGET_FILE:cacheroute>
                   --plan-dump $<TARGET_FILE:plan_dump>
                   --proto-dir ${CMAKE_SOURCE_DIR}/proto)
  set_tests_properties(integration_replay PROPERTIES LABELS "integration" TIMEOUT 300)
endif()
