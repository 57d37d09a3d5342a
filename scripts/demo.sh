#!/usr/bin/env bash
# One command for a new user: install the dependencies, build, and train an MLP on Fashion-MNIST
# on an embedded cluster of 4 workers whose emulated speeds differ (1,1,2,4): watch the batch
# sizes move to match the speeds, the loss fall, and the final summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec build/bin/omnilearn run examples/fashion_mnist_mlp.toml --local 4 --slowdown 1,1,2,4 "$@"
