"""A short repair of a compressed shared-base model: train E only (and, as the second arm, E
plus every layer's maps into and out of it) on text the evaluation never sees, for a fixed
budget, then measure as the ladder does (held-out perplexity, known facts)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...interop.packaged import NAME
from ...configtools import option, to_dict
from ...errors import Interrupted, ModformerError
from ...freeze import matching_parameters
from ...knowledge.fold import fold_model, unfold_model_approximate
from ...train.config import LoopConfig
from ...train.loop import TrainingLoop
from .known import known_fact_list
from .ladder import coefficient_parameters, score
from .loading import fact_requests, load_pretrained, text_blocks
from .records import append_record, done_keys

ARMS = {"entries": ["knowledge.entries"], "entries_and_maps": ["knowledge.entries", "blocks.*.ffn.*"]}


@dataclass
class RepairConfig:
    model: str = option(NAME, "the packaged SmolLM2 name or a local Hugging Face Llama folder")
    point: list[float] = option(default_factory=lambda: [1.0, 0.875], help="(n_E, d_E) as fractions of d_ff")
    arms: list[str] = option(default_factory=lambda: list(ARMS), help=f"of {', '.join(ARMS)}")
    steps: int = option(16, "optimizer steps")
    batch_size: int = option(2, "training blocks per step")
    train_len: int = option(256, "tokens per training block")
    lr: float = option(1e-3, "Adam learning rate of E (its entries are of unit scale)")
    maps_lr: float = option(1e-5, "Adam learning rate of the per-layer maps (their coefficients are about 1e-3; 1e-4 "
                                     "diverged on SmolLM2)")
    corpus: str = option("imdb", "text: evaluation blocks first, training blocks after them")
    eval_blocks: int = option(12, "held-out blocks for perplexity (the ladder's)")
    block_len: int = option(512, "tokens per held-out block")
    threads: int | None = option(None, "CPU threads for torch; null leaves torch's default (a sweep gives each of its "
                                       "workers its share of the cores)")
    seed: int = option(0, "the repair draws nothing at random (its text and its start are fixed); a sweep's seed, "
                          "kept with the config")

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ModformerError(f"threads must be positive or null, got {self.threads}")
        if len(self.point) != 2 or not 0 < self.point[1] <= self.point[0] <= 1:
            raise ModformerError(f"repair point {self.point}: need [n_E, d_E] fractions with 0 < d_E <= n_E <= 1")
        if [a for a in self.arms if a not in ARMS] or not self.arms or self.steps < 1:
            raise ModformerError(f"repair: arms must be among {', '.join(ARMS)} and steps positive")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


class RepairLoop(TrainingLoop):
    """The repair as a run of the one training loop: a constant rate (no warmup, no decay), Adam
    without weight decay, no clipping; E at `lr`, the maps at `maps_lr`."""

    def __init__(self, model: nn.Module, train: torch.Tensor, cfg: RepairConfig, names: list[str]):
        super().__init__()
        self.model = self.step_model = model
        self.train, self.batch_size = train, cfg.batch_size  # train: (steps x batch_size, train_len + 1)
        self.settings = LoopConfig(steps=cfg.steps, batch_size=cfg.batch_size, warmup_steps=0, min_lr_ratio=1.0,
                                   grad_clip=0.0, eval_every=cfg.steps, log_every=1, checkpoint_every=0)
        self.device, self.peak_lr = torch.device("cpu"), 1.0
        params = dict(model.named_parameters())
        entries = [params[n] for n in names if n == "knowledge.entries"]
        maps = [params[n] for n in names if n != "knowledge.entries"]
        self.optimizer = torch.optim.Adam([{"params": entries, "lr": cfg.lr, "lr_scale": cfg.lr},
                                           {"params": maps, "lr": cfg.maps_lr, "lr_scale": cfg.maps_lr}])
        self.trainable = entries + maps
        self.losses: list[float] = []
        self.log = lambda record: self.losses.append(record["loss"])

    def train_batch(self, step: int) -> torch.Tensor:
        return self.train[step * self.batch_size:(step + 1) * self.batch_size]

    def batch_loss(self, batch: torch.Tensor) -> tuple[torch.Tensor, float, int]:
        logits = self.step_model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        return loss, float(loss.detach()), batch[:, :-1].numel()

    def stop(self, done: int) -> None:
        raise Interrupted(f"repair interrupted at step {done}; run the same command again to redo this arm")


def run_repair(cfg: RepairConfig, out: Path) -> Path:
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    records = out / "repair.jsonl"
    done = done_keys(records)
    pre = load_pretrained(cfg.model)
    mc = pre.cfg
    n_entries, d_entry = round(cfg.point[0] * mc.ffn_dim), round(cfg.point[1] * mc.ffn_dim)
    blocks = text_blocks(pre.tokenizer, source=cfg.corpus, n_blocks=cfg.eval_blocks, length=cfg.block_len)
    skip = math.ceil(cfg.eval_blocks * cfg.block_len / cfg.train_len)  # past the evaluation text
    train = text_blocks(pre.tokenizer, source=cfg.corpus, n_blocks=cfg.steps * cfg.batch_size,
                        length=cfg.train_len + 1, skip_blocks=skip)
    facts = fact_requests(pre.tokenizer, known_fact_list(pre, out))
    for arm in cfg.arms:
        key = f"{arm}/{n_entries}/{d_entry}/{cfg.steps}"
        if key in done:
            continue
        t = time.time()
        model, _ = unfold_model_approximate(pre.model, n_entries, d_entry)  # each arm starts afresh
        params = dict(model.named_parameters())
        names = sorted({n for pattern in ARMS[arm] for n in matching_parameters(model, pattern)})
        for n, p in params.items():
            p.requires_grad_(n in names)
        repair = RepairLoop(model, train, cfg, names)
        repair.loop(0, desc=f"repair {key}")
        losses = repair.losses
        model.eval()
        trained = sum(params[n].numel() for n in names)
        rec = append_record(records, key, {
            "arm": arm, "n_entries": n_entries, "d_entry": d_entry, "steps": cfg.steps,
            "tokens_trained": cfg.steps * cfg.batch_size * cfg.train_len, "lr": cfg.lr, "maps_lr": cfg.maps_lr,
            "trained_parameters": trained,
            "parameters": coefficient_parameters(mc.n_layers, mc.d_model, n_entries, d_entry, shared=True),
            "losses": losses, **score(fold_model(model), blocks, facts)}, t)
        print(f"{key}: perplexity {rec['perplexity']:.3f}, facts {rec['facts_answered']}/{rec['facts_total']}, "
              f"{rec['seconds']:.0f} s", flush=True)
    return records
