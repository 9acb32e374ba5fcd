"""Property-based tests (hypothesis) of the parsers a user's input and a failing disk reach:
config overrides, grid point names, record files with torn, damaged and repeated lines
anywhere, task generators, and the quote grammar. Each draws many inputs and checks a
property every one must keep: a clear `ConfigError`/`ModformerError` or the right value,
never another exception, never a record lost."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modformer.config import load_config
from modformer.errors import ModformerError
from modformer.files import durable_append
from modformer.sweep.spec import point_names
from modformer.train.records import read_records
from modformer.version import RECORDS_FORMAT

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 80, 2 ** 80), st.floats(allow_nan=True),
                    st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3), max_leaves=6)
KEYS = st.sampled_from(["train.lr", "train.steps", "train.seed", "train.schedule", "train.betas", "model.d_model",
                        "model.n_heads", "model.layers", "model.freeze", "task.n_pairs", "task.test_seed",
                        "model.mixer_options", "train.aux_weights", "model.init_std", "train.grad_clip"])


EDGES = st.sampled_from([float("nan"), float("inf"), float("-inf"), -1, -0.5, 0, 2 ** 63, 2 ** 70, "", [], {}, None,
                         [float("nan"), 1.0], "3e-3"])


@settings(max_examples=150, deadline=None)
@given(key=KEYS, value=st.one_of(EDGES, VALUES))
def test_an_override_gives_its_value_or_one_clear_error(key, value):
    """Whatever value a dotted key is given on the command line, the config either holds it
    (as the field's type reads it) or is refused with a ModformerError, never another
    exception (a NaN, a 2^80, a list where a number goes, a mapping where a list goes)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    try:
        cfg = load_config(None, ["model.d_model=16", "model.n_heads=2", "task.n_pairs=2", f"{key}={text}"])
    except ModformerError:
        return
    section, field = key.split(".", 1)
    got = getattr(getattr(cfg, section), field)
    assert got is not None or value is None or field in ("layers", "mixer_options")
    for number in (got if isinstance(got, (list, tuple)) else [got]):  # what reaches torch is a sane number
        if isinstance(number, float):
            assert math.isfinite(number), (key, got)
        if isinstance(number, int) and not isinstance(number, bool):
            assert abs(number) < 2 ** 63, (key, got)
    if field.endswith("seed"):
        assert got >= 0, (key, got)


GRID_VALUES = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=300),
                        st.lists(st.text(max_size=8), max_size=3),
                        st.dictionaries(st.integers(-4, 4), st.one_of(st.text(max_size=8), st.lists(st.integers())),
                                        max_size=3))


@FAST
@given(values=st.lists(GRID_VALUES, min_size=1, max_size=8, unique_by=lambda v: json.dumps(v, default=repr)))
def test_grid_points_get_distinct_safe_folder_names(values):
    names = point_names([(("task.path", v),) for v in values])
    assert len(set(names)) == len(names)
    assert all(0 < len(n.encode()) <= 255 and "/" not in n and n not in (".", "..") for n in names)


RECORDS = st.lists(st.dictionaries(st.sampled_from(["step", "loss", "kind", "split"]),
                                   st.one_of(st.integers(0, 10 ** 6), st.floats(allow_nan=False, allow_infinity=False),
                                             st.text(max_size=6)), min_size=1), max_size=12)
DAMAGE = st.one_of(st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b),
                   st.just(b'{"torn": '), st.just(b"\x00" * 16), st.just(b"[1, 2]"), st.just(b"null"))


@FAST
@given(records=RECORDS, damage=st.lists(st.tuples(st.integers(0, 12), DAMAGE), max_size=5), data=st.data())
def test_records_survive_damaged_lines_anywhere_and_an_append_after_them(tmp_path_factory, records, damage, data):
    """Whole lines are read back in order, repeated ones included, whatever damaged lines
    (binary, zero-filled, torn, JSON that is no record) sit between them; a record appended
    after a torn last line is read back too."""
    path = tmp_path_factory.mktemp("records") / "metrics.jsonl"
    lines = [json.dumps(r).encode() for r in records]
    repeated = data.draw(st.lists(st.sampled_from(range(len(lines))), max_size=3)) if lines else []
    lines += [lines[i] for i in repeated]
    expected = [json.loads(line) for line in lines]
    for at, bad in sorted(damage, reverse=True):
        lines.insert(min(at, len(lines)), bad)
    torn_end = data.draw(st.booleans())
    path.write_bytes(b"\n".join(lines) + (b'\n{"cut": ' if torn_end else b"\n"))
    durable_append(path, json.dumps({"appended": 1}) + "\n")
    assert list(read_records(path)) == [*expected, {"appended": 1}]


