import math

import numpy as np
import pytest
import torch

from modformer.config import config_from_dict
from modformer.errors import ConfigError
from modformer.tasks.base import IGNORE
from modformer.tasks.memorization import Memorization, MemorizationConfig, capacity_bits_per_parameter


def decode(row, n):
    """A full row back into (x1, x2, y)."""
    assert 0 <= row[0] < n and n <= row[1] < 2 * n and 0 <= row[2] < n
    return int(row[0]), int(row[1]) - n, int(row[2])


def test_table_holds_every_fact_once_with_a_fixed_label():
    n = 16
    task = Memorization(MemorizationConfig(n=n))
    assert task.vocab_size == 2 * n and task.seq_len == 2
    test = task.test_set()
    assert len(test) == n * n
    facts = {}
    for (x1, x2tok), target in zip(test.inputs.tolist(), test.targets.tolist()):
        x1, x2, y = decode([x1, x2tok, target[1]], n)
        assert target[0] == IGNORE
        assert (x1, x2) not in facts
        facts[(x1, x2)] = y
    assert len(facts) == n * n
    # The labels are spread over 0..n-1, and sample() draws from the same table.
    assert len(set(facts.values())) == n
    seqs, slices = task.sample(np.random.default_rng(0), 500)
    assert slices == {} and seqs.shape == (500, 3)
    assert all(facts[decode(r, n)[:2]] == decode(r, n)[2] for r in seqs)


def test_label_table_is_fixed_by_its_seed():
    labels = lambda **kw: Memorization(MemorizationConfig(n=8, **kw)).labels
    assert np.array_equal(labels(), labels())
    assert np.array_equal(labels(label_seed=5), labels(label_seed=5, test_seed=99))
    assert np.array_equal(labels(test_seed=5), labels(label_seed=5))  # null falls back to test_seed
    assert not np.array_equal(labels(), labels(label_seed=5))


def test_worked_example_from_the_docstring():
    task = Memorization(MemorizationConfig(n=4))
    batch = task.to_batch(np.array([[2, 7, 1]]), {})
    assert batch.inputs.tolist() == [[2, 7]] and batch.targets.tolist() == [[IGNORE, 1]]
    fact = 2 * 4 + 3
    assert task.rows(np.array([fact])).tolist() == [[2, 7, int(task.labels[fact])]]


