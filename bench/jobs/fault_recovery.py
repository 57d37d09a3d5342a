#!/usr/bin/env python3
"""Recovery from each fault, against the leader (rank 0) and against a follower, on a real
cluster of processes on this machine.

Per cell: a head and 3 workers (the victim in its own network namespace, joined to the head's
by a veth pair that this script makes and removes), an MLP job on synthetic data (min 2, max 3
workers) submitted with `omnilearn submit`; once it trains with all three, one fault:
  kill         kill -9 of the victim's worker and trainer (a machine dies)
  freeze       SIGSTOP of the victim's worker and trainer for 4 s (a hung machine)
  freeze-agent SIGSTOP of the victim's worker only, 4 s: its trainer runs on (a partial failure)
  kill-trainer kill -9 of the victim's trainer only (an OOM kill, a crash): its worker runs on
  freeze-trainer SIGSTOP of the victim's trainer only, 4 s (a stuck call): its worker runs on
  partition    the victim's link to the head and the others down for 4 s
  drain        `omnilearn drain` of the victim (no failure: it leaves at a step boundary)
Measured from the fault to the first step committed by a generation without the victim (the
head's events.jsonl; fault times are taken here, on the same clock), the longest pause between
two committed steps in that time (what the job actually lost), and the summary's
lost_steps and superseded_steps (steps a cut-off leader committed before its lease ran out;
each step is still committed by one generation only). The leader's and a follower's node are
chosen by name: trainers of the first generation are ranked by node name.

Usage (root, for namespaces): bench/jobs/fault_recovery.py [--omnilearn build/bin/omnilearn]
       [--faults kill,freeze,...] [--repeats 1]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from run_dir import events, kill_process_groups, wait_event

JOB = """[job]
name = "bench-faults"
[model]
kind = "mlp"
hidden = [64]
[data]
dataset = "synthetic"
train_size = 20000
test_size = 500
[train]
global_batch = 384
steps = 100000
seed = 5
threads = 1
eval_every = 0
[controller]
policy = "proportional"
interval = 10
[elastic]
min_workers = 2
max_workers = 3
"""

HEAD_NS, FAR_NS = "olbench-head", "olbench-far"
HEAD_IP, FAR_IP = "10.251.7.1", "10.251.7.2"


def sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def make_network():
    delete_network()
    sh("ip", "netns", "add", HEAD_NS)
    sh("ip", "netns", "add", FAR_NS)
    sh("ip", "link", "add", "olh", "netns", HEAD_NS, "type", "veth", "peer", "name", "olf",
       "netns", FAR_NS)
    sh("ip", "-n", HEAD_NS, "addr", "add", HEAD_IP + "/24", "dev", "olh")
    sh("ip", "-n", FAR_NS, "addr", "add", FAR_IP + "/24", "dev", "olf")
    for ns, dev in ((HEAD_NS, "olh"), (FAR_NS, "olf")):
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", dev, "up")


def delete_network():
    for ns in (HEAD_NS, FAR_NS):
        sh("ip", "netns", "delete", ns, check=False)


def link(up):
    sh("ip", "-n", FAR_NS, "link", "set", "olf", "up" if up else "down")





def trainer_pid(victim):
    """The pid of the omnilearn-trainer process of node `victim` (its --trainer name is
    <job>-<node>-t<N>)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if not args or not args[0].endswith(b"omnilearn-trainer"):
            continue
        for flag, value in zip(args, args[1:]):
            if flag == b"--trainer" and f"-{victim}-t".encode() in value:
                return int(entry)
    raise RuntimeError(f"no trainer process of {victim}")


