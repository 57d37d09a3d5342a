#!/usr/bin/env python3
"""Head failover: how long a cluster is without a head, restarted in place or taken over.

Two cases, --repeats times each, on one machine (real processes, loopback):

  restart   `omnilearn head --state-dir DIR` with --workers workers; kill -9 of the head, a new
            one started on the same port and state after --down seconds. Measured from the new
            process's start: until it listens (process start, reading the state), and until
            every worker was heard from again (the head's own `nodes_back_ms`, status --json).
  standby   an active head and a --standby over a three-member etcd on loopback (started here
            from Debian's etcd-server), workers with --other-heads; kill -9 of the active head.
            Measured from the kill: until the standby listens (the lease TTL plus the election)
            and until every worker was heard from by it.
  job       as restart, with a three-worker synchronous job training: from the new head's start
            until it listens, until the job's scheduler restored it (head_restarted), until the
            resumed generation was issued and formed, and until its first committed step.
  durability  the same job run to its end twice per repeat, alternating, over `--store memory:`
            (nothing written) and the default SQLite state (a write per generation, membership
            change and lease to a new generation): median time per step of each run, side by side.

Usage: bench/jobs/head_failover.py --omnilearn build/bin/omnilearn [--repeats 5] [--workers 3]
                                   [--down 0.5] [--lease-ttl-s 5]
                                   [--cases restart,standby,job,durability]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, env, log):
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_line(path, pattern, timeout):
    deadline = time.monotonic() + timeout
    regex = re.compile(pattern)
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                match = regex.search(f.read())
            if match:
                return match
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"no '{pattern}' in {path} within {timeout} s")


def status(omnilearn, address, env):
    out = subprocess.run([omnilearn, "status", "--json", "--address", address,
                          "--timeout-ms", "1000"], env=env, capture_output=True, text=True,
                         timeout=10)
    return json.loads(out.stdout) if out.returncode == 0 else None


def wait_nodes_back(omnilearn, address, env, workers, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = status(omnilearn, address, env)
        if s and s["head"]["nodes_back_ms"] is not None and \
                sum(n["state"] == "alive" for n in s["nodes"]) == workers:
            return s
        time.sleep(0.05)
    raise RuntimeError("the workers were not heard from again")


def kill_all(processes):
    for p in processes:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def restart_case(args, env, scratch):
    port = free_port()
    address = f"127.0.0.1:{port}"
    head_argv = [args.omnilearn, "head", "--host", "127.0.0.1", "--port", str(port),
                 "--state-dir", os.path.join(scratch, "state")]
    processes = []
    logs = scratch + "/logs"
    os.makedirs(logs, exist_ok=True)
    try:
        head = start(head_argv, env, open(f"{logs}/head0", "w"))
        processes.append(head)
        wait_line(f"{logs}/head0", "listening on", 20)
        for i in range(args.workers):
            w = start([args.omnilearn, "worker", "--address", address, "--name", f"w{i}"], env,
                      open(f"{logs}/w{i}", "w"))
            processes.append(w)
            wait_line(f"{logs}/w{i}", "joined", 20)
        results = []
        for r in range(args.repeats):
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
            time.sleep(args.down)
            t0 = time.monotonic()
            head = start(head_argv, env, open(f"{logs}/head{r + 1}", "w"))
            processes.append(head)
            wait_line(f"{logs}/head{r + 1}", "listening on", 20)
            listening = time.monotonic() - t0
            s = wait_nodes_back(args.omnilearn, address, env, args.workers)
            results.append((listening, s["head"]["nodes_back_ms"] / 1000, s["head"]["restore_ms"]))
            print(f"restart {r + 1}: listening after {listening:.3f} s (state read in "
                  f"{s['head']['restore_ms']:.1f} ms), every worker heard from "
                  f"{s['head']['nodes_back_ms'] / 1000:.3f} s after the head's start", flush=True)
            time.sleep(1)
        return results
    finally:
        kill_all(processes)


def standby_case(args, env, scratch):
    etcd_bin = shutil.which("etcd") or "/usr/bin/etcd"
    clients = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    peers = [f"http://127.0.0.1:{free_port()}" for _ in range(3)]
    initial = ",".join(f"m{i}={peers[i]}" for i in range(3))
    logs = scratch + "/logs"
    os.makedirs(logs, exist_ok=True)
    processes = []
    try:
        for i in range(3):
            processes.append(start([etcd_bin, "--name", f"m{i}", "--data-dir", f"{scratch}/etcd{i}",
                                    "--listen-client-urls", f"http://{clients[i]}",
                                    "--advertise-client-urls", f"http://{clients[i]}",
                                    "--listen-peer-urls", peers[i],
                                    "--initial-advertise-peer-urls", peers[i],
                                    "--initial-cluster", initial], env, open(f"{logs}/etcd{i}", "w")))
        for i in range(3):
            wait_line(f"{logs}/etcd{i}", "ready to serve client requests", 30)
        results = []
        for r in range(args.repeats):
            store = "etcd://" + ",".join(clients) + f"/bench{r}"
            ports = [free_port(), free_port()]
            heads = []
            for k, port in enumerate(ports):
                argv = [args.omnilearn, "head", "--host", "127.0.0.1", "--port", str(port),
                        "--store", store, "--lease-ttl-s", str(args.lease_ttl_s)]
                if k == 1:
                    argv.append("--standby")
                heads.append(start(argv, env, open(f"{logs}/r{r}head{k}", "w")))
                wait_line(f"{logs}/r{r}head{k}", "listening on" if k == 0 else "standby on", 20)
            processes += heads
            workers = []
            for i in range(args.workers):
                w = start([args.omnilearn, "worker", "--address", f"127.0.0.1:{ports[0]}",
                           "--other-heads", f"127.0.0.1:{ports[1]}", "--name", f"w{i}"], env,
                          open(f"{logs}/r{r}w{i}", "w"))
                workers.append(w)
                wait_line(f"{logs}/r{r}w{i}", "joined", 20)
            processes += workers
            time.sleep(1)
            t0 = time.monotonic()
            os.killpg(heads[0].pid, signal.SIGKILL)
            wait_line(f"{logs}/r{r}head1", "listening on", 60)
            elected = time.monotonic() - t0
            wait_nodes_back(args.omnilearn, f"127.0.0.1:{ports[1]}", env, args.workers)
            back = time.monotonic() - t0
            results.append((elected, back))
            print(f"standby {r + 1}: elected and listening {elected:.3f} s after the kill "
                  f"(lease TTL {args.lease_ttl_s} s), every worker heard from after {back:.3f} s",
                  flush=True)
            kill_all(workers + heads)
        return results
    finally:
        kill_all(processes)


JOB = """
[job]
name = "failover"
[model]
kind = "mlp"
hidden = [128, 64]
[data]
dataset = "synthetic"
train_size = 8192
test_size = 512
[train]
global_batch = 384
steps = {steps}
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = 5
[elastic]
min_workers = 2
max_workers = 3
"""


def read_events(path):
    events = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    except FileNotFoundError:
        pass
    return events


def wait_event(path, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in read_events(path):
            if predicate(e):
                return e
        time.sleep(0.02)
    raise RuntimeError(f"no such event in {path} within {timeout} s")


def cluster_with_job(args, env, scratch, logs, head_argv, address, steps, tag):
    processes = []
    head = start(head_argv, env, open(f"{logs}/{tag}head0", "w"))
    processes.append(head)
    wait_line(f"{logs}/{tag}head0", "listening on", 20)
    for i in range(args.workers):
        w = start([args.omnilearn, "worker", "--address", address, "--name", f"w{i}"], env,
                  open(f"{logs}/{tag}w{i}", "w"))
        processes.append(w)
        wait_line(f"{logs}/{tag}w{i}", "joined", 20)
    job_file = f"{scratch}/{tag}job.toml"
    with open(job_file, "w") as f:
        f.write(JOB.format(steps=steps))
    run_dir = f"{scratch}/{tag}run"
    subprocess.run([args.omnilearn, "job", "submit", job_file, "--address", address,
                    "--run-dir", run_dir], env=env, check=True, capture_output=True, timeout=30)
    return processes, head, f"{run_dir}/events.jsonl"


def job_case(args, env, scratch):
    port = free_port()
    address = f"127.0.0.1:{port}"
    head_argv = [args.omnilearn, "head", "--host", "127.0.0.1", "--port", str(port),
                 "--state-dir", os.path.join(scratch, "jobstate")]
    logs = scratch + "/logs"
    os.makedirs(logs, exist_ok=True)
    processes, head, events = cluster_with_job(args, env, scratch, logs, head_argv, address,
                                               100000, "job")
    try:
        wait_event(events, lambda e: e.get("event") == "step" and e["step"] >= 20, 120)
        results = []
        for r in range(args.repeats):
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
            time.sleep(args.down)
            t0 = time.time()
            head = start(head_argv, env, open(f"{logs}/jobhead{r + 1}", "w"))
            processes.append(head)
            wait_line(f"{logs}/jobhead{r + 1}", "listening on", 20)
            listening = time.time() - t0
            restored = wait_event(events, lambda e: e.get("event") == "head_restarted" and
                                  e["time"] > t0, 30)
            issued = wait_event(events, lambda e: e.get("event") == "generation" and
                                e["time"] > t0 and e.get("members"), 60)
            formed = wait_event(events, lambda e: e.get("event") == "generation_formed" and
                                e["time"] > t0, 60)
            step = wait_event(events, lambda e: e.get("event") == "step" and e["time"] > t0, 60)
            split = (listening, restored["time"] - t0, issued["time"] - t0, formed["time"] - t0,
                     step["time"] - t0)
            results.append(split)
            print(f"job restart {r + 1}: from the head's start: listening {split[0]:.3f} s, job "
                  f"restored {split[1]:.3f} s, generation issued {split[2]:.3f} s, formed "
                  f"{split[3]:.3f} s, first committed step {split[4]:.3f} s", flush=True)
            time.sleep(1.5)
        return results
    finally:
        kill_all(processes)


def durability_case(args, env, scratch):
    logs = scratch + "/logs"
    os.makedirs(logs, exist_ok=True)
    results = {"memory": [], "sqlite": []}
    for r in range(args.repeats):
        for store in ("memory", "sqlite"):
            port = free_port()
            address = f"127.0.0.1:{port}"
            head_argv = [args.omnilearn, "head", "--host", "127.0.0.1", "--port", str(port)]
            head_argv += ["--store", "memory:"] if store == "memory" else \
                ["--state-dir", os.path.join(scratch, f"dur{r}")]
            processes, _, events = cluster_with_job(args, env, scratch, logs, head_argv, address,
                                                    args.durability_steps, f"dur{r}{store}")
            try:
                wait_event(events, lambda e: e.get("event") == "finished", 600)
                steps = [e for e in read_events(events) if e.get("event") == "step"]
                # Steady steps only: past the first generation's warm-up.
                times = [e["step_time_s"] for e in steps[len(steps) // 5:]]
                results[store].append(statistics.median(times))
                print(f"durability {r + 1}, {store}: median step {statistics.median(times) * 1000:.2f}"
                      f" ms over {len(times)} steps", flush=True)
            finally:
                kill_all(processes)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--omnilearn", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--down", type=float, default=0.5)
    parser.add_argument("--lease-ttl-s", type=int, default=5)
    parser.add_argument("--cases", default="restart,standby,job,durability")
    parser.add_argument("--durability-steps", type=int, default=400)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="omnilearn-failover-")
    env = dict(os.environ, OMNILEARN_CLUSTER_FILE=os.path.join(scratch, "cluster.toml"),
               OMNILEARN_LOG="info")
    try:
        if "restart" in args.cases:
            r = restart_case(args, env, scratch)
            print(f"restart: median listening {statistics.median(x[0] for x in r):.3f} s "
                  f"[{min(x[0] for x in r):.3f}..{max(x[0] for x in r):.3f}], workers back "
                  f"{statistics.median(x[1] for x in r):.3f} s after the start "
                  f"[{min(x[1] for x in r):.3f}..{max(x[1] for x in r):.3f}]")
        if "standby" in args.cases:
            r = standby_case(args, env, scratch)
            print(f"standby: median elected {statistics.median(x[0] for x in r):.3f} s after "
                  f"the kill [{min(x[0] for x in r):.3f}..{max(x[0] for x in r):.3f}], workers "
                  f"back {statistics.median(x[1] for x in r):.3f} s "
                  f"[{min(x[1] for x in r):.3f}..{max(x[1] for x in r):.3f}]")
        if "job" in args.cases:
            r = job_case(args, env, scratch)
            names = ["listening", "job restored", "generation issued", "formed",
                     "first committed step"]
            print("job restart: median from the head's start: " + ", ".join(
                f"{n} {statistics.median(x[i] for x in r):.3f} s "
                f"[{min(x[i] for x in r):.3f}..{max(x[i] for x in r):.3f}]"
                for i, n in enumerate(names)))
        if "durability" in args.cases:
            r = durability_case(args, env, scratch)
            ratios = [s / m for m, s in zip(r["memory"], r["sqlite"])]
            print(f"durability: median step, SQLite over memory: "
                  f"{statistics.median(ratios):.3f} [{min(ratios):.3f}..{max(ratios):.3f}] "
                  f"({args.repeats} pairs)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
