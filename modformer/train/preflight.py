"""What a run checks of its model before it writes anything: the probe of every part
(modformer/model/probe.py) and every analysis the config asks for during training."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from torch import nn

from ..analysis.induction import check_induction_scores
from ..config import RunConfig
from ..errors import ConfigError
from ..model.aux import check_aux_weights
from ..model.probe import probe_model
from ..registry import VARIANTS


def induction_half_len(max_seq_len: int | None) -> int:
    """The half length of the repeated sequence train.induction_scores scores."""
    return min((max_seq_len or 128) // 2, 64)


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (MemAvailable of /proc/meminfo); None where
    it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def step_memory_floor(cfg: RunConfig, seq_len: int, vocab_size: int) -> int:
    """Bytes one training step or one evaluation batch needs at the least, in float32: a
    step's logits and their gradient and the residual stream each block keeps for backward;
    an evaluation batch's logits. A floor, not an estimate: a batch above it cannot fit; one
    below it may still not."""
    step = cfg.train.batch_size * (2 * vocab_size + cfg.model.d_model * cfg.model.n_layers)
    return 4 * seq_len * max(step, cfg.train.eval_batch_size * vocab_size)


def check_memory(cfg: RunConfig, seq_len: int, vocab_size: int, available: int | None) -> None:
    """Refuse, before anything is allocated, batch sizes whose floor (`step_memory_floor`)
    exceeds the memory left (`available` bytes; None: not checked). Without it a batch of a
    billion sequences takes the whole machine down instead of failing."""
    need = step_memory_floor(cfg, seq_len, vocab_size)
    if available is not None and need > available:
        train = cfg.train.batch_size * (2 * vocab_size + cfg.model.d_model * cfg.model.n_layers)
        which = "batch_size" if train >= cfg.train.eval_batch_size * vocab_size else "eval_batch_size"
        raise ConfigError(f"train.{which}={getattr(cfg.train, which):,}: one batch of sequences of {seq_len} tokens "
                          f"needs at least {need / 2 ** 30:,.1f} GiB, more than the {available / 2 ** 30:,.1f} GiB "
                          f"this machine has free (modformer/train/preflight.py, step_memory_floor)")


def preflight(cfg: RunConfig, model: nn.Module, seq_len: int, vocab_size: int,
              echo: Callable[[str], None] = lambda message: None) -> None:
    """Refuse (one ConfigError) a model whose parts return the wrong thing or leak the future,
    or that an analysis of train.* cannot read; echo the probe's warnings."""
    if cfg.train.device == "cpu":  # a GPU's memory is its own, and checked by torch as it allocates
        check_memory(cfg, seq_len, vocab_size, available_memory())
    m = cfg.model
    names = {"mixer": f"model.mixer={m.mixer}", "ffn": f"model.ffn={m.ffn}"}
    if VARIANTS[m.variant].own_ffn is not None:
        names["ffn"] = f"the feed-forward module of model.variant={m.variant}"
    for warning in probe_model(model, seq_len, names):
        echo(warning)
    check_aux_weights(model, cfg.train.aux_weights)
    if cfg.train.induction_scores:
        check_induction_scores(model, vocab_size=vocab_size, half_len=induction_half_len(m.max_seq_len),
                               key="train.induction_scores")
