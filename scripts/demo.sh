#!/usr/bin/env bash
# One command for a new user: install the dependencies, build, and train an MLP on Fashion-MNIST
# on an embedded cluster of 4 workers whose emulated speeds differ (1,1,2,4): watch the batch
# sizes move to match the speeds, the loss fall, and the final summary with its report.
# Only what the demo runs is built (the omnilearn and omnilearn-trainer programs, not the tests
# and benchmarks), and no test-only package is installed, so a fresh machine gets there sooner;
# `bash scripts/test.sh` builds the rest later into the same build/ directory.
# Extra arguments go to `omnilearn run` (e.g. --dashboard-port 8265 to watch it in a browser);
# OMNILEARN_BUILD_DIR (as for scripts/build.sh) builds and runs from another directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
OMNILEARN_TARGETS="omnilearn omnilearn-trainer" bash scripts/build.sh
exec "${OMNILEARN_BUILD_DIR:-build}/bin/omnilearn" run examples/fashion_mnist_mlp.toml --local 4 \
  --slowdowns 1,1,2,4 "$@"
