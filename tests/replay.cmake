# The replay library: parser, generator, cache, baselines and the event
# loop, on hand-computed cases (no timing). The cache is tested through
# its private header too (replay/internal.h).
if(TARGET cacheroute_replay)
  cr_add_cunit_test(test_replay SOURCES test_replay.c LIBS cacheroute_replay)
  target_include_directories(test_replay PRIVATE ${CMAKE_SOURCE_DIR}/replay)
endif()
