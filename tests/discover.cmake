# Discovery's pure parts: the KV-event address template, the DNS source's
# values, address order and specs (test_discover); Kubernetes discovery's
# readers on the API server's shapes (test_k8s_pods). The DNS watcher
# against a real dnsmasq is integration/test_discover.py's; the Kubernetes
# watcher runs against tests/k8s/'s fake API server in integration_k8s.
if(TARGET cacheroute_discover)
  cr_add_cunit_test(test_discover SOURCES test_discover.c LIBS cacheroute_discover)
  cr_add_cunit_test(test_k8s_pods SOURCES test_k8s_pods.c LIBS cacheroute_discover)
  target_include_directories(test_k8s_pods PRIVATE ${CMAKE_SOURCE_DIR}/discover)
endif()
