#!/usr/bin/python3
"""PyTorch DDP baseline for the heterogeneity benchmark: the job OmniLearn trains,
trained by stock DistributedDataParallel with equal batches, under the same emulation.

Same as `omnilearn run JOB --local N --pin --cpu-quota Q --slowdown F`:
- model: the Sequential of training/models.cpp (mlp 784-256-128-10, or cnn 6,16 / 120,84);
- data: Fashion-MNIST from the IDX files, normalized as training/dataset.cpp does, visited in
  the order of training/sampler.cpp (std::mt19937_64 Fisher-Yates per epoch, seeded with
  splitmix64(seed ^ splitmix64(epoch))), each rank taking its consecutive slice of every global
  batch of B samples (B / N each: equal batches, what DDP does);
- SGD with the job's lr and momentum, torch threads = 1;
- rank r pinned to CPU r mod #cpus, and capped at the same CPU quota in a cgroup of its own
  (period 10 ms, as cluster/cpu_quota.cpp);
- slowdown F: the trainer's emulation (training/compute_throttle.cpp): sleep (F - 1) x the
  compute since the last launch (or with --slowdown-spin burn (F - 1) x its CPU time), after
  forward and before each bucket's all-reduce (a DDP comm hook), so a slowed rank's buckets are
  ready as late as a slower CPU's would be.

Ranks are started as torchrun starts them (see run() for why not by torchrun itself), from
heterogeneity.py or from the command line:
  /usr/bin/python3 bench/jobs/ddp_baseline.py --model mlp --global-batch 256 --steps 300 \\
      --slowdown 1,1,2,4 --quota 0.4 --json /tmp/ddp.json
Rank 0 writes the end time of every step (time.time()) and every rank's compute time per step
(data, forward and backward up to the last gradient: the trainer's compute_time_s) to the JSON
file.
"""
import argparse
import atexit
import gzip
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time

MASK64 = (1 << 64) - 1
FASHION_MEAN = 0.2860
FASHION_STD = 0.3530
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


