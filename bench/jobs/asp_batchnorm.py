#!/usr/bin/env python3
"""BatchNorm statistics under ASP: the final model's test accuracy with the servers' running
statistics as they are (`[asp] refresh_statistics = 0`) against the default refresh before the
final evaluation, side by side: the two jobs of a repeat go back to back, their order rotating.

Each job: the `resnet` model (channels 8, 16) on Fashion-MNIST, 1 epoch, B = 256, SGD lr
0.05 / workers, momentum 0.9, one server, `omnilearn run --local N` (8 by default), no
evaluation before the final one. For every final checkpoint the script also evaluates, with
Debian's python3-torch, the same parameters with their *own* statistics (running statistics
recomputed over 20,000 training samples, cumulative: "precise"), which is what a perfect refresh
would give, and the parameters with each 1,000-sample test batch's statistics ("batch").

Usage:
  /usr/bin/python3 bench/jobs/asp_batchnorm.py --omnilearn build/bin/omnilearn --repeats 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_baseline import load_split  # noqa: E402

JOB = """
[job]
name = "asp-batchnorm-{name}"
mode = "asp"

[model]
kind = "resnet"
channels = [8, 16]

[data]
dataset = "fashion-mnist"

[train]
global_batch = 256
epochs = 1
optimizer = "sgd"
lr = {lr}
momentum = 0.9
seed = {seed}
eval_every = 0

[asp]
servers = 1
staleness = "none"
refresh_statistics = {refresh}

[controller]
policy = "proportional"
interval = 20

[elastic]
min_workers = 1
max_workers = {workers}
"""

DATA = "/usr/share/datasets/fashion-mnist"


def load(torch, stem, count=None):
    """Debian's Fashion-MNIST split `stem` ("train" or "t10k"), normalized as the trainer does."""
    x, y = load_split(torch, DATA, stem)
    return (x[:count], y[:count]) if count else (x, y)


def resnet(torch, widths):
    """training/models.cpp's resnet (blocks_per_stage = 1), with the same state-dict names."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, i, o, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(i, o, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(o)
            self.conv2 = nn.Conv2d(o, o, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(o)
            self.shortcut = (nn.Sequential(nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))
                             if stride != 1 or i != o else None)

        def forward(self, x):
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))

    layers = [nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    i = widths[0]
    for k, w in enumerate(widths):
        layers.append(Block(i, w, 2 if k > 0 else 1))
        i = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(i, 10)]
    return nn.Sequential(*layers)


def check(torch, path, test, train_x):
    """Test accuracy of a checkpoint: its own statistics, each test batch's, and precise ones."""
    model = resnet(torch, [8, 16])
    state = torch.load(path)["model"]
    own = model.state_dict()
    model.load_state_dict({k: v.reshape(own[k].shape).to(own[k].dtype) for k, v in state.items()})

    def accuracy(train_mode):
        model.train(train_mode)
        correct = 0
        with torch.no_grad():
            for b in range(0, len(test[1]), 1000):
                correct += (model(test[0][b:b + 1000]).argmax(1) == test[1][b:b + 1000]).sum().item()
        return correct / len(test[1])

    out = {"kept": accuracy(False), "batch": accuracy(True)}
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # a cumulative average
    model.train()
    with torch.no_grad():
        for b in range(0, len(train_x), 1000):
            model(train_x[b:b + 1000])
    out["precise"] = accuracy(False)
    return out


def run(args, refresh, seed, tmp):
    name = f"refresh{refresh}-s{seed}"
    job = os.path.join(tmp, name + ".toml")
    with open(job, "w") as f:
        f.write(JOB.format(name=name, lr=0.05 / args.workers, seed=seed, refresh=refresh,
                           workers=args.workers))
    run_dir = os.path.join(tmp, name)
    cmd = [args.omnilearn, "run", "--local", str(args.workers), "--run-dir", run_dir, job]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--omnilearn", default="build/bin/omnilearn")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--refresh", type=int, default=32, help="the refreshed runs' passes")
    p.add_argument("--json")
    args = p.parse_args()
    import torch
    torch.set_num_threads(1)
    test = load(torch, "t10k")
    train_x = load(torch, "train", 20000)[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="asp-batchnorm-") as tmp:
        for r in range(args.repeats):
            order = (0, args.refresh) if r % 2 == 0 else (args.refresh, 0)
            for refresh in order:
                summary = run(args, refresh, seed=3 + r, tmp=tmp)
                figures = check(torch, summary["checkpoint"], test, train_x)
                row = {"repeat": r, "refresh": refresh, "reported": summary["final_test_accuracy"],
                       "updates": summary["updates"],
                       "staleness_mean": summary["staleness"]["mean"], **figures}
                rows.append(row)
                print(f"repeat {r} refresh {refresh:3d}: reported {row['reported']:.4f}  "
                      f"checkpoint: kept {figures['kept']:.4f}  batch {figures['batch']:.4f}  "
                      f"precise {figures['precise']:.4f}  (updates {row['updates']}, "
                      f"staleness mean {row['staleness_mean']:.2f})", flush=True)
    for refresh in (0, args.refresh):
        mine = [x for x in rows if x["refresh"] == refresh]
        def med(key):
            v = [x[key] for x in mine]
            return f"{statistics.median(v):.4f} [{min(v):.4f}..{max(v):.4f}]"
        print(f"refresh {refresh:3d}: reported {med('reported')}; precise {med('precise')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
