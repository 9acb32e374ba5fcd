"""The one training loop: every training in modformer is a `TrainingLoop`.

The loop owns what every training shares: the learning-rate schedule (warmup + cosine, each
parameter group scaled by its `lr_scale`), one optimizer step (autocast on the run's device,
a loss and a gradient norm that must stay finite, clipping), the cadence of logging,
evaluation and checkpoints, the running mean of the loss between log lines (saved in a
checkpoint, so a resumed run logs what an uninterrupted one does), Ctrl-C and SIGTERM taken
between steps, and the progress bar. What a training reads and scores is its own: a
subclass gives the batches, the loss, the evaluation and where checkpoints go
(`train.trainer.Trainer` for a run of a task, `bridge.arm_run.ArmRun` for an LLM-Modules
arm).
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable

import torch
from torch import nn
from tqdm import tqdm

from ..errors import ConfigError, TrainingDiverged
from ..model.aux import collecting
from ..precision import autocast
from .checkpoint import Checkpoint, load_model_state, load_optimizer_tensors, restore_rng
from .config import LoopConfig
from .optim import learning_rate


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device={name}, but no CUDA device is available (use cpu or auto)")
    return torch.device(name)


class Interrupts:
    """Turns SIGINT/SIGTERM into a flag read between steps, so a checkpoint is never torn.
    A second Ctrl-C raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.requested = False

    @contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handle(signum, frame):
            if self.requested and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.requested = True

        for s in previous:
            signal.signal(s, handle)
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


