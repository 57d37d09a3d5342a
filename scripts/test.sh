#!/usr/bin/env bash
# One command for the tests (CI runs exactly this, .ci/run): install the dependencies, build,
# run the whole suite with ctest; then the torch-free suite again under ASan+UBSan and under
# TSan (scripts/sanitize.sh), and each libFuzzer target for FUZZ_SECONDS (default 60) over its
# checked-in corpus (scripts/fuzz.sh). OMNILEARN_TEST_QUICK=1 stops after the main suite.
# Extra arguments go to the main ctest run (e.g. -L e2e, -R closed_cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build_dir="${OMNILEARN_BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "${OMNILEARN_TEST_JOBS:-2}" "$@"
if [ "${OMNILEARN_TEST_QUICK:-0}" = "1" ]; then
  echo "test.sh: OMNILEARN_TEST_QUICK=1: sanitizer and fuzzing runs skipped"
  exit 0
fi
bash scripts/sanitize.sh
FUZZ_SECONDS="${FUZZ_SECONDS:-60}" bash scripts/fuzz.sh
