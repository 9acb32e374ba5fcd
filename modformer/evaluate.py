"""Evaluation of a model on a task's fixed held-out set, overall and per slice."""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch
from torch import nn

from .tasks.base import Batch, Task


def autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, *, batch_size: int = 1000, precision: str = "fp32",
             data: Batch | None = None) -> dict:
    """Held-out metrics: the task's `summarize` (by default `accuracy`, every scored token of
    an example right; `token_accuracy`; `loss`, mean cross-entropy per scored token), plus
    `examples` and `slices`: {slice name: {slice value: {"accuracy", "token_accuracy", "examples"}}}."""
    data = task.test_set() if data is None else data
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    totals: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
    # slice name -> slice value -> [examples correct, examples, tokens correct, tokens]
    per_slice: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0, 0.0, 0.0]))
    try:
        for start in range(0, len(data), batch_size):
            batch = data.narrow(start, batch_size).to(device)
            with autocast(device, precision):
                logits = model(batch.inputs)
            stats = {k: v.double().cpu() for k, v in task.score(logits, batch).items()}
            for k, v in stats.items():
                totals[k] += v.sum()
            for name, values in batch.slices.items():
                rows = zip(values.cpu().tolist(), stats["correct"].tolist(), stats["tokens_correct"].tolist(),
                           stats["tokens"].tolist())
                for value, correct, tokens_correct, tokens in rows:
                    acc = per_slice[name][value]
                    acc[0] += correct
                    acc[1] += 1
                    acc[2] += tokens_correct
                    acc[3] += tokens
    finally:
        model.train(was_training)
    n = len(data)
    return {
        **{k: float(v) for k, v in task.summarize({k: float(v) for k, v in totals.items()}, n).items()},
        "examples": n,
        "slices": {
            name: {str(v): {"accuracy": c / n, "token_accuracy": tc / max(t, 1.0), "examples": int(n)}
                   for v, (c, n, tc, t) in sorted(values.items())}
            for name, values in per_slice.items()
        },
    }
