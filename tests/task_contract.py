"""Checks every task generator must pass, shared by the task test files."""

import torch


def check_stream_is_pure_and_never_emits_held_out(make_task, batch_size: int = 256, steps: int = 20):
    """Same (seed, step) -> same batch; another step -> another batch; no training input
    equals a validation or test input. `make_task()` builds a fresh task. The check relies
    on a task's inputs identifying its full sequence (true when the final token is
    padding, or is determined by the inputs)."""
    a, b = make_task(), make_task()
    first, again = a.train_batch(7, 11, batch_size), b.train_batch(7, 11, batch_size)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert all(torch.equal(first.slices[k], again.slices[k]) for k in first.slices)
    assert not torch.equal(first.inputs, a.train_batch(7, 12, batch_size).inputs)
    held_out = {tuple(row) for split in (a.test_set(), a.validation_set()) for row in split.inputs.tolist()}
    assert len(held_out) == len(a.test_set()) + len(a.validation_set())  # distinct, and disjoint
    for step in range(steps):
        batch = a.train_batch(0, step, batch_size)
        assert len(batch) == batch_size
        assert not any(tuple(row) in held_out for row in batch.inputs.tolist())


def check_test_set_is_fixed_by_its_seed(make_task):
    """`make_task(test_seed)` -> a task; the same seed gives the same test set, another another."""
    a, b, c = make_task(1234).test_set(), make_task(1234).test_set(), make_task(9).test_set()
    assert torch.equal(a.inputs, b.inputs) and not torch.equal(a.inputs, c.inputs)
