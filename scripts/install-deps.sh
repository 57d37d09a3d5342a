#!/usr/bin/env bash
# Installs everything OmniLearn needs to build, test and run, from Debian packages only
# (clang and its runtime are for the libFuzzer targets, scripts/fuzz.sh; python3-torch and
# python3-numpy, the same LibTorch 1.13 for /usr/bin/python3, for examples/torchscript and the
# tests that save users' models and tensors from Python; cpp-httplib and Chart.js for the head's
# dashboard and `omnilearn report`; OpenBLAS because Debian's LibTorch otherwise runs its matrix
# products on the reference BLAS: the MLP's forward and backward took 16x longer).
# `--test` adds what only the tests need: Chromium (the dashboard and report are checked in a
# real headless browser), Prometheus's promtool (checks /metrics), curl (asks a dashboard
# inside a network namespace), etcd (the tests of heads sharing their state start one), and for
# the deployment tests (tests/deploy, ctest label `deploy`) podman with its network stack,
# mmdebstrap (the image's Debian base), PyYAML (reads the Kubernetes manifests) and a one-node
# Slurm with munge. scripts/test.sh passes it; scripts/demo.sh does not, so a first run does not
# wait for a browser to install.
# Idempotent: packages already present are skipped by apt-get. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libzmq3-dev cppzmq-dev libsodium-dev
  libmsgpack-cxx-dev
  libsqlite3-dev
  libtomlplusplus-dev
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtorch-dev libgloo-dev libopenblas0-openmp
  python3-torch python3-numpy
  dataset-fashion-mnist
  zlib1g-dev
  iproute2 procps
  clang libclang-rt-14-dev
  libcpp-httplib-dev libjs-chart.js
)
test_packages=(
  chromium prometheus curl
  etcd-server etcd-client
  podman crun netavark aardvark-dns iptables catatonit mmdebstrap python3-yaml
  slurmctld slurmd slurm-client munge
)
if [ "${1:-}" = "--test" ]; then
  packages+=("${test_packages[@]}")
elif [ $# -gt 0 ]; then
  echo "install-deps: unknown argument '$1' (only --test)" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
