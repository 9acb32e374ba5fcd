import numpy as np
import pytest
import torch
import torch.nn.functional as F

from modformer.config import load_config
from modformer.errors import ConfigError
from modformer.tasks.addition import Addition, AdditionConfig
from modformer.tasks.base import IGNORE
from task_contract import check_stream_is_pure_and_never_emits_held_out, check_test_set_is_fixed_by_its_seed

PLUS, EQUALS, PAD, STOP = 10, 11, 12, 30


def config(**kw):
    """Small held-out sets, so that tiny digit counts leave the training stream room."""
    return AdditionConfig(**{"test_size": 10, "validation_size": 10, **kw})


def encode(a, b, n):
    """The reference format, written independently of the task's vectorised layout."""
    row = [int(c) for c in str(a)[::-1]] + [PLUS] + [int(c) for c in str(b)[::-1]] + [EQUALS]
    row += [int(c) + 20 for c in str(a + b)[::-1]] + [STOP]
    return row + [PAD] * (3 * n + 4 - len(row))


def decode(seq):
    """One full sequence -> (a, b, the answer digits as written); checks the separators."""
    seq = [int(x) for x in seq]
    plus, eq, stop = seq.index(PLUS), seq.index(EQUALS), seq.index(STOP)
    a_digits, b_digits, answer = seq[:plus], seq[plus + 1:eq], seq[eq + 1:stop]
    assert all(0 <= d <= 9 for d in a_digits + b_digits) and all(20 <= d <= 29 for d in answer)
    assert a_digits[-1] != 0 and b_digits[-1] != 0  # no leading zeros
    assert all(x == PAD for x in seq[stop + 1:])
    a = int("".join(map(str, a_digits[::-1])))
    b = int("".join(map(str, b_digits[::-1])))
    return a, b, answer


def carries_of(a, b):
    carry, count, run, chain = 0, 0, 0, 0
    while a or b or carry:
        carry = (a % 10 + b % 10 + carry) // 10
        count += carry
        run = run + 1 if carry else 0
        chain = max(chain, run)
        a, b = a // 10, b // 10
    return count, chain


@pytest.mark.parametrize("n,lo", [(1, None), (3, None), (3, 1), (12, 4), (30, None)])
def test_reference_format(n, lo):
    task = Addition(config(n_digits=n, min_digits=lo))
    seqs, slices = task.sample(np.random.default_rng(0), 1500)
    assert seqs.shape == (1500, 3 * n + 4) and task.seq_len == 3 * n + 3
    assert seqs.dtype == np.int64 and seqs.min() >= 0 and seqs.max() < task.vocab_size == 31
    lengths = set()
    for seq, digits, carries, chain in zip(seqs, slices["digits"], slices["carries"], slices["carry_chain"]):
        a, b, answer = decode(seq)
        assert [d - 20 for d in answer] == [int(c) for c in str(a + b)[::-1]]  # the sum, reversed
        assert seq.tolist() == encode(a, b, n)
        lengths |= {len(str(a)), len(str(b))}
        assert digits == max(len(str(a)), len(str(b)))
        assert (carries, chain) == carries_of(a, b)
    assert lengths == set(range(lo or n, n + 1))  # the operand length range, and only it


def test_worked_example_from_the_docstring():
    seq = np.array([[3, 2, 1, 10, 6, 5, 4, 11, 29, 27, 25, 30, 12]])
    assert seq[0].tolist() == encode(123, 456, 3)
    slices = {"digits": np.array([3])}
    batch = Addition(AdditionConfig(n_digits=3)).to_batch(seq, slices)
    assert batch.inputs.tolist() == [seq[0, :-1].tolist()]
    assert batch.targets.tolist() == [[IGNORE] * 7 + [29, 27, 25, 30, 12]]
    reference = Addition(AdditionConfig(n_digits=3, loss_positions="reference")).to_batch(seq, slices)
    assert reference.targets.tolist() == [[IGNORE] * 8 + [27, 25, 30, 12]]


@pytest.mark.parametrize("mode", ["answer", "reference"])
def test_loss_positions(mode):
    task = Addition(config(n_digits=4, min_digits=1, loss_positions=mode))
    seqs, slices = task.sample(np.random.default_rng(1), 500)
    batch = task.to_batch(seqs, slices)
    scored = batch.targets != IGNORE
    for seq, row in zip(seqs, scored):
        eq, stop = list(seq).index(EQUALS), list(seq).index(STOP)
        # Predictions at each answer digit and at stop (if a next token fits), and for
        # `answer` also at '=' (the first answer digit).
        first = eq if mode == "answer" else eq + 1
        expect = set(range(first, min(stop + 1, len(seq) - 1)))
        assert set(torch.nonzero(row).flatten().tolist()) == expect


