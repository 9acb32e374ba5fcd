"""Data loading against training, side by side: the tokens per second a task's training
stream delivers (`train_batch`: reading the memory-mapped shards and building the batch)
and the tokens per second one training step of the config's model consumes (forward,
loss, backward, clipping, AdamW), timed in turn in one process (`time_interleaved`).

The loader is fast enough when its rate is well above training's: then the data never
holds a step up, and nothing needs a background worker. The config may be a sweep file
(its `sweep` section is ignored; `--variant` picks the model, standard by default: the
one with the most trainable parameters).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..config import RunConfig, config_from_dict, read_yaml
from ..configtools import apply_override
from ..evaluate import autocast
from ..registry import TASKS
from ..train.optim import build_optimizer
from ..variants import build_model
from .timing import time_interleaved

LOADER_BATCHES = 10  # batches per timed loader call: one batch takes well under a millisecond


@dataclass
class DataRow:
    contender: str
    batch: str  # B x T
    ms_per_batch: float
    tokens_per_s: float


def load_bench_config(path: str | Path, overrides: Sequence[str] = (), variant: str | None = None) -> RunConfig:
    """A run config from a run or sweep file (its base: no profile); `variant` sets model.variant."""
    data = read_yaml(path)
    data.pop("sweep", None)
    data.pop("profiles", None)
    if variant is not None:
        data.setdefault("model", {})["variant"] = variant
    for assignment in overrides:
        apply_override(data, assignment)
    return config_from_dict(data)


def data_throughput(cfg: RunConfig, *, repeats: int = 5) -> list[DataRow]:
    """The loader's and the training step's rows, both on batches of train.batch_size x seq_len."""
    tc = cfg.train
    task = TASKS[cfg.task.name](cfg.task)
    task.test_set()  # prepares the corpus (tokenizer, shards) before any timing
    steps = itertools.count(10_000)  # fresh batches at every call, as in training

    def load() -> None:
        for _ in range(LOADER_BATCHES):
            task.train_batch(tc.seed, next(steps), tc.batch_size)

    model = build_model(cfg.model, tc.seed)
    optimizer = build_optimizer(model, tc)
    trainable = [p for p in model.parameters() if p.requires_grad]
    batch = task.train_batch(tc.seed, 0, tc.batch_size)
    device = torch.device("cpu")

    def train() -> None:
        with autocast(device, tc.precision):
            logits = model(batch.inputs)
        loss = task.loss(logits, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, tc.grad_clip if tc.grad_clip > 0 else math.inf)
        optimizer.step()

    seconds = time_interleaved({"loader": load, "training": train}, repeats=repeats, warmup=2)
    tokens = batch.inputs.numel()
    shape = f"{tc.batch_size}x{task.seq_len}"
    per_batch = {"loader": seconds["loader"] / LOADER_BATCHES, "training": seconds["training"]}
    names = {"loader": f"loader ({cfg.task.name}, {cfg.task.source})",
             "training": f"training ({cfg.model.variant}, d={cfg.model.d_model}, {cfg.model.n_layers} layers, "
                         f"{tc.precision})"}
    return [DataRow(names[k], shape, 1000 * v, tokens / v) for k, v in per_batch.items()]


def markdown(rows: list[DataRow], threads: int) -> str:
    loader, training = rows
    lines = [f"torch {torch.__version__}, {threads} thread(s), CPU; medians of interleaved repeats.", "",
             "| contender | batch | ms per batch | tokens/s |", "|---|---|---:|---:|"]
    lines += [f"| {r.contender} | {r.batch} | {r.ms_per_batch:.2f} | {r.tokens_per_s:,.0f} |" for r in rows]
    lines += ["", f"The loader delivers {loader.tokens_per_s / training.tokens_per_s:,.0f}x the tokens per second "
                  f"that training consumes."]
    return "\n".join(lines) + "\n"
