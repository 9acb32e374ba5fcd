"""TensorBoard: event files in the run folder itself, so that `tensorboard --logdir runs/`
names each run by its path (a sweep's runs under the sweep's folder, grouped)."""

from __future__ import annotations

from pathlib import Path

import yaml
from matplotlib.image import imread
from torch.utils.tensorboard import SummaryWriter

from . import RunInfo, Tracker


class TensorBoardTracker(Tracker):
    def __init__(self, info: RunInfo):
        super().__init__(info)
        # A resumed run redoes the steps after its checkpoint: purge_step tells TensorBoard
        # to drop what the killed process had written for them, as metrics.jsonl drops it.
        self.writer = SummaryWriter(str(info.run_dir), purge_step=info.start_step + 1 if info.start_step else None)
        self.writer.add_text("config", "```\n" + yaml.safe_dump(info.config, sort_keys=False) + "```",
                             global_step=info.start_step)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, global_step=step)

    def finish(self, images: list[Path]) -> None:
        for path in images:  # (H, W, 3 or 4) floats in [0, 1]
            self.writer.add_image(f"plots/{path.stem}", imread(path)[..., :3], dataformats="HWC")
        self.writer.close()


TRACKER = TensorBoardTracker
