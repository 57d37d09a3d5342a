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

Usage: bench/jobs/head_failover.py --omnilearn build/bin/omnilearn [--repeats 5] [--workers 3]
                                   [--down 0.5] [--lease-ttl-s 5] [--cases restart,standby]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--omnilearn", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--down", type=float, default=0.5)
    parser.add_argument("--lease-ttl-s", type=int, default=5)
    parser.add_argument("--cases", default="restart,standby")
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
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
