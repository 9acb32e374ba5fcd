"""Sending a run's records to experiment trackers: `train.log_to: [tensorboard, wandb, mlflow]`.

Each tracker is one small module behind one interface (`Tracker`), fed by the run's metrics
log (modformer/train/records.py): every record appended to metrics.jsonl goes to every
tracker as well, the run's config when it starts, its plots when it ends. metrics.jsonl stays
the record the reports read; the trackers are views of it.

    tensorboard   event files in the run folder (`tensorboard --logdir runs/`)
    wandb         one W&B run per modformer run, grouped by sweep; offline without network
    mlflow        one MLflow run per modformer run, its experiment the sweep; a local store

The packages are optional extras (pip install 'modformer[track]'); a missing one is one clear
error before the run starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError

# name -> (module of its Tracker, the package it needs)
TRACKERS = {
    "tensorboard": ("modformer.train.tracking.tensorboard_log", "tensorboard"),
    "wandb": ("modformer.train.tracking.wandb_log", "wandb"),
    "mlflow": ("modformer.train.tracking.mlflow_log", "mlflow"),
}


@dataclass
class RunInfo:
    """What a tracker knows of the run it follows."""
    run_dir: Path
    name: str  # the run's name in the trackers: its folder as given, e.g. runs/sweeps/ra/runs/standard/default/seed0
    group: str  # W&B group and MLflow experiment: the sweep's folder name, or the run folder's parent's
    config: dict[str, Any]  # the resolved run config, as plain data
    start_step: int  # 0 for a new run; the checkpoint's step for a resumed one
    mlflow_uri: str | None


class Tracker:
    """One tracker's view of one run. `log` receives every record of metrics.jsonl, in order."""

    def __init__(self, info: RunInfo):
        self.info = info

    def log(self, step: int, scalars: dict[str, float]) -> None:
        raise NotImplementedError

    def finish(self, images: list[Path]) -> None:
        raise NotImplementedError


def check_installed(names: list[str]) -> None:
    """One clear error for a tracker whose package is missing (before anything trains)."""
    for name in names:
        package = TRACKERS[name][1]
        if importlib.util.find_spec(package) is None:
            raise ConfigError(f"train.log_to names {name}, but the {package} package is not installed: "
                              f"pip install 'modformer[track]'")


def open_trackers(names: list[str], info: RunInfo) -> list[Tracker]:
    check_installed(names)
    return [importlib.import_module(TRACKERS[name][0]).TRACKER(info) for name in names]


def scalars(record: dict[str, Any]) -> tuple[int, dict[str, float]]:
    """A metrics.jsonl record as (step, {name: number}): numbers nested in dicts and lists are
    named by their path (`validation/slices/n_pairs/2/accuracy`, `induction/scores/0/1` for
    layer 0, head 1), under the record's split (eval records) or kind (the others)."""
    prefix = record.get("split") or record.get("kind", "record")
    out: dict[str, float] = {}

    def walk(value: Any, name: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{name}/{k}")
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{name}/{i}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)

    for key, value in record.items():
        if key not in ("kind", "split", "step"):
            walk(value, f"{prefix}/{key}")
    return int(record.get("step", 0)), out
