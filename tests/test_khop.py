import numpy as np
import pytest
import torch

from modformer.config import config_from_dict
from modformer.errors import ConfigError
from modformer.tasks.base import IGNORE
from modformer.tasks.khop import KHop, KHopConfig
from task_contract import check_stream_is_pure_and_never_emits_held_out


def reference_hop(s, k):
    """hop_k straight from Sanford et al.: move a position k times, each time to just after
    the last earlier occurrence of the letter at the current position; None if there is none."""
    out = []
    for i in range(len(s)):
        p = i
        for _ in range(k):
            earlier = [j for j in range(p) if s[j] == s[p]]
            if not earlier:
                p = None
                break
            p = earlier[-1] + 1
        out.append(None if p is None else s[p])
    return out


def decode(row, task):
    """A full row back into (k, string, answer) with letters as ints and None for null."""
    L = task.length
    k = int(row[0]) - task.hop0
    string = [int(x) for x in row[1:L + 1]]
    answer = [None if x == task.null else int(x) for x in row[L + 1:]]
    return k, string, answer


def test_reference_hop_on_the_docstring_example():
    s = [0, 1, 2, 0, 1, 3, 0, 2]  # a b c a b d a c
    assert reference_hop(s, 0) == s
    assert reference_hop(s, 1) == [None, None, None, 1, 2, None, 1, 0]
    assert reference_hop(s, 2) == [None] * 6 + [2, 1]


@pytest.mark.parametrize("length,letters,max_hops", [(100, 4, 16), (12, 3, 5), (1, 2, 2), (30, 2, 3)])
def test_format_matches_the_slow_reference(length, letters, max_hops):
    task = KHop(KHopConfig(length=length, letters=letters, max_hops=max_hops))
    assert task.vocab_size == letters + 2 + max_hops and task.seq_len == length + 1
    seqs, slices = task.sample(np.random.default_rng(0), 300)
    assert seqs.shape == (300, 2 * length + 1) and seqs.dtype == np.int64
    assert seqs.min() >= 0 and seqs.max() < task.vocab_size
    for row, k in zip(seqs, slices["hops"]):
        got_k, string, answer = decode(row, task)
        assert got_k == k and 0 <= k <= max_hops
        assert all(0 <= x < letters for x in string)
        assert all(a != b for a, b in zip(string, string[1:]))  # no immediate repeats
        assert answer == reference_hop(string, k)
    assert set(slices["hops"]) == set(range(max_hops + 1))


def test_long_hops_reach_letters_and_nulls():
    # With the paper's setting most 16-hop answers are null, but not all: check both occur,
    # so the comparison above is not vacuous.
    task = KHop(KHopConfig(min_hops=16, max_hops=16))
    seqs, slices = task.sample(np.random.default_rng(1), 200)
    answers = seqs[:, task.length + 1:]
    assert (slices["hops"] == 16).all()
    assert (answers == task.null).any() and (answers < task.letters).any()


def test_worked_example_from_the_docstring():
    task = KHop(KHopConfig(length=8))
    row = np.array([[7, 0, 1, 2, 0, 1, 3, 0, 2, 4, 4, 4, 4, 4, 4, 2, 1]])
    batch = task.to_batch(row, {"hops": np.array([2])})
    assert batch.inputs.tolist() == [[7, 0, 1, 2, 0, 1, 3, 0, 2]]
    assert batch.targets.tolist() == [[IGNORE, 4, 4, 4, 4, 4, 4, 2, 1]]
    assert batch.slices["hops"].tolist() == [2]
    # The generator's own rows lay out the same way.
    seqs, slices = task.sample(np.random.default_rng(3), 5)
    b = task.to_batch(seqs, slices)
    assert torch.equal(b.inputs, torch.from_numpy(seqs[:, :9]))
    assert torch.equal(b.targets[:, 1:], torch.from_numpy(seqs[:, 9:]))
    assert (b.targets[:, 0] == IGNORE).all()


def test_fixed_k():
    task = KHop(KHopConfig(length=20, min_hops=3, max_hops=3))
    seqs, slices = task.sample(np.random.default_rng(0), 50)
    assert (slices["hops"] == 3).all() and (seqs[:, 0] == task.hop_token(3)).all()


def test_training_stream_is_a_pure_function_and_excludes_the_held_out_sets():
    # 3 * 2^5 strings x 2 hop counts = 192 rows: many collisions for the stream to reject.
    cfg = KHopConfig(length=6, letters=3, max_hops=1, test_size=60, validation_size=40)
    check_stream_is_pure_and_never_emits_held_out(lambda: KHop(cfg), batch_size=128)


def test_test_set_is_fixed_by_its_seed():
    make = lambda **kw: KHop(KHopConfig(length=20, test_size=200, **kw)).test_set()
    a, b, c = make(), make(), make(test_seed=9)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)


def test_scores_every_string_position():
    task = KHop(KHopConfig(length=10, max_hops=2))
    batch = task.test_set().narrow(0, 8)
    logits = torch.nn.functional.one_hot(batch.targets.clamp(min=0), task.vocab_size).float() * 10
    stats = task.score(logits, batch)
    assert stats["tokens"].tolist() == [10.0] * 8 and stats["correct"].tolist() == [1.0] * 8


@pytest.mark.parametrize("key,value", [("length", 0), ("letters", 1), ("min_hops", -1), ("max_hops", -1)])
def test_config_errors_name_their_key(key, value):
    with pytest.raises(ConfigError, match=f"task.{key}"):
        config_from_dict({"task": {"name": "khop", key: value}})


def test_runs_from_a_config():
    cfg = config_from_dict({"task": {"name": "khop", "max_hops": 4, "length": 16}})
    assert cfg.task.max_hops == 4 and cfg.model.vocab_size == 4 + 2 + 4