def one_cell(omnilearn, workdir, fault, role, index, env):
    tag = f"{fault}-{role}-{index}"
    cluster_file = os.path.join(workdir, f"cluster-{tag}.toml")
    procs = {}
    # Trainers of the first generation are ranked by node name: "a..." leads, "z..." follows.
    victim = "a-victim" if role == "leader" else "z-victim"

    def start(name, args, ns):
        log = open(os.path.join(workdir, f"{name}-{tag}.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", ns, omnilearn] + args +
                             ["--cluster-file", cluster_file], stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs[name] = p
        return p

    def cli(*args):
        return subprocess.run(["ip", "netns", "exec", HEAD_NS, omnilearn] + list(args) +
                              ["--cluster-file", cluster_file], env=env, capture_output=True,
                              text=True, timeout=30)

    make_network()
    try:
        start("head", ["head", "--host", HEAD_IP, "--port", "0", "--runs-dir", workdir,
                       "--heartbeat-interval-ms", "200", "--heartbeat-timeout-ms", "1500"],
              HEAD_NS)
        address = None
        deadline = time.time() + 20
        while time.time() < deadline and not address:
            for line in open(os.path.join(workdir, f"head-{tag}.log")).read().splitlines():
                if "listening on" in line:
                    address = line.split("listening on ")[1].strip()
            time.sleep(0.05)
        if not address:
            raise RuntimeError("head did not start")
        for name in ("m-near", "n-near"):
            start(name, ["worker", "--name", name, "--address", address, "--gloo-host", HEAD_IP],
                  HEAD_NS)
        start(victim, ["worker", "--name", victim, "--address", address, "--gloo-host", FAR_IP],
              FAR_NS)
        time.sleep(2)
        job = os.path.join(workdir, "job.toml")
        open(job, "w").write(JOB)
        run_dir = os.path.join(workdir, f"run-{tag}")
        submitted = cli("submit", job, "--address", address, "--run-dir", run_dir)
        if submitted.returncode != 0:
            raise RuntimeError("submit failed: " + submitted.stderr)
        first = wait_event(run_dir, lambda e: e.get("event") == "step" and e["step"] >= 40
                           and len(e["batches"]) == 3, 120)
        generation = first["generation"]
        members = wait_event(run_dir, lambda e: e.get("event") == "generation"
                             and e["generation"] == generation, 5)["members"]
        rank = [i for i, m in enumerate(members) if f"-{victim}-t" in m]
        if not rank or (rank[0] == 0) != (role == "leader"):
            raise RuntimeError(f"the victim has rank {rank} in {members}; wanted the {role}")

        victim_pid = procs[victim].pid
        victim_trainer = trainer_pid(victim) if fault.endswith("-trainer") else None
        fault_at = time.time()
        if fault == "kill":
            os.killpg(victim_pid, signal.SIGKILL)
        elif fault == "freeze":
            os.killpg(victim_pid, signal.SIGSTOP)
        elif fault == "freeze-agent":
            # `ip netns exec` execs the worker: the group leader's pid is the worker's.
            os.kill(victim_pid, signal.SIGSTOP)
        elif fault == "kill-trainer":
            os.kill(victim_trainer, signal.SIGKILL)
        elif fault == "freeze-trainer":
            os.kill(victim_trainer, signal.SIGSTOP)
        elif fault == "partition":
            link(False)
        elif fault == "drain":
            drained = cli("drain", victim, "--address", address)
            if drained.returncode != 0:
                raise RuntimeError("drain failed: " + drained.stderr)

        def without_victim(e):
            if e.get("event") != "step" or e["time"] < fault_at or e["generation"] <= generation:
                return False
            gen = [g for g in events(run_dir) if g.get("event") == "generation"
                   and g["generation"] == e["generation"]]
            return gen and not any(f"-{victim}-t" in m for m in gen[0]["members"])

        resumed = wait_event(run_dir, without_victim, 120)
        if fault in ("freeze", "freeze-agent", "freeze-trainer", "partition"):
            time.sleep(max(0.0, fault_at + 4 - time.time()))
            if fault == "partition":
                link(True)
            elif fault == "freeze":
                os.killpg(victim_pid, signal.SIGCONT)
            elif fault == "freeze-trainer":
                os.kill(victim_trainer, signal.SIGCONT)
            else:
                os.kill(victim_pid, signal.SIGCONT)
        wait_event(run_dir, lambda e: e.get("event") == "step" and e["step"] >= resumed["step"] + 30,
                   120)
        job_id = next(e["job_id"] for e in events(run_dir) if e.get("event") == "submitted")
        cli("stop", job_id, "--address", address)
        summary_path = os.path.join(run_dir, "summary.json")
        deadline = time.time() + 60
        while not os.path.exists(summary_path) and time.time() < deadline:
            time.sleep(0.1)
        summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {}
        # Split brain check: every step number from one generation only.
        owners = {}
        for e in events(run_dir):
            if e.get("event") in ("step", "superseded_step"):
                owners.setdefault(e["step"], set()).add(e["generation"])
        doubled = sum(1 for gens in owners.values() if len(gens) > 1)
        # The longest pause in commits (any generation's, a superseded leader's included) from
        # the fault to 5 steps after the job resumed without the victim: how long training
        # actually stood still. A frozen agent whose trainer runs on pauses nothing until the
        # generation is replaced.
        commits = sorted(e["time"] for e in events(run_dir)
                         if e.get("event") in ("step", "superseded_step")
                         and fault_at <= e["time"] and e["step"] <= resumed["step"] + 5)
        pause = max((b - a for a, b in zip([fault_at] + commits, commits)), default=0.0)
        return {"fault": fault, "role": role, "recovery_s": resumed["time"] - fault_at,
                "longest_pause_s": pause, "resumed_step": resumed["step"],
                "lost_steps": summary.get("lost_steps"),
                "superseded_steps": summary.get("superseded_steps"),
                "steps_in_two_generations": doubled}
    finally:
        kill_process_groups(procs.values())
        delete_network()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--faults", default="kill,freeze,freeze-agent,kill-trainer,freeze-trainer,"
                    "partition,drain")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fault_recovery.py: needs root (network namespaces)")
    # A SIGTERM (a timeout, a Ctrl-C from a wrapper) must still run the clean-up below: every
    # process this script started, and its namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("fault_recovery.py: terminated"))
    env = dict(os.environ, OMNILEARN_LOG="warn")
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for fault in args.faults.split(","):
            for role in ("leader", "follower"):
                for i in range(args.repeats):
                    r = one_cell(os.path.abspath(args.omnilearn), workdir, fault, role, i, env)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    print()
    print("| fault | victim | fault -> first step without it (s) | longest pause in commits (s) "
          "| lost steps | superseded steps | steps in two generations |")
    print("|---|---|---|---|---|---|---|")
    for fault in args.faults.split(","):
        for role in ("leader", "follower"):
            cell = [r for r in results if r["fault"] == fault and r["role"] == role]
            rec = [r["recovery_s"] for r in cell]
            pause = [r["longest_pause_s"] for r in cell]
            print(f"| {fault} | {role} | {statistics.median(rec):.2f} "
                  f"[{min(rec):.2f}..{max(rec):.2f}] | {statistics.median(pause):.2f} "
                  f"[{min(pause):.2f}..{max(pause):.2f}] | {[r['lost_steps'] for r in cell]} | "
                  f"{[r['superseded_steps'] for r in cell]} | "
                  f"{[r['steps_in_two_generations'] for r in cell]} |")


if __name__ == "__main__":
    main()
