# The replica (replica/): its pure parts, the core's touched set, and the
# lease and fence scripts against a real redis-server it starts itself on a
# unix socket (Debian's redis-server, scripts/deps-test.txt).
if(TARGET cacheroute_replica)
  pkg_check_modules(TEST_HIREDIS REQUIRED IMPORTED_TARGET hiredis)
  cr_add_cunit_test(test_replica SOURCES test_replica.c
                    LIBS cacheroute_replica PkgConfig::TEST_HIREDIS LABELS concurrency)
  target_include_directories(test_replica PRIVATE ${CMAKE_SOURCE_DIR}/replica)
endif()
# The endpoint set across replicas: its blobs and a follower core's adoption.
if(TARGET cacheroute_replica)
  cr_add_cunit_test(test_replica_members SOURCES test_replica_members.c
                    LIBS cacheroute_replica LABELS concurrency)
endif()
