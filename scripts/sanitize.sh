#!/usr/bin/env bash
# The torch-free test suite (runtime, scheduler, actors, CLI, membership and closed-cluster
# integration tests) under AddressSanitizer + UndefinedBehaviorSanitizer, then under
# ThreadSanitizer, each in its own build directory. LibTorch is left out: it is not built with
# the sanitizers, and the job tests would take far longer than CI allows under them.
# Usage: scripts/sanitize.sh [address|thread]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(address thread)
for mode in "${modes[@]}"; do
  # Under TSan, tests labelled single_threaded (pure logic driven on one thread: the seeded
  # simulations and property tests, its longest runs) are left out: it reports data races and
  # has none to find there. ASan+UBSan runs them.
  skip=()
  case "$mode" in
    address) sanitize="address,undefined" ;;
    thread) sanitize="thread"; skip=(-LE single_threaded) ;;
    *) echo "scripts/sanitize.sh: unknown mode '$mode' (address or thread)" >&2; exit 2 ;;
  esac
  build_dir="build-sanitize-$mode"
  echo "=== $sanitize: building in $build_dir"
  # -O1 with assertions on (no NDEBUG): what the sanitizers' authors recommend, and it compiles
  # a third faster than -O2 on these 2-core machines. -g1: line tables and function names, all a
  # report's stack needs; full debug info took a quarter to a third longer per file.
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DOMNILEARN_WITH_TORCH=OFF -DOMNILEARN_BUILD_BENCH=OFF -DOMNILEARN_SANITIZE="$sanitize" >/dev/null
  cmake --build "$build_dir" -j "${OMNILEARN_JOBS:-2}"
  echo "=== $sanitize: testing"
  # Any report fails the test that produced it (and so this script).
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir "$build_dir" --output-on-failure -j "${OMNILEARN_TEST_JOBS:-2}" "${skip[@]}"
done
