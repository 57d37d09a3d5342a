#!/usr/bin/env python3
"""Time to reach a test accuracy (default 85%) with uniform vs proportional batches, and
PyTorch DDP, side by side.

Runs `omnilearn run JOB --local 4 --slowdown 1,1,2,4 --pin` (HL4) on the MLP job of the README
with eval_every = 25 steps, once per policy per repeat (interleaved), and reads the step events
of the run directory: the wall time from the first committed step to the first evaluation at or
above the target, and the steps it took. Every worker gets the same CPU quota, so a slowed
worker's sleep does not hand its CPU to the others.

"ddp" (bench/jobs/ddp_baseline.py: equal batches, the same model, data order, caps, pinning and
slowdowns) runs after the OmniLearn runs of its repeat, for as many steps as the first of them
needed to reach the target: every policy applies one update of the whole global batch per
step, so the learning curve per step is the same and only the time per step differs. Its time
is from the end of its first step to the end of that step, without evaluations (OmniLearn's
includes its own, every 25 steps); the baseline trains with SGD momentum at the job's lr, not
the job's Nesterov and cosine schedule (the same cost per step). The step-time ratio over the
steps from 50 on is printed beside the time ratio, and so is the time ratio without the
evaluations' share (the wait each evaluation adds after its step, beyond the usual gap between
steps).

Usage: bench/jobs/time_to_accuracy.py --omnilearn build/bin/omnilearn [--repeats 2]
  bench/jobs/time_to_accuracy.py --omnilearn build/bin/omnilearn --policies proportional,ddp \
      --target 0.88 --epochs 3 --slowdown 1,1,1,8 --repeats 1
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_baseline  # noqa: E402

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
    # The evaluations' share: every rank evaluates its share of the test set after the commit
    # (paced by its slowdown), and the leader reports the step with the accuracy afterwards, so
    # an evaluation lengthens the gap before its step's event; its share is that gap beyond the
    # median gap before a step that did not evaluate.
    gaps = [(b, b["time"] - a["time"]) for a, b in zip(steps, steps[1:])]
    usual = statistics.median(g for b, g in gaps if "test_accuracy" not in b)
    evals = sum(max(0.0, g - usual) for b, g in gaps
                if "test_accuracy" in b and reached and b["step"] <= reached["step"])
    # Steady wall time per step without evaluations: the mean gap from step 50 on before a step
    # that did not evaluate (what DDP's step time measures: it does not evaluate).
    plain = [g for b, g in gaps if b["step"] > 50 and "test_accuracy" not in b]
    return {
        "seconds": reached["time"] - start if reached else None,
        "without_eval_s": reached["time"] - start - evals if reached else None,
        "steps": reached["step"] - steps[0]["step"] if reached else None,
        "best_accuracy": best,
        "total_s": steps[-1]["time"] - start,
        "step_s": statistics.mean(plain) if plain else None,
    }


def run_ddp(steps, slowdown, quota):
    """DDP over `steps` + 1 steps of the job's model and batch: the time from the end of its
    first step to the end of step `steps` (the same count the OmniLearn runs measure)."""
    text = open(JOB).read()
    lr = float(re.search(r"^lr = ([0-9.]+)", text, re.M).group(1))
    momentum = float(re.search(r"^momentum = ([0-9.]+)", text, re.M).group(1))
    batch = int(re.search(r"^global_batch = (\d+)", text, re.M).group(1))
    result = ddp_baseline.run("mlp", batch, steps + 1, 4,
                              slowdown=[float(s) for s in slowdown.split(",")], quota=quota,
                              lr=lr, momentum=momentum)
    t = result["step_end_times"]
    return {"seconds": t[steps] - t[0], "without_eval_s": t[steps] - t[0], "steps": steps,
            "best_accuracy": float("nan"),
            "total_s": t[-1] - t[0], "step_s": ddp_baseline.steady_step_time(result)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--slowdown", default="1,1,2,4")
    ap.add_argument("--quota", type=float, default=0.45)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--policies", default="uniform,proportional",
                    help="uniform, proportional and ddp (run last in each repeat)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    policies = args.policies.split(",")
    unknown = set(policies) - {"uniform", "proportional", "ddp"}
    if unknown or policies == ["ddp"]:
        sys.exit(f"--policies: {','.join(sorted(unknown)) or 'ddp'}: give uniform and/or "
                 "proportional, and ddp if wanted (it runs the steps they needed)")
    policies = [p for p in policies if p != "ddp"] + (["ddp"] if "ddp" in policies else [])
    runs = {p: [] for p in policies}
    print(f"slowdown {args.slowdown}, quota {args.quota}, load average before "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.repeats):
            for policy in runs:
                if policy == "ddp":
                    needed = [runs[p][-1]["steps"] for p in runs
                              if p != "ddp" and runs[p][-1]["steps"] is not None]
                    if not needed:
                        print("  ddp           skipped: no run reached the target", flush=True)
                        continue
                    r = run_ddp(needed[0], args.slowdown, args.quota)
                else:
                    r = run_once(args.omnilearn, policy, args.slowdown, args.quota, args.epochs,
                                 args.target, workdir)
                runs[policy].append(r)
                print(f"  {policy:13s} reached {args.target:.0%} after "
                      f"{r['seconds'] if r['seconds'] is not None else float('nan'):7.1f} s "
                      f"(step {r['steps']}; {r['without_eval_s']:.1f} s without evaluations), "
                      f"best {r['best_accuracy']:.4f}, "
                      f"{args.epochs} epochs in {r['total_s']:.1f} s, step "
                      f"{1000 * r['step_s']:.1f} ms", flush=True)
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ratios = []
    for base in ("uniform", "ddp"):
        if base not in runs or "proportional" not in runs:
            continue
        pairs = [(b, p) for b, p in zip(runs[base], runs["proportional"])
                 if b["seconds"] and p["seconds"]]
        if base == "uniform":
            ratios = [b["seconds"] / p["seconds"] for b, p in pairs]
        if pairs:
            t = [b["seconds"] / p["seconds"] for b, p in pairs]
            w = [b["without_eval_s"] / p["without_eval_s"] for b, p in pairs]
            s = [b["step_s"] / p["step_s"] for b, p in pairs]
            print(f"{base} / proportional: time to {args.target:.0%} median "
                  f"{statistics.median(t):.2f}x [{min(t):.2f}..{max(t):.2f}], without "
                  f"evaluations {statistics.median(w):.2f}x [{min(w):.2f}..{max(w):.2f}], "
                  f"step time {statistics.median(s):.2f}x [{min(s):.2f}..{max(s):.2f}]")
    for policy, rs in runs.items():
        secs = [r["seconds"] for r in rs if r["seconds"] is not None]
        print(f"{policy:13s} median time to {args.target:.0%}: "
              f"{statistics.median(secs) if secs else float('nan'):.1f} s over {len(secs)} runs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
