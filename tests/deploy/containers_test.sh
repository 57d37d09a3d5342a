#!/usr/bin/env bash
# A cluster of podman containers from the image scripts/image.sh builds: the head and three
# workers each in its own container, network namespace and address on a podman network this
# test creates, the cluster file handed to each as a podman secret, every worker advertising
# its container's address. A job runs from a client container (the same image's CLI); one
# worker container is killed mid-job (scale down) and a fourth started (scale up); the job
# re-forms each time and finishes. Everything it made (containers, network, secret) is removed.
# Usage: containers_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "$1" && pwd)
src="${OMNILEARN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/scripts/podman-host.sh"
[ -x "$build/bin/omnilearn-trainer" ] || skip "no omnilearn-trainer in $build"
why=$(podman_host_ready) || skip "podman cannot run containers here: $why"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (install-deps.sh --test)"

image=$(OMNILEARN_BUILD_DIR="$build" bash "$src/scripts/image.sh" | tail -n 1)
[ -n "$image" ] || fail "scripts/image.sh printed no image"
probe=$(podman run --rm "${PODMAN_LIMITS[@]}" --network=none "$image" --version 2>&1) ||
  skip "podman cannot run a container here: $probe"

tag="omnilearn-test-$$"
work=$(mktemp -d /tmp/omnilearn-containers-test-XXXXXX)
containers=()
cleanup() {
  local code=$?
  if [ "$code" -ne 0 ]; then
    for c in "${containers[@]}"; do echo "--- $c"; podman logs --tail 15 "$c" 2>&1 || true; done
  fi
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  podman network rm -f "$tag" >/dev/null 2>&1 || true
  podman secret rm "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

podman network create "$tag" >/dev/null
subnet=$(podman network inspect "$tag" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
case "$subnet" in *.0/24) ;; *) fail "unexpected subnet '$subnet' of network $tag" ;; esac
net_prefix=${subnet%.0/24}
head_ip="$net_prefix.10"

# The cluster's credentials: a head (the build tree's, on loopback) writes a cluster file and
# stops; the containers get it as a secret and connect to the head container's address.
"$build/bin/omnilearn" head --port 0 --cluster-file "$work/cluster.toml" >"$work/keys.log" 2>&1 &
keys_pid=$!
wait_for 30 "no cluster file from the key-making head" test -s "$work/cluster.toml"
kill "$keys_pid"
wait "$keys_pid" || true
podman secret create "$tag" "$work/cluster.toml" >/dev/null

mkdir -p "$work/runs"
sed -e 's/^steps = .*/steps = 800/' -e 's/^name = .*/name = "containers-test"/' \
  "$src/examples/synthetic_quick.toml" >"$work/job.toml"

# start NAME IP ARGS...: a detached container (host name NAME) of the image on the network.
start() {
  local name="$tag-$1" host=$1 ip=$2
  shift 2
  containers+=("$name")
  podman run -d --name "$name" --hostname "$host" --network "$tag" --ip "$ip" \
    "${PODMAN_LIMITS[@]}" --secret "$tag,target=cluster.toml" \
    -e OMNILEARN_CLUSTER_SECRET=/run/secrets/cluster.toml "$image" "$@" >/dev/null
}
# client ARGS...: the CLI in a container of its own (removed when it exits).
client() {
  podman run --rm --network "$tag" "${PODMAN_LIMITS[@]}" \
    --secret "$tag,target=cluster.toml" -e OMNILEARN_CLUSTER_SECRET=/run/secrets/cluster.toml \
    -v "$work/job.toml:/job.toml:ro" "$image" "$@"
}

containers+=("$tag-head")
podman run -d --name "$tag-head" --hostname head --network "$tag" --ip "$head_ip" \
  "${PODMAN_LIMITS[@]}" --secret "$tag,target=cluster.toml" \
  -e OMNILEARN_CLUSTER_SECRET=/run/secrets/cluster.toml -v "$work/runs:/runs" "$image" \
  head --host 0.0.0.0 --port 7070 --advertise-address "$head_ip:7070" --runs-dir /runs \
  --heartbeat-interval-ms 200 --heartbeat-timeout-ms 1500 >/dev/null
head_up() { podman logs "$tag-head" 2>&1 | grep -q 'listening on'; }
wait_for 60 "the head container did not start listening" head_up

worker() {  # worker NAME LAST_OCTET [ARGS...]
  local name=$1 ip="$net_prefix.$2"
  shift 2
  start "$name" "$ip" worker --address "$head_ip:7070" --name "$name" --advertise-address "$ip" \
    --cpus 1 --join-timeout-s 60 "$@"
}
# The first three emulate slow machines (each step's compute 50x as long): at full speed the
# whole job takes about 3 s on a quiet machine, less than w4's container takes to start and
# join. w4 is a fast machine; once it trained in the job the others are set back to full speed
# and the job ends soon (at 50x they would keep the smallest batch for the rest of the job:
# minutes on a loaded machine).
worker w1 11 --slowdown 50
worker w2 12 --slowdown 50
worker w3 13 --slowdown 50
joined() { client status --address "$head_ip:7070" 2>/dev/null | grep -q "^$1 "; }
for w in w1 w2 w3; do wait_for 60 "worker $w did not join" joined "$w"; done

submitted=$(client submit /job.toml --address "$head_ip:7070" --json)
field() {
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$submitted" "$1"
}
job_id=$(field job_id)
run_dir="$work/runs/$(basename "$(field run_dir)")"
client logs "$job_id" --address "$head_ip:7070" --follow >"$work/follow.log" 2>&1 &
follow_pid=$!

all_three() { generation_members "$run_dir" w1 && generation_members "$run_dir" w2 &&
  generation_members "$run_dir" w3 && [ "$(trained_steps "$run_dir")" -gt 20 ]; }
wait_for 180 "the job did not train with w1, w2 and w3" all_three
# Scale down: w2's container dies at once (SIGKILL), as a lost machine would.
podman kill "$tag-w2" >/dev/null
wait_for 120 "the job did not re-form without w2" generation_members "$run_dir" w2 absent
step_at_kill=$(trained_steps "$run_dir")
# Scale up: a fourth worker container joins the running job.
worker w4 14
wait_for 120 "w4 did not join the job" generation_members "$run_dir" w4
for w in w1 w3; do
  client node set "$w" --slowdown 1 --address "$head_ip:7070" >/dev/null ||
    fail "omnilearn node set $w --slowdown 1 failed"
done
status=0
wait "$follow_pid" || status=$?
[ "$status" -eq 0 ] || { cat "$work/follow.log"; fail "logs --follow exited $status"; }
[ "$(summary_status "$run_dir")" = succeeded ] || fail "summary: $(cat "$run_dir/summary.json")"
[ "$(trained_steps "$run_dir")" -gt "$step_at_kill" ] || fail "no step after the kill"
echo "containers_test: job $job_id succeeded across w2's kill (step $step_at_kill) and w4's join"
