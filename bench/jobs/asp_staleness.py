#!/usr/bin/env python3
"""Asynchronous training side by side (issue 13): uniform-ASP, proportional-ASP and
proportional-BSP on the same job, workers slowed by --slowdown (default 1,1,2,4), each worker
under the same CPU quota and pinned. Every run trains the same number of epochs of Fashion-MNIST
(equal samples, not equal wall-clock time: `omnilearn run` has no time budget), and the figures
come from each run's summary.json: wall time, final test accuracy, and for ASP the staleness
(mean, p95, max over every push), updates and the per-worker updates (their spread is what
proportional batches should even out).

ASP runs use lr / n by default (--asp-lr to choose): each push is a whole optimizer step.

Usage:
  bench/jobs/asp_staleness.py --omnilearn build/bin/omnilearn --epochs 1 --json /tmp/asp.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

JOB = """
[job]
name = "asp-bench-{name}"
mode = "{mode}"

[model]
kind = "mlp"
hidden = [256, 128]

[data]
dataset = "fashion-mnist"

[train]
global_batch = {batch}
epochs = {epochs}
optimizer = "sgd"
lr = {lr}
momentum = 0.9
seed = 5
threads = 1

[controller]
policy = "{policy}"
min_batch = 8
interval = 10
cooldown = 3

[elastic]
min_workers = {n}
max_workers = {n}
"""

ASP = """
[asp]
servers = {servers}
staleness = "none"
lr_scaling = "linear"
"""


def run(args, name, mode, policy, slowdown):
    n = len(slowdown)
    # Each ASP push is a full optimizer step on one worker's batch: n pushes make one BSP step's
    # progress at lr / n (with the BSP learning rate, momentum 0.9 and stale gradients the MLP
    # diverged in both ASP runs).
    lr = args.lr if mode == "bsp" else (args.asp_lr or args.lr / n)
    text = JOB.format(name=name, mode=mode, policy=policy, batch=args.global_batch,
                      epochs=args.epochs, n=n, lr=lr)
    if mode == "asp":
        text += ASP.format(servers=args.servers)
    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "job.toml")
        with open(job, "w") as f:
            f.write(text)
        run_dir = os.path.join(tmp, "run")
        cmd = [args.omnilearn, "run", job, "--local", str(n), "--run-dir", run_dir,
               "--slowdown", ",".join(str(s) for s in slowdown)]
        if args.cpu_quota:
            cmd += ["--cpu-quota", ",".join([str(args.cpu_quota)] * n), "--pin"]
        env = dict(os.environ, OMNILEARN_PROGRESS="plain")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, timeout=3600)
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
    out = {"name": name, "mode": mode, "policy": policy, "lr": lr, "status": s.get("status"),
           "wall_time_s": s.get("wall_time_s"), "test_accuracy": s.get("final_test_accuracy"),
           "steps": s.get("steps")}
    if mode == "asp":
        out["staleness"] = s.get("staleness")
        out["worker_updates"] = [w.get("updates") for w in s.get("workers", [])]
        out["final_batches"] = [w.get("final_batch") for w in s.get("workers", [])]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--omnilearn", default="build/bin/omnilearn")
    p.add_argument("--slowdown", default="1,1,2,4")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05, help="BSP's learning rate")
    p.add_argument("--asp-lr", type=float, default=0.0, help="ASP's (default: lr / workers)")
    p.add_argument("--cpu-quota", type=float, default=0.4)
    p.add_argument("--json")
    args = p.parse_args()
    slowdown = [float(x) for x in args.slowdown.split(",")]
    results = []
    for name, mode, policy in [("uniform-asp", "asp", "uniform"),
                               ("proportional-asp", "asp", "proportional"),
                               ("proportional-bsp", "bsp", "proportional")]:
        r = run(args, name, mode, policy, slowdown)
        results.append(r)
        st = r.get("staleness") or {}
        print(f"{name:18s} {r['status']:9s} wall {r['wall_time_s']:7.1f} s  "
              f"test acc {r['test_accuracy'] or 0:.4f}  steps {r['steps']}"
              + (f"  staleness mean {st.get('mean', 0):.2f} p95 {st.get('p95')} max {st.get('max')}"
                 f"  updates/worker {r['worker_updates']}  batches {r['final_batches']}"
                 if mode == "asp" else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"slowdown": slowdown, "args": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
