"""The training settings: `LoopConfig`, what the one training loop (`train/loop.py`) reads,
and `TrainConfig`, the `train` section of a run config, which adds what a run of a task
needs. The LLM-Modules experiment's `train` section extends `LoopConfig` too
(`papers/llm_modules/config.py`)."""

from __future__ import annotations

from typing import Literal
from dataclasses import dataclass

from ..configtools import check_seeds, option
from ..errors import ConfigError
from ..precision import Precision
from .tracking import TRACKERS

Schedule = Literal["cosine", "linear"]


@dataclass
class LoopConfig:
    steps: int = option(1000, "optimizer steps")
    batch_size: int = option(64, "sequences per step")
    warmup_steps: int = option(100, "linear warmup steps from 0 to the peak")
    schedule: Schedule = option(
        "cosine", "after the warm-up, the decay from the peak to peak * min_lr_ratio at the last step: cosine, or "
                  "linear (the reference's trainer.py and trainer_classifier.py)")
    min_lr_ratio: float = option(0.1, "final learning rate as a fraction of the peak (end of the decay)")
    weight_decay: float = option(0.1, "AdamW decoupled weight decay on matrices (never on norms or biases)")
    betas: tuple[float, float] = option((0.9, 0.95), "AdamW betas")
    grad_clip: float = option(1.0, "clip the global gradient norm to this; 0 disables")
    precision: Precision = option(
        "fp32", "fp32; bf16 (autocast of matmuls; weights stay fp32); or auto: bf16 where the device computes it "
                "natively, else fp32 (modformer/precision.py; summary.json records the choice)")
    device: str = option("cpu", "cpu, cuda, or auto (cuda when available)")
    threads: int | None = option(None, "CPU threads for torch; null leaves torch's default")
    eval_every: int = option(100, "evaluate on the held-out set every this many steps (and at the end)")
    log_every: int = option(10, "append a training record to metrics.jsonl every this many steps")
    checkpoint_every: int = option(200, "save a checkpoint every this many steps (and at the end); 0: only at the end")
    progress: bool = option(True, "show a progress bar")
    aux_weights: dict[str, float] = option(
        default_factory=dict, help="weights of the model's auxiliary losses (modformer/model/aux.py), by glob over "
                                   "their names, e.g. {'blocks.*.ffn.balance': 0.0}; a loss no glob names keeps its "
                                   "part's weight")
    activation_checkpointing: bool = option(
        False, "keep only each block's input for backward and recompute the block's forward there "
               "(torch.utils.checkpoint): one block's activations held at a time instead of every block's, for "
               "about one more forward pass per step; the same gradients")
    compile: bool = option(
        False, "train through torch.compile of the model (the first step compiles: tens of seconds on a CPU); "
               "checkpoints, evaluation and resumption use the plain model and its parameter names")

    def __post_init__(self) -> None:
        for key in ("steps", "batch_size", "eval_every", "log_every"):
            if getattr(self, key) < 1:
                raise ConfigError(f"train.{key} must be positive, got {getattr(self, key)}")
        for key in ("warmup_steps", "checkpoint_every", "weight_decay", "grad_clip"):
            if getattr(self, key) < 0:
                raise ConfigError(f"train.{key} must not be negative, got {getattr(self, key)}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"train.min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")
        if not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"train.betas must lie in [0, 1), got {list(self.betas)}")
        if self.device not in ("cpu", "cuda", "auto") and not self.device.startswith("cuda:"):
            raise ConfigError(f"train.device must be cpu, cuda, cuda:N or auto, got '{self.device}'")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"train.threads must be positive or null, got {self.threads}")


@dataclass
class TrainConfig(LoopConfig):
    seed: int = option(0, "seed of the initial weights and of the training stream")
    lr: float = option(1e-3, "peak learning rate")
    eval_batch_size: int = option(1000, "sequences per evaluation forward pass")
    keep_checkpoints: int = option(2, "how many of the latest checkpoints to keep")
    init_from: str | None = option(
        None, "a checkpoint file or run directory (its latest checkpoint) whose model weights start this run, "
              "frozen ones included (fine-tuning); the optimizer, schedule and step start afresh. In a sweep, "
              "{variant} and {seed} are replaced by the run's own")
    log_to: list[str] = option(
        default_factory=list, help="experiment trackers that also receive every record of metrics.jsonl, the config "
                                   "and the plots: any of tensorboard, wandb, mlflow (pip install 'modformer[track]')")
    log_group: str | None = option(
        None, "the run's group in the trackers (W&B group, MLflow experiment); null: a sweep's folder name for its "
              "runs, else the name of the run folder's parent")
    mlflow_uri: str | None = option(
        None, "MLflow tracking URI; null: $MLFLOW_TRACKING_URI, else a local file store `mlruns` in the current folder")
    induction_scores: bool = option(
        False, "at every validation evaluation, log each head's induction score (random tokens repeated twice) "
               "and plot them in induction.png")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seeds(self, "train", "seed")
        for key in ("eval_batch_size", "keep_checkpoints"):
            if getattr(self, key) < 1:
                raise ConfigError(f"train.{key} must be positive, got {getattr(self, key)}")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be positive, got {self.lr}")
        unknown = [name for name in self.log_to if name not in TRACKERS]
        if unknown or len(set(self.log_to)) != len(self.log_to):
            raise ConfigError(f"train.log_to must name distinct trackers of {', '.join(TRACKERS)}, got {self.log_to}")
