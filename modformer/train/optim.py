"""AdamW over trainable parameters only, and the warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import TrainConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices and embeddings; never norms or biases (1-d). Frozen parameters are left out."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    groups = parameter_groups(model, cfg.weight_decay)
    if not groups:
        raise ValueError("the model has no trainable parameter")
    device = next(iter(groups[0]["params"])).device
    # The fused kernel is one pass over all parameters; it exists for CPU and CUDA.
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=fused)


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, then cosine decay
    from `lr` to `lr * min_lr_ratio` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def schedule_description(cfg: TrainConfig) -> dict:
    return {"kind": "linear warmup + cosine", "peak_lr": cfg.lr, "warmup_steps": cfg.warmup_steps,
            "total_steps": cfg.steps, "min_lr_ratio": cfg.min_lr_ratio}
