"""The optimizer and the learning-rate schedule, property by property: AdamW over exactly the
trainable parameters, weight decay on matrices and embeddings only, groups split by a
per-parameter learning-rate factor in a stable order; a warm-up that reaches the peak at its
last step, then a cosine or linear decay that ends at the floor on the last step."""

import math

import pytest
import torch
from torch import nn

from modformer.errors import ConfigError
from modformer.train.config import TrainConfig
from modformer.train.optim import build_optimizer, learning_rate, parameter_groups, schedule_description


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(4, 3)
        self.proj = nn.Linear(3, 3)
        self.norm = nn.LayerNorm(3)
        self.frozen = nn.Linear(3, 3)
        self.frozen.requires_grad_(False)


def ids(group) -> set[int]:
    return {id(p) for p in group["params"]}


def test_decay_falls_on_matrices_and_embeddings_of_the_trainable_parameters_only():
    net = Net()
    groups = parameter_groups(net, 0.1)
    assert [(g["weight_decay"], g["lr_scale"]) for g in groups] == [(0.1, 1.0), (0.0, 1.0)]
    assert ids(groups[0]) == {id(net.embed.weight), id(net.proj.weight)}
    assert ids(groups[1]) == {id(net.proj.bias), id(net.norm.weight), id(net.norm.bias)}
    assert all(id(p) not in ids(g) for g in groups for p in net.frozen.parameters())


def test_a_learning_rate_factor_splits_the_groups_in_the_order_its_values_first_appear():
    net = Net()
    groups = parameter_groups(net, 0.1, lambda name: 2.0 if name.startswith("proj") else 1.0)
    assert [(g["lr_scale"], g["weight_decay"]) for g in groups] == [(1.0, 0.1), (1.0, 0.0), (2.0, 0.1), (2.0, 0.0)]
    assert ids(groups[2]) == {id(net.proj.weight)} and ids(groups[3]) == {id(net.proj.bias)}
    assert ids(groups[0]) == {id(net.embed.weight)} and ids(groups[1]) == {id(net.norm.weight), id(net.norm.bias)}
    only_vectors = nn.LayerNorm(3)
    assert [g["weight_decay"] for g in parameter_groups(only_vectors, 0.1)] == [0.0]  # no empty decay group


def test_the_optimizer_is_fused_adamw_at_the_configured_or_given_peak():
    cfg = TrainConfig(lr=0.02, betas=(0.8, 0.9), weight_decay=0.05)
    optimizer = build_optimizer(Net(), cfg)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"] is True
    assert optimizer.defaults["lr"] == 0.02 and optimizer.defaults["betas"] == (0.8, 0.9)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]
    assert build_optimizer(Net(), cfg, peak_lr=0.5).defaults["lr"] == 0.5
    scaled = build_optimizer(Net(), cfg, lambda name: 0.5 if name.startswith("embed") else 1.0)
    assert [(g["lr_scale"], g["weight_decay"]) for g in scaled.param_groups] == [(0.5, 0.05), (1.0, 0.05), (1.0, 0.0)]
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="^the model has no trainable parameter$"):
        build_optimizer(frozen, cfg)


def test_warm_up_reaches_the_peak_at_its_last_step_and_cosine_ends_at_the_floor():
    cfg = TrainConfig(lr=1.0, warmup_steps=4, steps=14, min_lr_ratio=0.1)
    rates = [learning_rate(s, cfg) for s in range(14)]
    assert rates[:4] == [0.25, 0.5, 0.75, 1.0]  # step 0 already moves: (s + 1) / warmup
    assert rates[4] == 1.0  # decay starts from the peak
    assert rates[9] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))  # half way: the mean
    assert rates[13] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.9)))
    assert learning_rate(14, cfg) == pytest.approx(0.1) and learning_rate(100, cfg) == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[4:], rates[5:]))  # never rises after the warm-up
    assert learning_rate(0, cfg, peak=2.0) == 0.5  # a given peak replaces the configured one


def test_linear_decay_and_no_warm_up():
    cfg = TrainConfig(lr=1.0, warmup_steps=0, steps=10, min_lr_ratio=0.0, schedule="linear")
    assert [learning_rate(s, cfg) for s in (0, 2, 5, 10)] == pytest.approx([1.0, 0.8, 0.5, 0.0])  # cosine: 0.905 at 2
    short = TrainConfig(lr=1.0, warmup_steps=5, steps=5, min_lr_ratio=0.5)  # all warm-up: no span to decay over
    assert learning_rate(5, short) == 1.0 and learning_rate(6, short) == pytest.approx(0.5)  # no division by 0
    assert schedule_description(cfg) == {"kind": "linear warmup + linear", "peak_lr": 1.0, "warmup_steps": 0,
                                         "total_steps": 10, "min_lr_ratio": 0.0}


# -- the training section's checks, at their boundaries ---------------------------------------

@pytest.mark.parametrize("key", ["steps", "batch_size", "eval_every", "log_every", "eval_batch_size",
                                 "keep_checkpoints"])
def test_counts_that_must_be_positive_take_1_and_refuse_0(key):
    TrainConfig(**{key: 1})
    with pytest.raises(ConfigError, match=rf"^train\.{key} must be positive, got 0$"):
        TrainConfig(**{key: 0})


@pytest.mark.parametrize("key", ["warmup_steps", "checkpoint_every", "weight_decay", "grad_clip"])
def test_amounts_that_may_be_zero_take_0_and_refuse_a_negative(key):
    TrainConfig(**{key: 0})
    with pytest.raises(ConfigError, match=rf"^train\.{key} must not be negative, got -1$"):
        TrainConfig(**{key: -1})


def test_the_other_training_checks_at_their_boundaries():
    for good in ({"min_lr_ratio": 0.0}, {"min_lr_ratio": 1.0}, {"betas": (0.0, 0.999)}, {"device": "cuda:3"},
                 {"device": "auto"}, {"device": "cuda"}, {"threads": 1}, {"threads": None}, {"lr": 1e-9},
                 {"log_to": ["tensorboard", "wandb"]}, {"seed": 0}):
        TrainConfig(**good)
    for bad, message in (({"min_lr_ratio": -0.01}, r"min_lr_ratio must lie in \[0, 1\], got -0\.01"),
                         ({"min_lr_ratio": 1.01}, r"min_lr_ratio must lie in \[0, 1\], got 1\.01"),
                         ({"betas": (0.9, 1.0)}, r"betas must lie in \[0, 1\), got \[0\.9, 1\.0\]"),
                         ({"betas": (-0.1, 0.9)}, r"betas must lie in \[0, 1\)"),
                         ({"device": "gpu"}, r"device must be cpu, cuda, cuda:N or auto, got 'gpu'"),
                         ({"threads": 0}, r"threads must be positive or null, got 0"),
                         ({"lr": 0.0}, r"lr must be positive, got 0\.0"),
                         ({"seed": -1}, r"seed must be a seed >= 0, got -1"),
                         ({"log_to": ["wandb", "wandb"]}, r"log_to must name distinct trackers of .*, got \['wandb', "),
                         ({"log_to": ["neptune"]}, r"log_to must name distinct trackers of tensorboard, wandb, mlflow, "
                                                   r"got \['neptune'\]")):
        with pytest.raises(ConfigError, match=rf"^train\.{message}"):
            TrainConfig(**bad)
