# Discovery (discover/): Kubernetes discovery's readers on the API server's
# shapes (test_k8s_pods); the watcher itself runs against the fake API
# server of tests/k8s/ in integration_k8s.
if(TARGET cacheroute_discover)
  cr_add_cunit_test(test_k8s_pods SOURCES test_k8s_pods.c LIBS cacheroute_discover)
  target_include_directories(test_k8s_pods PRIVATE ${CMAKE_SOURCE_DIR}/discover)
endif()
