#!/usr/bin/env bash
# Configures and builds OmniLearn into build/ (Release with debug info, ccache when present).
# Extra arguments go to CMake's configure step, e.g. -DOMNILEARN_SANITIZE=address,undefined.
# OMNILEARN_TARGETS="a b" builds only those targets (scripts/demo.sh: the two programs it runs).
# Parallelism: OMNILEARN_JOBS if set, else as many jobs as there are cores and as fit in the
# memory available now at ~1.5 GB each (what a LibTorch translation unit takes to compile).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${OMNILEARN_BUILD_DIR:-build}"

build_jobs() {
  local cores mem_kb by_memory
  cores=$(nproc 2>/dev/null || echo 1)
  mem_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
  by_memory=$(( mem_kb / (1536 * 1024) ))
  local jobs=$cores
  [ "$by_memory" -lt "$jobs" ] && jobs=$by_memory
  [ "$jobs" -lt 1 ] && jobs=1
  echo "$jobs"
}

jobs="${OMNILEARN_JOBS:-$(build_jobs)}"
targets=()
for t in ${OMNILEARN_TARGETS:-}; do targets+=(--target "$t"); done
echo "build.sh: $jobs parallel jobs ($(nproc) cores, $(awk '/^MemAvailable:/ {printf "%.1f", $2/1048576}' /proc/meminfo) GiB available)${OMNILEARN_TARGETS:+, targets: $OMNILEARN_TARGETS}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
