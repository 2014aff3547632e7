# Admission at the door (admit/): the objectives' table, the decision, the
# queue's bounds and fairness, the counts; one threaded case for TSan.
if(TARGET cacheroute_admit)
  cr_add_cunit_test(test_admit SOURCES test_admit.c LIBS cacheroute_admit Threads::Threads
                    LABELS concurrency)
endif()
# The door around the route on the core, in virtual time; a route and a
# dispatch on two threads for TSan.
if(TARGET cacheroute_core)
  cr_add_cunit_test(test_door SOURCES test_door.c LIBS cacheroute_core Threads::Threads
                    LABELS concurrency)
endif()
# Admission in the replay: objectives per session, cacheroute-door.
if(TARGET cacheroute_replay)
  cr_add_cunit_test(test_replay_door SOURCES test_replay_door.c LIBS cacheroute_replay)
endif()
