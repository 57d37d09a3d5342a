#!/usr/bin/env bash
# The same job on three workers two ways, on this one machine: each worker in its own podman
# container on a podman network (the image from scripts/image.sh, every worker advertising its
# container's address, Gloo over the containers' veth pairs and bridge), and `omnilearn run
# --local 3` on loopback (the build tree's programs). Prints the median step time and
# all-reduce time over the job's steps (events.jsonl's step_time_s, allreduce_time_s) for each.
# Usage: bench/deploy/step_time.sh [BUILD_DIR] [STEPS]   (root, podman; docs/benchmarks.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "${1:-build}" && pwd)
steps="${2:-300}"
source scripts/podman-host.sh
why=$(podman_host_ready) || { echo "step_time.sh: podman cannot run: $why" >&2; exit 1; }
image=$(OMNILEARN_BUILD_DIR="$build" bash scripts/image.sh | tail -n 1)
tag="omnilearn-bench-$$"
work=$(mktemp -d /tmp/omnilearn-step-time-XXXXXX)
names=()
cleanup() {
  for c in "${names[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  podman network rm -f "$tag" >/dev/null 2>&1 || true
  podman secret rm "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
sed -e "s/^steps = .*/steps = $steps/" -e 's/^name = .*/name = "step-time"/' \
  examples/synthetic_quick.toml >"$work/job.toml"
median() {  # median FIELD RUN_DIR: over the step events that ran on all three workers
  python3 - "$2/events.jsonl" "$1" <<'PY'
import json, statistics, sys
values = [e[sys.argv[2]] for e in map(json.loads, open(sys.argv[1]))
          if e.get("event") == "step" and len(e.get("batches", [])) == 3]
print("%.4f s over %d steps" % (statistics.median(values), len(values)))
PY
}

# Loopback: the build tree's programs, one machine, no containers.
(cd "$work" && "$build/bin/omnilearn" run job.toml --local 3 --run-dir "$work/loopback" \
  >"$work/loopback.log" 2>&1)
echo "loopback   step $(median step_time_s "$work/loopback");" \
  "all-reduce $(median allreduce_time_s "$work/loopback")"

# Containers: head and three workers, each in its own network namespace.
podman network create "$tag" >/dev/null
net=$(podman network inspect "$tag" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
prefix=${net%.0/24}
"$build/bin/omnilearn" head --port 0 --cluster-file "$work/cluster.toml" >/dev/null 2>&1 &
keys=$!
for ((i = 0; i < 300; i++)); do [ -s "$work/cluster.toml" ] && break; sleep 0.1; done
kill "$keys"; wait "$keys" || true
podman secret create "$tag" "$work/cluster.toml" >/dev/null
secret=(--secret "$tag,target=cluster.toml" -e OMNILEARN_CLUSTER_SECRET=/run/secrets/cluster.toml)
mkdir -p "$work/runs"
names+=("$tag-head")
podman run -d --name "$tag-head" --network "$tag" --ip "$prefix.10" "${PODMAN_LIMITS[@]}" \
  "${secret[@]}" -v "$work/runs:/runs" "$image" head --host 0.0.0.0 --port 7070 \
  --advertise-address "$prefix.10:7070" --runs-dir /runs >/dev/null
sleep 2
for i in 1 2 3; do
  names+=("$tag-w$i")
  podman run -d --name "$tag-w$i" --network "$tag" --ip "$prefix.1$i" "${PODMAN_LIMITS[@]}" \
    "${secret[@]}" "$image" worker --address "$prefix.10:7070" --name "w$i" \
    --advertise-address "$prefix.1$i" >/dev/null
done
client() { podman run --rm --network "$tag" "${PODMAN_LIMITS[@]}" "${secret[@]}" \
  -v "$work/job.toml:/job.toml:ro" "$image" "$@"; }
for ((i = 0; i < 60; i++)); do
  [ "$(client status --address "$prefix.10:7070" 2>/dev/null | grep -c '^w[123] ')" -ge 3 ] && break
  sleep 1
done
client submit /job.toml --address "$prefix.10:7070" --follow >"$work/containers.log" 2>&1
run=$(ls -d "$work"/runs/*/ | head -n 1)
echo "containers step $(median step_time_s "$run"); all-reduce $(median allreduce_time_s "$run")"
