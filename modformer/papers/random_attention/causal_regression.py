"""Causal regression (`causal_regression`): fit a random continuous causal function of a
token sequence, the task behind the paper's Theorem 5.1 check (one layer of attention with
frozen random Q/K plus a trainable MLP approximates any continuous causal function).

The target is a random tanh recurrent network, drawn once from `task.function_seed`, read
over a fixed random encoding of the tokens:

    u_t = phi[x_t]                                  phi: (vocab_size, input_dim), N(0, 1)
    h_t = tanh(W h_{t-1} + U u_t + b),  h_0 = 0     W: N(0, recurrent_gain^2 / hidden), gain 1.5,
                                                    U: N(0, input_gain^2 / input_dim), b: N(0, 0.1^2)
    y_t = C h_t                                     C: N(0, 1 / hidden), (outputs,) per position

then standardised per output (mean and std of 8192 reference sequences drawn from the same
seed), so each output has mean about 0 and variance about 1. y_t depends on x_1..x_t only
(causal), continuously on their encodings, and on their order. Every position is scored.

The model reads token ids and its first `outputs` logits are read as the prediction (the
output head is a linear readout); the loss is the mean squared error. Metrics:
`fit_error` = sum of squared errors / sum of squared deviations from each output's mean,
over every position of the held-out set, so 1.0 is predicting each output's mean and 0 is
an exact fit; `loss` (the MSE per scalar); `accuracy` is not defined for this task. The
test set also reports `current_token_floor`: the fit_error of the best function of the
position and the current token alone, E[y | t, x_t] estimated on the test set itself (a
model that mixes no earlier token cannot do better; an in-sample estimate, so slightly
optimistic).

Worked example, vocab_size 4, seq_len 3, outputs 1 (values illustrative)::

    inputs   2     0     3
    targets  0.41  -1.2  0.77     y_1 = f(x_1), y_2 = f(x_1, x_2), y_3 = f(x_1, x_2, x_3)

No slices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...configtools import option
from ...errors import ConfigError
from ...tasks.base import Batch, Task, TaskConfig

REFERENCE_SEQUENCES = 8192  # the sample the standardisation is measured on


@dataclass
class CausalRegressionConfig(TaskConfig):
    vocab_size: int = option(16, "input tokens 0..vocab_size-1, drawn uniformly and independently")
    seq_len: int = option(8, "sequence length; every position is scored")
    outputs: int = option(4, "target values per position (the model's first `outputs` logits predict them)")
    input_dim: int = option(8, "width of the target's own random token encoding phi")
    hidden: int = option(32, "hidden units of the target's random recurrent network")
    recurrent_gain: float = option(1.5, "std of W times sqrt(hidden): how long the target remembers earlier tokens")
    input_gain: float = option(1.0, "std of U times sqrt(input_dim): how strongly each token drives the network")
    function_seed: int = option(0, "seed of the target function (phi, W, U, b, C); fixed across a sweep's seeds")

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("vocab_size", "seq_len", "outputs", "input_dim", "hidden"):
            if getattr(self, key) < 1:
                raise ConfigError(f"task.{key} must be positive, got {getattr(self, key)}")
        if self.vocab_size < 2:
            raise ConfigError(f"task.vocab_size must be at least 2, got {self.vocab_size}")
        if self.recurrent_gain < 0 or self.input_gain <= 0:
            raise ConfigError(f"task.recurrent_gain must be >= 0 and task.input_gain > 0, got "
                              f"{self.recurrent_gain} and {self.input_gain}")
        self.check_room(min(self.vocab_size ** self.seq_len, 2 ** 62), f"task.vocab_size={self.vocab_size} and "
                                                                        f"task.seq_len={self.seq_len}")


class RandomCausalNetwork:
    """The target function of a `CausalRegressionConfig`: tokens (B, T) -> (B, T, outputs),
    a pure function of the config (its own generator, seeded by `function_seed`)."""

    def __init__(self, cfg: CausalRegressionConfig):
        rng = np.random.default_rng([cfg.function_seed, 0xCA05A1])
        self.phi = rng.standard_normal((cfg.vocab_size, cfg.input_dim))
        self.W = rng.standard_normal((cfg.hidden, cfg.hidden)) * cfg.recurrent_gain / np.sqrt(cfg.hidden)
        self.U = rng.standard_normal((cfg.hidden, cfg.input_dim)) * cfg.input_gain / np.sqrt(cfg.input_dim)
        self.b = rng.standard_normal(cfg.hidden) * 0.1
        self.C = rng.standard_normal((cfg.outputs, cfg.hidden)) / np.sqrt(cfg.hidden)
        reference = rng.integers(0, cfg.vocab_size, size=(REFERENCE_SEQUENCES, cfg.seq_len))
        raw = self.raw(reference).reshape(-1, cfg.outputs)
        self.mean, self.std = raw.mean(0), raw.std(0)

    def raw(self, tokens: np.ndarray) -> np.ndarray:
        """tokens (B, T) int -> unstandardised outputs (B, T, outputs), float64."""
        u = self.phi[tokens]  # (B, T, input_dim)
        h = np.zeros((tokens.shape[0], self.W.shape[0]))
        out = np.empty((*tokens.shape, self.C.shape[0]))
        for t in range(tokens.shape[1]):  # h_t depends on tokens 0..t only: the causality
            h = np.tanh(h @ self.W.T + u[:, t] @ self.U.T + self.b)
            out[:, t] = h @ self.C.T
        return out

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        """tokens (B, T) int -> standardised targets (B, T, outputs), float32."""
        return ((self.raw(tokens) - self.mean) / self.std).astype(np.float32)


class CausalRegression(Task):
    Config = CausalRegressionConfig

    def __init__(self, cfg: CausalRegressionConfig):
        super().__init__(cfg)
        self.vocab_size = cfg.vocab_size
        self.seq_len = cfg.seq_len
        self.function = RandomCausalNetwork(cfg)

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return rng.integers(0, self.cfg.vocab_size, size=(count, self.cfg.seq_len)), {}

    def to_batch(self, seqs: np.ndarray, slices: dict[str, np.ndarray]) -> Batch:
        """Tokens (B, T) -> inputs (B, T) int64 and targets (B, T, outputs) float32."""
        targets = torch.from_numpy(self.function(seqs))
        return Batch.from_numpy(torch.from_numpy(np.ascontiguousarray(seqs, dtype=np.int64)), targets, slices)

    def prediction(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, T, vocab) -> (B, T, outputs): the first `outputs` logits."""
        return logits[..., :self.cfg.outputs].float()

    def loss(self, logits: torch.Tensor, batch: Batch, reduction: str = "mean") -> torch.Tensor:
        """Mean (or summed) squared error over every position and output."""
        return torch.nn.functional.mse_loss(self.prediction(logits), batch.targets.float(), reduction=reduction)

    def score(self, logits: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-example sums: squared error, scalars scored, and each output's sum and sum of
        squares of the target (the variance `summarize` divides by)."""
        y = batch.targets.float()
        stats = {"sq_err": (self.prediction(logits) - y).pow(2).sum((1, 2)),
                 "scalars": torch.full((y.shape[0],), float(y.shape[1] * y.shape[2]))}
        for j in range(y.shape[2]):
            stats[f"y_sum_{j}"] = y[..., j].sum(1)
            stats[f"y_sq_{j}"] = y[..., j].pow(2).sum(1)
        return stats

    def summarize(self, totals: dict[str, float], examples: int) -> dict[str, float]:
        positions = examples * self.cfg.seq_len
        spread = sum(totals[f"y_sq_{j}"] - totals[f"y_sum_{j}"] ** 2 / positions for j in range(self.cfg.outputs))
        return {"fit_error": totals["sq_err"] / spread, "loss": totals["sq_err"] / totals["scalars"]}

    def model_metrics(self, metrics: dict, parameters: dict[str, int]) -> dict[str, float]:
        return {"current_token_floor": current_token_floor(self.test_set())}


def current_token_floor(data: Batch) -> float:
    """The fit_error of E[y | position, current token], estimated on `data` itself."""
    y = data.targets.double()  # (B, T, outputs)
    B, T, k = y.shape
    cell = (torch.arange(T)[None, :] * (int(data.inputs.max()) + 1) + data.inputs).flatten()  # (B*T,)
    flat = y.reshape(B * T, k)
    sums = torch.zeros(int(cell.max()) + 1, k, dtype=torch.float64).index_add_(0, cell, flat)
    counts = torch.bincount(cell, minlength=sums.shape[0]).clamp(min=1).double()[:, None]
    residual = flat - (sums / counts)[cell]
    return float(residual.pow(2).sum() / (flat - flat.mean(0)).pow(2).sum())
