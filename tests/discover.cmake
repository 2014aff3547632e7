# Discovery's pure parts: the KV-event address template, the DNS source's
# values, address order and specs. The DNS watcher against a real dnsmasq
# is integration/test_discover.py's.
if(TARGET cacheroute_discover)
  cr_add_cunit_test(test_discover SOURCES test_discover.c LIBS cacheroute_discover)
endif()
