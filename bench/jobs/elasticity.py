#!/usr/bin/env python3
"""Elasticity timings on a real cluster of processes on this machine.

Per repeat: a head and 3 workers (`omnilearn head`, `omnilearn worker`, a private cluster file),
an MLP job on Fashion-MNIST (min 2, max 4 workers) submitted with `omnilearn submit`; then
  * join: a 4th `omnilearn worker` starts; measured from its start to the first committed step
    with 4 workers, split into start -> registered (agent joined), -> trainer ready (LibTorch
    loaded, data read), -> first step of the new generation;
  * kill: `kill -9` of a worker process; measured from the kill to the next committed step, and
    the steps lost (summary.json: lost_steps, abandoned_in_flight_steps).
Event times come from the run's events.jsonl (written by the head); kill and start times are
taken here, on the same clock (one machine).

Usage: bench/jobs/elasticity.py --omnilearn build/bin/omnilearn [--repeats 3]
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
name = "bench-elastic"
[model]
kind = "mlp"
hidden = [256, 128]
[data]
dataset = "fashion-mnist"
[train]
global_batch = 256
steps = 100000
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = 3
threads = 1
[controller]
policy = "proportional"
min_batch = 8
interval = 10
cooldown = 3
[elastic]
min_workers = 2
max_workers = 4
"""





def one_repeat(omnilearn, workdir, index, env):
    cluster_file = os.path.join(workdir, f"cluster-{index}.toml")
    procs = []

    def start(args, name):
        log = open(os.path.join(workdir, f"{name}-{index}.log"), "w")
        p = subprocess.Popen([omnilearn] + args + ["--cluster-file", cluster_file], stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(p)
        return p

    try:
        start(["head", "--host", "127.0.0.1", "--port", "0", "--runs-dir", workdir], "head")
        deadline = time.time() + 20
        address = None
        while time.time() < deadline and not address:
            text = open(os.path.join(workdir, f"head-{index}.log")).read()
            for line in text.splitlines():
                if "listening on" in line:
                    address = line.split("listening on ")[1].strip()
            time.sleep(0.05)
        if not address:
            raise RuntimeError("head did not start")
        workers = {}
        for name in ("w1", "w2", "w3"):
            workers[name] = start(["worker", "--name", name, "--address", address], name)
        time.sleep(2)
        job = os.path.join(workdir, "job.toml")
        open(job, "w").write(JOB)
        run_dir = os.path.join(workdir, f"run-{index}")
        subprocess.run([omnilearn, "submit", job, "--address", address, "--cluster-file",
                        cluster_file, "--run-dir", run_dir], check=True, env=env,
                       capture_output=True)
        wait_event(run_dir, lambda e: e.get("event") == "step" and e["step"] >= 30
                   and len(e["batches"]) == 3, 120)

        # Join.
        joined_at = time.time()
        workers["w4"] = start(["worker", "--name", "w4", "--address", address], "w4")
        ready = wait_event(run_dir, lambda e: e.get("event") == "trainer_ready"
                           and "-w4-t" in e.get("trainer", ""), 120)
        first = wait_event(run_dir, lambda e: e.get("event") == "step" and len(e["batches"]) == 4,
                           120)
        # The scheduler places a trainer right after the node registers: the spawn event marks
        # the end of the join itself.
        spawn = wait_event(run_dir, lambda e: e.get("event") == "spawn"
                           and "-w4-t" in e.get("trainer", ""), 5)
        join = {"total_s": first["time"] - joined_at, "to_spawn_s": spawn["time"] - joined_at,
                "spawn_to_ready_s": ready["time"] - spawn["time"],
                "ready_to_step_s": first["time"] - ready["time"]}
        wait_event(run_dir, lambda e: e.get("event") == "step" and e["step"] >= first["step"] + 30,
                   120)

        # Kill -9 a worker (the process group: worker and trainer, as a machine dies).
        before = max(e["step"] for e in events(run_dir) if e.get("event") == "step")
        killed_at = time.time()
        os.killpg(workers["w2"].pid, signal.SIGKILL)
        recovered = wait_event(run_dir, lambda e: e.get("event") == "recovered"
                               and e["time"] >= killed_at, 120)
        next_step = wait_event(run_dir, lambda e: e.get("event") == "step"
                               and e["time"] >= killed_at and len(e["batches"]) == 3, 120)
        kill = {"to_next_step_s": next_step["time"] - killed_at,
                "recovery_s": recovered.get("recovery_s"), "step_before": before,
                "resumed_at_step": recovered["step"]}
        job_id = next(e["job_id"] for e in events(run_dir) if e.get("event") == "submitted")
        subprocess.run([omnilearn, "stop", job_id, "--address", address, "--cluster-file",
                        cluster_file], env=env, capture_output=True)
        summary_path = os.path.join(run_dir, "summary.json")
        deadline = time.time() + 60
        while not os.path.exists(summary_path) and time.time() < deadline:
            time.sleep(0.1)
        summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {}
        kill["lost_steps"] = summary.get("lost_steps")
        kill["abandoned_in_flight_steps"] = summary.get("abandoned_in_flight_steps")
        return join, kill
    finally:
        kill_process_groups(procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    env = dict(os.environ, OMNILEARN_LOG="warn")
    joins, kills = [], []
    with tempfile.TemporaryDirectory() as workdir:
        for i in range(args.repeats):
            join, kill = one_repeat(os.path.abspath(args.omnilearn), workdir, i, env)
            joins.append(join)
            kills.append(kill)
            print(f"repeat {i}: join {join['total_s']:.2f} s (to spawn {join['to_spawn_s']:.2f}, "
                  f"trainer start {join['spawn_to_ready_s']:.2f}, to first step "
                  f"{join['ready_to_step_s']:.2f}); kill -9 -> next step {kill['to_next_step_s']:.2f} s "
                  f"(recovery_s {kill['recovery_s']}), lost {kill['lost_steps']}, abandoned in flight "
                  f"{kill['abandoned_in_flight_steps']}", flush=True)
    med = lambda xs: statistics.median(xs)
    print(f"median: worker start -> first committed step with it {med([j['total_s'] for j in joins]):.2f} s "
          f"[{min(j['total_s'] for j in joins):.2f}..{max(j['total_s'] for j in joins):.2f}], "
          f"of which trainer start {med([j['spawn_to_ready_s'] for j in joins]):.2f} s; "
          f"kill -9 -> next committed step {med([k['to_next_step_s'] for k in kills]):.2f} s "
          f"[{min(k['to_next_step_s'] for k in kills):.2f}..{max(k['to_next_step_s'] for k in kills):.2f}]; "
          f"lost steps {[k['lost_steps'] for k in kills]}")


if __name__ == "__main__":
    main()
