"""Evaluation of a model on a task's fixed held-out set, overall and per slice."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from .config import RunConfig, config_from_dict
from .configtools import apply_override
from .errors import ConfigError, ModformerError
from .precision import autocast
from .registry import TASKS
from .tasks.base import Batch, Task
from .train.checkpoint import list_checkpoints, load_model_state, read_checkpoint
from .variants import build_model


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


def checkpoint_file(path: Path) -> Path:
    """A checkpoint file, or a run directory's latest checkpoint."""
    if path.is_dir() and (path / "checkpoints").is_dir():
        found = list_checkpoints(path / "checkpoints")
        if not found:
            raise ModformerError(f"no checkpoint under {path / 'checkpoints'}")
        return found[-1][1]
    return path


def load_checkpoint_model(path: str | Path, overrides: Sequence[str] = ()) -> tuple[nn.Module, dict[str, Any], int]:
    """(model, run config as plain data, step) of a modformer checkpoint or run directory;
    `overrides` (dotted `key=value`) change the recorded config first, e.g. the test size."""
    path = checkpoint_file(Path(path))
    ckpt = read_checkpoint(path)
    data = ckpt.meta.get("config")
    if not isinstance(data, dict):
        raise ModformerError(f"{path} records no config; it was not written by modformer")
    try:  # the config as recorded, before any override: is it one today's code reads?
        cfg = config_from_dict(data)
    except ConfigError as e:  # an older modformer's checkpoint: say how to bring it up to date
        raise ConfigError(f"{path}: the config it records is not read today ({e}); a run an older modformer wrote "
                          f"is brought up to date by `modformer migrate RUN_DIR`") from None
    if overrides:
        for assignment in overrides:
            apply_override(data, assignment)
        cfg = config_from_dict(data)
    model = build_model(cfg.model, cfg.train.seed)
    load_model_state(model, ckpt.model, path)
    return model, cfg.to_dict(), ckpt.step


def load_run(path: str | Path, overrides: Sequence[str] = ()) -> tuple[nn.Module, RunConfig, Task, int]:
    """A trained model with its config and task, from a checkpoint or run directory: what
    the commands that analyse a trained model start from.

    Args:
        path: a run directory (its latest checkpoint) or a checkpoint file.
        overrides: `key=value` changes of the run's recorded config, applied before anything
            is built (e.g. `task.test_size=10000`).

    Returns:
        `(model, cfg, task, step)`: the model with the checkpoint's weights, the run's config,
            its task (built from `cfg.task`), and the step the checkpoint was saved at.
    """
    model, data, step = load_checkpoint_model(path, overrides)
    cfg = config_from_dict(data)
    return model, cfg, TASKS[cfg.task.name](cfg.task), step


def beside(source: str | Path, name: str) -> Path:
    """Where a command reading SOURCE writes by default: SOURCE/name for a run directory, or
    name next to a checkpoint file."""
    source = Path(source)
    return (source if source.is_dir() else source.parent) / name
