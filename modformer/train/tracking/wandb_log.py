"""Weights & Biases: one W&B run per modformer run, grouped by sweep, resumed with the run.

Offline (a run folder under the run's own folder, `wandb sync` uploads it later) unless
WANDB_MODE says otherwise or an API key is known and the W&B server answers. The project is
$WANDB_PROJECT, else `modformer`.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import wandb

from . import RunInfo, Tracker


def _mode() -> str:
    """WANDB_MODE where set; else online only with an API key and a server that answers."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if not (os.environ.get("WANDB_API_KEY") or wandb.api.api_key):
        return "offline"
    url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=3).close()
    except OSError:
        return "offline"
    return "online"


class WandbTracker(Tracker):
    def __init__(self, info: RunInfo):
        super().__init__(info)
        # The same W&B run for every start of one run folder: its id is the folder's.
        run_id = hashlib.sha1(str(info.run_dir.resolve()).encode()).hexdigest()[:16]
        self.mode = _mode()
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "modformer"), group=info.group, name=info.name,
                              id=run_id, resume="allow", dir=str(info.run_dir), config=info.config, mode=self.mode,
                              settings=wandb.Settings(silent=True, console="off"))
        # Every chart's x axis is the training step, which a resumed run repeats past its
        # checkpoint: a metric of its own, not W&B's own (strictly increasing) step.
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log({**scalars, "step": step})

    def finish(self, images: list[Path]) -> None:
        if images:
            self.run.log({f"plots/{p.stem}": wandb.Image(str(p)) for p in images})
        self.run.finish()


TRACKER = WandbTracker
