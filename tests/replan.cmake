# Stable replans and churn (planner/replan.c): the planner library alone.
cr_add_cunit_test(test_replan SOURCES test_replan.c LIBS cacheroute_planner)
