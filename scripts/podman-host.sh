# Sourced by scripts/image.sh and tests/deploy: makes this host able to run podman containers,
# or says why it cannot.
#   podman_host_ready    returns 0, or prints the reason on stdout and returns 1
#   PODMAN_LIMITS        the rlimits to pass to `podman run` and `podman build`
# On hosts with hybrid cgroups (v1 controllers plus the unified v2 tree), crun refuses to create
# a container's cgroup unless the hugetlb controller is mounted on the v1 hierarchy; mounting it
# (root only) is all it takes, and it changes nothing for other programs. The limits: a
# container asks for the rlimits it is given, and raising any above the caller's hard limit
# needs CAP_SYS_RESOURCE, which a process in a container or CI sandbox may lack; these are
# within what such hosts allow and more than a head or worker uses.
PODMAN_LIMITS=(--ulimit nofile=1024:20000 --ulimit nproc=1000:1000)

podman_host_ready() {
  if ! command -v podman >/dev/null 2>&1; then
    echo "podman is not installed (scripts/install-deps.sh --test installs it)"
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "needs root (rootful podman: its own networks and addresses per container)"
    return 1
  fi
  if [ -d /sys/fs/cgroup/cpu ] && [ -d /sys/fs/cgroup/unified ] &&
    ! grep -q ' /sys/fs/cgroup/hugetlb cgroup ' /proc/mounts; then
    if grep -qw hugetlb /proc/cgroups; then
      mkdir -p /sys/fs/cgroup/hugetlb 2>/dev/null || true
      if ! mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb 2>/dev/null; then
        echo "hybrid cgroups without the hugetlb controller mounted, and mounting it failed"
        return 1
      fi
    fi
  fi
  local why
  if ! why=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>&1); then
    echo "podman info fails: $why"
    return 1
  fi
  return 0
}
