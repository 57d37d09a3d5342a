#!/usr/bin/python3
"""Gloo's ring all-reduce against reduce-to-rank-0 plus broadcast, and all-gather plus a local
sum, for one MLP gradient (235,146 floats, 0.94 MB) among local ranks.

Each rank is pinned to CPU r mod #cpus and capped as the heterogeneity benchmark caps its
workers (ddp_baseline.cap_and_pin: a cgroup of its own, the shortest period with a 1 ms
quota, as `omnilearn worker --cpu-quota`; --quota 0 leaves it uncapped). Every round does
about 10 ms of matrix products (so an exchange starts as it does after a step's compute), a
barrier, then times one exchange of each kind, interleaved; the first 10 rounds are warm-up.
Rank 0 prints each kind's median and 90th percentile.

  /usr/bin/python3 bench/jobs/allreduce_algorithms.py --ranks 2 --quota 0
  /usr/bin/python3 bench/jobs/allreduce_algorithms.py --ranks 4 --quota 0.4

On a 2-vCPU machine reduce-and-broadcast was faster in isolation (8.8 against 10.9 ms, four ranks
at 0.4 CPU) but no faster inside the trainer, where the ring's steps pipeline: the trainer keeps it.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_baseline  # noqa: E402

MLP_PARAMETERS = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10


def rank_main(args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    ddp_baseline.cap_and_pin(rank, args.quota)
    dist.init_process_group("gloo")
    t = torch.ones(MLP_PARAMETERS)
    a, w = torch.randn(256, 784), torch.randn(784, 256)

    def ring():
        dist.all_reduce(t)

    def reduce_broadcast():
        dist.reduce(t, 0)
        dist.broadcast(t, 0)

    def all_gather_sum():
        out = [torch.empty_like(t) for _ in range(args.ranks)]
        dist.all_gather(out, t)
        torch.stack(out).sum(0)

    kinds = {"ring all-reduce": ring, "reduce + broadcast": reduce_broadcast,
             "all-gather + sum": all_gather_sum}
    times = {k: [] for k in kinds}
    for _ in range(args.rounds + 10):
        for kind, exchange in kinds.items():
            for _ in range(8):
                a @ w
            t.fill_(1.0)  # the in-place sums would grow it n-fold each round, to inf
            dist.barrier()
            start = time.perf_counter()
            exchange()
            times[kind].append(time.perf_counter() - start)
    if rank == 0:
        for kind, v in times.items():
            v = sorted(v[10:])
            print(f"{kind:20s} median {1000 * v[len(v) // 2]:6.2f} ms  "
                  f"p90 {1000 * v[int(0.9 * (len(v) - 1))]:6.2f} ms", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--quota", type=float, default=0.4, help="CPU quota per rank (0: none)")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ranks < 2:
        sys.exit("--ranks: at least 2")
    if args.rank:
        rank_main(args)
        return
    argv = ["/usr/bin/python3", os.path.abspath(__file__), "--rank", "--ranks", str(args.ranks),
            "--quota", str(args.quota), "--rounds", str(args.rounds)]
    try:
        outputs = ddp_baseline.launch_ranks(argv, args.ranks, 600, "the exchange benchmark")
    except RuntimeError as e:
        sys.exit(str(e))
    print(outputs[0], end="")  # rank 0 prints the table

if __name__ == "__main__":
    main()
