#!/usr/bin/env python3
"""Loads a job's final checkpoint into the scripted model it trained and evaluates it on the
test tensors, the way the trainer does (uint8 inputs scaled by 1/255, float32, chunks of 1000).
Prints one JSON line: accuracy and loss here, and what the job's summary reports.

    /usr/bin/python3 examples/torchscript/evaluate.py RUN_DIR/summary.json \\
        [--model examples/torchscript/model.pt] [--test examples/torchscript/test.pt]
"""
import argparse
import json
import os

import torch


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summary", help="the run directory's summary.json")
    parser.add_argument("--model", default=os.path.join(here, "model.pt"))
    parser.add_argument("--test", default=os.path.join(here, "test.pt"))
    args = parser.parse_args()

    with open(args.summary) as f:
        summary = json.load(f)
    model = torch.jit.load(args.model)
    # The checkpoint's "model" entry is the module's state dict (PyTorch's names).
    model.load_state_dict(torch.load(summary["checkpoint"])["model"])
    model.eval()

    torch.set_num_threads(1)  # as the job's trainers ([train] threads = 1)
    data = torch.load(args.test)
    x, y = data["x"], data["y"].to(torch.int64)
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for begin in range(0, len(y), 1000):
            xb = x[begin : begin + 1000]
            xb = xb.to(torch.float32).mul_(1.0 / 255.0) if xb.dtype == torch.uint8 else xb.float()
            logits = model(xb)
            yb = y[begin : begin + 1000]
            loss_sum += torch.nn.functional.cross_entropy(logits, yb, reduction="sum").item()
            correct += (logits.argmax(1) == yb).sum().item()
    print(json.dumps({"accuracy": correct / len(y), "loss": loss_sum / len(y),
                      "samples": len(y), "summary_accuracy": summary["final_test_accuracy"],
                      "summary_loss": summary["final_test_loss"]}))


if __name__ == "__main__":
    main()
