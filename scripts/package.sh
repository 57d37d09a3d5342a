#!/usr/bin/env bash
# Builds the Debian package omnilearn_<version>_amd64.deb (CPack; cmake/OmniLearnDeploy.cmake)
# into dist/: both programs, the library and header, examples, docs and systemd units, for
# prefix /usr. It builds only what the package holds, in the build tree scripts/build.sh uses
# (OMNILEARN_BUILD_DIR, default build/). Needs dpkg-dev: dpkg-shlibdeps computes the Depends
# (runtime library packages only). Prints the package's path on its last line.
# Install it with: apt install ./dist/omnilearn_<version>_amd64.deb
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${OMNILEARN_BUILD_DIR:-build}"
out_dir="${OMNILEARN_PACKAGE_DIR:-dist}"
OMNILEARN_TARGETS="omnilearn omnilearn-trainer omnilearn_runtime" bash scripts/build.sh >&2
build_dir=$(cd "$build_dir" && pwd)
mkdir -p "$out_dir"
rm -f "$build_dir"/cpack/omnilearn_*.deb
cpack --config "$build_dir/CPackConfig.cmake" -B "$build_dir/cpack" >&2
deb=$(ls "$build_dir"/cpack/omnilearn_*_amd64.deb)
cp "$deb" "$out_dir/"
echo "package.sh: Depends: $(dpkg-deb -f "$deb" Depends)" >&2
echo "$(cd "$out_dir" && pwd)/$(basename "$deb")"
