"""What every task provides: a training stream, a fixed held-out set, and how to score it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..configtools import check_seeds, option
from ..errors import ConfigError

IGNORE = -100  # target value at positions that carry no loss


@dataclass
class TaskConfig:
    name: str = option("retrieval", "registered task (`modformer list` shows them)")
    test_size: int = option(4000, "examples in the fixed held-out test set (scored once, at the end)")
    validation_size: int = option(1000, "examples in the validation set: scored during training and used by "
                                        "sweeps to choose settings; disjoint from the test set")
    test_seed: int = option(1234, "seed of the held-out sets; fixed so every run is scored on the same examples")

    def __post_init__(self) -> None:
        check_seeds(self, "task", *(f.name for f in fields(self) if f.name.endswith("seed")))
        for key in ("test_size", "validation_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"task.{key} must be positive, got {getattr(self, key)}")

    def check_room(self, space: int, knob: str) -> None:
        """Refuse held-out sets that would hold over half of the task's `space` distinct
        examples: the training stream, which rejects them, would have little (or nothing:
        an endless loop) left to draw. `knob` names the setting that enlarges the space."""
        if space <= 2 * (self.test_size + self.validation_size):
            raise ConfigError(f"task.test_size={self.test_size} plus task.validation_size={self.validation_size} "
                              f"would hold over half of the {space} distinct examples with {knob}; "
                              f"lower them or enlarge the task")


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, T) int64 token ids
    targets: torch.Tensor  # (B, T) int64 next-token targets, IGNORE where not scored
    slices: dict[str, torch.Tensor]  # slice name -> (B,) int64 slice value of each example

    def __len__(self) -> int:
        return self.inputs.shape[0]

    @classmethod
    def from_numpy(cls, inputs: np.ndarray | torch.Tensor, targets: np.ndarray | torch.Tensor,
                   slices: dict[str, np.ndarray]) -> "Batch":
        as_tensor = lambda a: a if isinstance(a, torch.Tensor) else torch.from_numpy(  # noqa: E731
            np.ascontiguousarray(a, dtype=np.int64))
        return cls(as_tensor(inputs).contiguous(), as_tensor(targets).contiguous(),
                   {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in slices.items()})

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(self.inputs.to(device), self.targets.to(device),
                     {k: v.to(device) for k, v in self.slices.items()})

    def narrow(self, start: int, length: int) -> "Batch":
        return Batch(self.inputs[start:start + length], self.targets[start:start + length],
                     {k: v[start:start + length] for k, v in self.slices.items()})


class Task:
    """Base class. A subclass sets `Config`, `vocab_size` and `seq_len`, and implements
    `sample(rng, count)`; it gets a validation set and a test set, disjoint and fixed by
    `test_seed`, and a training stream that is a pure function of (config, seed, step) and
    never emits a held-out example."""

    Config: type[TaskConfig] = TaskConfig
    vocab_size: int
    seq_len: int  # length of `inputs`
    # What a run's budget counts (steps x batch sequences, or those times seq_len in tokens
    # for a task whose examples are windows of one stream, as language modelling's are).
    budget_unit: str = "sequences"

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        self._held_out: dict[str, Batch] | None = None
        self._held_out_keys: set[bytes] = set()

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Draw `count` full rows, (count, width) as `to_batch` reads them (by default
        width = seq_len + 1: inputs plus the final next-token target), and their slice values."""
        raise NotImplementedError

    def to_batch(self, seqs: np.ndarray, slices: dict[str, np.ndarray]) -> Batch:
        """Full sequences -> inputs and next-token targets. The default scores every
        position after the first; tasks with a single answer override `target_mask`."""
        seqs_t = torch.from_numpy(np.ascontiguousarray(seqs, dtype=np.int64))
        inputs, targets = seqs_t[:, :-1], seqs_t[:, 1:].clone()
        targets[~self.target_mask(inputs, targets)] = IGNORE
        return Batch.from_numpy(inputs, targets, slices)

    def target_mask(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(targets, dtype=torch.bool)

    def _draw_held_out(self) -> dict[str, Batch]:
        if self._held_out is None:
            sets = {}
            for split, size, stream in (("test", self.cfg.test_size, 0x7E57),
                                        ("validation", self.cfg.validation_size, 0x7A11)):
                seqs, slices = self.sample(np.random.default_rng([self.cfg.test_seed, stream]), size)
                _, first = np.unique(seqs, axis=0, return_index=True)
                keep = [i for i in np.sort(first) if seqs[i].tobytes() not in self._held_out_keys]
                self._held_out_keys.update(seqs[i].tobytes() for i in keep)
                sets[split] = self.to_batch(seqs[keep], {k: v[keep] for k, v in slices.items()})
            self._held_out = sets
        return self._held_out

    def test_set(self) -> Batch:
        """The fixed held-out test set, drawn from `test_seed` (duplicates removed)."""
        return self._draw_held_out()["test"]

    def validation_set(self) -> Batch:
        """The fixed validation set: drawn like the test set, with none of its examples."""
        return self._draw_held_out()["validation"]

    def is_held_out(self, seqs: np.ndarray) -> np.ndarray:
        """(count,) bool: which full sequences belong to the validation or test set."""
        self._draw_held_out()
        return np.array([row.tobytes() in self._held_out_keys for row in seqs], dtype=bool)

    def train_batch(self, seed: int, step: int, batch_size: int) -> Batch:
        """Training batch `step` of the stream seeded by `seed`: depends on nothing else,
        so a resumed run sees exactly the batches an uninterrupted one would."""
        rng = np.random.default_rng([seed, step])
        rows: list[np.ndarray] = []
        slice_rows: dict[str, list[np.ndarray]] = {}
        have, rounds = 0, 0
        while have < batch_size:
            rounds += 1
            if rounds > 1000:  # the held-out sets hold (nearly) every possible example
                raise ConfigError("the validation and test sets leave almost no example to train on; lower "
                                  "task.test_size and task.validation_size or enlarge the task")
            seqs, slices = self.sample(rng, batch_size - have)
            fresh = ~self.is_held_out(seqs)
            rows.append(seqs[fresh])
            for k, v in slices.items():
                slice_rows.setdefault(k, []).append(v[fresh])
            have += int(fresh.sum())
        return self.to_batch(np.concatenate(rows), {k: np.concatenate(v) for k, v in slice_rows.items()})

    def save(self, run_dir: Path) -> None:
        """Write what a run directory needs besides its config to be used later (a text
        task's tokenizer); nothing for generated tasks."""

    def model_metrics(self, metrics: dict, parameters: dict[str, int]) -> dict[str, float]:
        """Metrics that need the model's size as well as its held-out metrics (such as
        memorization capacity in bits per parameter); added to the run's summary."""
        return {}

    def loss(self, logits: torch.Tensor, batch: Batch, reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy over scored positions, their mean (or "sum"). logits: (B, T, V).

        Only the scored rows are normalised: retrieval scores one position in ten, and the
        log-softmax of the other nine was a tenth of a training step at width 64. The
        gradient is bit for bit that of `ignore_index` over every row; the loss's value can
        differ in its last bit (another order of summation)."""
        logits, targets = logits.flatten(0, 1), batch.targets.flatten()
        scored = targets != IGNORE
        if not bool(scored.all()):
            logits, targets = logits[scored], targets[scored]
        return F.cross_entropy(logits.float(), targets, reduction=reduction)

    def score(self, logits: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-example statistics, summed over a dataset by the evaluator.

        Returns (B,) tensors: `correct` (every scored position right), `tokens_correct`,
        `tokens` (scored positions) and `loss_sum` (summed cross-entropy)."""
        scored = batch.targets != IGNORE
        hit = (logits.argmax(-1) == batch.targets) & scored
        ce = F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten(), ignore_index=IGNORE,
                             reduction="none").view_as(batch.targets)
        return {
            "correct": (hit.sum(1) == scored.sum(1)).float(),
            "tokens_correct": hit.sum(1).float(),
            "tokens": scored.sum(1).float(),
            "loss_sum": ce.sum(1),
        }

    def summarize(self, totals: dict[str, float], examples: int) -> dict[str, float]:
        """Dataset metrics from the sums of `score`'s statistics. A task that adds statistics
        to `score` adds their metrics here."""
        return {
            "accuracy": totals["correct"] / examples,
            "token_accuracy": totals["tokens_correct"] / max(totals["tokens"], 1.0),
            "loss": totals["loss_sum"] / max(totals["tokens"], 1.0),
        }
