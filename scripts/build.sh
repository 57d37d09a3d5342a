#!/usr/bin/env bash
# Configures and builds OmniLearn into build/ (Release with debug info, ccache when present).
# Extra arguments go to CMake's configure step, e.g. -DOMNILEARN_SANITIZE=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${OMNILEARN_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
# Two jobs: LibTorch translation units need ~1.5 GB each and these machines have 2 cores.
cmake --build "$build_dir" -j "${OMNILEARN_JOBS:-2}"
