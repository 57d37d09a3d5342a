#!/usr/bin/env bash
# `cmake --install` gives a tree that runs jobs on its own: both programs, the library and
# header, examples, docs and systemd units land in a fresh prefix, and a job runs from there
# with the installed worker starting the installed trainer (no build tree, no OMNILEARN_TRAINER).
# A worker whose trainer is missing says where it looked and exits 2.
# Usage: install_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "$1" && pwd)
[ -x "$build/bin/omnilearn-trainer" ] ||
  skip "no omnilearn-trainer in $build (OMNILEARN_WITH_TORCH=OFF)"

work=$(mktemp -d /tmp/omnilearn-install-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

expect_file "$prefix/bin/omnilearn"
expect_file "$prefix/libexec/omnilearn/omnilearn-trainer"
ls "$prefix"/lib*/libomnilearn.so.* >/dev/null 2>&1 ||
  fail "no libomnilearn.so.* under $prefix/lib*"
expect_file "$prefix/include/omnilearn/omnilearn.hpp"
ls "$prefix"/lib*/cmake/OmniLearn/OmniLearnConfig.cmake >/dev/null 2>&1 ||
  fail "no OmniLearnConfig.cmake under $prefix/lib*/cmake/OmniLearn"
for example in synthetic_quick fashion_mnist_mlp fashion_mnist_cnn; do
  expect_file "$prefix/share/omnilearn/examples/$example.toml"
done
expect_file "$prefix/share/doc/omnilearn/README.md"
expect_file "$prefix/share/doc/omnilearn/docs/DEPLOYMENT.md"
expect_file "$prefix/share/omnilearn/deploy/slurm/omnilearn.sbatch"
for unit in omnilearn-head omnilearn-worker; do
  file="$prefix/lib/systemd/system/$unit.service"
  expect_file "$file"
  # The unit runs the program of the prefix it was installed into, and restarts on failure.
  expect_contains "$(cat "$file")" "ExecStart=$prefix/bin/omnilearn " "$unit.service"
  expect_contains "$(cat "$file")" "Restart=on-failure" "$unit.service"
  # The documentation it names is installed.
  doc=$(sed -n 's|^Documentation=file:||p' "$file")
  expect_file "$doc"
  if command -v systemd-analyze >/dev/null; then
    # `verify` checks the unit's syntax and that ExecStart's program exists.
    verify=$(systemd-analyze verify "$file" 2>&1 || true)
    case "$verify" in
      *"$unit.service"*) fail "systemd-analyze verify $unit.service: $verify" ;;
    esac
  fi
done

# A small job from the installed examples, run with the installed program only: `run --local`
# starts installed workers, which must find the installed trainer.
sed 's/^steps = .*/steps = 30/' "$prefix/share/omnilearn/examples/synthetic_quick.toml" \
  >"$work/job.toml"
cd "$work"
status=0
env -u OMNILEARN_TRAINER -u OMNILEARN_BIN PATH=/usr/bin:/bin HOME="$work" \
  "$prefix/bin/omnilearn" run job.toml --local 2 --run-dir "$work/run" >"$work/run.log" 2>&1 ||
  status=$?
[ "$status" -eq 0 ] || { cat "$work/run.log"; fail "omnilearn run from $prefix exited $status"; }
[ "$(summary_status "$work/run")" = succeeded ] ||
  { cat "$work/run.log"; fail "job from the installed tree did not succeed"; }

# The trainer gone: the worker names the places it looked and exits 2.
mv "$prefix/libexec/omnilearn/omnilearn-trainer" "$work/trainer.moved"
status=0
out=$(env -u OMNILEARN_TRAINER "$prefix/bin/omnilearn" worker --insecure --address 127.0.0.1:9 \
  2>&1) || status=$?
[ "$status" -eq 2 ] || fail "worker without a trainer exited $status, expected 2: $out"
expect_contains "$out" "$prefix/libexec/omnilearn/omnilearn-trainer" "missing-trainer error"
expect_contains "$out" "$prefix/bin/omnilearn-trainer" "missing-trainer error"
expect_contains "$out" "OMNILEARN_TRAINER" "missing-trainer error"
echo "install_test: installed tree at $prefix ran a job; missing trainer reported"
