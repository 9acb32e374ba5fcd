"""The repeated-random-tokens task on which induction heads are measured."""

import numpy as np
import pytest

from modformer.config import config_from_dict
from modformer.errors import ConfigError
from modformer.tasks.base import IGNORE
from modformer.tasks.repeat import Repeat, RepeatConfig
from task_contract import check_stream_is_pure_and_never_emits_held_out, check_test_set_is_fixed_by_its_seed


@pytest.mark.parametrize("min_len,max_len", [(2, 2), (4, 16), (16, 16)])
def test_format_two_copies_of_distinct_tokens_then_padding(min_len, max_len):
    task = Repeat(RepeatConfig(min_len=min_len, max_len=max_len, test_size=50, validation_size=50))
    seqs, slices = task.sample(np.random.default_rng(0), 500)
    assert seqs.shape == (500, 2 * max_len) and task.seq_len == 2 * max_len - 1
    assert set(slices["copy_length"].tolist()) == set(range(min_len, max_len + 1))
    for seq, L in zip(seqs, slices["copy_length"]):
        copy = seq[:L]
        assert (copy >= 1).all() and (copy < 512).all() and len(set(copy.tolist())) == L
        assert (seq[L:2 * L] == copy).all() and (seq[2 * L:] == 0).all()


def test_only_the_predictable_part_of_the_second_copy_is_scored():
    task = Repeat(RepeatConfig(min_len=3, max_len=6, test_size=50, validation_size=50))
    seqs, slices = task.sample(np.random.default_rng(1), 200)
    batch = task.to_batch(seqs, slices)
    for inputs, targets, L in zip(batch.inputs, batch.targets, slices["copy_length"]):
        scored = (targets != IGNORE).nonzero().flatten().tolist()
        assert scored == list(range(L, 2 * L - 1))
        # Each scored target is the token that followed the current one in the first copy.
        for p in scored:
            earlier = inputs[:L].tolist().index(int(inputs[p]))
            assert targets[p] == inputs[earlier + 1]


def test_stream_and_held_out_sets():
    check_stream_is_pure_and_never_emits_held_out(lambda: Repeat(RepeatConfig(test_size=200, validation_size=200)))
    check_test_set_is_fixed_by_its_seed(lambda seed: Repeat(RepeatConfig(test_seed=seed, test_size=50,
                                                                         validation_size=50)))


def test_bad_sizes_are_refused():
    with pytest.raises(ConfigError, match="min_len"):
        config_from_dict({"task": {"name": "repeat", "min_len": 8, "max_len": 4}})
    with pytest.raises(ConfigError, match="vocab_size"):
        config_from_dict({"task": {"name": "repeat", "vocab_size": 8, "max_len": 16}})
