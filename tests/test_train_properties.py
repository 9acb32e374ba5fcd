"""The training package's contracts off a single process's straight path (modformer/train/):
what several processes agree on, and what a run's budget counts. Written for survivors of the
package's mutation sample (results/mutation/train_survivors.txt)."""

from types import SimpleNamespace

import pytest
import torch

from modformer.errors import ConfigError
from modformer.train import distributed
from modformer.train.budget import trained
from modformer.train.distributed import World
from modformer.train.trainer import Trainer


@pytest.fixture
def two_processes(monkeypatch):
    """A world of two processes whose other one holds `other[0]`: all_reduce adds it in."""
    other = [None]

    def all_reduce(value):
        value.add_(other[0].to(value.dtype))

    monkeypatch.setattr(distributed.dist, "all_reduce", all_reduce)
    return other


def test_every_process_stops_where_any_one_would(two_processes):
    world = World(rank=0, size=2)
    two_processes[0] = torch.tensor([1.0])
    assert world.any(False) is True
    two_processes[0] = torch.tensor([0.0])
    assert world.any(False) is False and world.any(True) is True
    assert World().any(True) is True and World().any(False) is False


def test_the_auxiliary_losses_logged_are_the_mean_over_processes_by_name(two_processes):
    two_processes[0] = torch.tensor([1.0, 5.0])  # the other process's a and b, in name order
    trainer = SimpleNamespace(world=World(rank=0, size=2), device=torch.device("cpu"))
    assert Trainer.reduce_aux(trainer, {"b": 3.0, "a": 3.0}) == {"a": 2.0, "b": 4.0}
    assert Trainer.reduce_aux(trainer, {}) == {}
    alone = SimpleNamespace(world=World(), device=torch.device("cpu"))
    assert Trainer.reduce_aux(alone, {"a": 1.5}) == {"a": 1.5}


def test_each_process_takes_its_own_rows_of_a_global_batch():
    assert [World(rank=r, size=4).share(32) for r in range(4)] == [(0, 8), (8, 8), (16, 8), (24, 8)]
    with pytest.raises(ConfigError, match=r"^train\.batch_size=30 does not split over 4 processes$"):
        World(rank=0, size=4).share(30)


@pytest.mark.parametrize("config, budget", [
    ({}, {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
    ({"train": {"steps": 10, "batch_size": 4}, "model": {"d_model": 64}},
     {"sequences": 40, "amount": 40, "unit": "sequences", "width": 64}),
    ({"train": {"steps": 10, "batch_size": 4}, "task": {"name": "lm", "seq_len": 128}},
     {"sequences": 40, "amount": 5120, "unit": "tokens", "width": 0}),
    ({"train": {"batch_size": 4}}, {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
    ({"train": {"steps": 4}}, {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
    ({"train": None, "task": {"name": "retrieval", "seq_len": 128}},
     {"sequences": 0, "amount": 0, "unit": "sequences", "width": 0}),
])
def test_a_budget_counts_sequences_or_a_language_models_tokens(config, budget):
    assert trained(config) == budget
