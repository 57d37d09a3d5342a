#!/usr/bin/env python3
"""Soak: what a head keeps per finished job, over many short jobs back to back.

A head and 2 workers (`omnilearn head`, `omnilearn worker`, a private cluster file), then --jobs
short jobs one after the other (synthetic data, a tiny MLP, 3 steps, 1..2 workers, one trainer
per node), each submitted with `omnilearn submit` and waited for through its summary.json; every
one must succeed. After each job in --report (and after the last), once no job runs, it prints
the head's own counters from `omnilearn status --json` (threads, open_fds, actors, store_keys)
and its resident memory (VmRSS from /proc). A head that releases what a job took shows the same
threads, descriptors and actors at every report, no store keys, and a flat VmRSS (the job
manager keeps each finished job's summary, up to --max-jobs of them: a few KiB each).

The ctest `integration_soak_test` checks the same at 40 jobs; this is the long run quoted in
docs/benchmarks.md, "Head limits".

Usage: bench/jobs/soak.py --omnilearn build/bin/omnilearn [--jobs 500] [--report 50,500]
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

from run_dir import kill_process_groups

JOB = """[job]
name = "soak"
[model]
kind = "mlp"
hidden = [16]
[data]
dataset = "synthetic"
train_size = 512
test_size = 128
[train]
global_batch = 64
steps = 3
optimizer = "sgd"
lr = 0.05
seed = 5
threads = 1
[controller]
policy = "proportional"
min_batch = 8
interval = 10
[elastic]
min_workers = 1
max_workers = 2
slots = 1
"""


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--report", default="50", help="job numbers to report after (and the last)")
    args = ap.parse_args()
    omnilearn = os.path.abspath(args.omnilearn)
    reports = sorted({int(x) for x in args.report.split(",") if x} | {args.jobs})
    env = dict(os.environ, OMNILEARN_LOG="warn")
    procs = []
    with tempfile.TemporaryDirectory() as workdir:
        cluster_file = os.path.join(workdir, "cluster.toml")

        def start(cmd, name):
            log = open(os.path.join(workdir, f"{name}.log"), "w")
            p = subprocess.Popen([omnilearn] + cmd + ["--cluster-file", cluster_file],
                                 stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
            procs.append(p)
            return p

        def cli(cmd, timeout=30):
            return subprocess.run([omnilearn] + cmd + ["--address", address, "--cluster-file",
                                                       cluster_file],
                                  env=env, capture_output=True, text=True, timeout=timeout)

        try:
            head = start(["head", "--host", "127.0.0.1", "--port", "0", "--runs-dir", workdir,
                          "--heartbeat-interval-ms", "200", "--heartbeat-timeout-ms", "1500"],
                         "head")
            address = None
            deadline = time.time() + 20
            while time.time() < deadline and not address:
                for line in open(os.path.join(workdir, "head.log")).read().splitlines():
                    if "listening on" in line:
                        address = line.split("listening on ")[1].strip()
                time.sleep(0.05)
            if not address:
                sys.exit("the head did not start; see " + os.path.join(workdir, "head.log"))
            for name in ("w1", "w2"):
                start(["worker", "--name", name, "--address", address], name)

            def status():
                out = cli(["status", "--json"])
                return json.loads(out.stdout) if out.returncode == 0 else None

            def idle_counters(actors=None, timeout=60):
                """The head's counters once no job runs (and it holds `actors` actors)."""
                deadline = time.time() + timeout
                last = None
                while time.time() < deadline:
                    s = status()
                    if s:
                        last = s["counters"]
                        busy = any(j["state"] in ("pending", "running") for j in s["jobs"])
                        if (not busy and last.get("store_keys") == 0
                                and (actors is None or last.get("actors") == actors)):
                            return last, len(s["nodes"])
                    time.sleep(0.2)
                sys.exit(f"the head did not settle: {last}")

            deadline = time.time() + 30
            while time.time() < deadline:
                s = status()
                if s and sum(n["state"] == "alive" for n in s["nodes"]) == 2:
                    break
                time.sleep(0.2)
            else:
                sys.exit("the workers did not join")
            base, _ = idle_counters()

            def report(label, counters):
                print(f"{label:>14}: threads {counters['threads']}, open_fds "
                      f"{counters['open_fds']}, actors {counters['actors']}, store_keys "
                      f"{counters['store_keys']}, VmRSS {rss_kib(head.pid)} KiB", flush=True)

            report("before jobs", base)
            job_file = os.path.join(workdir, "job.toml")
            open(job_file, "w").write(JOB)
            durations = []
            started = time.time()
            for i in range(1, args.jobs + 1):
                t0 = time.time()
                run_dir = os.path.join(workdir, f"run-{i}")
                out = cli(["submit", job_file, "--run-dir", run_dir])
                if out.returncode != 0:
                    sys.exit(f"job {i}: submit failed: {out.stderr}")
                summary_path = os.path.join(run_dir, "summary.json")
                deadline = time.time() + 180
                summary = None
                while time.time() < deadline and summary is None:
                    try:
                        summary = json.load(open(summary_path))
                    except (OSError, json.JSONDecodeError):
                        time.sleep(0.05)
                if not summary or summary.get("status") != "succeeded":
                    sys.exit(f"job {i} did not succeed: {summary}")
                durations.append(time.time() - t0)
                if i in reports:
                    counters, _ = idle_counters(base["actors"])
                    report(f"after job {i}", counters)
            print(f"{args.jobs} jobs in {time.time() - started:.0f} s, median "
                  f"{statistics.median(durations):.2f} s a job (submit to summary.json)")
        finally:
            kill_process_groups(procs)


if __name__ == "__main__":
    main()
