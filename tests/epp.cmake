# The endpoint picker's reader (epp/): the OpenAI body reader, a prompt's
# block keys and usage (test_epp_openai); the engine mode's /tokenize
# client against a loopback HTTP server of the test's own (test_epp_tokenize).
if(TARGET cacheroute_epp)
  cr_add_cunit_test(test_epp_openai SOURCES test_epp_openai.c LIBS cacheroute_epp)
  target_include_directories(test_epp_openai PRIVATE ${CMAKE_SOURCE_DIR}/epp)
  cr_add_cunit_test(test_epp_tokenize SOURCES test_epp_tokenize.c LIBS cacheroute_epp Threads::Threads
                    LABELS concurrency)
  target_include_directories(test_epp_tokenize PRIVATE ${CMAKE_SOURCE_DIR}/epp)
endif()

# The endpoint picker's stream (epp/, epp.h) against a real core, driven
# with Envoy's ext_proc messages built and read by protobuf-c; its
# dispatch ticker runs on a thread of its own (TSan).
if(TARGET cacheroute_epp)
  cr_add_cunit_test(test_epp_stream SOURCES test_epp_stream.c
                    LIBS cacheroute_epp cacheroute_envoy_proto LABELS concurrency)
endif()