# --- data order: training/sampler.cpp ------------------------------------------------------------

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class MT19937_64:
    """std::mt19937_64, bit for bit."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & MASK64
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        x = self.mt[self.index]
        self.index += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        x ^= x >> 43
        return x & MASK64


def permutation(size, seed, epoch):
    perm = list(range(size))
    rng = MT19937_64(splitmix64(seed ^ splitmix64(epoch)))
    for i in range(size - 1, 0, -1):
        bound = i + 1
        limit = MASK64 - (MASK64 % bound)
        x = rng()
        while x >= limit:
            x = rng()
        j = x % bound
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Sampler:
    def __init__(self, size, seed):
        self.size, self.seed, self.cache = size, seed, {}

    def perm(self, epoch):
        if epoch not in self.cache:
            # Two epochs at most: a global batch may straddle an epoch boundary.
            self.cache = {k: v for k, v in self.cache.items() if k == epoch - 1}
            self.cache[epoch] = permutation(self.size, self.seed, epoch)
        return self.cache[epoch]

    def indices(self, position, count):
        """`count` samples from absolute position `position` (epoch * size + offset)."""
        out = []
        while count > 0:
            epoch, at = divmod(position, self.size)
            take = min(count, self.size - at)
            out.extend(self.perm(epoch)[at:at + take])
            position += take
            count -= take
        return out


# --- model and data: training/models.cpp, training/dataset.cpp ---------------------------------

def make_model(torch, kind):
    nn = torch.nn
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return raw[4 + 4 * ndim:], dims


def load_train(torch, data_dir):
    return load_split(torch, data_dir, "train")


def load_split(torch, data_dir, split):
    """Fashion-MNIST's `split` ("train" or "t10k") from the IDX files, normalized as
    training/dataset.cpp does: images [N, 1, 28, 28] float32, labels int64."""
    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(data_dir, name)):
                return os.path.join(data_dir, name)
        raise FileNotFoundError(f"{stem}(.gz) not in {data_dir}")
    images, dims = read_idx(find(split + "-images-idx3-ubyte"))
    labels, _ = read_idx(find(split + "-labels-idx1-ubyte"))
    x = torch.frombuffer(bytearray(images), dtype=torch.uint8).view(dims[0], 1, dims[1], dims[2])
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).to(torch.long)
    x = x.to(torch.float32).mul_(1.0 / (255.0 * FASHION_STD)).sub_(FASHION_MEAN / FASHION_STD)
    return x, y


# --- caps and pinning: cluster/cpu_quota.cpp, `omnilearn run --pin` -------------------------------

def cap_parent():
    return ("/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.controllers")
            else "/sys/fs/cgroup/cpu")


def cap_path(pid):
    """The cgroup cap_and_pin makes for process `pid`."""
    return os.path.join(cap_parent(), f"omnilearn-ddp-{pid}")


def cfs_period_and_quota(cpus):
    """The period and quota (microseconds) `omnilearn worker --cpu-quota` uses
    (cluster/cpu_quota.cpp): the shortest period whose quota is the kernel's minimum of 1 ms, so
    a rank that waited does not run its next compute at full speed on saved-up quota."""
    period = int(min(max(math.ceil(1000.0 / cpus), 1000), 1000000))
    return period, max(1000, round(cpus * period))


def cap_and_pin(rank, quota):
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    if quota <= 0:
        return
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    parent = cap_parent()
    path = cap_path(os.getpid())
    os.makedirs(path, exist_ok=True)
    period, quota_us = cfs_period_and_quota(quota)
    if v2:
        with open(os.path.join(path, "cpu.max"), "w") as f:
            f.write(f"{quota_us} {period}")
    else:
        with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
            f.write(str(period))
        with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(quota_us))
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))

    def release():
        try:
            with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            os.rmdir(path)
        except OSError:
            pass
    atexit.register(release)


# --- one rank ------------------------------------------------------------------------------------

class Pace:
    """The trainer's slowdown emulation (training/compute_throttle.cpp): sleep (factor - 1) x the
    wall time of the compute since the last mark or, with `spin`, burn the CPU until the process
    has used (factor - 1) x that compute's CPU time more (process CPU time, every thread, as the
    trainer measures it), so that under a quota the rank is a slower CPU."""

    def __init__(self, factor, spin=False):
        self.factor, self.spin = factor, spin
        self.start()

    def start(self):
        self.mark, self.cpu_mark = time.perf_counter(), time.process_time()

    def __call__(self):
        if self.factor > 1:
            if self.spin:
                until = time.process_time() + (self.factor - 1) * (time.process_time() -
                                                                    self.cpu_mark)
                while time.process_time() < until:
                    pass
            else:
                time.sleep((self.factor - 1) * (time.perf_counter() - self.mark))
        self.start()


def worker(args):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    speeds = [float(s) for s in args.slowdown.split(",")] if args.slowdown else [1.0] * world
    quotas = ([float(q) for q in args.quotas.split(",")] if args.quotas else [args.quota] * world)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    torch.set_num_threads(1)
    x_all, y_all = load_train(torch, args.data)
    # Capped after the imports and the data load (start-up, outside every measured step), before
    # Gloo's threads start; a cgroup v1 write moves every thread of the process anyway.
    cap_and_pin(rank, quotas[rank])
    dist.init_process_group("gloo")
    sampler = Sampler(x_all.shape[0], args.seed)
    torch.manual_seed(args.seed)
    model = DDP(make_model(torch, args.model))
    pace = Pace(speeds[rank], args.slowdown_spin)
    # When this step's compute ended: the last parameter's gradient computed (a tensor hook runs
    # as autograd computes it, before DDP's hook launches its bucket), or for a slowed rank the
    # end of the emulated slowdown before its bucket's all-reduce. What a step takes beyond the
    # slowest rank's compute is DDP's fixed cost, measured as the trainer's (compute_time_s).
    compute_end = [0.0]

    def ready(grad):
        compute_end[0] = time.perf_counter()
        return grad
    for p in model.parameters():
        p.register_hook(ready)
    if speeds[rank] > 1:
        def hook(state, bucket):
            pace()
            compute_end[0] = time.perf_counter()
            return default_hooks.allreduce_hook(None, bucket)
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    B = args.global_batch
    mine = B // world + (1 if rank < B % world else 0)
    offset = sum(B // world + (1 if r < B % world else 0) for r in range(rank))
    ends, computes = [], []
    for step in range(args.steps):
        pace.start()
        start = pace.mark
        idx = torch.tensor(sampler.indices(step * B + offset, mine))
        x, y = x_all.index_select(0, idx), y_all.index_select(0, idx)
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        pace()
        # No pace after backward: DDP's backward ends by waiting for the all-reduces, and a
        # sleep in proportion to that wait would slow a rank for its peers' slowness. The last
        # bucket is ready (and paced in the hook) when the compute of backward is done.
        loss.backward()
        opt.step()
        ends.append(time.time())
        computes.append(compute_end[0] - start)
    every_compute = [None] * world
    dist.all_gather_object(every_compute, computes)
    dist.barrier()
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"step_end_times": ends, "compute_times": every_compute,
                       "loss": float(loss), "world": world,
                       "global_batch": B, "model": args.model, "slowdown": speeds,
                       "quotas": quotas}, f)
    dist.destroy_process_group()


# --- launcher ------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(argv, workers, timeout, what):
    """Runs `argv` as ranks 0..workers-1 of a local env:// group, as torchrun's static launch
    would (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and waits for all of them.
    One failed rank leaves the others blocked in Gloo, so the first failure (or the timeout)
    stops them all; the cgroups of ranks killed before their exit handlers ran are removed here.
    Returns each rank's output (stdout and stderr); raises RuntimeError, the failed ranks' output
    on stderr."""
    import tempfile
    port = free_port()
    logs, procs = [], []
    for rank in range(workers):
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432",
                   MALLOC_TRIM_THRESHOLD_="1073741824", OMP_NUM_THREADS="1", RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(workers), LOCAL_WORLD_SIZE=str(workers),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        logs.append(tempfile.TemporaryFile(mode="w+"))  # a pipe would fill while we poll
        procs.append(subprocess.Popen(argv, env=env, stdout=logs[-1], stderr=subprocess.STDOUT,
                                      text=True))
    deadline = time.time() + timeout
    try:
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs) or time.time() > deadline:
                break
            time.sleep(0.1)
        timed_out = any(p.poll() is None for p in procs) and time.time() > deadline
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            try:
                os.rmdir(cap_path(p.pid))
            except OSError:
                pass
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    failed = [(rank, p.returncode) for rank, p in enumerate(procs) if p.returncode != 0]
    for rank, code in failed:
        sys.stderr.write(f"rank {rank} (exit {code}):\n{outputs[rank][-3000:]}\n")
    if timed_out:
        raise RuntimeError(f"{what} timed out after {timeout} s")
    if failed:
        raise RuntimeError(f"{what} failed: {' '.join(argv)}")
    return outputs


def run(model, global_batch, steps, workers, slowdown=None, quota=0.4, quotas=None, lr=0.05,
        momentum=0.9, seed=1, data=DEFAULT_DATA, json_path=None, timeout=1800,
        slowdown_spin=False):
    """Runs the baseline on `workers` local ranks; returns rank 0's JSON (step end times).

    The ranks are started as torchrun's static single-node launch starts them (one process per
    rank with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; env:// rendezvous on a
    TCPStore), but by this function: Debian 12's torch 1.13 under Python 3.11 cannot parse its
    own default --redirects/--tee values (Std.from_str("0") is None), so
    `python3 -m torch.distributed.run` fails before starting any rank.
    """
    import tempfile
    own = json_path is None
    if own:
        fd, json_path = tempfile.mkstemp(suffix=".json", prefix="ddp-")
        os.close(fd)
    args = [os.path.abspath(__file__), "--worker", "--model", model, "--global-batch",
            str(global_batch), "--steps", str(steps), "--lr", str(lr), "--momentum",
            str(momentum), "--seed", str(seed), "--data", data, "--json", json_path, "--quota",
            str(quota)]
    if slowdown:
        args += ["--slowdown", ",".join(str(s) for s in slowdown)]
    if quotas:
        args += ["--quotas", ",".join(str(q) for q in quotas)]
    if slowdown_spin:
        args += ["--slowdown-spin"]
    launch_ranks(["/usr/bin/python3"] + args, workers, timeout, "DDP baseline")
    with open(json_path) as f:
        result = json.load(f)
    if own:
        os.unlink(json_path)
    return result


def steady_step_time(result, first=50):
    """Wall-clock seconds per step from the end of step `first` to the end of the last one."""
    t = result["step_end_times"]
    first = min(first, len(t) // 2)
    return (t[-1] - t[first]) / (len(t) - 1 - first)


def fixed_cost(result, first=50):
    """Seconds a steady step takes beyond its slowest rank's compute (median over the steps),
    as heterogeneity.py measures OmniLearn's balanced reference."""
    import statistics
    t = result["step_end_times"]
    first = min(first, len(t) // 2)
    slowest = statistics.median(max(c[i] for c in result["compute_times"])
                                for i in range(first + 1, len(t)))
    return steady_step_time(result, first) - slowest, slowest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--slowdown", default="")
    ap.add_argument("--slowdown-spin", action="store_true",
                    help="emulate a slowdown by burning CPU, not sleeping (omnilearn's "
                         "--slowdown-spin)")
    ap.add_argument("--quota", type=float, default=0.4, help="CPU quota of every rank (0: none)")
    ap.add_argument("--quotas", default="", help="per-rank CPU quotas (instead of --quota)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    result = run(args.model, args.global_batch, args.steps, args.workers,
                 [float(s) for s in args.slowdown.split(",")] if args.slowdown else None,
                 args.quota, [float(q) for q in args.quotas.split(",")] if args.quotas else None,
                 args.lr, args.momentum, args.seed, args.data, args.json or None,
                 slowdown_spin=args.slowdown_spin)
    print(f"DDP {args.model} B={args.global_batch} slowdown {args.slowdown or 'none'}: "
          f"{1000 * steady_step_time(result):.1f} ms per step (steady state, wall clock), "
          f"slowest compute {1000 * fixed_cost(result)[1]:.1f} ms, fixed cost "
          f"{1000 * fixed_cost(result)[0]:.1f} ms")


if __name__ == "__main__":
    main()
