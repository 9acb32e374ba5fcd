"""What a run checks of its model before it writes anything: the probe of every part
(modformer/model/probe.py) and every analysis the config asks for during training."""

from __future__ import annotations

from typing import Callable

from torch import nn

from ..analysis.induction import check_induction_scores
from ..config import RunConfig
from ..model.aux import check_aux_weights
from ..model.probe import probe_model
from ..registry import VARIANTS


def induction_half_len(max_seq_len: int | None) -> int:
    """The half length of the repeated sequence train.induction_scores scores."""
    return min((max_seq_len or 128) // 2, 64)


def preflight(cfg: RunConfig, model: nn.Module, seq_len: int, vocab_size: int,
              echo: Callable[[str], None] = lambda message: None) -> None:
    """Refuse (one ConfigError) a model whose parts return the wrong thing or leak the future,
    or that an analysis of train.* cannot read; echo the probe's warnings."""
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
