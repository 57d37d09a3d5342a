#!/usr/bin/env python3
"""Asynchronous training side by side: uniform-ASP, proportional-ASP and
proportional-BSP on the same job, workers slowed by --slowdown (default 1,1,2,4), each worker
under the same CPU quota and pinned. The three runs of a repeat go back to back (their order
rotates from one repeat to the next), and every run evaluates the test set at the same sample
counts (every --eval-samples samples: BSP every eval_samples / B steps, ASP every
eval_samples / (B / n) updates), so each run gives a curve of test accuracy over wall-clock time
from its first update.

Per run it reports: wall time, the final test accuracy, the test accuracy at the repeat's equal
time budget (the shortest run's last evaluation: each run's last evaluation at or before it),
the time to --target accuracy (first evaluation at or above it), and for ASP the staleness (mean,
p95 and max over every push), the updates and each worker's updates and final batch. Then the
medians over the repeats, with the range.

ASP runs use lr / n by default (--asp-lr to choose): each push is a whole optimizer step.
Slowed workers burn CPU (`omnilearn run --slowdown-spin`) unless --emulation sleep: the speeds
they reach are printed (samples/s per worker in uniform-ASP, where nobody waits).

Usage:
  bench/jobs/asp_staleness.py --omnilearn build/bin/omnilearn --epochs 3 --repeats 3 \\
      --slowdown 1,1,2,4 --json /tmp/asp.json
"""
import argparse
import fcntl
import json
import os
import statistics
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
seed = {seed}
threads = 1
eval_every = {eval_every}

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
staleness = "{staleness}"
lr_scaling = "{lr_scaling}"
"""

# name -> (mode, policy, ASP's lr_scaling). "proportional-asp-unscaled" tests whether linear lr
# scaling (the fast workers' gradients weighed about 1.5x, the slow ones' 0.3x at 1,1,2,4) is
# what costs proportional-ASP accuracy: every push's gradient then counts whole.
ALL_CONFIGS = {
    "uniform-asp": ("asp", "uniform", "linear"),
    "proportional-asp": ("asp", "proportional", "linear"),
    "proportional-bsp": ("bsp", "proportional", "linear"),
    "proportional-asp-unscaled": ("asp", "proportional", "none"),
}
DEFAULT_CONFIGS = "uniform-asp,proportional-asp,proportional-bsp"


def curve(run_dir, mode):
    """(seconds from the first update, test accuracy) of every evaluation, and the run's end."""
    events = []
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            events.append(json.loads(line))
    if mode == "asp":
        starts = [e["time"] for e in events if e.get("event") == "first_push"]
        evals = [e for e in events if e.get("event") == "asp_interval" and "test_accuracy" in e]
    else:
        starts = [e["time"] for e in events if e.get("event") == "step"]
        evals = [e for e in events if e.get("event") == "step" and "test_accuracy" in e]
    start = min(starts)
    end = next(e["time"] for e in events if e.get("event") == "finished")
    return [(e["time"] - start, e["test_accuracy"]) for e in evals], end - start


def run(args, name, mode, policy, lr_scaling, slowdown, seed):
    n = len(slowdown)
    # Each ASP push is a full optimizer step on one worker's batch: n pushes make one BSP step's
    # progress at lr / n (with the BSP learning rate, momentum 0.9 and stale gradients the MLP
    # diverged in both ASP runs).
    lr = args.lr if mode == "bsp" else (args.asp_lr or args.lr / n)
    per_update = args.global_batch if mode == "bsp" else args.global_batch / n
    eval_every = max(1, round(args.eval_samples / per_update))
    text = JOB.format(name=name, mode=mode, policy=policy, batch=args.global_batch,
                      epochs=args.epochs, n=n, lr=lr, seed=seed, eval_every=eval_every)
    if mode == "asp":
        text += ASP.format(servers=args.servers, staleness=args.staleness, lr_scaling=lr_scaling)
    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "job.toml")
        with open(job, "w") as f:
            f.write(text)
        run_dir = os.path.join(tmp, "run")
        cmd = [args.omnilearn, "run", job, "--local", str(n), "--run-dir", run_dir,
               "--slowdown", ",".join(str(s) for s in slowdown)]
        if args.cpu_quota:
            cmd += ["--cpu-quota", ",".join([str(args.cpu_quota)] * n), "--pin"]
        if args.emulation == "spin":
            cmd.append("--slowdown-spin")
        env = dict(os.environ, OMNILEARN_PROGRESS="plain")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, timeout=3600)
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
        evals, end = curve(run_dir, mode)
    out = {"name": name, "mode": mode, "policy": policy, "lr": lr, "eval_every": eval_every,
           "status": s.get("status"), "wall_time_s": s.get("wall_time_s"), "train_s": end,
           "test_accuracy": s.get("final_test_accuracy"), "steps": s.get("steps"),
           "evals": evals}
    reached = next((t for t, a in evals if a >= args.target), None)
    if reached is None and (s.get("final_test_accuracy") or 0) >= args.target:
        reached = end
    out["time_to_target_s"] = reached
    if mode == "asp":
        out["staleness"] = s.get("staleness")
        out["worker_updates"] = [w.get("updates") for w in s.get("workers", [])]
        out["final_batches"] = [w.get("final_batch") for w in s.get("workers", [])]
        # Samples per second each worker reached (uniform batches: its speed, nobody waits).
        out["worker_samples_per_s"] = [
            round((w.get("updates") or 0) * (w.get("final_batch") or 0) / end, 1)
            for w in s.get("workers", [])]
    return out


