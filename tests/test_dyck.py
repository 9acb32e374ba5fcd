from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from modformer.config import load_config
from modformer.errors import ConfigError
from modformer.tasks.base import IGNORE
from modformer.tasks.dyck import Dyck, DyckConfig
from task_contract import check_stream_is_pure_and_never_emits_held_out, check_test_set_is_fixed_by_its_seed

RANDOM, BALANCED, MUTATED = 0, 1, 2


def config(**kw):
    """Tiny held-out sets, so that tiny N leaves the training stream room."""
    return DyckConfig(**{"test_size": 1, "validation_size": 1, **kw})


def balanced(text):
    """The independent checker: a depth counter over '(' and ')'."""
    depth = 0
    for c in text:
        depth += 1 if c == "(" else -1
        if depth < 0:
            return False
    return depth == 0


def decode(seq):
    """One full sequence -> (the string, the answer token); checks the layout."""
    seq = [int(x) for x in seq]
    q = seq.index(3)
    assert q >= 1 and all(x in (1, 2) for x in seq[:q])
    assert seq[q + 1] in (1, 2) and all(x == 0 for x in seq[q + 2:])
    return "".join("()"[x - 1] for x in seq[:q]), seq[q + 1]


@pytest.mark.parametrize("N", [1, 3, 10, 40])
def test_reference_format(N):
    task = Dyck(config(max_pairs=N))
    seqs, slices = task.sample(np.random.default_rng(0), 3000)
    assert seqs.shape == (3000, 2 * N + 3) and task.seq_len == 2 * N + 2
    assert seqs.dtype == np.int64 and seqs.min() >= 0 and seqs.max() < task.vocab_size == 4
    lengths = Counter()
    for seq, is_bal, kind in zip(seqs, slices["balanced"], slices["kind"]):
        text, answer = decode(seq)
        assert 1 <= len(text) <= 2 * N
        assert answer == (2 if balanced(text) else 1) and is_bal == balanced(text)
        if kind == BALANCED:
            assert balanced(text)
        if kind != RANDOM:  # mutations keep the length of a balanced string
            assert len(text) % 2 == 0
        lengths[kind, len(text)] += 1
    assert {n for k, n in lengths if k == RANDOM} == set(range(1, 2 * N + 1))
    assert {n for k, n in lengths if k == BALANCED} == set(range(2, 2 * N + 1, 2))


def test_proportions_follow_the_reference():
    seqs, slices = Dyck(config(max_pairs=6)).sample(np.random.default_rng(1), 30000)
    kind, bal = slices["kind"], slices["balanced"].astype(bool)
    # 1/3 random; of the 2/3 balanced, 1/2 kept and 1/2 drawing mutation code 0..3 (0: none)
    assert np.bincount(kind, minlength=3) / len(kind) == pytest.approx([1 / 3, 5 / 12, 1 / 4], abs=0.015)
    # Some mutated strings stay balanced: the label comes from the final string.
    assert 0.02 < bal[kind == MUTATED].mean() < 0.5
    assert not bal[kind == RANDOM].all() and bal[kind == RANDOM].any()


def test_balanced_strings_follow_the_reference_recursion():
    # Three pairs: '(' [2] ')' with 1/2, split 1+2 or 2+1 with 1/4 each; [2] is '(())' or
    # '()()' with 1/2 each.
    expect = {"((()))": 1 / 4, "(()())": 1 / 4, "()(())": 1 / 8, "(())()": 1 / 8, "()()()": 1 / 4}
    seqs, slices = Dyck(config(max_pairs=3)).sample(np.random.default_rng(2), 40000)
    texts = [decode(s)[0] for s, k in zip(seqs, slices["kind"]) if k == BALANCED]
    counts = Counter(t for t in texts if len(t) == 6)
    total = sum(counts.values())
    assert set(counts) == set(expect)
    for text, p in expect.items():
        assert counts[text] / total == pytest.approx(p, abs=0.025)


def test_worked_examples_from_the_docstring():
    task = Dyck(config(max_pairs=3))
    seqs = np.array([[1, 1, 2, 2, 3, 2, 0, 0, 0], [1, 2, 2, 1, 3, 1, 0, 0, 0]])
    assert [decode(s) for s in seqs] == [("(())", 2), ("())(", 1)]
    batch = task.to_batch(seqs, {"balanced": np.array([1, 0])})
    assert batch.inputs.tolist() == seqs[:, :-1].tolist()
    assert batch.targets.tolist() == [[IGNORE] * 4 + [2] + [IGNORE] * 3, [IGNORE] * 4 + [1] + [IGNORE] * 3]


def test_only_the_answer_is_scored():
    task = Dyck(config(max_pairs=5))
    seqs, slices = task.sample(np.random.default_rng(3), 500)
    batch = task.to_batch(seqs, slices)
    scored = batch.targets != IGNORE
    assert (scored.sum(1) == 1).all()
    assert (batch.inputs[scored] == 3).all()
    assert batch.targets[scored].tolist() == [2 if b else 1 for b in slices["balanced"]]


def test_training_stream_is_a_pure_function_and_excludes_the_test_set():
    # A small example space, so that the stream has many held-out examples to reject.
    check_stream_is_pure_and_never_emits_held_out(lambda: Dyck(DyckConfig(max_pairs=6, test_size=2000, validation_size=1000)))


def test_test_set_is_fixed_by_its_seed():
    check_test_set_is_fixed_by_its_seed(lambda seed: Dyck(DyckConfig(max_pairs=10, test_size=500, test_seed=seed)))


def test_metrics_on_hand_built_logits():
    task = Dyck(config(max_pairs=5))
    seqs, slices = task.sample(np.random.default_rng(4), 400)
    batch = task.to_batch(seqs, slices)
    logits = 50 * F.one_hot(torch.from_numpy(seqs[:, 1:]), 4).float()
    stats = task.score(logits, batch)
    assert stats["correct"].sum() == 400 and float(stats["loss_sum"].sum()) < 1e-3
    # Always answering "balanced": right exactly on the balanced strings.
    always = torch.zeros_like(logits)
    always[..., 2] = 1.0
    assert stats["correct"].tolist() != task.score(always, batch)["correct"].tolist()
    assert task.score(always, batch)["correct"].tolist() == slices["balanced"].astype(float).tolist()


@pytest.mark.parametrize("override,key", [
    ("task.max_pairs=0", "task.max_pairs"),
    ("task.test_size=4000", "task.test_size"),  # over half of the 8190 strings with max_pairs=6
    ("task.validation_size=4000", "task.validation_size"),
])
def test_config_errors_name_their_key(override, key):
    base = ["task.name=dyck", "task.max_pairs=6", "task.test_size=100", "task.validation_size=100"]
    load_config(None, base)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [*base, override])


def test_the_run_config_takes_its_sizes_from_the_task():
    cfg = load_config(None, ["task.name=dyck", "task.max_pairs=8"])
    assert cfg.model.vocab_size == 4 and cfg.model.max_seq_len == 18
