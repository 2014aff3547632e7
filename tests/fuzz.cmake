# Fuzz targets (tests/fuzz/): one per request decoder and its validator,
# each a LLVMFuzzerTestOneInput on the shared driver (fuzz/fuzz.h). With
# -DCR_FUZZ=ON (clang) they link libFuzzer; otherwise fuzz/standalone.c's
# main() runs the files it is given. Either way ctest's fuzz_corpus_<name>
# (label unit) runs each target once over its seed corpus,
# tests/fuzz/corpus/<name>/ (made by tests/fuzz/make_corpus.sh, committed).
# scripts/test.sh fuzzes each for a bounded time; `cr_fuzz` builds them all.
if(TARGET cacheroute_server AND TARGET cacheroute_replay)
  set(CR_FUZZ_TARGETS plan record_arrival select_injection get_rates forget get_node_profile
                      report_outcome get_decision get_stats watch_decisions health_check
                      reflection trace state route report_kv_events kv_decode endpoints_file
                      epp_stream scrape_parse)
  add_library(cr_fuzz_driver STATIC fuzz/driver.c fuzz/env.c fuzz/strict.c fuzz/unary.c)
  target_include_directories(cr_fuzz_driver PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
  target_link_libraries(cr_fuzz_driver PUBLIC cacheroute_server)
  add_custom_target(cr_fuzz)
  foreach(t ${CR_FUZZ_TARGETS})
    if(CR_FUZZ)
      add_executable(fuzz_${t} fuzz/fuzz_${t}.c)
      target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    else()
      add_executable(fuzz_${t} fuzz/fuzz_${t}.c fuzz/standalone.c)
    endif()
    target_link_libraries(fuzz_${t} PRIVATE cr_fuzz_driver m)
    add_dependencies(cr_fuzz fuzz_${t})
    file(GLOB seeds CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${t}/*)
    if(NOT seeds) # libFuzzer without files would fuzz for ever
      message(FATAL_ERROR "tests/fuzz/corpus/${t}/ is empty: run tests/fuzz/make_corpus.sh")
    endif()
    file(GLOB regressions CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions/${t}-*)
    add_test(NAME fuzz_corpus_${t} COMMAND fuzz_${t} ${seeds} ${regressions})
    set_tests_properties(fuzz_corpus_${t} PROPERTIES TIMEOUT 300 LABELS "unit;fuzz")
  endforeach()
  target_link_libraries(fuzz_trace PRIVATE cacheroute_replay)
  target_link_libraries(fuzz_kv_decode PRIVATE cacheroute_kvevents)
  target_link_libraries(fuzz_scrape_parse PRIVATE cacheroute_scrape)
  target_link_libraries(fuzz_epp_stream PRIVATE cacheroute_epp cacheroute_envoy_proto)
  pkg_check_modules(FUZZ_LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
  target_link_libraries(fuzz_state PRIVATE PkgConfig::FUZZ_LIBCRYPTO)
endif()