def known_by(r, budget):
    """The test accuracies the run had shown by `budget` seconds, in order (the final one counts
    at the run's end)."""
    points = list(r["evals"])
    if r["test_accuracy"] is not None:
        points.append((r["train_s"], r["test_accuracy"]))
    return [a for t, a in points if t <= budget + 1e-9]


def accuracy_at(r, budget):
    """The run's test accuracy known at `budget` seconds: its last evaluation by then."""
    known = known_by(r, budget)
    return known[-1] if known else None


def best_by(r, budget):
    """The best test accuracy any evaluation had shown by `budget` seconds (ASP's accuracy moves
    a few points between evaluations at a constant learning rate)."""
    known = known_by(r, budget)
    return max(known) if known else None


def late_mean(r, budget):
    """The mean of the run's evaluations in the second half of `budget` (after budget / 2, up to
    it): steadier than one evaluation, since at a constant learning rate ASP's test accuracy moves
    by up to 3 points from one evaluation to the next."""
    points = list(r["evals"])
    if r["test_accuracy"] is not None:
        points.append((r["train_s"], r["test_accuracy"]))
    late = [a for t, a in points if budget / 2 < t <= budget + 1e-9]
    return statistics.fmean(late) if late else None


def median_range(values, fmt="{:.4f}"):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    text = fmt.format(statistics.median(values))
    if len(values) > 1:
        text += " [" + fmt.format(min(values)) + ".." + fmt.format(max(values)) + "]"
    return text


