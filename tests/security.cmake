# The sidecar's authorization pieces on their own: which Plan requests need
# an admin (read off the wire format) and the admin token file.
if(TARGET cacheroute_server)
  cr_add_cunit_test(test_authz SOURCES test_authz.c LIBS cacheroute_server)
endif()
