#!/usr/bin/python3
"""Step-time traces for the controller's replay tests (tests/data/trace_*.csv).

  traces.py record CASE --omnilearn build-ctl/bin/omnilearn --out tests/data/trace_CASE.csv
      runs a real job (a head, `omnilearn worker` processes each capped at --quota CPU and
      pinned, an MLP on Fashion-MNIST) and extracts its trace. CASE:
        clean   slowdowns 1,1,2,4
        noisy   slowdowns 1,1,1,1 with a bursty CPU hog on every vCPU beside the workers
        change  slowdowns 1,1,2,4, then `omnilearn node set w1 --slowdown 3` at step --at
        join    slowdowns 1,1,2 (min_workers 3), then a 4th worker (slowdown 4) at step --at
  traces.py extract RUN_DIR [--change STEP:WORKER:TEXT] [--per-step] [--out FILE]
      writes the trace of an existing run directory; --per-step: one observation per worker
      and step, from the compute of every rank the leader reports (record: --per-step-out).

What a trace holds is what the scheduler saw: the per-worker heartbeat windows the step events
carry (timing_steps: the committed step the window ended at; timing_batch; compute_time_s: mean
compute per step in the window), the generations (members by node name) and the real speed
changes. controller/trace_replay.hpp reads it.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jobs"))
from run_dir import events, kill_process_groups, wait_event  # noqa: E402

JOB = """[job]
name = "trace-{case}"
[model]
kind = "mlp"
hidden = [256, 128]
[data]
dataset = "fashion-mnist"
[train]
global_batch = 256
steps = {steps}
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = 0
threads = 1
[controller]
policy = "proportional"
min_batch = 8
interval = 10
cooldown = 3
[elastic]
min_workers = {min_workers}
max_workers = 4
"""

CASES = {
    "clean": {"slowdowns": [1, 1, 2, 4], "min_workers": 4},
    "noisy": {"slowdowns": [1, 1, 1, 1], "min_workers": 4, "hog": True},
    "change": {"slowdowns": [1, 1, 2, 4], "min_workers": 4, "node_set": ("w1", 3)},
    "join": {"slowdowns": [1, 1, 2], "min_workers": 3, "join": ("w4", 4)},
}


def node_of(trainer, nodes):
    # Trainers are named <job id>-<node>-t<n>.
    for n in sorted(nodes, key=len, reverse=True):
        if f"-{n}-t" in trainer:
            return n
    return trainer


def extract(run_dir, changes=(), header=(), per_step=False):
    """The trace of run_dir as a list of lines. per_step: one observation per worker and step
    from the compute times the leader reports for every rank (step events' compute_times_s)
    instead of the heartbeat windows."""
    ev = events(run_dir)
    submitted = next(e for e in ev if e.get("event") == "submitted")
    nodes = set()
    for e in ev:
        if e.get("event") == "step":
            nodes.update(w["node"] for w in e["workers"] if w.get("node"))
    out = [f"# {h}" for h in header]
    out.append(f"# job {submitted['job_id']}, policy {submitted.get('policy')}, "
               f"extracted by bench/scheduler/traces.py from {os.path.basename(run_dir)}/events.jsonl")
    if per_step:
        out.append("# obs,WORKER,STEP,STEP,BATCH,COMPUTE_S: one step of one worker (its compute, "
                   "as the leader reported it for every rank)")
    else:
        out.append("# obs,WORKER,FIRST,LAST,BATCH,COMPUTE_S: one heartbeat window (steps "
                   "FIRST..LAST at BATCH, mean compute s/step)")
    out.append(f"global_batch,{submitted['global_batch']}")
    for c in changes:
        step, worker, text = c.split(":", 2)
        out.append(f"change,{step},{worker},{text}")
    obs_lines = []
    last_steps = {}   # trainer -> timing_steps of its previous window
    last_batch = {}
    batch_since = {}  # trainer -> first step at its current plan batch
    for e in ev:
        kind = e.get("event")
        if kind == "generation":
            members = [node_of(t, nodes) for t in e["members"]]
            out.append(f"generation,{e['step']},{';'.join(members)}")
        elif kind == "step" and per_step:
            for rank, (w, t) in enumerate(zip(e["workers"], e.get("compute_times_s", []))):
                if e["batches"][rank] > 0 and t > 0:
                    obs_lines.append((w["node"], e["step"], e["step"], e["batches"][rank], t))
        elif kind == "step":
            for rank, w in enumerate(e["workers"]):
                t = w["trainer"]
                if e["batches"][rank] != batch_since.get(t, (None, 0))[0]:
                    batch_since[t] = (e["batches"][rank], e["step"])
                steps, batch = w.get("timing_steps", 0), w.get("timing_batch", 0)
                if steps <= last_steps.get(t, 0) or batch <= 0 or w["compute_time_s"] <= 0:
                    continue
                first = last_steps.get(t, steps - 1) + 1
                if batch != last_batch.get(t) and batch_since[t][0] == batch:
                    first = max(first, batch_since[t][1])  # the agent restarted at the new batch
                first = min(first, steps)
                last_steps[t], last_batch[t] = steps, batch
                obs_lines.append((w["node"], first, steps, batch, w["compute_time_s"]))
    out += fit_alphas(obs_lines, out)
    out += [f"obs,{n},{a},{b},{bt},{t:.6g}" for n, a, b, bt, t in obs_lines]
    return out


def fit_alphas(obs, lines):
    """alpha lines: each worker's fixed compute per step, fitted by least squares through the
    median compute time of each batch it ran at (3 or more windows each, batches at least 20%
    apart) within the first regime (before any later generation or change)."""
    end = min([int(l.split(",")[1]) for l in lines
               if l.startswith("change,")] + [int(l.split(",")[1]) for l in lines
                                              if l.startswith("generation,")][1:] + [10**12])
    out = []
    for node in sorted({o[0] for o in obs}):
        by_batch = {}
        for n, first, last, batch, t in obs:
            if n == node and last <= end:
                by_batch.setdefault(batch, []).append(t)
        pts = [(b, sorted(v)[len(v) // 2]) for b, v in by_batch.items() if len(v) >= 3]
        if len(pts) < 2 or (max(b for b, _ in pts) - min(b for b, _ in pts)) < 0.2 * max(b for b, _ in pts):
            continue
        mb = sum(b for b, _ in pts) / len(pts)
        mt = sum(t for _, t in pts) / len(pts)
        sbb = sum((b - mb) ** 2 for b, _ in pts)
        beta = sum((b - mb) * (t - mt) for b, t in pts) / sbb
        alpha = max(0.0, mt - beta * mb)
        if beta > 0:
            out.append(f"alpha,{node},{alpha:.6g}  # fit over batches {sorted(b for b, _ in pts)}: "
                       f"{1000 * alpha:.2f} ms + {1000 * beta:.4f} ms/sample")
    return out


class Hog:
    """A bursty CPU load on every vCPU: busy for 50-400 ms, idle for 50-400 ms, seeded."""

    def __init__(self, seed):
        code = ("import random,time,sys\n"
                f"r=random.Random({seed}+int(sys.argv[1]))\n"
                "while True:\n"
                "  end=time.time()+r.uniform(0.05,0.4)\n"
                "  while time.time()<end: pass\n"
                "  time.sleep(r.uniform(0.05,0.4))\n")
        self.procs = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", code,
                                        str(cpu)], start_new_session=True)
                      for cpu in range(os.cpu_count() or 1)]

    def stop(self):
        kill_process_groups(self.procs)


def record(args):
    case = CASES[args.case]
    work = tempfile.mkdtemp(prefix=f"trace-{args.case}-")
    cluster_file = os.path.join(work, "cluster.toml")
    env = dict(os.environ)
    procs, hog = [], None
    cpus = os.cpu_count() or 1

    def start(cmd, name, cpu=None):
        log = open(os.path.join(work, f"{name}.log"), "w")
        full = ([] if cpu is None else ["taskset", "-c", str(cpu)]) + [args.omnilearn] + cmd
        p = subprocess.Popen(full + ["--cluster-file", cluster_file], stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(p)
        return p

    changes = []
    try:
        start(["head", "--host", "127.0.0.1", "--port", "0", "--runs-dir", work], "head")
        address = None
        deadline = time.time() + 20
        while time.time() < deadline and not address:
            for line in open(os.path.join(work, "head.log")).read().splitlines():
                if "listening on" in line:
                    address = line.split("listening on ")[1].strip()
            time.sleep(0.05)
        if not address:
            raise RuntimeError("head did not start")

        def worker(i, slowdown):
            name = f"w{i}"
            start(["worker", "--name", name, "--address", address, "--slowdown", str(slowdown),
                   "--cpu-quota", str(args.quota)], name, cpu=(i - 1) % cpus)

        for i, s in enumerate(case["slowdowns"], start=1):
            worker(i, s)
        time.sleep(2)
        if case.get("hog"):
            hog = Hog(args.seed)
        job = os.path.join(work, "job.toml")
        open(job, "w").write(JOB.format(case=args.case, steps=args.steps,
                                        min_workers=case["min_workers"]))
        run_dir = os.path.join(work, "run")
        subprocess.run([args.omnilearn, "submit", job, "--address", address, "--cluster-file",
                        cluster_file, "--run-dir", run_dir], check=True, env=env,
                       capture_output=True)
        if "node_set" in case or "join" in case:
            at = wait_event(run_dir, lambda e: e.get("event") == "step" and e["step"] >= args.at,
                            300)
            if "node_set" in case:
                node, slowdown = case["node_set"]
                subprocess.run([args.omnilearn, "node", "set", node, "--slowdown", str(slowdown),
                                "--address", address, "--cluster-file", cluster_file],
                               check=True, env=env, capture_output=True)
                now = max(e["step"] for e in events(run_dir) if e.get("event") == "step")
                changes.append(f"{now}:{node}:node set {node} --slowdown {slowdown} "
                               f"(issued after step {at['step']})")
            else:
                node, slowdown = case["join"]
                worker(int(node[1:]), slowdown)
        wait_event(run_dir, lambda e: e.get("event") == "finished", 600)
        time.sleep(0.5)
        cmd = " ".join(["bench/scheduler/traces.py", "record", args.case, "--steps", str(args.steps),
                        "--quota", str(args.quota), "--at", str(args.at), "--seed", str(args.seed)])
        load = open("/proc/loadavg").read().split()[:3]
        header = [f"Recorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this "
                  f"{cpus}-vCPU VM (load average {' '.join(load)} at the end) with:",
                  f"  {cmd}",
                  f"Case {args.case}: 4 `omnilearn worker` processes (w1..w4), slowdowns "
                  f"{case['slowdowns']}, each at --cpu-quota {args.quota} and pinned to vCPU "
                  f"(i-1) mod {cpus}; MLP 784-256-128-10, Fashion-MNIST, B=256, "
                  f"{args.steps} steps, proportional, interval 10, cooldown 3."
                  + (" A bursty CPU hog (busy/idle 50-400 ms, seeded) on every vCPU." if case.get("hog") else "")
                  + (" Worker w4 (slowdown 4) joins." if "join" in case else "")]
        lines = extract(run_dir, changes, header)
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{args.out}: {sum(1 for l in lines if l.startswith('obs,'))} windows; run dir {run_dir}")
        if args.per_step_out:
            lines = extract(run_dir, changes, header, per_step=True)
            with open(args.per_step_out, "w") as f:
                f.write("\n".join(lines) + "\n")
            print(f"{args.per_step_out}: {sum(1 for l in lines if l.startswith('obs,'))} steps")
    finally:
        if hog:
            hog.stop()
        kill_process_groups(procs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record")
    r.add_argument("case", choices=sorted(CASES))
    r.add_argument("--omnilearn", default="build-ctl/bin/omnilearn")
    r.add_argument("--out", required=True)
    r.add_argument("--steps", type=int, default=300)
    r.add_argument("--quota", type=float, default=0.4)
    r.add_argument("--at", type=int, default=120, help="step of the node set or the join")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--per-step-out", help="also the same run's per-step trace (extract --per-step)")
    x = sub.add_parser("extract")
    x.add_argument("run_dir")
    x.add_argument("--change", action="append", default=[], help="STEP:WORKER:TEXT")
    x.add_argument("--per-step", action="store_true",
                   help="one observation per worker and step (the leader's compute_times_s)")
    x.add_argument("--out")
    args = ap.parse_args()
    if args.command == "record":
        record(args)
    else:
        lines = extract(args.run_dir, args.change, per_step=args.per_step)
        text = "\n".join(lines) + "\n"
        if args.out:
            open(args.out, "w").write(text)
        else:
            sys.stdout.write(text)


if __name__ == "__main__":
    main()
