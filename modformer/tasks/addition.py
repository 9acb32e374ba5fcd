"""Decimal addition (`addition_n`): add two numbers written least-significant digit first.

Format (the random-attention paper's reference format, vocabulary 31, length 3n + 4):

- the first operand's digits 0-9, least-significant first; '+' = 10;
- the second operand's digits, least-significant first; '=' = 11;
- the sum's digits, least-significant first, answer digit d written as d + 20;
- the stop token 30, then padding 12 to length 3n + 4.

Operands have no leading zeros (so 0 is never an operand, as in the reference); each
operand's length is drawn uniformly from [min_digits, n] and its value uniformly among
the numbers of that length (the reference always draws exactly n digits: `min_digits`
defaults to that). Worked example, n = 3, 123 + 456 = 579::

    3 2 1 10 6 5 4 11 29 27 25 30 12
    1 2 3 +  4 5 6 =  9  7  5  stop pad

Which positions carry the loss (`loss_positions`):

- `reference`: the reference code's positions, those whose current token is >= 20 (answer
  digits and stop): every answer digit but the first, the stop token, and the pad after
  stop when it fits. It never trains the first answer digit (predicted at '='), so exact
  match is left to chance. In the example, positions 8..11, targets 27 25 30 12.
- `answer` (default): the reference's positions plus '=', so the whole answer is trained
  and so is every position the reference metric scores. In the example, positions 7..11,
  targets 29 27 25 30 12.

Metrics: `accuracy` is exact match of the whole answer (every answer digit and the stop
token), whatever `loss_positions`; `token_accuracy` is per token over the loss positions;
`reference_token_accuracy` is the reference code's metric, per token over positions whose
current token is >= 20 (the paper's numbers). Slices: `digits` (the longer operand's
digit count), `carries` (digit positions that produce a carry) and `carry_chain` (the
longest run of consecutive carries).
"""

from __future__ import annotations

from typing import Literal
from dataclasses import dataclass

import numpy as np
import torch

from ..configtools import option
from ..errors import ConfigError
from ..registry import TASKS
from .base import IGNORE, Batch, Task, TaskConfig

PLUS, EQUALS, PAD, ANSWER, STOP = 10, 11, 12, 20, 30
LossPositions = Literal["answer", "reference"]


@dataclass
class AdditionConfig(TaskConfig):
    name: str = option("addition", "registered task (`modformer list` shows them)")
    n_digits: int = option(10, "n: the most digits of an operand; sequences have 3n + 4 tokens "
                               "(the reference README runs n = 10)")
    min_digits: int | None = option(None, "fewest digits of an operand (each operand's length is uniform in "
                                          "[min_digits, n_digits]); null means n_digits, the reference's fixed length")
    loss_positions: LossPositions = option("answer", "'reference': the reference code's positions (current token >= 20: "
                                           "every answer digit but the first, stop, the pad after stop); "
                                           "'answer': those plus the first answer digit")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_digits < 1:
            raise ConfigError(f"task.n_digits must be positive, got {self.n_digits}")
        if self.min_digits is not None and not 1 <= self.min_digits <= self.n_digits:
            raise ConfigError(f"task.min_digits={self.min_digits} must lie in 1..task.n_digits={self.n_digits}")
        lo = self.min_digits or self.n_digits
        space = (10 ** self.n_digits - 10 ** (lo - 1)) ** 2  # distinct (a, b) pairs
        self.check_room(space, f"task.n_digits={self.n_digits}")


@TASKS.register("addition")
class Addition(Task):
    Config = AdditionConfig
    vocab_size = 31

    def __init__(self, cfg: AdditionConfig):
        super().__init__(cfg)
        self.n = cfg.n_digits
        self.lo = cfg.min_digits or cfg.n_digits
        self.reference_loss = cfg.loss_positions == "reference"
        self.seq_len = 3 * self.n + 3

    def _operands(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Lengths (count,) and digits (count, n), least-significant first, zero above the
        length: uniform over the numbers of each length (leading digit 1-9)."""
        lengths = rng.integers(self.lo, self.n + 1, size=count)
        digits = rng.integers(0, 10, size=(count, self.n))
        digits[np.arange(count), lengths - 1] = rng.integers(1, 10, size=count)
        digits[np.arange(self.n)[None, :] >= lengths[:, None]] = 0
        return lengths, digits

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n = self.n
        la, a = self._operands(rng, count)
        lb, b = self._operands(rng, count)
        # Column-wise addition: sequential in the digit, vectorised over examples.
        total = np.zeros((count, n + 1), dtype=np.int64)
        carry = np.zeros(count, dtype=np.int64)
        carries, run, chain = np.zeros_like(carry), np.zeros_like(carry), np.zeros_like(carry)
        for j in range(n):
            column = a[:, j] + b[:, j] + carry
            total[:, j], carry = column % 10, column // 10
            carries += carry
            run = (run + 1) * carry
            chain = np.maximum(chain, run)
        total[:, n] = carry
        longest = np.maximum(la, lb)
        sum_len = longest + (total[np.arange(count), longest] > 0)  # a carry out of the top digit

        # Lay out each row by position; segment boundaries differ per row.
        pos = np.arange(3 * n + 4)[None, :]
        la_, lb_ = la[:, None], lb[:, None]
        eq = la_ + lb_ + 1
        end = eq + sum_len[:, None]  # position of the last answer digit

        def pick(digits: np.ndarray, index: np.ndarray) -> np.ndarray:
            return np.take_along_axis(digits, np.clip(index, 0, digits.shape[1] - 1), axis=1)

        seqs = np.select(
            [pos < la_, pos == la_, pos < eq, pos == eq, pos <= end, pos == end + 1],
            [pick(a, np.broadcast_to(pos, (count, pos.shape[1]))), PLUS, pick(b, pos - la_ - 1), EQUALS,
             pick(total, pos - eq - 1) + ANSWER, STOP],
            PAD).astype(np.int64)
        return seqs, {"digits": longest, "carries": carries, "carry_chain": chain}

    def target_mask(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """inputs, targets: (B, T). The positions whose prediction is trained and scored."""
        reference = inputs >= ANSWER
        return reference if self.reference_loss else reference | (inputs == EQUALS)

    def score(self, logits: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """logits: (B, T, V). Adds (B,) `reference_tokens_correct` and `reference_tokens`,
        and makes `correct` exact match of the answer whatever the loss positions."""
        stats = super().score(logits, batch)
        inputs, targets = batch.inputs, batch.targets
        # The true next token everywhere: the inputs shifted, plus the last target. Both
        # loss modes score it unless the last input is padding, whose next token is padding.
        last = torch.where(targets[:, -1:] == IGNORE, torch.full_like(targets[:, -1:], PAD), targets[:, -1:])
        hit = logits.argmax(-1) == torch.cat([inputs[:, 1:], last], dim=1)
        stats["correct"] = (hit | ~answer_positions(inputs)).all(dim=1).float()
        reference = inputs >= ANSWER
        stats["reference_tokens_correct"] = (hit & reference).sum(dim=1).float()
        stats["reference_tokens"] = reference.sum(dim=1).float()
        return stats

    def summarize(self, totals: dict[str, float], examples: int) -> dict[str, float]:
        metrics = super().summarize(totals, examples)
        metrics["reference_token_accuracy"] = totals["reference_tokens_correct"] / max(totals["reference_tokens"], 1.0)
        return metrics


def answer_positions(inputs: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T) bool: '=' and every answer digit, whose targets are the answer
    digits and the stop token."""
    return (inputs == EQUALS) | ((inputs >= ANSWER) & (inputs < STOP))
