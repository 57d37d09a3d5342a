#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang into build-fuzz/ and fuzzes each for a
# bounded time, starting from a scratch copy of the checked-in corpus (new inputs never go into
# tests/fuzz/corpus by themselves). Exits non-zero when a target crashes, leaks, times out or
# runs out of memory, and prints where the offending input was saved. The scratch folder is
# removed when every target passes and kept (its path printed) when one fails.
# Environment: FUZZ_SECONDS (per target, default 60), FUZZ_TARGETS (default both),
# OMNILEARN_FUZZ_BUILD_DIR (default build-fuzz), OMNILEARN_JOBS (build jobs, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
build_dir="${OMNILEARN_FUZZ_BUILD_DIR:-build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
read -r -a targets <<<"${FUZZ_TARGETS:-decode_envelope_fuzz job_spec_fuzz}"

CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DOMNILEARN_FUZZ=ON -DOMNILEARN_WITH_TORCH=OFF -DOMNILEARN_BUILD_BENCH=OFF \
  -DOMNILEARN_BUILD_TESTS=OFF >/dev/null
cmake --build "$build_dir" -j "${OMNILEARN_JOBS:-2}" --target "${targets[@]}"

work="$(mktemp -d "${TMPDIR:-/tmp}/omnilearn-fuzz.XXXXXX")"
echo "fuzz: scratch corpora, logs and crashing inputs under $work (removed if all pass)"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# The targets fuzz side by side (one process each: libFuzzer runs one thread), so the whole run
# takes FUZZ_SECONDS rather than FUZZ_SECONDS per target on CI's two cores.
declare -A pids
for target in "${targets[@]}"; do
  name="${target%_fuzz}"
  mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
  cp -R "tests/fuzz/corpus/$name/." "$work/$name/corpus/"
  dict=()
  if [[ -f "tests/fuzz/$name.dict" ]]; then dict=("-dict=$repo/tests/fuzz/$name.dict"); fi
  echo "fuzz: $target for ${seconds}s"
  "$build_dir/tests/fuzz/$target" "$work/$name/corpus" "${dict[@]}" \
    -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$work/$name/artifacts/" \
    >"$work/$name/log" 2>&1 &
  pids[$target]=$!
done
failed=0
for target in "${targets[@]}"; do
  name="${target%_fuzz}"
  rc=0
  wait "${pids[$target]}" || rc=$?
  echo "fuzz: $target:"
  grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/$name/log" || true
  if [[ $rc -ne 0 ]]; then
    failed=1
    echo "fuzz: $target FAILED (exit $rc); last lines of $work/$name/log:" >&2
    tail -n 40 "$work/$name/log" >&2
    for input in "$work/$name/artifacts/"*; do
      [[ -e "$input" ]] || continue
      echo "fuzz: offending input: $input" >&2
      echo "fuzz: reproduce with: $build_dir/tests/fuzz/$target $input" >&2
    done
  fi
done
if [[ $failed -eq 0 ]]; then
  rm -rf "$work"
else
  echo "fuzz: kept $work for the post-mortem" >&2
fi
exit "$failed"
