"""The compression ladder: every FFN of a pretrained Llama written over ONE shared knowledge
base E of (n_E, d_E), against each layer over its own base of the same shape, and against
per-layer low-rank FFNs with the shared base's parameter budget (the control: is sharing
across layers better than compressing each layer alone?).

Arms, for a model of L layers, width d, SwiGLU width d_ff:
- `shared`: `unfold_approximate` over all layers (joint factorization, units pruned to n_E
  by importance). Parameters: E (n_E d_E) + per layer the coefficient maps of gate, up and
  down (3 d d_E). (The knowledge layers also hold an identity factor, W_Q = sqrt(d_k) I or
  W_K = I, which the factorization fixes and nothing trains; it is not counted.)
- `own`: the same, one layer at a time (each its own base): L (n_E d_E + 3 d d_E).
- `lowrank`: each of gate, up, down replaced by its truncated SVD of rank r, with r chosen
  so that L 3 r (d + d_ff) is closest to the shared arm's count.
- `original`: the model itself (3 L d d_ff).

Each is measured by folding it back into FFNs (exact up to rounding; `fold`) and scoring
held-out perplexity and the known facts answered (greedy decoding starts with the answer).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...interop.packaged import NAME
from ...configtools import option, to_dict
from ...errors import ModformerError
from ...knowledge.editing import Request, answered, perplexity
from ...knowledge.fold import fold, fold_model, unfold_approximate, unfold_model_approximate
from ...model.transformer import Transformer
from .known import known_fact_list
from .loading import Pretrained, fact_requests, load_pretrained, text_blocks
from .records import append_record, done_keys


ARMS = ("original", "shared", "own", "lowrank")


@dataclass
class LadderConfig:
    model: str = option(NAME, "the packaged SmolLM2 name or a local Hugging Face Llama folder")
    points: list[list[float]] = option(
        default_factory=lambda: [[1, 0.875], [1, 0.75], [1, 0.5], [0.75, 0.75]],
        help="(n_E, d_E) as fractions of d_ff; the full point (1, 1) is the original, measured as such")
    own: bool = option(True, "also the per-layer own-base arm at every point with n_E = d_ff")
    control: bool = option(True, "also the per-layer low-rank arm at every point's budget")
    corpus: str = option("imdb", "held-out text (a data source name or file)")
    eval_blocks: int = option(12, "held-out blocks for perplexity")
    block_len: int = option(512, "tokens per block")
    threads: int | None = option(None, "CPU threads for torch; null leaves torch's default (a sweep gives each of its "
                                       "workers its share of the cores)")
    arms: list[str] = option(default_factory=lambda: list(ARMS),
                             help="the arms measured, of " + ", ".join(ARMS) + " (a ladder sweep's variants)")
    seed: int = option(0, "the ladder draws nothing at random; a sweep's seed, kept with the config")

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ModformerError(f"threads must be positive or null, got {self.threads}")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or not self.arms:
            raise ModformerError(f"ladder arms must be among {', '.join(ARMS)}, got {self.arms}")
        for point in self.points:
            if len(point) != 2 or not 0 < point[1] <= point[0] <= 1:
                raise ModformerError(f"ladder point {point}: need [n_E, d_E] fractions with 0 < d_E <= n_E <= 1")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def coefficient_parameters(n_layers: int, d: int, n_entries: int, d_entry: int, shared: bool) -> int:
    """Parameters of a knowledge form that are not fixed by the factorization (see the module doc)."""
    bases = n_entries * d_entry * (1 if shared else n_layers)
    return bases + n_layers * 3 * d * d_entry


def low_rank(model: Transformer, rank: int) -> Transformer:
    """A copy of `model` with each FFN matrix replaced by its rank-`rank` truncated SVD."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for block in out.blocks:
            for name in ("gate_proj", "up_proj", "down_proj"):
                w = getattr(block.ffn, name).weight
                U, S, Vh = torch.linalg.svd(w.double(), full_matrices=False)
                w.copy_((U[:, :rank] * S[:rank]) @ Vh[:rank])
    return out


