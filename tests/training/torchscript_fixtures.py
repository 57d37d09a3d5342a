#!/usr/bin/env python3
"""Writes what tests/training/{torchscript,equivalence}_test.cpp load, as a user would: models
saved with torch.jit.script, datasets saved with torch.save({"x": X, "y": Y}) and numpy.save,
and files that are wrong in one way each. Usage: torchscript_fixtures.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
import torch


class Cnn(torch.nn.Module):
    """No BatchNorm: 3 ranks must compute exactly the update of one."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 8, 3)
        self.fc = torch.nn.Linear(8 * 2 * 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)  # 12x12 -> 6x6
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)  # -> 4x4 -> 2x2
        return self.fc(torch.flatten(x, 1))


class BnNet(torch.nn.Module):
    """BatchNorm buffers (float and int), nested modules, and a frozen parameter."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 12 * 12, 5))
        self.scale = torch.nn.Parameter(torch.full([1], 0.5), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x * self.scale))))


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class TupleOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(144, 5)

    def forward(self, x: torch.Tensor):
        y = self.fc(torch.flatten(x, 1))
        return y, y


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = lambda name: os.path.join(out, name)
    torch.manual_seed(0)
    names = {}
    for name, module in (("cnn", Cnn()), ("bn", BnNet()), ("regressor", Regressor()),
                         ("tuple_out", TupleOut())):
        scripted = torch.jit.script(module)
        scripted.save(path(name + ".pt"))
        names[name] = {"parameters": [n for n, _ in scripted.named_parameters()],
                       "buffers": [n for n, _ in scripted.named_buffers()]}
    with open(path("names.json"), "w") as f:
        json.dump(names, f)
    torch.save(Cnn().state_dict(), path("state_dict.pt"))  # a zip, but not TorchScript

    # Classification: 12x12 single-channel images labelled by a linear teacher (5 classes).
    gen = torch.Generator().manual_seed(1)
    teacher = torch.randn(144, 5, generator=gen)
    def images(n):
        x = torch.randn(n, 1, 12, 12, generator=gen)
        return x, (x.reshape(n, 144) @ teacher).argmax(1)
    x_train, y_train = images(600)
    x_test, y_test = images(200)
    torch.save({"x": x_train, "y": y_train}, path("train.pt"))
    torch.save({"x": x_test, "y": y_test}, path("test.pt"))
    # The same training split as .npy: float32 inputs, int64 labels.
    np.save(path("train_x.npy"), x_train.numpy())
    np.save(path("train_y.npy"), y_train.numpy())
    np.save(path("test_x.npy"), x_test.numpy())
    np.save(path("test_y.npy"), y_test.numpy())

    # Every supported .npy type, and a Fortran-order array, next to the same values in a .pt.
    rng = np.random.default_rng(2)
    arrays = {
        "f4": rng.standard_normal((7, 3, 2)).astype("<f4"),
        "f8": rng.standard_normal((7, 5)).astype("<f8"),
        "i8": rng.integers(-1000, 1000, (7, 4)).astype("<i8"),
        "i4": rng.integers(-1000, 1000, (7,)).astype("<i4"),
        "u1": rng.integers(0, 256, (7, 2, 3)).astype("|u1"),
        "fortran": np.asfortranarray(rng.standard_normal((7, 4, 3))),
    }
    labels = np.arange(7, dtype="<i8") % 3
    np.save(path("labels7.npy"), labels)
    for key, array in arrays.items():
        np.save(path(f"{key}.npy"), array)
        torch.save({"x": torch.from_numpy(np.ascontiguousarray(array)),
                    "y": torch.from_numpy(labels)}, path(f"{key}.pt"))
    # A slice of a larger tensor: torch.save stores the whole storage it views.
    torch.save({"x": x_train[10:20], "y": y_train[10:20]}, path("slice.pt"))

    # Regression: float64 inputs, float32 targets [N, 2].
    xr = torch.randn(300, 6, generator=gen, dtype=torch.float64)
    yr = (xr @ torch.randn(6, 2, generator=gen, dtype=torch.float64)).float()
    torch.save({"x": xr[:200].clone(), "y": yr[:200].clone()}, path("reg_train.pt"))
    torch.save({"x": xr[200:].clone(), "y": yr[200:].clone()}, path("reg_test.pt"))

    # Files that are wrong in one way each.
    torch.save({"x": x_train, "y": y_train}, path("legacy.pt"),
               _use_new_zipfile_serialization=False)
    torch.save([x_train, y_train], path("list.pt"))
    torch.save({"inputs": x_train, "y": y_train}, path("no_x.pt"))
    torch.save({"x": x_train, "y": y_train.float()}, path("float_labels.pt"))
    torch.save({"x": x_train, "y": y_train[:599].clone()}, path("short_labels.pt"))
    torch.save({"x": x_train, "y": y_train - 1}, path("negative_labels.pt"))
    torch.save({"x": x_train, "y": y_train + 2}, path("seven_classes.pt"))
    torch.save({"x": x_train.repeat(1, 3, 1, 1), "y": y_train}, path("three_channels.pt"))
    torch.save({"x": x_test.double(), "y": y_test}, path("test_float64.pt"))
    np.save(path("big_endian.npy"), x_train.numpy().astype(">f4"))
    np.save(path("float16.npy"), x_train.numpy().astype("<f2"))
    np.save(path("structured.npy"), np.zeros(3, dtype=[("a", "<f4"), ("b", "<i8")]))


if __name__ == "__main__":
    main()
