#!/usr/bin/env python3
"""Writes what job.toml trains: a small CNN saved with TorchScript (model.pt) and Fashion-MNIST
as tensor files (train.pt, test.pt: torch.save({"x": X, "y": Y})). Any PyTorch model and any
tensors go the same way: script (or trace) the model, save the data as {"x", "y"}.

    /usr/bin/python3 examples/torchscript/make_example.py
    build/bin/omnilearn run examples/torchscript/job.toml --local 3 --slowdowns 1,1,2 \\
        --run-dir runs/byo
    /usr/bin/python3 examples/torchscript/evaluate.py runs/byo/summary.json

Needs Debian's python3-torch (scripts/install-deps.sh installs it; it is /usr/bin/python3's,
not a virtualenv's) and the dataset-fashion-mnist package.
"""
import argparse
import gzip
import os
import struct

import torch


class SmallCnn(torch.nn.Module):
    """LeNet-like, with BatchNorm: its running statistics are trained buffers, averaged across
    workers like the gradients (and its num_batches_tracked an integer buffer)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 5, padding=2)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 5)
        self.fc1 = torch.nn.Linear(16 * 5 * 5, 64)
        self.fc2 = torch.nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


def read_idx(path: str) -> torch.Tensor:
    """An unsigned-byte IDX file (gzipped), as Fashion-MNIST ships."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\x00\x00\x08":
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    rank = data[3]
    shape = struct.unpack(">" + "I" * rank, data[4 : 4 + 4 * rank])
    return torch.frombuffer(bytearray(data[4 + 4 * rank :]), dtype=torch.uint8).reshape(shape)


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=here, help="directory for model.pt, train.pt, test.pt")
    parser.add_argument("--fashion-mnist", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train-samples", type=int, default=60000)
    parser.add_argument("--test-samples", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.jit.script(SmallCnn()).save(os.path.join(args.out, "model.pt"))
    for split, prefix, n in (("train", "train", args.train_samples),
                             ("test", "t10k", args.test_samples)):
        images = read_idx(os.path.join(args.fashion_mnist, f"{prefix}-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(args.fashion_mnist, f"{prefix}-labels-idx1-ubyte.gz"))
        # uint8 pixels [N, 1, 28, 28] (the trainer scales uint8 inputs by 1/255) and int64
        # labels [N]; .clone() so that torch.save writes only the first n samples.
        x = images[:n].unsqueeze(1).clone()
        y = labels[:n].to(torch.int64).clone()
        torch.save({"x": x, "y": y}, os.path.join(args.out, f"{split}.pt"))
        print(f"{split}.pt: x {list(x.shape)} {x.dtype}, y {list(y.shape)} {y.dtype}")
    print(f"model.pt: {SmallCnn.__name__} scripted; files in {args.out}")


if __name__ == "__main__":
    main()