@pytest.mark.parametrize("batch_size", [7, 16, 100])
def test_stream_covers_every_fact_once_per_epoch(batch_size):
    n = 8
    task = Memorization(MemorizationConfig(n=n))
    table = {tuple(r) for r in torch.cat([task.test_set().inputs, task.test_set().targets[:, 1:]], 1).tolist()}
    stream = []
    for step in range(3 * n * n // batch_size + 1):
        b = task.train_batch(3, step, batch_size)
        assert len(b) == batch_size and (b.targets[:, 0] == IGNORE).all()
        stream += [(x1, x2, t[1]) for (x1, x2), t in zip(b.inputs.tolist(), b.targets.tolist())]
    assert set(stream) <= table  # the stream emits only true facts
    for epoch in range(3):
        assert sorted(stream[epoch * n * n:(epoch + 1) * n * n]) == sorted(table)
    assert stream[:n * n] != stream[n * n:2 * n * n]  # reshuffled each epoch


def test_stream_is_a_pure_function_of_seed_and_step():
    cfg = MemorizationConfig(n=32)
    a, b = Memorization(cfg), Memorization(cfg)
    for step in (0, 5, 40):  # 40 * 100 > 1024: a later epoch, reached without the earlier ones
        x, y = a.train_batch(1, step, 100), b.train_batch(1, step, 100)
        assert torch.equal(x.inputs, y.inputs) and torch.equal(x.targets, y.targets)
    assert not torch.equal(a.train_batch(1, 0, 100).inputs, a.train_batch(2, 0, 100).inputs)


def test_reference_size_builds():
    task = Memorization(MemorizationConfig())
    test = task.test_set()
    batch = task.train_batch(0, 3000, 256)
    assert len(test) == 512 * 512 and len(batch) == 256


def test_summary_reports_recalled_facts():
    task = Memorization(MemorizationConfig(n=4))
    batch = task.test_set()
    logits = torch.nn.functional.one_hot(batch.targets.clamp(min=0), task.vocab_size).float()
    logits[:5, 1] = logits[:5, 1].roll(1, dims=-1)  # five wrong answers
    totals = {k: float(v.sum()) for k, v in task.score(logits, batch).items()}
    metrics = task.summarize(totals, len(batch))
    assert metrics["recalled"] == 11 and metrics["accuracy"] == 11 / 16


def test_capacity_formula():
    # 1000 facts of a 512-way label (9 bits each) in 3000 parameters: 3 bits per parameter.
    assert capacity_bits_per_parameter(1000, 512, 3000) == pytest.approx(3.0)
    assert capacity_bits_per_parameter(262144, 512, 1) == pytest.approx(262144 * 9)
    assert capacity_bits_per_parameter(10, 3, 5) == pytest.approx(2 * math.log2(3))
    with pytest.raises(ValueError):
        capacity_bits_per_parameter(10, 512, 0)


@pytest.mark.parametrize("value", [1, 0, 4096])
def test_config_errors_name_their_key(value):
    with pytest.raises(ConfigError, match="task.n "):
        config_from_dict({"task": {"name": "memorization", "n": value}})


def test_runs_from_a_config():
    cfg = config_from_dict({"task": {"name": "memorization", "n": 32, "label_seed": 4}})
    assert cfg.model.vocab_size == 64 and cfg.task.label_seed == 4


def test_validation_set_is_a_fixed_sample_of_the_table():
    task = Memorization(MemorizationConfig(n=64, validation_size=300))
    val, test = task.validation_set(), task.test_set()
    rows = lambda b: [tuple(r) + (t[1],) for r, t in zip(b.inputs.tolist(), b.targets.tolist())]
    assert len(val) == 300 and len(set(rows(val))) == 300 and set(rows(val)) <= set(rows(test))
    again = Memorization(MemorizationConfig(n=64, validation_size=300)).validation_set()
    assert torch.equal(val.inputs, again.inputs)
    assert len(Memorization(MemorizationConfig(n=4, validation_size=300)).validation_set()) == 16
    assert not task.is_held_out(task.sample(np.random.default_rng(0), 10)[0]).any()


def test_new_facts_are_set_apart_and_reported_as_a_slice():
    cfg = dict(n=16, new_facts=0.25)
    old, new = Memorization(MemorizationConfig(**cfg, facts="old")), Memorization(MemorizationConfig(**cfg, facts="new"))
    assert new.is_new.sum() == 64 and np.array_equal(old.is_new, new.is_new)  # fixed by the label seed
    fact = lambda rows: set(decode(r, 16)[0] * 16 + decode(r, 16)[1] for r in rows.tolist())  # noqa: E731
    for task, want in ((old, set(np.flatnonzero(~old.is_new))), (new, set(np.flatnonzero(new.is_new)))):
        batch = task.train_batch(seed=0, step=3, batch_size=100)
        seen = fact(np.column_stack([batch.inputs.numpy(), batch.targets[:, 1].numpy()]))
        assert seen <= want
        assert torch.equal(batch.slices["new"], torch.full((100,), int(task is new)))
        validation = task.validation_set()
        assert bool((validation.slices["new"] == int(task is new)).all())
    # One epoch of the new-facts stream shows each new fact exactly once.
    epoch = new.train_batch(seed=1, step=0, batch_size=64)
    assert len(fact(np.column_stack([epoch.inputs.numpy(), epoch.targets[:, 1].numpy()]))) == 64
    test = old.test_set()
    assert len(test) == 256 and int(test.slices["new"].sum()) == 64


@pytest.mark.parametrize("override, key", [({"new_facts": 1.0}, "new_facts"), ({"facts": "some"}, "facts"),
                                           ({"facts": "new"}, "new_facts"),
                                           ({"facts": "old", "new_facts": 0.999}, "new_facts")])
def test_injection_options_are_checked(override, key):
    with pytest.raises(ConfigError, match=f"task.{key}"):
        MemorizationConfig(n=8, **override)
