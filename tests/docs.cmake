# The reference in docs/ against the code (label "docs"): every flag of the
# built sidecar's --help and every rpc of the proto must be named in docs/.
if(TARGET cacheroute-sidecar)
  add_test(NAME docs_check
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/docs_check.py
                   --sidecar $<TARGET_FILE:cacheroute-sidecar>
                   --proto ${CMAKE_SOURCE_DIR}/proto/cacheroute/v1/cacheroute.proto
                   --docs ${CMAKE_SOURCE_DIR}/docs)
  set_tests_properties(docs_check PROPERTIES LABELS "docs" TIMEOUT 60)
endif()
