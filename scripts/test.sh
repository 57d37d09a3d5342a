#!/usr/bin/env bash
# One command for the tests (CI runs exactly this, .ci/run): install the dependencies, build,
# run the whole suite with ctest; the training tests once more with oneDNN held to AVX2 kernels
# (the CPUs CI may land on); then the torch-free suite again under ASan+UBSan and under TSan
# (scripts/sanitize.sh), and each libFuzzer target for FUZZ_SECONDS (default 60) over its
# checked-in corpus (scripts/fuzz.sh). OMNILEARN_TEST_QUICK=1 stops after the main suite.
# It ends with the list of test cases that skipped and why (scripts/skipped-tests.py).
# Extra arguments go to the main ctest run (e.g. -L e2e, -R closed_cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
bash scripts/build.sh
build_dir="${OMNILEARN_BUILD_DIR:-build}"
logs="$build_dir/test-logs"
rm -rf "$logs" && mkdir -p "$logs"
report_skips() { python3 scripts/skipped-tests.py "$logs"/*.log; }
trap report_skips EXIT
keep_log() { cp "$1/Testing/Temporary/LastTest.log" "$logs/$2.log" 2>/dev/null || true; }

status=0
ctest --test-dir "$build_dir" --output-on-failure -j "${OMNILEARN_TEST_JOBS:-2}" "$@" || status=$?
keep_log "$build_dir" main
[ "$status" -eq 0 ] || exit "$status"

if [ $# -eq 0 ]; then
  # oneDNN chooses kernels per CPU; results must not depend on which (issue: an AVX2-only EPYC
  # failed equivalence tests that passed on AVX-512 machines).
  echo "=== training tests with ONEDNN_MAX_CPU_ISA=AVX2"
  ONEDNN_MAX_CPU_ISA=AVX2 ctest --test-dir "$build_dir" --output-on-failure \
    -j "${OMNILEARN_TEST_JOBS:-2}" -R '^training_' || status=$?
  keep_log "$build_dir" avx2
  [ "$status" -eq 0 ] || exit "$status"
fi

if [ "${OMNILEARN_TEST_QUICK:-0}" = "1" ]; then
  echo "test.sh: OMNILEARN_TEST_QUICK=1: sanitizer and fuzzing runs skipped"
  exit 0
fi
bash scripts/sanitize.sh
for mode in address thread; do keep_log "build-sanitize-$mode" "sanitize-$mode"; done
FUZZ_SECONDS="${FUZZ_SECONDS:-60}" bash scripts/fuzz.sh
