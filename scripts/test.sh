#!/usr/bin/env bash
# One command for the tests: install the dependencies, build, run the whole suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build_dir="${OMNILEARN_BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "${OMNILEARN_TEST_JOBS:-2}" "$@"
