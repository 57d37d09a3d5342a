#!/usr/bin/env python3
"""Heterogeneity benchmark: wall-clock time per step of PyTorch DDP (equal batches) and of
OmniLearn's uniform, proportional and affine batches, side by side.

For every slowdown set (HL1 1,1,1,1 / HL2 1,1,1,2 / HL4 1,1,2,4 / HL8 1,1,1,8, and a cgroup-quota
set), every global batch and every policy, trains the same job: `omnilearn run JOB --local N`
(reading the run's events.jsonl) or, for "ddp", bench/jobs/ddp_baseline.py under torchrun with
the same model, data order, optimizer, caps, pinning and slowdown emulation. The runs of one
repeat are interleaved (ddp, uniform, proportional, affine back to back), so the ratios compare
runs made side by side; repeat r starts r places further along that
list (`--order rotate`, the default), so that a drift of the VM's speed within a repeat does not
always favour the same policy. Every worker gets the same CPU quota (fair
emulation: a slowed worker's sleep must not hand CPU to the others) and is pinned to a vCPU.

The figure is wall-clock time per step over steps 50..end (every cost included: control,
waiting, evaluation if any), from the head's step events (OmniLearn) or rank 0's step end times
(DDP). Printed per policy: that time, the ratio to DDP and the speed-up over uniform (paired by
repeat: medians and min..max), the fraction of the ideal speed-up sum(speed) / (n x slowest)
with speeds measured in the same session's uniform runs from compute time alone, the
compute-only efficiency B / sum(speed) / step time, the same against each run's own speeds
(each worker's compute at the batch it had), and plan changes per 100 steps.

"balanced" (in --policies by default) is the balanced reference: right after each repeat's
uniform run, equal unslowed workers under the same caps, each with the batch whose compute a
perfect split gives every worker (global batch B x n / sum(1/slowdown), the slowdowns as
measured in that uniform run: under the caps they differ from those asked, and both are
printed). It is what a controller that split perfectly could at best reach; each policy is
reported as a fraction of it (balanced step / policy step, paired by repeat: the controller's
quality), and its step time minus its slowest compute is the fixed cost every step pays. With
"ddp" among the policies, DDP runs on the same equal workers at the same global batch right
after it ("ddp-balanced"), its fixed cost measured the same way (bench/jobs/ddp_baseline.py
times each rank's compute up to its last gradient), and the difference is printed paired by
repeat. The load average before and after each set is recorded: other work on the machine
moves every figure, ratios less.

--omnilearn-b BUILD compares two builds in one run: every OmniLearn run, the balanced reference
included, is made with each build back to back, the second reported as POLICY@b (paired with
the same repeat's DDP runs).

Usage (the reference job of docs/benchmarks.md, "Speed-up over PyTorch DDP", and a larger batch):
  bench/jobs/heterogeneity.py --omnilearn build/bin/omnilearn --model mlp --repeats 3 \
      --global-batches 256,1024 --json het.json
A set may also be literal slowdowns joined by "/", one per worker: on a 2-vCPU machine
`--sets 1/2,1/4 --quota 1.0` gives each of two workers a vCPU of its own (worker i is pinned to
vCPU i mod #cpus), where four workers share them in pairs.
--slowdown-spin emulates a slowdown by burning CPU inside the worker's quota (DDP's ranks the
same way), a slower CPU under the same cap; by default a slowed worker sleeps, refills its quota
meanwhile and computes faster, so that 1,1,2,4 under 0.4-CPU caps measures nearer 1,1,1.7,3.2.
A policy may carry extra [controller] keys and runs as its own column, e.g.
  --policies ddp,uniform,proportional,proportional+persist_rounds=0
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_baseline  # noqa: E402

STEADY_FROM = 50  # steps before this are warm-up and the controller's first rounds

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


def measured_slowdowns(speeds, nominal_slowdowns):
    """Each worker's slowdown as measured: the reference speed (the median of the workers asked
    to run unslowed, slowdown 1 or the largest quota) over its own. Under CPU caps a slowdown of
    2 can measure nearer 1.1: a worker that sleeps refills its quota and computes faster."""
    fastest = min(nominal_slowdowns)
    ref = statistics.median(s for s, f in zip(speeds, nominal_slowdowns) if f == fastest)
    return [ref / s for s in speeds]


def balanced_batch(batch, slowdowns):
    """The balanced reference's global batch: n equal unslowed workers, each with the batch
    that gives the compute a perfect split of `batch` among workers of these slowdowns gives
    every worker (batch / sum(1/slowdown)), rounded to a multiple of n."""
    n = len(slowdowns)
    return n * max(1, round(batch / sum(1.0 / f for f in slowdowns)))


def split_variant(policy):
    """"proportional+persist_rounds=0" -> ("proportional", {"persist_rounds": "0"}): a policy
    with extra [controller] keys, run as its own column beside the others."""
    name, *extra = policy.split("+")
    keys = dict(kv.split("=", 1) for kv in extra)
    fixed = {"policy", "deadband", "min_batch", "max_batch", "interval", "cooldown"}
    if fixed & keys.keys():
        sys.exit(f"{policy}: {sorted(fixed & keys.keys())} are set by the benchmark itself")
    return name, keys


def job_toml(model, policy, steps, batch, seed, deadband=0.1, workers=4):
    policy, extra = split_variant(policy)
    extra_lines = "".join(f"{k} = {v}\n" for k, v in extra.items())
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
seed = {seed}
threads = 1

[controller]
policy = "{policy}"
deadband = {deadband}
min_batch = 8
max_batch = {batch}
interval = 20
cooldown = 3
{extra_lines}
[elastic]
min_workers = {workers}
max_workers = {workers}
"""


