import numpy as np
import pytest
import torch

from modformer.tasks.base import IGNORE
from modformer.tasks.retrieval import Retrieval, RetrievalConfig
from task_contract import check_test_set_is_fixed_by_its_seed


def decode(seq, N, half=256):
    """Read one full reference-format sequence back into (pairs, query key, answer)."""
    pairs, i = {}, 0
    while i < 2 * N and half <= seq[i] < half + N:
        pairs[int(seq[i]) - half] = int(seq[i + 1])
        i += 2
    query = int(seq[i]) - N - half
    return pairs, query, int(seq[i + 1]), i


@pytest.mark.parametrize("N", [1, 3, 8, 30])
def test_reference_format(N):
    task = Retrieval(RetrievalConfig(n_pairs=N, test_size=50, validation_size=50))
    seqs, slices = task.sample(np.random.default_rng(0), 2000)
    assert seqs.shape == (2000, 2 * N + 3) and seqs.min() >= 0 and seqs.max() < 512
    for seq, n in zip(seqs, slices["n_pairs"]):
        pairs, query, answer, qpos = decode(seq, N)
        assert len(pairs) == n == qpos // 2 and 1 <= n <= N
        assert all(1 <= v <= 255 for v in pairs.values())
        assert query in pairs and answer == pairs[query]
        assert (seq[qpos + 2:] == 0).all()
    assert set(slices["n_pairs"]) == set(range(1, N + 1))


def test_worked_example_from_the_docstring():
    task = Retrieval(RetrievalConfig(n_pairs=3))
    seq = np.array([[258, 17, 256, 200, 259, 200, 0, 0, 0]])
    batch = task.to_batch(seq, {"n_pairs": np.array([2])})
    assert batch.inputs.tolist() == [[258, 17, 256, 200, 259, 200, 0, 0]]
    assert batch.targets.tolist() == [[IGNORE] * 4 + [200] + [IGNORE] * 3]


def test_training_stream_is_a_pure_function_and_excludes_the_test_set():
    cfg = RetrievalConfig(n_pairs=2, test_size=3000)  # a small space: many collisions to reject
    a, b = Retrieval(cfg), Retrieval(cfg)
    first, again = a.train_batch(7, 11, 256), b.train_batch(7, 11, 256)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert not torch.equal(first.inputs, a.train_batch(7, 12, 256).inputs)
    test = a.test_set()
    held_out = {(*row, 0) for row in test.inputs.tolist()}  # full sequences end in padding
    assert len(held_out) == len(test)  # no duplicates in the test set
    for step in range(30):
        batch = a.train_batch(0, step, 256)
        assert len(batch) == 256
        for row in batch.inputs.tolist():
            # The full sequence is the inputs plus the final token, which is always padding.
            assert (*row, 0) not in held_out

def test_test_set_is_fixed_by_its_seed():
    check_test_set_is_fixed_by_its_seed(lambda seed: Retrieval(RetrievalConfig(n_pairs=8, test_size=500, test_seed=seed)))


def test_validation_and_test_sets_are_disjoint_and_never_trained_on():
    task = Retrieval(RetrievalConfig(n_pairs=2, test_size=1500, validation_size=1500))
    test = {tuple(r) for r in task.test_set().inputs.tolist()}
    validation = {tuple(r) for r in task.validation_set().inputs.tolist()}
    assert validation and test and not (validation & test)
    for step in range(20):
        for row in task.train_batch(3, step, 256).inputs.tolist():
            assert tuple(row) not in test and tuple(row) not in validation


def test_exhausted_example_space_is_a_clear_error():
    from modformer.errors import ConfigError
    from modformer.tasks.base import Task

    with pytest.raises(ConfigError, match="task.test_size"):  # only 255 examples exist
        RetrievalConfig(n_pairs=1, test_size=2000, validation_size=1000)

    class OneExample(Task):  # a task whose every example is held out: the stream's backstop
        vocab_size, seq_len = 4, 3

        def sample(self, rng, count):
            return np.ones((count, 4), dtype=np.int64), {}

    with pytest.raises(ConfigError, match="task.test_size"):
        OneExample(RetrievalConfig(test_size=1, validation_size=1)).train_batch(0, 0, 8)