def summarize(args, configs, names, repeats):
    for results in repeats:
        for r in results.values():
            r["late_mean"] = late_mean(r, r["budget_s"])
    print(f"\nslowdown {args.slowdown}, B = {args.global_batch}, {args.epochs} epochs, "
          f"{len(repeats)} repeats: median [range]")
    print(f"{'':25s} {'accuracy at equal time':>24s} {'best by then':>22s} "
          f"{'mean, 2nd half':>22s} {'final accuracy':>22s} "
          f"{'time to ' + format(args.target, '.0%'):>22s} {'p95 staleness':>14s} "
          f"{'mean staleness':>20s}")
    for name, mode, *_ in configs:
        rs = [rep[name] for rep in repeats]
        print(f"{name:25s} {median_range([r['accuracy_at_budget'] for r in rs]):>24s} "
              f"{median_range([r['best_by_budget'] for r in rs]):>22s} "
              f"{median_range([r['late_mean'] for r in rs]):>22s} "
              f"{median_range([r['test_accuracy'] for r in rs]):>22s} "
              f"{median_range([r['time_to_target_s'] for r in rs], '{:.1f}'):>22s} "
              + (f"{median_range([r['staleness']['p95'] for r in rs], '{:.0f}'):>14s} "
                 f"{median_range([r['staleness']['mean'] for r in rs], '{:.2f}'):>20s}"
                 if mode == "asp" else ""))
    for other in ("proportional-asp", "proportional-asp-unscaled"):
        if other not in names or "uniform-asp" not in names:
            continue
        ratios = [rep[other]["staleness"]["p95"] / rep["uniform-asp"]["staleness"]["p95"]
                  for rep in repeats if rep["uniform-asp"]["staleness"]["p95"]]
        gains = [rep[other]["accuracy_at_budget"] - rep["uniform-asp"]["accuracy_at_budget"]
                 for rep in repeats]
        print(f"p95 staleness {other} / uniform-asp: {median_range(ratios, '{:.2f}')} "
              f"(goal <= 0.5)")
        print(f"accuracy at equal time, {other} - uniform-asp: "
              f"{median_range(gains, '{:+.4f}')} (goal > 0)")
        late = [rep[other]["late_mean"] - rep["uniform-asp"]["late_mean"] for rep in repeats
                if None not in (rep[other]["late_mean"], rep["uniform-asp"]["late_mean"])]
        print(f"mean accuracy over the budget's second half, {other} - uniform-asp: "
              f"{median_range(late, '{:+.4f}')}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--omnilearn", default="build/bin/omnilearn")
    p.add_argument("--slowdown", default="1,1,2,4")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--staleness", default="none", help="ASP's [asp] staleness")
    p.add_argument("--lr", type=float, default=0.05, help="BSP's learning rate")
    p.add_argument("--asp-lr", type=float, default=0.0, help="ASP's (default: lr / workers)")
    p.add_argument("--cpu-quota", type=float, default=0.4)
    p.add_argument("--emulation", choices=["spin", "sleep"], default="spin",
                   help="how a slowed worker is slowed (omnilearn run --slowdown-spin or not): "
                        "under equal quotas a sleeping worker is never throttled while a fast "
                        "ASP worker always is, so sleeping flattens the heterogeneity")
    p.add_argument("--eval-samples", type=int, default=12800,
                   help="training samples between test-set evaluations (every run alike)")
    p.add_argument("--target", type=float, default=0.85)
    p.add_argument("--lock", action="append", default=[],
                   help="a file to flock around each run (not to overlap other benchmarks or "
                        "builds); may be repeated")
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help="the runs of a repeat, comma-separated, among: " + ", ".join(ALL_CONFIGS))
    p.add_argument("--json")
    p.add_argument("--pool", nargs="+", metavar="JSON",
                   help="run nothing: the summary of the repeats in these --json files together "
                        "(same slowdown and configs)")
    args = p.parse_args()
    if args.pool:
        repeats = []
        for path in args.pool:
            with open(path) as f:
                pooled = json.load(f)
            if repeats and (pooled["args"]["slowdown"], sorted(pooled["repeats"][0])) != (
                    args.slowdown, sorted(repeats[0])):
                p.error(f"--pool: {path} has another slowdown or other configs than the first")
            repeats += pooled["repeats"]
            for key in ("slowdown", "global_batch", "epochs", "target"):
                setattr(args, key, pooled["args"][key])
        names = [name for name in ALL_CONFIGS if name in repeats[0]]
        configs = [(name,) + ALL_CONFIGS[name] for name in names]
        summarize(args, configs, names, repeats)
        return 0
    names = args.configs.split(",")
    unknown = [name for name in names if name not in ALL_CONFIGS]
    if unknown:
        p.error(f"--configs: unknown {', '.join(unknown)}; choose among {', '.join(ALL_CONFIGS)}")
    configs = [(name,) + ALL_CONFIGS[name] for name in names]
    slowdown = [float(x) for x in args.slowdown.split(",")]
    repeats = []
    for rep in range(args.repeats):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        results = {}
        for name, mode, policy, lr_scaling in order:
            locks = [open(path, "w") for path in args.lock]
            for lock in locks:
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                r = run(args, name, mode, policy, lr_scaling, slowdown, seed=5 + rep)
            finally:
                for lock in locks:
                    lock.close()
            results[name] = r
            st = r.get("staleness") or {}
            ttt = r["time_to_target_s"]
            print(f"[{rep + 1}] {name:25s} {r['status']:9s} wall {r['wall_time_s']:6.1f} s  "
                  f"final acc {r['test_accuracy'] or 0:.4f}  to {args.target:.0%} "
                  + (f"{ttt:6.1f} s" if ttt is not None else "  not  ")
                  + (f"  staleness mean {st.get('mean', 0):.2f} p95 {st.get('p95')} "
                     f"max {st.get('max')}  updates/worker {r['worker_updates']}  "
                     f"batches {r['final_batches']}  samples/s {r['worker_samples_per_s']}"
                     if mode == "asp" else ""), flush=True)
        budget = min(r["train_s"] for r in results.values())
        for r in results.values():
            r["budget_s"] = budget
            r["accuracy_at_budget"] = accuracy_at(r, budget)
            r["best_by_budget"] = best_by(r, budget)
        print(f"[{rep + 1}] equal time budget {budget:.1f} s: " + ", ".join(
            f"{name} {results[name]['accuracy_at_budget'] or 0:.4f}" for name, *_ in configs),
            flush=True)
        repeats.append(results)

    summarize(args, configs, names, repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"slowdown": slowdown, "args": vars(args), "repeats": repeats}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
