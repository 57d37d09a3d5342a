#!/usr/bin/python3
"""ASP on a simulated clock with real gradients: what decides whether proportional batches make
asynchronous training more accurate than uniform ones.

The job runs (`asp_staleness.py`) measure it on real processes, where the VM's noise moves
accuracy by points between repeats. Here the same training math runs in one process on a
simulated clock, so a comparison is exact and repeatable from its seed, and the server's update
rule can be swapped:
- workers r = 0..n-1 with speeds v_r (samples per second) and a fixed cost c per update: a batch
  of b samples takes c + b / v_r. A worker pulls the parameters (with their version), computes
  the mean gradient of the next b_r indices of the epoch's global permutation (exactly once per
  epoch, as the real dealer), pushes it, and pulls again; pushes are applied in the order of
  their finishing times;
- the server's optimizer is SGD with momentum (torch.optim.SGD's formulas, as training/
  optimizer.cpp); a push of batch b with staleness s gets the scale b / (B / n) under linear lr
  scaling, and 1 / (1 + s) more under "inverse";
- `--apply` says where that scale goes:
    "lr":       p -= lr * scale * m after m = mu * m + g (the scale multiplies the step, and so
                the momentum of every earlier push too: OmniLearn's server before this change);
    "gradient": m = mu * m + scale * g, p -= lr * m (each push's gradient enters the momentum
                weighted by its scale: a sample counts the same whichever worker took it);
    "replace":  the worker takes the optimizer step itself (momentum of its own) on the
                parameters it pulled and the server replaces its parameters with the result, as
                the paper's published prototype does (no scale), pulling before every batch;
    "prototype": the published prototype's whole loop: each worker trains a model of its own
                (its own momentum, `--local-lr`, its own shuffle of the whole training set) and
                pushes its parameters after every batch, which replace the server's; when the
                server's epoch changes, every worker reports its compute time for the next
                batch sizes (a call that returns when all have reported) and then pulls, so
                each epoch starts from the last pusher's model. Evaluated: the server's model
                (the last push), and at T each worker's own (what the prototype logs). Unlike
                the prototype, which builds a new data loader after each barrier, a worker
                goes on through its own permutation;
- batches: "uniform" (B / n each) or "proportional" (b_r proportional to v_r, sum B: the plan the
  controller converges to, given here so that only the training math differs).

Every configuration trains for the same simulated time (what `--epochs` of samples take at the
sum of the speeds) and is evaluated on the full test set every `--eval-seconds` of simulated
time; "accuracy at T" is the last evaluation, "best" the best one. Same seeds for every
configuration (initial model, permutation), so differences are the update rule's.

Usage:
  /usr/bin/python3 bench/jobs/asp_simulated.py --slowdown 1,1,2,4 --seeds 3
  /usr/bin/python3 bench/jobs/asp_simulated.py --slowdown 1,1,1,8 --lr 0.025 --apply lr,gradient
"""
import argparse
import heapq
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from asp_staleness import median_range  # noqa: E402
from ddp_baseline import DEFAULT_DATA, load_split, make_model  # noqa: E402


