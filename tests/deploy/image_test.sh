#!/usr/bin/env bash
# The Debian package and the container image: scripts/package.sh builds
# omnilearn_<version>_amd64.deb whose Depends are Debian runtime packages only (no -dev);
# scripts/image.sh installs it with apt into a Debian 12 minbase made by mmdebstrap (the fresh
# system a user's machine would be); in a container of that image the package's files are
# where Debian puts them, and a job runs (`omnilearn run --local 2`, head, workers and trainers
# inside one container with no network but its loopback).
# Usage: image_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "$1" && pwd)
src="${OMNILEARN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/scripts/podman-host.sh"
[ -x "$build/bin/omnilearn-trainer" ] || skip "no omnilearn-trainer in $build"
command -v dpkg-shlibdeps >/dev/null || skip "dpkg-dev is not installed (dpkg-shlibdeps)"
why=$(podman_host_ready) || skip "podman cannot run containers here: $why"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (install-deps.sh --test)"

work=$(mktemp -d /tmp/omnilearn-image-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
deb=$(OMNILEARN_BUILD_DIR="$build" OMNILEARN_PACKAGE_DIR="$work" bash "$src/scripts/package.sh" |
  tail -n 1)
version=$(cd "$src" && sed -n 's/^project(OmniLearn VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ "$(basename "$deb")" = "omnilearn_${version}_amd64.deb" ] || fail "package named $deb"
depends=$(dpkg-deb -f "$deb" Depends)
case "$depends" in *-dev*) fail "Depends names a -dev package: $depends" ;; esac
expect_contains "$depends" "libtorch1.13" "Depends"
expect_contains "$depends" "libzmq5" "Depends"
files=$(dpkg-deb -c "$deb")
for path in ./usr/bin/omnilearn ./usr/libexec/omnilearn/omnilearn-trainer \
  ./usr/lib/systemd/system/omnilearn-head.service \
  ./usr/lib/systemd/system/omnilearn-worker.service \
  ./usr/share/omnilearn/examples/synthetic_quick.toml ./usr/include/omnilearn/omnilearn.hpp \
  ./usr/share/doc/omnilearn/docs/DEPLOYMENT.md; do
  expect_contains "$files" " $path" "the package's files"
done

image=$(OMNILEARN_BUILD_DIR="$build" OMNILEARN_DEB="$deb" bash "$src/scripts/image.sh" | tail -n 1)
[ "$image" = "localhost/omnilearn:$version" ] || fail "scripts/image.sh built '$image'"
run() { podman run --rm "${PODMAN_LIMITS[@]}" --network=none "$@"; }
probe=$(run "$image" --version 2>&1) || skip "podman cannot run a container here: $probe"
expect_contains "$probe" "$version" "omnilearn --version in the image"
installed=$(run --entrypoint dpkg-query "$image" -W -f '${Status} ${Version}' omnilearn)
[ "$installed" = "install ok installed $version" ] || fail "dpkg in the image: $installed"
unit=$(run --entrypoint cat "$image" /usr/lib/systemd/system/omnilearn-worker.service)
expect_contains "$unit" "ExecStart=/usr/bin/omnilearn worker" "the worker's unit"

# A job inside one container: the installed program, workers and trainer, loopback only.
sed 's/^steps = .*/steps = 30/' "$src/examples/synthetic_quick.toml" >"$work/job.toml"
mkdir -p "$work/run"
status=0
run -v "$work:/work" -w /work "$image" run /work/job.toml --local 2 --run-dir /work/run \
  >"$work/run.log" 2>&1 || status=$?
[ "$status" -eq 0 ] || { cat "$work/run.log"; fail "omnilearn run in the image exited $status"; }
[ "$(summary_status "$work/run")" = succeeded ] || fail "summary: $(cat "$work/run/summary.json")"
echo "image_test: $(basename "$deb") (Depends: $depends) installs into $image; a job ran there"