def test_training_stream_is_a_pure_function_and_excludes_the_test_set():
    # A small example space, so that the stream has many held-out examples to reject.
    check_stream_is_pure_and_never_emits_held_out(lambda: Addition(AdditionConfig(n_digits=2, test_size=2000, validation_size=1000)))


def test_test_set_is_fixed_by_its_seed():
    check_test_set_is_fixed_by_its_seed(lambda seed: Addition(AdditionConfig(n_digits=5, test_size=500, test_seed=seed)))


def metrics(task, logits, batch):
    """What the evaluator does: sum `score` over examples, then `summarize`."""
    totals = {k: float(v.double().sum()) for k, v in task.score(logits, batch).items()}
    return task.summarize(totals, len(batch))


def perfect_logits(seqs, vocab=31):
    """(B, L) full sequences -> (B, L-1, V) logits that predict every next token."""
    return 50 * F.one_hot(torch.from_numpy(seqs[:, 1:]), vocab).float()


@pytest.mark.parametrize("mode", ["answer", "reference"])
def test_reference_metric_on_hand_built_logits(mode):
    task = Addition(config(n_digits=4, min_digits=1, loss_positions=mode))
    seqs, slices = task.sample(np.random.default_rng(2), 400)
    batch = task.to_batch(seqs, slices)
    logits = perfect_logits(seqs)
    assert metrics(task, logits, batch) == pytest.approx(
        {"accuracy": 1.0, "token_accuracy": 1.0, "loss": 0.0, "reference_token_accuracy": 1.0}, abs=1e-3)

    # Wrong only on the first answer digit (predicted at '='): the reference metric never
    # looks there, exact match fails everywhere.
    wrong = logits.clone()
    rows, eq = torch.nonzero(batch.inputs == EQUALS, as_tuple=True)
    wrong[rows, eq] = wrong[rows, eq].roll(1, dims=-1)
    m = metrics(task, wrong, batch)
    assert m["reference_token_accuracy"] == 1.0 and m["accuracy"] == 0.0
    assert (m["token_accuracy"] < 1.0) == (mode == "answer")

    # Wrong only on the pad after stop: the reference metric and both losses count it,
    # exact match does not.
    wrong = logits.clone()
    rows, stop = torch.nonzero(batch.inputs == STOP, as_tuple=True)
    wrong[rows, stop] = wrong[rows, stop].roll(1, dims=-1)
    m = metrics(task, wrong, batch)
    assert m["accuracy"] == 1.0 and m["reference_token_accuracy"] < 1.0 and m["token_accuracy"] < 1.0


@pytest.mark.parametrize("mode", ["answer", "reference"])
def test_reference_metric_matches_the_reference_formula(mode):
    task = Addition(config(n_digits=3, min_digits=1, loss_positions=mode))
    seqs, slices = task.sample(np.random.default_rng(3), 600)
    batch = task.to_batch(seqs, slices)
    # Mostly right, with noise, so both metrics land strictly between 0 and 1.
    gen = torch.Generator().manual_seed(0)
    logits = perfect_logits(seqs) / 25 + torch.randn(len(seqs), seqs.shape[1] - 1, 31, generator=gen)
    predictions = logits.argmax(-1).numpy()
    wanted = seqs[:, :-1] >= 20  # the reference: current token an answer digit or stop
    expect = ((predictions == seqs[:, 1:]) & wanted).sum() / wanted.sum()
    exact = [all(predictions[i, j] == seqs[i, j + 1] for j in range(seqs.shape[1] - 1)
                 if seqs[i, j] == EQUALS or 20 <= seqs[i, j] < STOP) for i in range(len(seqs))]
    m = metrics(task, logits, batch)
    assert 0 < m["reference_token_accuracy"] < 1 and 0 < m["accuracy"] < 1
    assert m["reference_token_accuracy"] == pytest.approx(expect)
    assert m["accuracy"] == pytest.approx(np.mean(exact))


@pytest.mark.parametrize("override,key", [
    ("task.n_digits=0", "task.n_digits"),
    ("task.min_digits=0", "task.min_digits"),
    ("task.min_digits=4", "task.min_digits"),
    ("task.loss_positions=all", "task.loss_positions"),
    ("task.test_size=4000", "task.test_size"),  # over half of the 8100 pairs with n_digits=2
    ("task.validation_size=4000", "task.validation_size"),
    ("task.validation_size=0", "task.validation_size"),
])
def test_config_errors_name_their_key(override, key):
    base = ["task.name=addition", "task.n_digits=2", "task.min_digits=2", "task.test_size=100",
            "task.validation_size=100"]
    load_config(None, base)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [*base, override])


def test_the_run_config_takes_its_sizes_from_the_task():
    cfg = load_config(None, ["task.name=addition", "task.n_digits=3", "task.min_digits=1"])
    assert cfg.model.vocab_size == 31 and cfg.model.max_seq_len == 12 and cfg.task.min_digits == 1
