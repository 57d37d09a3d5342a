#!/usr/bin/env bash
# deploy/slurm/omnilearn.sbatch on a real one-node Slurm that this test starts (munged,
# slurmctld and slurmd of its own: private key, ports, state and config; one node of 2 CPUs,
# OverSubscribe=FORCE so the head's and the workers' steps share it). A job succeeds, with a
# second worker joining mid-job as another srun step of the same allocation; a bad job file's
# exit code (2) comes back through sbatch; nothing is left running afterwards.
# Usage: slurm_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "$1" && pwd)
src="${OMNILEARN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
[ "$(id -u)" -eq 0 ] || skip "needs root (slurmd and munged run as root here)"
for program in munged mungekey slurmctld slurmd sbatch srun squeue scontrol scancel sinfo; do
  command -v "$program" >/dev/null ||
    skip "$program is not installed (scripts/install-deps.sh --test installs Slurm and munge)"
done
[ -x "$build/bin/omnilearn-trainer" ] || skip "no omnilearn-trainer in $build"

work=$(mktemp -d /tmp/omnilearn-slurm-test-XXXXXX)
chmod 755 "$work"
export SLURM_CONF="$work/slurm.conf"
cleanup() {
  local code=$?
  # Jobs first, while slurmctld runs, so that slurmd's step daemons end them; then the daemons.
  if [ -f "$work/slurmctld.pid" ]; then
    scancel --quiet --user=root 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
      [ -z "$(squeue --noheader 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  local pidfile pid
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  # A process of this test still running (the test failed half-way) is found by this test's
  # own folder in its command line, and killed by its id.
  for pid in $(pgrep -f "$work" || true); do kill -9 "$pid" 2>/dev/null || true; done
  [ "$code" -eq 0 ] || { echo "--- slurmctld.log"; tail -20 "$work/slurmctld.log";
    echo "--- slurmd.log"; tail -20 "$work/slurmd.log"; } 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# munge: a key of this test's, its socket in a folder everyone may enter (munged insists).
mkdir -p "$work/munge" "$work/munge-socket" "$work/state" "$work/spool"
chmod 700 "$work/munge"
chmod 755 "$work/munge-socket"
mungekey --create --keyfile="$work/munge/munge.key"
munged --key-file="$work/munge/munge.key" --socket="$work/munge-socket/socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed"

node=$(hostname -s)
cat >"$SLURM_CONF" <<CONF
ClusterName=omnilearn-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge-socket/socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES OverSubscribe=FORCE MaxTime=INFINITE State=UP
CONF
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
node_idle() { [ "$(sinfo --noheader --nodes="$node" --format=%T 2>/dev/null)" = idle ]; }
wait_for 60 "the test's Slurm node never became idle" node_idle

# A job that lasts until a second worker joins: the allocation's own worker emulates a slow
# machine (each step's compute 50x as long; at full speed the job's steps take a few ms each
# and a join has only seconds to land), the second runs at full speed. Once it trained in the
# job the first is set back to full speed, and the job ends soon (the slow one would otherwise
# keep the smallest batch at 50x for the rest of the job: minutes on a loaded machine).
sed -e 's/^steps = .*/steps = 400/' -e 's/^name = .*/name = "slurm-test"/' \
  "$src/examples/synthetic_quick.toml" >"$work/job.toml"
export OMNILEARN="$build/bin/omnilearn"
export OMNILEARN_RUN_ROOT="$work/cluster"
export OMNILEARN_HEAD_ARGS="--heartbeat-interval-ms 200 --heartbeat-timeout-ms 1500"
export OMNILEARN_WORKER_ARGS="--slowdown 50"
cd "$work"
jobid=$(sbatch --parsable --nodes=1 --output="$work/slurm-%j.out" \
  "$src/deploy/slurm/omnilearn.sbatch" "$work/job.toml")
run_events() { ls "$work"/cluster/runs/*/events.jsonl 2>/dev/null | head -n 1; }
has_steps() { local e; e=$(run_events) && [ -n "$e" ] && grep -q '"step"' "$e"; }
wait_for 120 "job $jobid's run did not start training" has_steps
# Another step of the same allocation: a worker that joins the running job.
srun --jobid="$jobid" --overlap --nodes=1 --ntasks=1 --job-name=omnilearn-worker \
  "$OMNILEARN" worker --cluster-file "$work/cluster/cluster.toml" --name extra-worker \
  >"$work/extra-worker.log" 2>&1 &
joined() { local e; e=$(run_events) && generation_members "$(dirname "$e")" extra-worker; }
wait_for 120 "the worker of the second srun step never trained in the job" joined
"$OMNILEARN" node set "$node" --slowdown 1 --cluster-file "$work/cluster/cluster.toml" >/dev/null ||
  fail "omnilearn node set $node --slowdown 1 failed"
job_state() { scontrol show job "$jobid" | grep -o 'JobState=[A-Z]*' | cut -d= -f2; }
job_ended() {
  case "$(job_state)" in COMPLETED | FAILED | CANCELLED | TIMEOUT) return 0 ;; esac
  return 1
}
wait_for 300 "job $jobid did not end" job_ended
cat "$work/slurm-$jobid.out"
[ "$(job_state)" = COMPLETED ] || fail "job $jobid ended $(job_state)"
exit_code=$(scontrol show job "$jobid" | grep -o ' ExitCode=[0-9:]*' | cut -d= -f2)
[ "$exit_code" = "0:0" ] || fail "job $jobid's exit code $exit_code, expected 0:0"
run_dir=$(dirname "$(run_events)")
[ "$(summary_status "$run_dir")" = succeeded ] ||
  fail "the job's summary: $(cat "$run_dir/summary.json")"
wait  # the extra worker's srun ends with the allocation

# A bad job file: `omnilearn submit` exits 2, and so does the batch job (sbatch --wait).
printf '[job]\nname = "bad"\n[train]\nsteps = -1\n' >"$work/bad.toml"
status=0
sbatch --wait --quiet --nodes=1 --output="$work/slurm-bad.out" \
  "$src/deploy/slurm/omnilearn.sbatch" "$work/bad.toml" || status=$?
[ "$status" -eq 2 ] ||
  { cat "$work/slurm-bad.out"; fail "sbatch --wait returned $status, expected 2"; }

# Nothing left: no job or step in Slurm, no process of this test's clusters.
[ -z "$(squeue --noheader)" ] || fail "Slurm still has: $(squeue)"
left=$(pgrep -af "$work/cluster" || true)
[ -z "$left" ] || fail "processes left running: $left"
echo "slurm_test: job succeeded with a worker added by a second step; exit code 2 propagated"