def steady(steps_ev, key_time="time"):
    """Wall-clock seconds per step over the steps from STEADY_FROM to the last."""
    window = [e for e in steps_ev if e["step"] >= min(STEADY_FROM, steps_ev[-1]["step"] // 2)]
    first, last = window[0], window[-1]
    return (last[key_time] - first[key_time]) / max(1, last["step"] - first["step"])


def run_omnilearn(omnilearn, model, policy, speeds, quotas, steps, batch, seed, workdir,
                  deadband=0.1, spin=False):
    path = os.path.join(workdir, f"{model}-{policy}.toml")
    with open(path, "w") as f:
        f.write(job_toml(model, policy, steps, batch, seed, deadband, len(quotas)))
    run_dir = os.path.join(workdir, f"run-{model}-{policy}-{time.time_ns()}")
    cmd = [omnilearn, "run", path, "--local", str(len(quotas)), "--pin", "--run-dir", run_dir]
    if speeds:
        cmd += ["--slowdown", ",".join(str(s) for s in speeds)]
        if spin:
            cmd += ["--slowdown-spin"]
    cmd += ["--cpu-quota", ",".join(str(q) for q in quotas)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824",
               OMNILEARN_LOG="error")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise RuntimeError(f"run failed: {' '.join(cmd)}")
    steps_ev, plans = [], []
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "step":
                steps_ev.append(e)
            elif e.get("event") == "plan":
                plans.append(e)
    tail = [e for e in steps_ev if e["step"] >= STEADY_FROM] or steps_ev[len(steps_ev) // 2:]
    n = len(tail[-1]["workers"])
    # Per-worker samples/s of compute alone over the steady state, median per worker.
    worker_speeds = [statistics.median(e["batches"][i] / max(e["workers"][i]["compute_time_s"], 1e-9)
                                       for e in tail if e["batches"][i] > 0)
                     for i in range(n)]
    window = tail[-1]["step"] - tail[0]["step"]
    changes = sum(1 for p in plans if p["step"] >= tail[0]["step"])
    persisted = sum(1 for p in plans  # by the smoothing across rounds, once steady
                    if p.get("persisted") and p["step"] >= tail[0]["step"])
    # Where a step's wall time goes: the slowest worker's compute (the controller's balance plus
    # per-step jitter: the slowest of n noisy computes) and what follows it (the exchange's
    # exposed part, the optimizer, control), medians over the steady steps.
    slowest = statistics.median(max(w["compute_time_s"] for w in e["workers"]) for e in tail)
    mean_compute = statistics.median(statistics.mean(w["compute_time_s"] for w in e["workers"])
                                     for e in tail)
    # The slowest minus the mean splits in two: the plan's own imbalance (one worker's compute
    # is longer on every step: the split the controller keeps, within its deadband) and per-step
    # jitter (which worker is slowest changes from step to step). The first is each worker's
    # median compute over the steady steps, the largest of them against their mean.
    per_worker = [statistics.median(e["workers"][i]["compute_time_s"] for e in tail)
                  for i in range(n)]
    imbalance = max(per_worker) - statistics.mean(per_worker)
    return {"step_time_s": steady(steps_ev),
            "reported_step_time_s": statistics.median(e["step_time_s"] for e in tail),
            "allreduce_s": statistics.median(e["allreduce_time_s"] for e in tail),
            "slowest_compute_s": slowest, "mean_compute_s": mean_compute,
            "imbalance_s": imbalance, "worker_compute_s": per_worker,
            "batches": tail[-1]["batches"], "speeds": worker_speeds,
            "plan_changes_per_100": 100.0 * changes / max(1, window),
            "persisted_changes": persisted}


def run_balanced(omnilearn, model, slowdowns, quotas, steps, batch, seed, workdir, deadband):
    """The balanced reference: equal workers (no slowdown, every one at the reference worker's
    quota) at the per-worker compute a perfect split under `slowdowns` gives, run with uniform
    batches: what a controller that splits perfectly could at best reach under the same caps.
    Its step time minus its slowest compute is the fixed cost every step pays."""
    n = len(quotas)
    global_batch = balanced_batch(batch, slowdowns)
    r = run_omnilearn(omnilearn, model, "uniform", None, [max(quotas)] * n, steps, global_batch,
                      seed, workdir, deadband)
    r["global_batch"] = global_batch
    r["slowdowns"] = list(slowdowns)
    return r


def run_ddp(model, speeds, quotas, steps, batch, seed, spin=False):
    n = len(quotas)
    result = ddp_baseline.run(model, batch, steps, n, slowdown=speeds, quotas=quotas, seed=seed,
                              slowdown_spin=spin)
    t = result["step_end_times"]
    first = min(STEADY_FROM, len(t) // 2)
    fixed, slowest = ddp_baseline.fixed_cost(result, first)
    return {"step_time_s": (t[-1] - t[first]) / (len(t) - 1 - first),
            "fixed_cost_s": fixed, "slowest_compute_s": slowest, "global_batch": batch,
            "batches": [batch // n] * n, "plan_changes_per_100": 0.0}


def set_speeds(name):
    """A named set (HL4) or a literal one, slowdowns joined by "/": "1/4" is two workers, the
    second four times slower (worker i pinned to vCPU i mod #cpus, so on a 2-vCPU machine two
    workers have a vCPU each while four share them in pairs)."""
    if name in SETS:
        return SETS[name]
    try:
        speeds = [float(f) for f in name.split("/")]
    except ValueError:
        raise SystemExit(f"--sets: {name!r} is neither one of {', '.join(SETS)}, "
                         f"{QUOTA_SET[0]} nor slowdowns joined by '/' (e.g. 1/4)")
    if len(speeds) < 2 or not all(math.isfinite(f) and f >= 1 for f in speeds):
        raise SystemExit(f"--sets: {name!r} needs at least two slowdowns, each at least 1")
    return [int(f) if f.is_integer() else f for f in speeds]


def load_average():
    """The machine's load average (1, 5, 15 minutes): other work shares these vCPUs."""
    return list(os.getloadavg())


def span(values):
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omnilearn", default="build/bin/omnilearn")
    ap.add_argument("--model", default="mlp", choices=list(MODELS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--global-batches", default="256", help="comma-separated, e.g. 256,1024")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quota", type=float, default=0.4, help="CPU quota of every worker")
    ap.add_argument("--slowdown-spin", action="store_true",
                    help="emulate slowdowns by burning CPU inside each worker's quota (a slower "
                         "CPU), not by sleeping: under the caps a sleeping worker refills its "
                         "quota and computes faster, so its slowdown measures below the one asked")
    ap.add_argument("--sets", default="HL1,HL2,HL4,HL8,Q4",
                    help="named sets, or literal slowdowns joined by '/' (1/4: two workers)")
    ap.add_argument("--policies", default="ddp,uniform,proportional,affine,balanced",
                    help="ddp, uniform, proportional, affine (variants with +key=value), and "
                         "balanced: the balanced reference, run right after uniform")
    ap.add_argument("--deadband", type=float, default=0.1,
                    help="the controller's deadband (the reference configuration's is 0.1)")
    ap.add_argument("--order", default="rotate", choices=["rotate", "fixed"],
                    help="rotate: repeat r runs the policies starting at the r-th (mod their "
                         "count); fixed: every repeat in the order given")
    ap.add_argument("--omnilearn-b", default="",
                    help="a second build to compare: every OmniLearn run (the balanced reference "
                         "included) is made with it too, right after the first build's, and "
                         "reported as POLICY@b")
    ap.add_argument("--json", default="")
    ap.add_argument("--keep-runs", default="",
                    help="write the runs' directories (events.jsonl, summary.json) here and keep them")
    args = ap.parse_args()
    policies = args.policies.split(",")
    balanced = "balanced" in policies
    policies = [p for p in policies if p != "balanced"]
    if args.omnilearn_b:  # each OmniLearn policy right before its run with the second build
        policies = [v for p in policies for v in ([p] if p == "ddp" else [p, p + "@b"])]
    # With DDP and the balanced reference: DDP on the same equal workers at the same global
    # batch ("ddp-balanced"), whose fixed cost is measured as the balanced reference's.
    references = (["balanced"] + (["balanced@b"] if args.omnilearn_b else []) +
                  (["ddp-balanced"] if "ddp" in policies else [])) if balanced else []
    results = {}
    if args.keep_runs:
        os.makedirs(args.keep_runs, exist_ok=True)
    for name in args.sets.split(","):  # a bad set is refused before any run, not after some
        if name != QUOTA_SET[0]:
            set_speeds(name)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep_runs or tmp
        for batch in [int(b) for b in args.global_batches.split(",")]:
            for name in args.sets.split(","):
                if name == QUOTA_SET[0]:
                    speeds, quotas = None, QUOTA_SET[1]
                    rel = [q / max(quotas) for q in quotas]
                    slowdowns = [max(quotas) / q for q in quotas]
                else:
                    speeds = set_speeds(name)
                    quotas = [args.quota] * len(speeds)
                    rel = [1.0 / s for s in speeds]
                    slowdowns = list(speeds)
                nominal = sum(rel) / (len(rel) * min(rel))  # sum of speeds / (n x slowest)
                runs = {p: [] for p in policies}
                reference_runs = {b: [] for b in references}
                loads = [load_average()]
                for r in range(args.repeats):
                    shift = r % len(policies) if args.order == "rotate" else 0
                    order = policies[shift:] + policies[:shift]
                    if balanced:  # right after this repeat's uniform runs, whose speeds they use
                        after = max((i for i, p in enumerate(order) if p.startswith("uniform")),
                                    default=len(order) - 1)
                        order[after + 1:after + 1] = references
                    for p in order:
                        binary = args.omnilearn_b if p.endswith("@b") else args.omnilearn
                        if p in references:
                            f = (measured_slowdowns(runs["uniform"][-1]["speeds"], slowdowns)
                                 if "uniform" in runs else slowdowns)
                            if p == "ddp-balanced":
                                x = run_ddp(args.model, None, [max(quotas)] * len(quotas),
                                            args.steps, balanced_batch(batch, f), args.seed)
                                x["slowdowns"] = list(f)
                            else:
                                x = run_balanced(binary, args.model, f, quotas, args.steps, batch,
                                                 args.seed, workdir, args.deadband)
                            reference_runs[p].append(x)
                        elif p == "ddp":
                            runs[p].append(run_ddp(args.model, speeds, quotas, args.steps, batch,
                                                   args.seed, args.slowdown_spin))
                        else:
                            runs[p].append(run_omnilearn(binary, args.model, p.removesuffix("@b"),
                                                         speeds, quotas, args.steps, batch,
                                                         args.seed, workdir, args.deadband,
                                                         args.slowdown_spin))
                # The ideal from the per-worker speeds measured in this session's uniform runs.
                measured = [sum(u["speeds"]) / (len(u["speeds"]) * min(u["speeds"]))
                            for u in runs.get("uniform", [])]
                ideal = statistics.median(measured) if measured else nominal
                compute_only = [batch / sum(u["speeds"]) for u in runs.get("uniform", [])]
                ideal_step = statistics.median(compute_only) if compute_only else float("nan")
                res = {"global_batch": batch, "order": args.order,
                       "slowdown_emulation": "spin" if args.slowdown_spin else "sleep",
                       "nominal_ideal_speedup": nominal,
                       "measured_ideal_speedup": ideal, "compute_only_step_ms": 1000 * ideal_step,
                       "policies": {}}
                for p in policies:
                    q = {"step_ms": 1000 * statistics.median(x["step_time_s"] for x in runs[p]),
                         "plan_changes_per_100": statistics.median(
                             x["plan_changes_per_100"] for x in runs[p]),
                         "final_batches": runs[p][-1]["batches"]}
                    if "ddp" in runs:
                        q["vs_ddp"] = span([d["step_time_s"] / x["step_time_s"]
                                            for d, x in zip(runs["ddp"], runs[p])])
                    uniform = "uniform@b" if p.endswith("@b") and "uniform@b" in runs else "uniform"
                    if uniform in runs:
                        sp = span([u["step_time_s"] / x["step_time_s"]
                                   for u, x in zip(runs[uniform], runs[p])])
                        q["vs_uniform"] = sp
                        q["of_ideal"] = sp[0] / ideal
                        q["compute_only_efficiency"] = ideal_step / (q["step_ms"] / 1000)
                    if p != "ddp":
                        # Against the run's own speeds: B / sum(b_i / compute_i) with each
                        # worker's compute at the batch it had. The uniform runs' speeds can
                        # be another machine's: in one run a fast worker computed 128 samples
                        # in 46 ms under uniform batches (idle for most of each step) and 219
                        # in 50 ms under proportional ones, on the same vCPU. This bound does
                        # not depend on them.
                        q["own_speed_efficiency"] = statistics.median(
                            batch / sum(x["speeds"]) / x["step_time_s"] for x in runs[p])
                        q["allreduce_ms"] = 1000 * statistics.median(x["allreduce_s"]
                                                                     for x in runs[p])
                        q["slowest_compute_ms"] = 1000 * statistics.median(
                            x["slowest_compute_s"] for x in runs[p])
                        q["mean_compute_ms"] = 1000 * statistics.median(
                            x["mean_compute_s"] for x in runs[p])
                        q["imbalance_ms"] = 1000 * statistics.median(x["imbalance_s"]
                                                                     for x in runs[p])
                        q["worker_compute_ms"] = [1000 * c for c in runs[p][-1]["worker_compute_s"]]
                        q["persisted_changes"] = [x["persisted_changes"] for x in runs[p]]
                    res["policies"][p] = q
                loads.append(load_average())
                res["load_average"] = loads
                for ref, ref_runs in reference_runs.items():
                    bal = {"step_ms": [1000 * x["step_time_s"] for x in ref_runs],
                           "slowest_compute_ms": [1000 * x["slowest_compute_s"]
                                                  for x in ref_runs],
                           "global_batch": [x["global_batch"] for x in ref_runs],
                           "nominal_slowdowns": slowdowns,
                           "measured_slowdowns": [x["slowdowns"] for x in ref_runs]}
                    # The fixed cost: what a step takes beyond its slowest compute when every
                    # worker computes the same (the exchange, the optimizer, between steps).
                    bal["fixed_cost_ms"] = span([1000 * (x["step_time_s"] - x["slowest_compute_s"])
                                                 for x in ref_runs])
                    if ref != "ddp-balanced" and "ddp-balanced" in reference_runs:
                        # Paired by repeat: this fixed cost minus DDP's on the same workers.
                        bal["fixed_cost_minus_ddp_ms"] = span(
                            [1000 * ((x["step_time_s"] - x["slowest_compute_s"]) -
                                     (d["step_time_s"] - d["slowest_compute_s"]))
                             for x, d in zip(ref_runs, reference_runs["ddp-balanced"])])
                    res[ref] = bal
                for p in policies:  # balanced step / policy step, paired by repeat
                    ref = "balanced@b" if p.endswith("@b") else "balanced"
                    if reference_runs.get(ref):
                        res["policies"][p]["of_balanced"] = span(
                            [b["step_time_s"] / x["step_time_s"]
                             for b, x in zip(reference_runs[ref], runs[p])])
                results[f"{name}/B{batch}"] = res
                print(f"{args.model} {name} B={batch} (slowdowns by "
                      f"{res['slowdown_emulation']}): ideal {nominal:.2f}x nominal, {ideal:.2f}x "
                      f"from the speeds measured in the uniform runs; compute-only step "
                      f"{1000 * ideal_step:.1f} ms", flush=True)
                for p in policies:
                    q = res["policies"][p]
                    line = f"  {p:13s} step {q['step_ms']:7.1f} ms"
                    if "vs_ddp" in q:
                        line += " vs DDP {:.2f}x [{:.2f}..{:.2f}]".format(*q["vs_ddp"])
                    if "vs_uniform" in q:
                        line += " vs uniform {:.2f}x [{:.2f}..{:.2f}]".format(*q["vs_uniform"])
                        line += f"  of ideal {q['of_ideal']:4.0%}"
                        line += f"  compute-only eff {q['compute_only_efficiency']:4.0%}"
                    if "own_speed_efficiency" in q:
                        line += f"  own-speed eff {q['own_speed_efficiency']:4.0%}"
                    line += f"  plan changes/100 {q['plan_changes_per_100']:.1f}"
                    if "allreduce_ms" in q:
                        line += f"  exposed all-reduce {q['allreduce_ms']:.1f} ms"
                        line += (f"  compute mean {q['mean_compute_ms']:.1f} / slowest "
                                 f"{q['slowest_compute_ms']:.1f} ms, after it "
                                 f"{q['step_ms'] - q['slowest_compute_ms']:.1f} ms; "
                                 f"of the slowest's excess, plan imbalance "
                                 f"{q['imbalance_ms']:.1f} ms")
                        line += " (per worker " + ", ".join(
                            f"{c:.1f}" for c in q["worker_compute_ms"]) + " ms)"
                    if "of_balanced" in q:
                        line += " of balanced {:.3f} [{:.3f}..{:.3f}]".format(*q["of_balanced"])
                    if "persisted_changes" in q:
                        line += f"  persisted changes per run {q['persisted_changes']}"
                    line += f"  batches {q['final_batches']}"
                    print(line, flush=True)
                for ref in reference_runs:
                    bal = res[ref]
                    asked = ",".join(f"{f:g}" for f in slowdowns)
                    got = "; ".join(",".join(f"{f:.2f}" for f in m)
                                    for m in bal["measured_slowdowns"])
                    line = (f"  {ref:13s} step {statistics.median(bal['step_ms']):7.1f} ms "
                            f"(B = {'/'.join(str(b) for b in bal['global_batch'])} on equal "
                            f"workers; slowdowns asked {asked}, measured {got}), slowest compute "
                            f"{statistics.median(bal['slowest_compute_ms']):.1f} ms, fixed cost "
                            "{:.1f} ms [{:.1f}..{:.1f}]".format(*bal["fixed_cost_ms"]))
                    if "fixed_cost_minus_ddp_ms" in bal:
                        line += " (minus DDP's, paired: {:+.1f} ms [{:+.1f}..{:+.1f}])".format(
                            *bal["fixed_cost_minus_ddp_ms"])
                    print(line, flush=True)
                print("  load average (1, 5, 15 min) before and after: " +
                      " / ".join(" ".join(f"{x:.2f}" for x in l) for l in loads), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
