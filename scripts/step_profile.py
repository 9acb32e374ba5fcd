"""Where a training step of the random-attention retrieval model goes, on this CPU.

    python scripts/step_profile.py --variant frozen_qk [--compile] [--ab-loss]

The main job's model (reference construction, width 64, 2 layers, 4 heads; retrieval_4:
batch 256 x 10 tokens) at one thread: milliseconds per step, tokens/s, and the share of
the step's self CPU time (torch.profiler, 20 steps) by kind of work: matrix multiplies,
attention (SDPA), the loss's log-softmax, the optimizer, the rest (element-wise work,
autograd). `--ab-loss` also times the task's loss (over scored rows) against cross-entropy
with ignore_index over every row, alternating in one process, and checks that the two
give the same gradient bit for bit. Times depend on the machine and on what else runs:
compare figures only within one output.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from modformer.api import config
from modformer.tasks.base import IGNORE
from modformer.train.trainer import Trainer

KINDS = {"matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
         "attention": ("scaled_dot_product", "flash"), "loss": ("log_softmax", "nll_loss"),
         "optimizer": ("adamw", "optimizer")}
TOKENS = 256 * 10


def every_row(logits: torch.Tensor, batch, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy over every position, unscored ones ignored (the loss before scored rows)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten(), ignore_index=IGNORE,
                           reduction=reduction)


def trainer(variant: str, compiled: bool) -> Trainer:
    cfg = config({"model": {"construction": "reference", "d_model": 64, "n_layers": 2, "n_heads": 4,
                            "variant": variant},
                  "task": {"name": "retrieval", "n_pairs": 4, "test_size": 200, "validation_size": 100},
                  "train": {"steps": 10_000, "batch_size": 256, "warmup_steps": 20, "lr": 3e-3, "threads": 1,
                            "compile": compiled, "progress": False}})
    t = Trainer(cfg, tempfile.mkdtemp() + "/run")
    t._setup()  # everything a run builds, without running it
    t.model.train()
    return t


def seconds_per_step(t: Trainer, first: int, n: int) -> float:
    start = time.perf_counter()
    for step in range(first, first + n):
        t.step(step)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="frozen_qk")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--ab-loss", action="store_true")
    args = parser.parse_args()
    t = trainer(args.variant, args.compile)
    seconds_per_step(t, 0, 30)  # warm-up (and compilation)
    dt = seconds_per_step(t, 30, 60)
    print(f"{args.variant}, compile={args.compile}: {dt * 1e3:.0f} ms/step, {TOKENS / dt:,.0f} tokens/s")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        seconds_per_step(t, 90, 20)
    share, total = dict.fromkeys(KINDS, 0.0), 0.0
    for event in prof.key_averages():
        total += event.self_cpu_time_total
        kind = next((k for k, keys in KINDS.items() if any(x in event.key.lower() for x in keys)), None)
        if kind:
            share[kind] += event.self_cpu_time_total
    for kind, v in share.items():
        print(f"  {kind:10s} {v / total:6.1%}")
    print(f"  {'other':10s} {1 - sum(share.values()) / total:6.1%}")
    if args.ab_loss:
        batch = t.train_batch(0)
        logits = t.model(batch.inputs).detach().requires_grad_()
        grads = [torch.autograd.grad(f(logits, batch), logits)[0] for f in (t.task.loss, every_row)]
        print(f"scored rows against every row: gradients identical: {torch.equal(*grads)}")
        scored, times, step = t.task.loss, {"every row": [], "scored rows": []}, 110
        for _ in range(6):
            for name, f in (("every row", every_row), ("scored rows", scored)):
                t.task.loss = f
                times[name].append(seconds_per_step(t, step, 15))
                step += 15
        med = {k: statistics.median(v) for k, v in times.items()}
        print("  " + ", ".join(f"{k} {v * 1e3:.1f} ms/step" for k, v in med.items())
              + f": {med['every row'] / med['scored rows']:.3f}x")


if __name__ == "__main__":
    main()