@FAST
@given(n_pairs=st.integers(1, 6), seed=st.integers(0, 2 ** 32), step=st.integers(0, 10 ** 6))
def test_retrieval_batches_score_one_stored_answer_and_are_pure(n_pairs, seed, step):
    from modformer.registry import TASKS
    from modformer.tasks.base import IGNORE

    cls = TASKS["retrieval"]
    task = cls(cls.Config(n_pairs=n_pairs, test_size=20, validation_size=10))
    batch = task.train_batch(seed, step, 16)
    again = cls(cls.Config(n_pairs=n_pairs, test_size=20, validation_size=10)).train_batch(seed, step, 16)
    assert batch.inputs.equal(again.inputs) and batch.targets.equal(again.targets)
    scored = batch.targets != IGNORE
    assert scored.sum(1).eq(1).all()  # one answer per sequence
    answers = batch.targets[scored]
    for row, answer, n in zip(batch.inputs, answers, batch.slices["n_pairs"]):
        values = row[1:2 * int(n):2]
        assert int(answer) in values.tolist() and 1 <= int(n) <= n_pairs


SPEC_WORDS = st.lists(st.one_of(st.sampled_from(["sweep", "standard", "minus", "test.accuracy", "%1", ".2", ",0",
                                                 "ci", "mean", "seeds", "above=0.9", "above=x", "n", "train.lr=0.003",
                                                 "seed=1", "x.json", "x.jsonl", "over", '"a b"', "'", "=", "%x"]),
                                st.text(max_size=6)), max_size=9)


@FAST
@given(words=SPEC_WORDS)
def test_a_quote_spec_renders_or_is_refused_in_words(tmp_path_factory, words):
    """Any spec, well formed or not, either renders from the records or raises ModformerError."""
    from modformer.sweep.quote import Records, render

    root = tmp_path_factory.mktemp("quote")
    (root / "sweep").mkdir()
    (root / "sweep" / "sweep.yaml").write_text(f"format: {RECORDS_FORMAT}\n" "sweep: {variants: [standard], grid: {}, seeds: [0]}\n")
    record = {"run_id": "standard/default/seed0", "run_dir": "runs/x", "variant": "standard", "point": {}, "seed": 0,
              "status": "done", "summary": {"test": {"accuracy": 0.5}}}
    (root / "sweep" / "results.jsonl").write_text(json.dumps(record) + "\n")
    try:
        text = render(" ".join(words), Records(root))
    except ModformerError:
        return
    assert isinstance(text, str) and text


@pytest.mark.parametrize("spec, want", [("sweep standard test.accuracy %1", "50.0% (one run)"),
                                        ("sweep standard test.accuracy .2 n", "1")])
def test_the_quote_fixture_renders_a_well_formed_spec(tmp_path, spec, want):
    """The fuzzed quote test's records do render (so that it is not passing on refusals alone)."""
    from modformer.sweep.quote import Records, render

    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.yaml").write_text(f"format: {RECORDS_FORMAT}\n" "sweep: {variants: [standard], grid: {}, seeds: [0]}\n")
    record = {"run_id": "standard/default/seed0", "run_dir": "runs/x", "variant": "standard", "point": {}, "seed": 0,
              "status": "done", "summary": {"test": {"accuracy": 0.5}}}
    (tmp_path / "sweep" / "results.jsonl").write_text(json.dumps(record) + "\n")
    assert render(spec, Records(tmp_path)) == want


GENERATED = ["addition", "dyck", "khop", "memorization", "mqar", "repeat", "retrieval"]  # no corpus needed


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(GENERATED), seed=st.integers(0, 2 ** 32), step=st.integers(0, 10 ** 6),
       batch_size=st.integers(1, 24))
def test_every_generated_task_is_a_pure_function_of_seed_and_step_within_its_vocabulary(name, seed, step, batch_size):
    """Any seed and step: the same batch twice, of the task's length, every token and scored
    target inside its vocabulary, every example scored somewhere, one slice value each, and no
    training example equal to a held-out one (but in memorization, whose test set is every fact
    it trains on: recall is the task)."""
    from modformer.registry import TASKS
    from modformer.tasks.base import IGNORE

    cls = TASKS[name]
    task = cls(cls.Config(test_size=20, validation_size=10))
    batch = task.train_batch(seed, step, batch_size)
    again = cls(cls.Config(test_size=20, validation_size=10)).train_batch(seed, step, batch_size)
    assert batch.inputs.equal(again.inputs) and batch.targets.equal(again.targets)
    assert all(batch.slices[k].equal(again.slices[k]) for k in batch.slices)
    assert batch.inputs.shape == (batch_size, task.seq_len) == batch.targets.shape
    assert 0 <= int(batch.inputs.min()) and int(batch.inputs.max()) < task.vocab_size
    scored = batch.targets != IGNORE
    assert scored.any(1).all()
    assert 0 <= int(batch.targets[scored].min()) and int(batch.targets[scored].max()) < task.vocab_size
    assert all(v.shape == (batch_size,) for v in batch.slices.values())
    if name == "memorization":
        return
    held_out = {tuple(r) for split in (task.test_set(), task.validation_set())
                for r in torch.cat([split.inputs, split.targets], 1).tolist()}
    assert not held_out & {tuple(r) for r in torch.cat([batch.inputs, batch.targets], 1).tolist()}
