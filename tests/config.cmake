# The option rows and the sidecar's composed configuration (server/config.c
# over every component's rows).
if(TARGET cacheroute_server)
  cr_add_cunit_test(test_config SOURCES test_config.c LIBS cacheroute_server)
  target_compile_definitions(test_config PRIVATE
    CR_TEST_MODEL_CONFIGS="${CMAKE_SOURCE_DIR}/tests/fixtures/model-configs")
endif()