def plan(kind, speeds, global_batch):
    n = len(speeds)
    if kind == "uniform":
        return [global_batch // n] * n
    total = sum(speeds)
    batches = [max(1, round(global_batch * v / total)) for v in speeds]
    batches[batches.index(max(batches))] += global_batch - sum(batches)
    return batches


class Dealer:
    """The next b indices of the epoch's permutation; a new permutation each epoch."""

    def __init__(self, torch, size, seed):
        self.torch, self.size, self.seed = torch, size, seed
        self.epoch, self.position = 0, 0
        self.perm = self._perm()

    def _perm(self):
        g = self.torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
        return self.torch.randperm(self.size, generator=g)

    def take(self, count):
        out = []
        while count > 0:
            if self.position == self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self.perm = self._perm()
            k = min(count, self.size - self.position)
            out.append(self.perm[self.position:self.position + k])
            self.position += k
            count -= k
        return self.torch.cat(out)


def simulate(torch, data, config, args, seed):
    x, y, tx, ty = data
    torch.manual_seed(seed)
    model = make_model(torch, args.model)
    params = [p for p in model.parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in params]).clone()
    sizes = [p.numel() for p in params]

    def set_flat(v):
        with torch.no_grad():
            for p, chunk in zip(params, torch.split(v, sizes)):
                p.copy_(chunk.view_as(p))

    def gradient(at, idx):
        set_flat(at)
        model.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        return torch.cat([p.grad.reshape(-1) for p in params])

    def evaluate(at):
        set_flat(at)
        with torch.no_grad():
            correct = sum(int((model(tx[i:i + 2000]).argmax(1) == ty[i:i + 2000]).sum())
                          for i in range(0, len(ty), 2000))
        return correct / len(ty)

    speeds = [args.speed / f for f in args.slowdown]
    n = len(speeds)
    batches = plan(config["batches"], speeds, args.global_batch)
    reference = args.global_batch / n
    horizon = args.epochs * len(y) / sum(speeds)  # what the epochs take at the summed speed
    mu = args.momentum
    momentum = torch.zeros_like(flat)
    worker_momentum = [torch.zeros_like(flat) for _ in range(n)]
    local = [flat] * n  # the prototype's worker models (the parameters each last stepped)
    prototype = config["apply"] == "prototype"
    # The prototype's workers each shuffle the whole training set in an order of their own; the
    # other rules deal one global permutation exactly once.
    dealers = ([Dealer(torch, len(y), seed * 100 + 1 + r) for r in range(n)] if prototype
               else [Dealer(torch, len(y), seed)] * n)
    version, samples, worker_epoch, at_barrier = 0, 0, [0] * n, []
    staleness, updates = [], [0] * n
    # (finish time, worker, version pulled, parameters pulled, indices). `flat` is rebound by each
    # update and never written in place, so what a worker pulled needs no copy.
    events = []
    for r in range(n):
        heapq.heappush(events, (args.cost + batches[r] / speeds[r], r, 0, flat,
                                dealers[r].take(batches[r])))
    evaluations, next_eval = [], args.eval_seconds
    while events:
        t, r, pulled, at, idx = heapq.heappop(events)
        while next_eval <= min(t, horizon):
            evaluations.append((next_eval, evaluate(flat)))
            next_eval += args.eval_seconds
        if t > horizon:
            break
        if idx is None:
            # The prototype's pull (an epoch ended): the server's parameters now, which are the
            # last pusher's; then the next batch.
            local[r] = flat
            heapq.heappush(events, (t + batches[r] / speeds[r], r, version, flat,
                                    dealers[r].take(batches[r])))
            continue
        s = version - pulled  # under "prototype": pushes since this worker's last pull
        staleness.append(s)
        g = gradient(at, idx)
        if prototype:
            # The worker steps its own model (its own momentum and learning rate, as a single
            # worker would) and the server takes the result; the worker keeps training on its
            # own parameters. When the server's epoch (samples pushed / training set size,
            # rounded up) has changed since it last looked, it reports its compute time for the
            # new batch sizes, a call that returns when every worker has reported (a barrier),
            # and then pulls: every worker starts the epoch from the last pusher's parameters.
            worker_momentum[r].mul_(mu).add_(g)
            flat = at - args.local_lr * worker_momentum[r]
            version += 1
            updates[r] += 1
            samples += batches[r]
            epoch = -(-samples // len(y))
            if epoch != worker_epoch[r]:
                worker_epoch[r] = epoch
                at_barrier.append(r)
                if len(at_barrier) == n:
                    for w in at_barrier:
                        heapq.heappush(events, (t + args.cost, w, version, None, None))
                    at_barrier.clear()
            else:
                heapq.heappush(events, (t + args.cost + batches[r] / speeds[r], r, pulled, flat,
                                        dealers[r].take(batches[r])))
            local[r] = flat
            if not bool(torch.isfinite(flat).all()):
                evaluations.append((t, float("nan")))
                break
            continue
        if config["apply"] == "replace":
            # The worker's own optimizer step on what it pulled, then the server takes the result.
            worker_momentum[r].mul_(mu).add_(g)
            flat = at - args.lr * worker_momentum[r]
        else:
            scale = batches[r] / reference if config["lr_scaling"] == "linear" else 1.0
            if config["staleness"] == "inverse":
                scale /= 1.0 + s
            if config["apply"] == "lr":
                momentum.mul_(mu).add_(g)
                flat = flat - args.lr * scale * momentum
            else:
                momentum.mul_(mu).add_(g, alpha=scale)
                flat = flat - args.lr * momentum
        version += 1
        updates[r] += 1
        if not bool(torch.isfinite(flat).all()):
            evaluations.append((t, float("nan")))
            break
        heapq.heappush(events, (t + args.cost + batches[r] / speeds[r], r, version, flat,
                                dealers[r].take(batches[r])))
    accuracies = [a for _, a in evaluations]
    # The prototype logs each worker's test accuracy on its own model: those at T too.
    local_accuracy = [evaluate(v) for v in local] if prototype else []
    staleness.sort()
    return {
        "batches": batches,
        "accuracy_at_T": accuracies[-1] if accuracies else float("nan"),
        "best": max(accuracies) if accuracies else float("nan"),
        "staleness_mean": sum(staleness) / len(staleness),
        "staleness_p95": staleness[int(0.95 * (len(staleness) - 1))],
        "updates": updates,
        "local_accuracy_at_T": local_accuracy,
        "evaluations": evaluations,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slowdown", default="1,1,2,4")
    parser.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--lr", type=float, default=None,
                        help="the server's learning rate (default 0.05 / workers, as "
                             "asp_staleness.py)")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--local-lr", type=float, default=0.05,
                        help="--apply prototype: each worker's own learning rate (the job's)")
    parser.add_argument("--speed", type=float, default=900.0,
                        help="an unslowed worker's samples per second (measured: about 900 "
                             "for the MLP)")
    parser.add_argument("--cost", type=float, default=0.005,
                        help="seconds per update that no slowdown stretches (pull, push, apply)")
    parser.add_argument("--eval-seconds", type=float, default=5.0)
    parser.add_argument("--seeds", type=int, default=3,
                        help="seeds first-seed, first-seed + 1, ...")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--batches", default="uniform,proportional")
    parser.add_argument("--apply", default="lr,gradient,replace")
    parser.add_argument("--lr-scaling", default="linear", choices=["linear", "none"])
    parser.add_argument("--staleness", default="none", choices=["none", "inverse"])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--json")
    args = parser.parse_args()
    args.slowdown = [float(f) for f in args.slowdown.split(",")]
    if args.lr is None:
        args.lr = 0.05 / len(args.slowdown)

    import torch
    torch.set_num_threads(1)
    x, y = load_split(torch, args.data, "train")
    tx, ty = load_split(torch, args.data, "t10k")
    data = (x, y, tx, ty)

    configs = [{"apply": a, "batches": b, "lr_scaling": args.lr_scaling,
                "staleness": args.staleness}
               for a in args.apply.split(",") for b in args.batches.split(",")]
    results = []
    for config in configs:
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        runs = [simulate(torch, data, config, args, seed) for seed in seeds]
        results.append({"config": config, "runs": runs})
        at_t = [r["accuracy_at_T"] for r in runs]
        best = [r["best"] for r in runs]
        print(f"apply={config['apply']:8} batches={config['batches']:12} "
              f"accuracy at T {median_range(at_t)} "
              f"best {statistics.median(best):.4f} "
              + ("" if config["apply"] == "prototype" else  # no pull per push: no staleness
                 f"staleness mean {statistics.median(r['staleness_mean'] for r in runs):.2f} "
                 f"p95 {statistics.median(r['staleness_p95'] for r in runs)} ") +
              f"batches {runs[0]['batches']} updates {runs[0]['updates']}", flush=True)
        if config["apply"] == "prototype":
            print("    workers' own models at T (seed by seed): " + "; ".join(
                ", ".join(f"{a:.4f}" for a in r["local_accuracy_at_T"]) for r in runs),
                flush=True)
    # Paired by seed: proportional - uniform, per update rule.
    by = {(r["config"]["apply"], r["config"]["batches"]): r["runs"] for r in results}
    for a in args.apply.split(","):
        if (a, "uniform") in by and (a, "proportional") in by:
            d = [100 * (p["accuracy_at_T"] - u["accuracy_at_T"])
                 for p, u in zip(by[(a, "proportional")], by[(a, "uniform")])]
            print(f"apply={a:8} proportional - uniform at T: "
                  f"{median_range(d, '{:+.2f}')} points over {len(d)} seeds")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
