#!/usr/bin/env python3
"""Heterogeneity benchmark: steady-state step time of uniform vs proportional vs affine batches.

For every slowdown set (HL1 1,1,1,1 / HL2 1,1,1,2 / HL4 1,1,2,4 / HL8 1,1,1,8, and a cgroup-quota
set) and every policy, runs `omnilearn run JOB --local 4` on the same job and reads the run's
events.jsonl. Runs of one repeat are interleaved (uniform, proportional, affine back to back), so
the ratios compare runs made side by side (shared/BENCHMARKING.md). Every worker gets the same
CPU quota (fair emulation: a slowed worker's sleep must not hand CPU to the others) and is
pinned to a vCPU.

Prints a table and writes JSON. Usage:
  bench/jobs/heterogeneity.py --omnilearn build/bin/omnilearn --model mlp --repeats 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SETS = {
    "HL1": [1, 1, 1, 1],
    "HL2": [1, 1, 1, 2],
    "HL4": [1, 1, 2, 4],
    "HL8": [1, 1, 1, 8],
}
# cgroup quotas instead of sleeps: real contention. 0.6,0.6,0.3,0.15 CPUs ~ speeds 1,1,1/2,1/4.
QUOTA_SET = ("Q4", [0.6, 0.6, 0.3, 0.15])

MODELS = {
    "mlp": '[model]\nkind = "mlp"\nhidden = [256, 128]\n',
    "cnn": '[model]\nkind = "cnn"\nchannels = [6, 16]\nfc = [120, 84]\n',
}


def job_toml(model, policy, steps, batch):
    return f"""[job]
name = "bench-{model}-{policy}"
{MODELS[model]}
[data]
dataset = "fashion-mnist"

[train]
global_batch = {batch}
steps = {steps}
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = 1
threads = 1

[controller]
policy = "{policy}"
deadband = 0.05
min_batch = 8
max_batch = {batch}
interval = 10
cooldown = 3

[elastic]
min_workers = 4
max_workers = 4
"""


def run_once(omnilearn, model, policy, speeds, quotas, steps, batch, workdir):
    path = os.path.join(workdir, f"{model}-{policy}.toml")
    with open(path, "w") as f:
        f.write(job_toml(model, policy, steps, batch))
    run_dir = os.path.join(workdir, f"run-{model}-{policy}-{time.time_ns()}")
    cmd = [omnilearn, "run", path, "--local", "4", "--pin", "--run-dir", run_dir]
    if speeds:
        cmd += ["--slowdown", ",".join(str(s) for s in speeds)]
    cmd += ["--cpu-quota", ",".join(str(q) for q in quotas)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824",
               OMNILEARN_LOG="error")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise RuntimeError(f"run failed: {' '.join(cmd)}")
    steps_ev = []
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "step":
                steps_ev.append(e)
    # Steady state: the second half of the steps (after the controller settled).
    tail = steps_ev[len(steps_ev) // 2:]
    step_time = statistics.median(e["step_time_s"] for e in tail)
    allreduce = statistics.median(e["allreduce_time_s"] for e in tail)
    last = steps_ev[-1]
    compute = [w["compute_time_s"] for w in last["workers"]]
    # Per-worker samples/s over the steady state: batch / compute time, median per worker.
    speeds = [statistics.median(e["batches"][i] / max(e["workers"][i]["compute_time_s"], 1e-9)
                                for e in tail)
              for i in range(len(last["workers"]))]
    return {"step_time_s": step_time, "allreduce_s": allreduce, "batches": last["batches"],
            "compute_s": compute, "speeds": speeds}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--model", default="mlp", choices=list(MODELS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--global-batch", type=int, default=512)
    ap.add_argument("--quota", type=float, default=0.45, help="CPU quota of every worker")
    ap.add_argument("--sets", default="HL1,HL2,HL4,HL8,Q4")
    ap.add_argument("--policies", default="uniform,proportional,affine")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    policies = args.policies.split(",")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.sets.split(","):
            if name == QUOTA_SET[0]:
                speeds, quotas = None, QUOTA_SET[1]
                rel = [q / max(quotas) for q in quotas]
            else:
                speeds, quotas = SETS[name], [args.quota] * 4
                rel = [1.0 / s for s in speeds]
            ideal = sum(rel) / (len(rel) * min(rel))  # sum of speeds / (n x slowest)
            runs = {p: [] for p in policies}
            for r in range(args.repeats):
                for p in policies:
                    runs[p].append(run_once(args.omnilearn, args.model, p, speeds, quotas,
                                            args.steps, args.global_batch, workdir))
            # The nominal ideal assumes speeds exactly 1/slowdown (or proportional to quota); the
            # measured one uses the per-worker speeds seen in the uniform runs.
            measured = []
            for u in runs.get("uniform", []):
                measured.append(sum(u["speeds"]) / (len(u["speeds"]) * min(u["speeds"])))
            measured_ideal = statistics.median(measured) if measured else float("nan")
            res = {"ideal_speedup": ideal, "measured_ideal_speedup": measured_ideal, "policies": {}}
            for p in policies:
                times = [x["step_time_s"] for x in runs[p]]
                ratios = [u["step_time_s"] / x["step_time_s"] for u, x in zip(runs["uniform"], runs[p])]
                res["policies"][p] = {
                    "median_step_ms": 1000 * statistics.median(times),
                    "speedup_median": statistics.median(ratios),
                    "speedup_min": min(ratios), "speedup_max": max(ratios),
                    "allreduce_ms": 1000 * statistics.median(x["allreduce_s"] for x in runs[p]),
                    "final_batches": runs[p][-1]["batches"],
                }
            results[name] = res
            print(f"{args.model} {name} (ideal {ideal:.2f}x nominal, {measured_ideal:.2f}x from the "
                  f"speeds measured in the uniform runs)", flush=True)
            for p in policies:
                q = res["policies"][p]
                frac = (q["speedup_median"] - 1) / (ideal - 1) if ideal > 1.001 else float("nan")
                print(f"  {p:13s} step {q['median_step_ms']:7.1f} ms  speed-up {q['speedup_median']:.2f}x "
                      f"[{q['speedup_min']:.2f}..{q['speedup_max']:.2f}]  of ideal gain {frac:5.0%}  "
                      f"all-reduce {q['allreduce_ms']:.1f} ms  batches {q['final_batches']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
