import numpy as np
import pytest
import torch

from modformer.config import config_from_dict
from modformer.errors import ConfigError
from modformer.tasks.base import IGNORE
from modformer.tasks.mqar import MQAR, MQARConfig, distinct, skip_taken
from task_contract import check_stream_is_pure_and_never_emits_held_out


def decode(row, n, V):
    """One full row -> (pairs {key: value}, {key: query position}, filler positions)."""
    half = V // 2
    pairs = {}
    for j in range(n):
        k, v = int(row[2 * j]), int(row[2 * j + 1])
        assert 1 <= k < half and half <= v < V and k not in pairs
        pairs[k] = v
    assert len(set(pairs.values())) == n  # values distinct too
    queries, filler, p = {}, [], 2 * n
    while p < len(row):
        if int(row[p]) in pairs and (p - 2 * n) % 2 == 0:
            k = int(row[p])
            assert k not in queries and row[p + 1] == pairs[k]
            queries[k] = p
            p += 2
        else:
            assert int(row[p]) not in pairs  # filler never looks like a query
            filler.append(p)
            p += 1
    assert set(queries) == set(pairs)  # every key queried exactly once
    return pairs, queries, filler


@pytest.mark.parametrize("V,L,kv,noise", [(8192, 128, (4, 8, 16, 32), True), (16, 16, (1, 2, 4), False),
                                          (64, 33, (8,), True), (8192, 512, (64, 128), True)])
def test_format_by_decoding(V, L, kv, noise):
    task = MQAR(MQARConfig(vocab_size=V, seq_len=L, kv_pairs=kv, noise=noise))
    seqs, slices = task.sample(np.random.default_rng(0), 300)
    assert seqs.shape == (300, L + 1) and seqs.min() >= 0 and seqs.max() < V
    batch = task.to_batch(seqs, slices)
    assert batch.inputs.shape == batch.targets.shape == (300, L)
    for row, n, targets in zip(seqs, slices["n_pairs"], batch.targets.tolist()):
        pairs, queries, filler = decode(row, int(n), V)
        scored = {p: t for p, t in enumerate(targets) if t != IGNORE}
        assert scored == {p: pairs[k] for k, p in queries.items()}
        if not noise:
            assert all(row[p] == 0 for p in filler)
    assert set(slices["n_pairs"]) == set(kv)
    if noise:  # filler covers the vocabulary, keys and values included
        fill = seqs[:, -1]
        assert (fill < V // 2).any() and (fill >= V // 2).any()


def test_worked_example_from_the_docstring():
    task = MQAR(MQARConfig(vocab_size=16, seq_len=16, kv_pairs=(2,), noise=False))
    row = np.array([[3, 9, 5, 12, 5, 12, 3, 9] + [0] * 9])
    batch = task.to_batch(row, {"n_pairs": np.array([2])})
    assert batch.inputs.tolist() == [[3, 9, 5, 12, 5, 12, 3, 9] + [0] * 8]
    assert batch.targets.tolist() == [[IGNORE] * 4 + [12, IGNORE, 9] + [IGNORE] * 9]


def test_query_gaps_follow_the_power_law():
    # n = 1, seq_len 22: one query, gap g in 0..9 with P(g) ~ (g + 1)^(a - 1).
    for a in (0.01, 1.0, 0.5):
        task = MQAR(MQARConfig(vocab_size=64, seq_len=22, kv_pairs=(1,), power_a=a, noise=False))
        seqs, _ = task.sample(np.random.default_rng(5), 20000)
        gaps = (np.argmax(seqs[:, 2:] == seqs[:, :1], axis=1)) // 2
        want = np.arange(1, 11) ** (a - 1.0)
        got = np.bincount(gaps, minlength=10) / len(gaps)
        assert np.abs(got - want / want.sum()).max() < 0.015


def test_gaps_match_sequential_draws_without_replacement():
    # Zoology draws the n gaps one after another without replacement, key j taking draw j;
    # the Gumbel top-k used here must give the same joint law. Compare the mean gap of each
    # key with a plain sequential sampler. n = 4, seq_len 64: 28 slots.
    n, slots, count = 4, 28, 4000
    p = np.arange(1, slots + 1) ** (0.01 - 1.0)
    rng = np.random.default_rng(1)
    reference = np.zeros((count, n))
    for i in range(count):
        w = p.copy()
        for j in range(n):
            reference[i, j] = g = rng.choice(slots, p=w / w.sum())
            w[g] = 0.0
    task = MQAR(MQARConfig(vocab_size=256, seq_len=64, kv_pairs=(n,), noise=False))
    seqs, _ = task.sample(np.random.default_rng(0), count)
    ours = np.stack([np.argmax(seqs[:, 2 * n:] == seqs[:, 2 * j:2 * j + 1], axis=1) // 2 for j in range(n)], 1)
    # Means ~6..8, each with standard error ~0.12; fixed seeds, so this is not flaky.
    assert np.abs(ours.mean(0) - reference.mean(0)).max() < 0.45
    assert abs((ours[:, 0] < ours[:, 3]).mean() - (reference[:, 0] < reference[:, 3]).mean()) < 0.04


def test_distinct_draws_and_skipping():
    out = distinct(np.random.default_rng(0), 2000, 5, 7)
    assert all(len(set(r)) == 5 for r in out.tolist()) and out.min() == 0 and out.max() == 6
    counts = np.bincount(out[:, 4], minlength=7) / 2000  # every column uniform over the pool
    assert np.abs(counts - 1 / 7).max() < 0.04
    taken = np.array([[1, 2, 5, 9], [0, 3, 4, 6]])
    u = np.array([[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]])
    free = [[x for x in range(20) if x not in t][:5] for t in taken.tolist()]
    assert skip_taken(u, taken).tolist() == free


def test_training_stream_is_a_pure_function_and_excludes_the_held_out_sets():
    # 3 keys, 4 values, few gaps: 180 possible rows, so many collisions to reject. With noise
    # off the last full token is filler 0, so inputs identify rows.
    cfg = MQARConfig(vocab_size=8, seq_len=8, kv_pairs=(1, 2), noise=False, test_size=60, validation_size=40)
    check_stream_is_pure_and_never_emits_held_out(lambda: MQAR(cfg), batch_size=128)


def test_test_set_is_fixed_by_its_seed():
    make = lambda **kw: MQAR(MQARConfig(test_size=300, **kw)).test_set()
    a, b, c = make(), make(), make(test_seed=9)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize("overrides,key", [({"kv_pairs": []}, "kv_pairs"), ({"kv_pairs": [0, 4]}, "kv_pairs"),
                                           ({"kv_pairs": [40]}, "seq_len"), ({"vocab_size": 63}, "vocab_size"),
                                           ({"vocab_size": 16, "kv_pairs": [8]}, "vocab_size"),
                                           ({"power_a": 0.0}, "power_a")])
def test_config_errors_name_their_key(overrides, key):
    with pytest.raises(ConfigError, match=f"task.{key}"):
        config_from_dict({"task": {"name": "mqar", **overrides}})


def test_runs_from_a_config():
    cfg = config_from_dict({"task": {"name": "mqar", "kv_pairs": [2, 4], "seq_len": 64, "vocab_size": 256}})
    assert cfg.task.kv_pairs == (2, 4) and cfg.model.vocab_size == 256
