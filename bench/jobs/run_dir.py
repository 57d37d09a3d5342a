"""What the job benchmarks share: reading a run directory's events.jsonl while the head writes
it, waiting for an event, and killing the process groups a benchmark started (with the CPU-quota
cgroups their workers made)."""
import glob
import json
import os
import signal
import sys
import time


def events(run_dir):
    """Every complete event of run_dir/events.jsonl so far (a line being written is skipped)."""
    path = os.path.join(run_dir, "events.jsonl")
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line being written
    return out


def wait_event(run_dir, predicate, timeout):
    """The first event that satisfies predicate, polling until timeout seconds have passed."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for e in events(run_dir):
            if predicate(e):
                return e
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for an event")


def kill_process_groups(procs):
    """SIGKILL (after SIGCONT, for frozen ones) each Popen's process group, reap it, and remove
    the CPU-quota cgroup a killed `omnilearn worker --cpu-quota` could not remove itself."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGCONT)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        remove_quota_cgroups(p.pid)


def remove_quota_cgroups(pid, timeout=2.0):
    """Removes the cgroups a worker with this PID made for --cpu-quota (cluster/cpu_quota.cpp
    names them omnilearn-<node name>-<pid>, under cgroup v1's cpu controller or v2's root).
    A group empties once its killed trainers are gone, so an rmdir that finds it busy is
    retried until `timeout`."""
    groups = glob.glob(f"/sys/fs/cgroup/cpu/omnilearn-*-{pid}") + \
        glob.glob(f"/sys/fs/cgroup/omnilearn-*-{pid}")
    deadline = time.monotonic() + timeout
    for group in groups:
        while True:
            try:
                os.rmdir(group)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    print(f"run_dir: could not remove cgroup {group}", file=sys.stderr)
                    break
                time.sleep(0.05)