class TrainingLoop:
    """Subclasses set, before `loop`: `settings` (a `LoopConfig`), `model` (what is saved and
    evaluated), `step_model` (what the training forward goes through: the model itself, or
    wrapped by DDP or torch.compile), `optimizer`, `device`, `peak_lr` (the schedule's peak;
    each group's rate is that schedule times its `lr_scale`) and `log` (receives each record);
    and they define `train_batch`, `batch_loss`, `validate` and `save`."""

    settings: LoopConfig
    model: nn.Module
    step_model: nn.Module
    optimizer: torch.optim.Optimizer
    trainable: list[nn.Parameter]
    device: torch.device
    peak_lr: float
    log: Callable[[dict[str, Any]], None]

    def __init__(self) -> None:
        self.interrupts = Interrupts()
        self.window_loss, self.window_steps = 0.0, 0
        self.window_tokens, self.window_start, self.tokens_per_s = 0, time.perf_counter(), 0.0
        self.last_train_loss = math.nan  # the mean loss of the last logged window
        # Auxiliary losses (modformer/model/aux.py): this step's, by name (collected around `batch_loss`),
        # their sums over the log window, and the last window's means.
        self.step_aux: dict[str, float] = {}
        self.window_aux: dict[str, float] = {}
        self.last_aux: dict[str, float] = {}
        self.last_saved: int | None = None
        self.start = 0

    # -- what a training defines -------------------------------------------------------
    def train_batch(self, step: int) -> Any:
        """Training batch `step` (a function of the run's seed and the step), on the device."""
        raise NotImplementedError

    def reduce_aux(self, values: dict[str, float]) -> dict[str, float]:
        """The step's auxiliary losses as logged (a distributed training averages its ranks')."""
        return values

    def batch_loss(self, batch: Any) -> tuple[torch.Tensor, float, int]:
        """(the task's loss to differentiate, its value as logged, the tokens the step read);
        the model's auxiliary losses (modformer/model/aux.py) are added by `step`; called
        under autocast, the model in training mode."""
        raise NotImplementedError

    def validate(self, done: int) -> None:
        """Evaluate after `done` steps (every settings.eval_every, and at the end)."""

    def save(self, done: int) -> None:
        """Checkpoint after `done` steps (every settings.checkpoint_every, at the end, and when stopped)."""

    def stop(self, done: int) -> None:
        """Ctrl-C or SIGTERM: called after step `done` was saved; raises `Interrupted`."""
        raise NotImplementedError

    def stop_requested(self) -> bool:
        return self.interrupts.requested

    def progress_postfix(self) -> dict[str, str]:
        return {}

    # -- the loop --------------------------------------------------------------------------
    def learning_rate(self, step: int) -> float:
        """The schedule's rate at `step` (a group's rate is this times its lr_scale)."""
        return learning_rate(step, self.settings, self.peak_lr)

    def learning_rates(self, step: int) -> dict[str, float]:
        """The rates a training record shows for `step` (one, `lr`, unless groups are scaled)."""
        return {"lr": self.learning_rate(step)}

    def step(self, step: int) -> tuple[float, float]:
        """One optimizer step on training batch `step`; returns (loss, gradient norm)."""
        s = self.settings
        batch = self.train_batch(step)
        lr = self.learning_rate(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        self.optimizer.zero_grad(set_to_none=True)  # the last step's gradients are not held through the forward
        with autocast(self.device, s.precision), collecting(self.model, getattr(s, "aux_weights", {})) as aux:
            loss, loss_value, tokens = self.batch_loss(batch)  # the parts' own losses collected meanwhile
        self.step_aux = self.reduce_aux(aux.logged())
        if not math.isfinite(loss_value):
            self.diverged("loss", loss_value, step)
        for name, value in self.step_aux.items():
            if not math.isfinite(value):
                self.diverged(f"the auxiliary loss {name}", value, step)
        loss = loss + aux.total()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, s.grad_clip if s.grad_clip > 0 else math.inf)
        if not math.isfinite(grad_norm):  # a finite loss can still have non-finite gradients
            self.diverged("the gradient norm", float(grad_norm), step)
        self.optimizer.step()
        self.window_loss += loss_value
        self.window_steps += 1
        self.window_tokens += tokens
        for name, value in self.step_aux.items():
            self.window_aux[name] = self.window_aux.get(name, 0.0) + value
        return loss_value, float(grad_norm)

    def diverged(self, what: str, value: float, step: int) -> None:
        good = self.last_saved or self.start
        kept = (f"the last good checkpoint (step {good}) is kept" if good else "no checkpoint had been written yet")
        raise TrainingDiverged(f"{what} became {value} at step {step + 1}{self.describe()}; {kept}. "
                               f"Try a lower learning rate or train.grad_clip")

    def describe(self) -> str:
        """Names the training in messages (after the step number)."""
        return ""

    def log_train(self, done: int, grad_norm: float) -> None:
        now = time.perf_counter()
        self.tokens_per_s = self.window_tokens / max(now - self.window_start, 1e-9)
        self.last_train_loss = self.window_loss / self.window_steps
        self.last_aux = {name: total / self.window_steps for name, total in self.window_aux.items()}
        self.log({"kind": "train", "step": done, "loss": self.last_train_loss, **self.learning_rates(done - 1),
                  "grad_norm": grad_norm, "tokens_per_s": self.tokens_per_s,
                  **({"aux": self.last_aux} if self.last_aux else {})})
        self.window_loss, self.window_steps, self.window_aux = 0.0, 0, {}
        self.window_tokens, self.window_start = 0, now

    def loop(self, start: int, *, desc: str, show_progress: bool = True) -> None:
        """Train from step `start` to settings.steps."""
        s = self.settings
        self.start = start
        self.window_tokens, self.window_start = 0, time.perf_counter()
        bar = tqdm(total=s.steps, initial=start, disable=not (s.progress and show_progress), dynamic_ncols=True,
                   desc=desc, file=sys.stderr)
        self.model.train()
        try:
            with self.interrupts.installed():
                for step in range(start, s.steps):
                    loss_value, grad_norm = self.step(step)
                    done = step + 1
                    if done % s.log_every == 0 or done == s.steps:
                        self.log_train(done, grad_norm)
                    if done % s.eval_every == 0 or done == s.steps:
                        self.validate(done)
                    if (s.checkpoint_every and done % s.checkpoint_every == 0) or done == s.steps:
                        self.save(done)
                    bar.update(1)
                    bar.set_postfix({"loss": f"{loss_value:.4f}", "tok/s": f"{self.tokens_per_s:,.0f}",
                                     **self.progress_postfix()}, refresh=False)
                    if self.stop_requested():
                        if self.last_saved != done:
                            self.save(done)
                        self.stop(done)
        finally:
            bar.close()

    # -- checkpoints -----------------------------------------------------------------------
    def loop_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the loop beyond weights, optimizer and generators."""
        return {"loss_window": [self.window_loss, self.window_steps], "last_train_loss": self.last_train_loss,
                "aux_window": self.window_aux, "last_aux": self.last_aux}

    def restore(self, ckpt: Checkpoint, path) -> None:
        """Continue from `ckpt` (read from `path`): weights, optimizer, generators, loss window."""
        load_model_state(self.model, ckpt.model, path)  # copied onto the model's device
        names = {p: n for n, p in self.model.named_parameters() if p.requires_grad}
        load_optimizer_tensors(self.optimizer, names, ckpt.optimizer)
        restore_rng(ckpt.rng)
        self.window_loss, self.window_steps = ckpt.meta.get("loss_window", [0.0, 0])
        self.last_train_loss = ckpt.meta.get("last_train_loss", math.nan)
        self.window_aux = dict(ckpt.meta.get("aux_window", {}))
        self.last_aux = dict(ckpt.meta.get("last_aux", {}))