def own_bases(model: Transformer, n_entries: int, d_entry: int) -> tuple[Transformer, list[dict[str, float]]]:
    """A copy of `model` whose every FFN went through its own base of (n_E, d_E) and back."""
    out, errors = copy.deepcopy(model), []
    for block in out.blocks:
        _, (layer,), (err,) = unfold_approximate([block.ffn], n_entries, d_entry)
        block.ffn = fold(layer)
        errors.append(err)
    return out, errors


def score(model: nn.Module, blocks: torch.Tensor, facts: list[Request]) -> dict[str, Any]:
    hits = answered(model, facts)
    return {"perplexity": perplexity(model, blocks), "facts_answered": int(hits.sum()), "facts_total": len(facts),
            "facts_missed": [i for i, h in enumerate(hits.tolist()) if not h]}


def run_ladder(cfg: LadderConfig, out: Path) -> Path:
    """Measure every arm at every point; append each to `out/ladder.jsonl` (skipping done ones)."""
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    records = out / "ladder.jsonl"
    done = done_keys(records)
    pre: Pretrained = load_pretrained(cfg.model)
    model, mc = pre.model, pre.cfg
    L, d, d_ff = mc.n_layers, mc.d_model, mc.ffn_dim
    blocks = text_blocks(pre.tokenizer, source=cfg.corpus, n_blocks=cfg.eval_blocks, length=cfg.block_len)
    facts = fact_requests(pre.tokenizer, known_fact_list(pre, out))
    common = {"model": cfg.model, "tokens": int(blocks.numel()), "block_len": cfg.block_len, "corpus": cfg.corpus,
              "n_layers": L, "d_model": d, "d_ff": d_ff}

    def record(key: str, started: float, **fields: Any) -> None:
        rec = append_record(records, key, {**common, **fields}, started)
        print(f"{key}: perplexity {rec['perplexity']:.3f}, facts {rec['facts_answered']}/{rec['facts_total']}, "
              f"{rec['seconds']:.0f} s", flush=True)

    if "original" in cfg.arms and "original" not in done:
        t = time.time()
        record("original", t, arm="original", n_entries=d_ff, d_entry=d_ff, parameters=3 * L * d * d_ff,
               **score(model, blocks, facts))
    for n_frac, d_frac in cfg.points:
        n_entries, d_entry = round(n_frac * d_ff), round(d_frac * d_ff)
        budget = coefficient_parameters(L, d, n_entries, d_entry, shared=True)
        key = f"shared/{n_entries}/{d_entry}"
        if "shared" in cfg.arms and key not in done:
            t = time.time()
            shared, errors = unfold_model_approximate(model, n_entries, d_entry)
            record(key, t, arm="shared", n_entries=n_entries, d_entry=d_entry, parameters=budget,
                   layer_errors=errors, **score(fold_model(shared), blocks, facts))
            del shared
        key = f"own/{n_entries}/{d_entry}"
        if cfg.own and "own" in cfg.arms and n_entries == d_ff and d_entry < d_ff and key not in done:
            t = time.time()
            own, errors = own_bases(model, n_entries, d_entry)
            record(key, t, arm="own", n_entries=n_entries, d_entry=d_entry,
                   parameters=coefficient_parameters(L, d, n_entries, d_entry, shared=False), layer_errors=errors,
                   **score(own, blocks, facts))
            del own
        rank = max(1, round(budget / (3 * L * (d + d_ff))))
        key = f"lowrank/{rank}"
        if cfg.control and "lowrank" in cfg.arms and key not in done:
            t = time.time()
            record(key, t, arm="lowrank", rank=rank, budget_of=f"shared/{n_entries}/{d_entry}",
                   parameters=3 * L * rank * (d + d_ff), **score(low_rank(model, rank), blocks, facts))
    return records

