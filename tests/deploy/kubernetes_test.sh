#!/usr/bin/env bash
# deploy/kubernetes's pods under `podman kube play` (tests/deploy/kube_pods.py turns the
# StatefulSet, Deployment, Job and Service into pods and host aliases, and says what else it
# stands in for), on a podman network this test creates: the head with its state volume and
# the cluster file from the Secret's files, answering /healthz (its liveness probe) without
# the dashboard's token; the Deployment's two workers; the submit Job, which follows the job.
# While the job runs a third worker pod joins (scale up), and one pod leaves as
# `kubectl scale` would make it: its preStop hook (the manifest's command, run with podman
# exec) drains it, then the pod stops. The job finishes; the submit pod exits 0.
# Not exercised here: Kubernetes' scheduling, Services' virtual IPs, controllers restarting pods,
# the kubelet running probes and hooks itself (docs/DEPLOYMENT.md).
# Usage: kubernetes_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "$1" && pwd)
src="${OMNILEARN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/scripts/podman-host.sh"
[ -x "$build/bin/omnilearn-trainer" ] || skip "no omnilearn-trainer in $build"
why=$(podman_host_ready) || skip "podman cannot run containers here: $why"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (install-deps.sh --test)"
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml is not installed"

image=$(OMNILEARN_BUILD_DIR="$build" bash "$src/scripts/image.sh" | tail -n 1)
manifest_images=$(grep -ho 'image: .*' "$src"/deploy/kubernetes/*.yaml | sort -u)
[ "$manifest_images" = "image: $image" ] ||
  fail "deploy/kubernetes names $manifest_images; scripts/image.sh builds $image"

tag="omnilearn-kube-$$"
work=$(mktemp -d /tmp/omnilearn-kube-test-XXXXXX)
pods=()
volumes=()
cleanup() {
  local code=$?
  if [ "$code" -ne 0 ]; then
    for p in "${pods[@]}"; do
      for c in $(podman ps -a --filter "pod=$p" --format '{{.Names}}' | grep -v infra); do
        echo "--- $c"; podman logs --tail 15 "$c" 2>&1 || true
      done
    done
  fi
  for p in "${pods[@]}"; do podman pod rm -f -t 0 "$p" >/dev/null 2>&1 || true; done
  for v in "${volumes[@]}"; do podman volume rm -f "$v" >/dev/null 2>&1 || true; done
  podman network rm -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# podman 4.3 gives containers of a pod, its infra container included, RLIMIT_NOFILE
# 1048576 unless containers.conf sets default ulimits, and applies those with soft and hard
# limits swapped: equal soft and hard values are the ones that work. This test's own file.
cat >"$work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=1000:1000"]
CONF
export CONTAINERS_CONF="$work/containers.conf"

podman network create "$tag" >/dev/null
subnet=$(podman network inspect "$tag" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
case "$subnet" in *.0/24) ;; *) fail "unexpected subnet '$subnet' of network $tag" ;; esac

# The Secret's content: a cluster file, made as docs/DEPLOYMENT.md says (a head run once).
mkdir -p "$work/secret"
"$build/bin/omnilearn" head --port 0 --cluster-file "$work/secret/cluster.toml" \
  >"$work/keys.log" 2>&1 &
keys_pid=$!
wait_for 30 "no cluster file from the key-making head" test -s "$work/secret/cluster.toml"
kill "$keys_pid"
wait "$keys_pid" || true

# The first two workers emulate slow machines (each step's compute 50x as long): at full speed
# the job's steps take a few ms each, and it could end before the third pod had joined and the
# first been drained. The third runs at full speed and takes most of each step's batch once it
# joins; after the drain the second is set back to full speed (at 50x it would keep the
# smallest batch for the rest of the job: minutes on a loaded machine), and the job ends soon.
python3 "$src/tests/deploy/kube_pods.py" "$src/deploy/kubernetes" "$work/pods" \
  --prefix "${subnet%.0/24}" --secret-dir "$work/secret" --job-steps 600 --replicas 3 \
  --slowdown omnilearn-worker-0=50 --slowdown omnilearn-worker-1=50 >"$work/pods.txt"
pod_ip() { awk -v n="$1" '$1 == "pod" && $2 == n {print $3}' "$work/pods.txt"; }
# The volumes the pods make (the head's claim, the ConfigMap's), removed at the end.
mapfile -t volumes < <(awk '$1 == "volume" {print $2}' "$work/pods.txt" | sort -u)
play() {  # play POD: starts the pod (its YAML from kube_pods.py) at its IP
  local file
  file=$(awk -v n="$1" '$1 == "pod" && $2 == n {print $4}' "$work/pods.txt")
  [ -n "$file" ] || fail "no pod $1 in the manifests"
  pods+=("$1")
  podman kube play --network "$tag" --ip "$(pod_ip "$1")" "$file" >"$work/play-$1.log" 2>&1 ||
    { cat "$work/play-$1.log"; fail "podman kube play $1"; }
}

play omnilearn-head-0
head_ip=$(pod_ip omnilearn-head-0)
head_up() { podman logs omnilearn-head-0-head 2>&1 | grep -q 'listening on'; }
wait_for 60 "the head pod did not start listening" head_up
healthz() {
  python3 -c 'import sys, urllib.request as u
r = u.urlopen("http://%s:8080/healthz" % sys.argv[1], timeout=5)
sys.exit(0 if r.status == 200 and r.read() == b"ok\n" else 1)' "$head_ip"
}
wait_for 30 "the head's liveness endpoint /healthz did not answer 200 ok" healthz

play omnilearn-worker-0
play omnilearn-worker-1
state=$(podman volume inspect state-omnilearn-head-0 --format '{{.Mountpoint}}')
play omnilearn-submit
run_dir() { ls -d "$state"/runs/*/ 2>/dev/null | head -n 1; }
both() { local r; r=$(run_dir) && [ -n "$r" ] && generation_members "$r" omnilearn-worker-0 &&
  generation_members "$r" omnilearn-worker-1 && [ "$(trained_steps "$r")" -gt 20 ]; }
