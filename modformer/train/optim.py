"""AdamW over trainable parameters only, and the learning-rate schedule: linear warm-up,
then a cosine or linear decay."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from .config import LoopConfig, TrainConfig


def parameter_groups(model: nn.Module, weight_decay: float,
                     lr_scale: Callable[[str], float] | None = None) -> list[dict]:
    """Decay matrices and embeddings; never norms or biases (1-d). Frozen parameters are left
    out. `lr_scale` (parameter name -> factor, default 1) splits the groups further: a group's
    learning rate is the schedule's times its `lr_scale`."""
    groups: dict[tuple[float, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((1.0 if lr_scale is None else lr_scale(name), p.ndim >= 2), []).append(p)
    scales = dict.fromkeys(scale for scale, _ in groups)
    order = [(scale, decay) for scale in scales for decay in (True, False) if (scale, decay) in groups]
    return [{"params": groups[key], "weight_decay": weight_decay if key[1] else 0.0, "lr_scale": key[0]}
            for key in order]


def build_optimizer(model: nn.Module, cfg: LoopConfig, lr_scale: Callable[[str], float] | None = None, *,
                    peak_lr: float | None = None) -> torch.optim.AdamW:
    groups = parameter_groups(model, cfg.weight_decay, lr_scale)
    if not groups:
        raise ValueError("the model has no trainable parameter")
    device = next(iter(groups[0]["params"])).device
    # The fused kernel is one pass over all parameters; it exists for CPU and CUDA.
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, lr=cfg.lr if peak_lr is None else peak_lr, betas=cfg.betas, fused=fused)


def learning_rate(step: int, cfg: LoopConfig, peak: float | None = None) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, then a cosine or
    (`cfg.schedule: linear`) linear decay from the peak (`peak`, default `cfg.lr`) to
    peak * min_lr_ratio at the last step."""
    peak = cfg.lr if peak is None else peak
    if step < cfg.warmup_steps:
        return peak * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    floor = peak * cfg.min_lr_ratio
    left = 1.0 - progress if cfg.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return floor + (peak - floor) * left


def schedule_description(cfg: TrainConfig) -> dict:
    return {"kind": f"linear warmup + {cfg.schedule}", "peak_lr": cfg.lr, "warmup_steps": cfg.warmup_steps,
            "total_steps": cfg.steps, "min_lr_ratio": cfg.min_lr_ratio}
