"""What the job benchmarks share: reading a run directory's events.jsonl while the head writes
it, waiting for an event, and killing the process groups a benchmark started."""
import json
import os
import signal
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
    """SIGKILL (after SIGCONT, for frozen ones) each Popen's process group, and reap it."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGCONT)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
