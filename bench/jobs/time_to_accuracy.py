#!/usr/bin/env python3
"""Time to reach a test accuracy (default 85%) with uniform vs proportional batches, side by side.

Runs `omnilearn run JOB --local 4 --slowdown 1,1,2,4 --pin` (HL4) on the MLP job of the README
with eval_every = 25 steps, once per policy per repeat (interleaved), and reads the step events
of the run directory: the wall time from the first committed step to the first evaluation at or
above the target, and the steps it took. Every worker gets the same CPU quota, so a slowed
worker's sleep does not hand its CPU to the others.

Usage: bench/jobs/time_to_accuracy.py --omnilearn build/bin/omnilearn [--repeats 2]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "..", "..", "examples", "fashion_mnist_mlp.toml")


def job_text(policy, epochs):
    text = open(JOB).read()
    text = re.sub(r'policy = "\w+"', f'policy = "{policy}"', text)
    text = re.sub(r"eval_every = \d+", "eval_every = 25", text)
    text = re.sub(r"epochs = \d+", f"epochs = {epochs}", text)
    return text


def run_once(omnilearn, policy, slowdown, quota, epochs, target, workdir):
    path = os.path.join(workdir, f"{policy}.toml")
    with open(path, "w") as f:
        f.write(job_text(policy, epochs))
    run_dir = os.path.join(workdir, f"run-{policy}-{time.time_ns()}")
    cmd = [omnilearn, "run", path, "--local", "4", "--pin", "--run-dir", run_dir,
           "--slowdown", slowdown, "--cpu-quota", ",".join([str(quota)] * 4)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824",
               OMNILEARN_LOG="error")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise RuntimeError("run failed: " + " ".join(cmd))
    steps = []
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "step":
                steps.append(e)
    start = steps[0]["time"]
    reached = next((e for e in steps if e.get("test_accuracy", 0) >= target), None)
    best = max((e.get("test_accuracy", 0) for e in steps), default=0)
    return {
        "seconds": reached["time"] - start if reached else None,
        "steps": reached["step"] if reached else None,
        "best_accuracy": best,
        "total_s": steps[-1]["time"] - start,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--slowdown", default="1,1,2,4")
    ap.add_argument("--quota", type=float, default=0.45)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    runs = {"uniform": [], "proportional": []}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.repeats):
            for policy in runs:
                r = run_once(args.omnilearn, policy, args.slowdown, args.quota, args.epochs,
                             args.target, workdir)
                runs[policy].append(r)
                print(f"  {policy:13s} reached {args.target:.0%} after "
                      f"{r['seconds'] if r['seconds'] is not None else float('nan'):7.1f} s "
                      f"(step {r['steps']}), best {r['best_accuracy']:.4f}, "
                      f"{args.epochs} epochs in {r['total_s']:.1f} s", flush=True)
    ratios = [u["seconds"] / p["seconds"] for u, p in zip(runs["uniform"], runs["proportional"])
              if u["seconds"] and p["seconds"]]
    for policy, rs in runs.items():
        secs = [r["seconds"] for r in rs if r["seconds"] is not None]
        print(f"{policy:13s} median time to {args.target:.0%}: "
              f"{statistics.median(secs) if secs else float('nan'):.1f} s over {len(secs)} runs")
    if ratios:
        print(f"uniform / proportional: median {statistics.median(ratios):.2f}x "
              f"[{min(ratios):.2f}..{max(ratios):.2f}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
