#!/usr/bin/env python3
"""Where a step's time goes: one `omnilearn run` of the reference MLP job with uniform batches
(by default equal workers, as in the heterogeneity benchmark's balanced reference), its trainers
logging every step's parts at debug level, and the run's step events.

Printed: wall-clock time per step from step 50 on (the step events), the slowest worker's compute
per step (median), their difference (the fixed cost: what a step takes beyond its slowest
compute), the all-reduce after the last rank's compute (per step the smallest exposed
all-reduce of the ranks: the rank that computed longest waits for nobody), and per trainer the medians of its step parts: the step as the trainer times it (from
the step boundary to the commit), data, forward, backward, slowdown sleep, the exposed all-reduce
(from the end of backward until every bucket's all-reduce completed: it includes waiting for the
slowest peer's compute), the buckets launched while backward still ran, and the optimizer; then
the mean step, and the gap between steps (from a step's return to the next step's start, which
the trainer logs): median and mean. Wall per step minus the mean step is the same gap as the
head sees it.

Usage: bench/jobs/step_profile.py --omnilearn build/bin/omnilearn --global-batch 348 --steps 200
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heterogeneity  # noqa: E402

STEP_LINE = re.compile(
    r"trainer (\S+): step (\d+) b=(\d+) ([\d.]+) ms: data ([\d.]+) fwd ([\d.]+) bwd ([\d.]+) "
    r"slowdown ([\d.]+) exposed all-reduce ([\d.]+) \((\d+)/(\d+) buckets launched in "
    r"backward\) optimizer ([\d.]+)(?: gap before ([\d.]+))?")
PARTS = ["step", "data", "forward", "backward", "slowdown", "exposed all-reduce",
         "buckets in backward", "buckets", "optimizer", "gap"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--quota", type=float, default=0.4, help="CPU quota of every worker")
    ap.add_argument("--slowdown", default="", help="e.g. 1,1,2,4 (default: none)")
    ap.add_argument("--policy", default="uniform")
    args = ap.parse_args()
    if args.steps <= 60:
        sys.exit("--steps: give more than 60 (steps before 50 are warm-up)")
    with tempfile.TemporaryDirectory() as work:
        job = os.path.join(work, "job.toml")
        with open(job, "w") as f:
            f.write(heterogeneity.job_toml("mlp", args.policy, args.steps, args.global_batch, 0,
                                           0.1, args.workers))
        run_dir = os.path.join(work, "run")
        cmd = [args.omnilearn, "run", job, "--local", str(args.workers), "--pin", "--run-dir",
               run_dir, "--cpu-quota", ",".join([str(args.quota)] * args.workers)]
        if args.slowdown:
            cmd += ["--slowdown", args.slowdown]
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432",
                   MALLOC_TRIM_THRESHOLD_="1073741824", OMNILEARN_LOG="debug")
        load_before = os.getloadavg()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
            sys.exit(f"run failed: {' '.join(cmd)}")
        with open(os.path.join(run_dir, "events.jsonl")) as f:
            events = [json.loads(line) for line in f]
    parts, by_step = {}, {}
    for line in (out.stdout + out.stderr).splitlines():
        m = STEP_LINE.search(line)
        if m and int(m.group(2)) >= 50:
            parts.setdefault(m.group(1), []).append([float(x or "nan") for x in m.groups()[3:]])
            by_step.setdefault(int(m.group(2)), []).append(float(m.group(9)))
    steps = [e for e in events if e.get("event") == "step" and e["step"] >= 50]
    wall = (steps[-1]["time"] - steps[0]["time"]) / (steps[-1]["step"] - steps[0]["step"])
    slowest = statistics.median(max(w["compute_time_s"] for w in e["workers"]) for e in steps)
    print(f"B = {args.global_batch} on {args.workers} workers at {args.quota} CPU "
          f"(slowdown {args.slowdown or 'none'}, {args.policy}); load average "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after")
    print(f"wall per step {1000 * wall:.1f} ms, slowest compute {1000 * slowest:.1f} ms, "
          f"fixed cost {1000 * (wall - slowest):.1f} ms")
    if not parts:
        sys.exit("no step lines in the trainers' debug log: is OMNILEARN_LOG passed to them?")
    # The rank that computed longest waits for nobody: its exposed all-reduce, the smallest of
    # the step's, is the exchange's own time after the last compute.
    last = [min(v) for v in by_step.values() if len(v) == args.workers]
    if last:
        print(f"all-reduce after the last rank's compute (per step, the smallest exposed "
              f"all-reduce of the ranks): median {statistics.median(last):.1f} ms, mean "
              f"{statistics.mean(last):.1f} ms")
    for trainer, rows in sorted(parts.items()):
        med = [statistics.median(c) for c in zip(*rows)]
        times = [(n, v) for n, v in zip(PARTS, med) if not n.startswith("buckets") and n != "gap"]
        mean_step = statistics.mean(r[0] for r in rows)
        gaps = [r[9] for r in rows if r[9] == r[9]]
        gap = (f"gap between steps median {statistics.median(gaps):.1f} mean "
               f"{statistics.mean(gaps):.1f} ms" if gaps else "gap not logged")
        print(f"  {trainer}: " + ", ".join(f"{n} {v:.1f}" for n, v in times) +
              f" ms (medians; step mean {mean_step:.1f}); buckets {med[6]:.0f} of {med[7]:.0f} "
              f"launched in backward; {gap}; wall minus mean step {1000 * wall - mean_step:.1f} ms")

if __name__ == "__main__":
    main()
