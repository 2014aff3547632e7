# Node probe and injection decision suites. Both start threads (the prober's,
# and concurrent select callers), hence the concurrency label for TSan runs.
if(TARGET cacheroute_probe)
  cr_add_cunit_test(test_probe SOURCES test_probe.c LIBS cacheroute_probe LABELS concurrency)
  # probe_test.h: the probe library's pure parts and the prober's test hook,
  # private to probe/ and its tests.
  target_include_directories(test_probe PRIVATE ${CMAKE_SOURCE_DIR}/probe)
  # With cuda.h, the CUDA probe also runs against a fake driver (the success
  # path) and, when the toolkit ships it, NVIDIA's stub libcuda.so (real
  # export names; its cuInit fails).
  if(CR_WITH_CUDA AND CR_CUDA_INCLUDE_DIR)
    add_library(cr_fake_libcuda MODULE fixtures/fake_libcuda.c)
    target_include_directories(cr_fake_libcuda SYSTEM PRIVATE ${CR_CUDA_INCLUDE_DIR})
    add_dependencies(test_probe cr_fake_libcuda)
    target_compile_definitions(test_probe PRIVATE
                               CR_TEST_FAKE_CUDA="$<TARGET_FILE:cr_fake_libcuda>")
    find_file(CR_CUDA_STUB libcuda.so NO_DEFAULT_PATH
              HINTS ${CR_CUDA_INCLUDE_DIR}/../lib64/stubs ${CR_CUDA_INCLUDE_DIR}/../lib/stubs)
    if(CR_CUDA_STUB)
      target_compile_definitions(test_probe PRIVATE CR_TEST_CUDA_STUB="${CR_CUDA_STUB}")
    endif()
  endif()
endif()
if(TARGET cacheroute_inject)
  cr_add_cunit_test(test_inject SOURCES test_inject.c LIBS cacheroute_inject LABELS concurrency)
endif()
