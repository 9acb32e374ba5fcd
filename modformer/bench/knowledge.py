"""The cost of a knowledge layer against the FFN it folds into.

A knowledge layer computes E W_K, E W_V and b1(E) once per call, then the same two matrix
products per token as an FFN of width n_E. Its extra cost is therefore fixed per call and
its share falls as batch x sequence grows. This benchmark measures, for each shape, a
training step (forward, backward into every parameter, E included) and an inference
forward of (1) the knowledge layer and (2) `fold(layer)`, the ordinary FFN with the same
outputs, interleaved in one process, and reports both and their ratio. The same for whole
models: the knowledge variant against `fold_model` of it (identical logits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..knowledge import fold, fold_model
from ..model.config import ModelConfig
from ..model.knowledge import KnowledgeBase, KnowledgeConfig, KnowledgeFFN
from ..variants import build_model
from .timing import time_interleaved


@dataclass
class CostRow:
    what: str  # "layer" or "N-layer model"
    mode: str  # "train" (forward + backward) or "inference" (forward, no grad)
    shape: str  # batch x seq, d_model, n_E
    knowledge_ms: float
    ffn_ms: float

    @property
    def ratio(self) -> float:
        return self.knowledge_ms / self.ffn_ms


class _LayerWithBase(nn.Module):
    """A knowledge layer that owns its base, so that a training step updates E as well."""

    def __init__(self, layer: KnowledgeFFN, base: KnowledgeBase):
        super().__init__()
        self.layer, self.knowledge = layer, base

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.layer(h)


def _train_step(module: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    params = [p for p in module.parameters() if p.requires_grad]

    def step() -> None:
        for p in params:
            p.grad = None
        out = module(x)
        out.float().square().mean().backward()
    return step


def _inference(module: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def forward() -> None:
        with torch.no_grad():
            module(x)
    return forward


def _compare(what: str, shape: str, knowledge: nn.Module, ffn: nn.Module, x: torch.Tensor,
             repeats: int) -> list[CostRow]:
    rows = []
    for mode, make in (("train", _train_step), ("inference", _inference)):
        t = time_interleaved({"knowledge": make(knowledge, x), "ffn": make(ffn, x)}, repeats=repeats)
        rows.append(CostRow(what, mode, shape, 1e3 * t["knowledge"], 1e3 * t["ffn"]))
    return rows


def _heads(d_model: int) -> int:
    """Heads of width 64 where the width allows, else the fewest heads of width 8 or more."""
    return d_model // 64 if d_model % 64 == 0 else next(h for h in range(1, d_model + 1)
                                                         if d_model % h == 0 and d_model // h <= 64)


def knowledge_cost(*, d_model: int = 256, tokens: list[tuple[int, int]] = ((8, 64), (16, 256)), n_layers: int = 4,
                   repeats: int = 15, seed: int = 0) -> list[CostRow]:
    """Layer and model timings for each (batch, seq) in `tokens`; n_E = d_ff = 4 d_model."""
    g = torch.Generator().manual_seed(seed)
    d_ff = 4 * d_model
    base = KnowledgeBase(d_ff, d_model)
    layer = KnowledgeFFN(base, d_model, activation="relu", threshold="mlp")
    for p in (*layer.parameters(), base.entries):
        with torch.no_grad():
            p.normal_(0.0, 0.02, generator=g)
    layer_with_base = _LayerWithBase(layer, base)
    folded = fold(layer)
    cfg = ModelConfig(vocab_size=512, d_model=d_model, n_layers=n_layers, n_heads=_heads(d_model),
                      max_seq_len=max(t for _, t in tokens), variant="knowledge",
                      knowledge=KnowledgeConfig(activation="relu"))
    model = build_model(cfg, seed)
    standard = fold_model(model)
    rows = []
    for batch, seq in tokens:
        h = torch.randn(batch, seq, d_model, generator=g)
        ids = torch.randint(0, 512, (batch, seq), generator=g)
        shape = f"{batch}x{seq}, d={d_model}, n_E={d_ff}"
        rows += _compare("layer", shape, layer_with_base, folded, h, repeats)
        rows += _compare(f"{n_layers}-layer model", shape, model, standard, ids, repeats)
    return rows


def markdown(rows: list[CostRow], threads: int) -> str:
    lines = [f"torch {torch.__version__}, {threads} thread(s), float32, CPU. Median of interleaved repeats; ratio = "
             "knowledge / FFN.", "",
             "| what | mode | batch x seq, sizes | knowledge ms | FFN ms | ratio |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.what} | {r.mode} | {r.shape} | {r.knowledge_ms:.2f} | {r.ffn_ms:.2f} | {r.ratio:.3f} |"
              for r in rows]
    return "\n".join(lines) + "\n"
