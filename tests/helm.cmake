# Helm chart and container image checks (label "helm"). Included by
# tests/CMakeLists.txt. The first test installs the pinned tools (helm, the
# Kubernetes schema validator) into $CR_TOOLS_DIR (default <repo>/.tools) with
# scripts/helm-tools.sh; it does nothing when they are already there.
#
#   ctest -L helm --output-on-failure

set(CR_HELM_TESTS ${CMAKE_SOURCE_DIR}/helm/tests)

add_test(NAME helm_tools COMMAND sh ${CMAKE_SOURCE_DIR}/scripts/helm-tools.sh)
set_tests_properties(helm_tools PROPERTIES FIXTURES_SETUP helm_tools)

# helm lint --strict + helm template + strict Kubernetes schema validation,
# for the default values, every helm/cacheroute/ci/*.yaml, and the
# all-options file in standalone and epp modes (the InferencePool against
# helm/tests/schemas/, GIE's v1 types).
add_test(NAME helm_chart_lint_template_validate COMMAND sh ${CR_HELM_TESTS}/check_chart.sh)
# Typo keys, wrong types, bad enums... in values must fail lint and template.
add_test(NAME helm_schema_rejects_bad_values COMMAND sh ${CR_HELM_TESTS}/check_schema_negative.sh)
# The manifest validator itself rejects broken manifests.
add_test(NAME helm_validator_rejects_bad_manifests
         COMMAND sh ${CR_HELM_TESTS}/check_validator_negative.sh)
# What the rendered manifests contain (both modes, every value).
add_test(NAME helm_chart_assertions COMMAND /usr/bin/python3 ${CR_HELM_TESTS}/test_chart.py)
set_tests_properties(
  helm_chart_lint_template_validate helm_schema_rejects_bad_values
  helm_validator_rejects_bad_manifests helm_chart_assertions
  PROPERTIES FIXTURES_REQUIRED helm_tools)

# The Dockerfile and .dockerignore, statically (no Docker engine here), and
# their agreement with the chart (ports, uid).
add_test(NAME helm_dockerfile_static COMMAND /usr/bin/python3 ${CR_HELM_TESTS}/test_dockerfile.py)

# The image's runtime package list against ldd: first a self-test on
# binaries built on the spot (a missing package must be caught)...
add_test(NAME helm_image_libs_selftest COMMAND bash ${CR_HELM_TESTS}/test_check_image_libs.sh)
set(CR_HELM_ALL_TESTS
  helm_tools helm_chart_lint_template_validate helm_schema_rejects_bad_values
  helm_validator_rejects_bad_manifests helm_chart_assertions helm_dockerfile_static
  helm_image_libs_selftest)
# ...then the real binaries, when this build has them (not in sanitizer
# builds: those link sanitizer runtimes the image never has).
if(TARGET cacheroute-sidecar AND NOT CR_SANITIZE)
  set(CR_IMAGE_BINARIES $<TARGET_FILE:cacheroute-sidecar>)
  if(TARGET cacheroute)
    list(APPEND CR_IMAGE_BINARIES $<TARGET_FILE:cacheroute>)
  endif()
  add_test(NAME helm_image_libs
           COMMAND bash ${CR_HELM_TESTS}/check_image_libs.sh
                   --dockerfile ${CMAKE_SOURCE_DIR}/Dockerfile ${CR_IMAGE_BINARIES})
  list(APPEND CR_HELM_ALL_TESTS helm_image_libs)
endif()

# The chart's CACHEROUTE_* variables are exactly the binary's (its --help
# lists them), and the binary accepts every rendered environment (checked
# through --check-config, which loads and checks every variable and starts
# no server; --help exits 0 even when the environment is bad, and only warns).
if(TARGET cacheroute-sidecar)
  add_test(NAME helm_chart_env_matches_binary
           COMMAND /usr/bin/python3 ${CR_HELM_TESTS}/check_env_against_binary.py
                   $<TARGET_FILE:cacheroute-sidecar>)
  set_tests_properties(helm_chart_env_matches_binary PROPERTIES FIXTURES_REQUIRED helm_tools)
  list(APPEND CR_HELM_ALL_TESTS helm_chart_env_matches_binary)
endif()

set_tests_properties(${CR_HELM_ALL_TESTS} PROPERTIES LABELS "helm" TIMEOUT 600)