wait_for 240 "the job did not train on the Deployment's two workers" both
run=$(run_dir)

# Scale up: a third replica joins the running job.
play omnilearn-worker-2
wait_for 120 "the third worker did not join the job" generation_members "$run" omnilearn-worker-2
step_at_join=$(trained_steps "$run")
# Scale down: the pod's preStop hook, as the manifest has it, then the pod stops.
pre_stop=$(python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Deployment":
        container = d["spec"]["template"]["spec"]["containers"][0]
        print("\n".join(container["lifecycle"]["preStop"]["exec"]["command"]))' \
  "$src/deploy/kubernetes/workers.yaml")
mapfile -t pre_stop_argv <<<"$pre_stop"
status=0
podman exec omnilearn-worker-0-worker "${pre_stop_argv[@]}" >"$work/prestop.log" 2>&1 || status=$?
[ "$status" -eq 0 ] || { cat "$work/prestop.log"; fail "the preStop hook exited $status"; }
grep -q '"event":"drain"' "$run/events.jsonl" || fail "no drain in the job's events after preStop"
step_at_drain=$(trained_steps "$run")
podman pod stop -t 30 omnilearn-worker-0 >/dev/null
wait_for 120 "the job did not re-form without the drained worker" \
  generation_members "$run" omnilearn-worker-0 absent
"$build/bin/omnilearn" node set omnilearn-worker-1 --slowdown 1 --address "$head_ip:7070" \
  --cluster-file "$work/secret/cluster.toml" >/dev/null ||
  fail "omnilearn node set omnilearn-worker-1 --slowdown 1 failed"

status=$(podman wait omnilearn-submit-submit)
[ "$status" -eq 0 ] ||
  { podman logs omnilearn-submit-submit; fail "the submit Job's pod exited $status"; }
[ "$(summary_status "$run")" = succeeded ] || fail "summary: $(cat "$run/summary.json")"
lost=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("lost_steps", 0))' \
  "$run/summary.json")
[ "$lost" = 0 ] || fail "the drained scale-down lost $lost steps"
echo "kubernetes_test: job succeeded across a scale-up (step $step_at_join) and a drained" \
  "scale-down (step $step_at_drain)"
