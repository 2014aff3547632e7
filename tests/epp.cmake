# The endpoint picker's stream (epp/, epp.h) against a real core, driven
# with Envoy's ext_proc messages built and read by protobuf-c.
if(TARGET cacheroute_epp)
  cr_add_cunit_test(test_epp_stream SOURCES test_epp_stream.c
                    LIBS cacheroute_epp cacheroute_envoy_proto)
endif()
