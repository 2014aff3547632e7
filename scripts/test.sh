#!/bin/sh
# Runs every test the way CI does, on a fresh Debian 12 machine as root:
# installs the Debian packages, then builds and runs ctest three times:
#   build-test  gcc, all tests (unit, integration, chart checks)
#   build-asan  clang, AddressSanitizer + UndefinedBehaviorSanitizer
#   build-tsan  clang, ThreadSanitizer, the tests labelled "concurrency"
# after first building what scripts/setup.sh builds (build-release: Release,
# -O3, no tests), so a warning only the optimiser sees cannot break the
# README's first command. Last it fuzzes (build-fuzz: clang, -DCR_FUZZ=ON,
# libFuzzer with ASan and UBSan): the targets' corpus tests, then each
# target of tests/fuzz for CR_FUZZ_SECONDS (default 25), nproc at a time,
# failing on any crash (about 3 minutes on 2 cores; tests/fuzz/run.sh).
# Warnings are errors in every build, so gcc and clang both gate.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh" "$root/scripts/deps.txt" "$root/scripts/deps-test.txt"
jobs=$(nproc)

build() {
    dir=$1
    shift
    cmake -S . -B "$dir" "$@"
    cmake --build "$dir" -j "$jobs"
}

build build-release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DCMAKE_C_COMPILER=gcc

build build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc
ctest --test-dir build-test --output-on-failure -j "$jobs"

build build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCR_SANITIZE=address,undefined
ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE helm

build build-tsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCR_SANITIZE=thread
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L concurrency

cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCR_FUZZ=ON
cmake --build build-fuzz -j "$jobs" --target cr_fuzz
ctest --test-dir build-fuzz --output-on-failure -j "$jobs" -L fuzz
"$root/tests/fuzz/run.sh" build-fuzz "${CR_FUZZ_SECONDS:-25}" "$jobs"
