"""The sharp edges a new user found: every command's bad input is one line and exit 2, and
nothing is ignored or clamped silently (issue 28, items 3 and 8)."""

from __future__ import annotations

import json

import pytest

from modformer.cli import main
from modformer.sweep.kinds import RUN_KINDS
from modformer.sweep.runner import record_outcome
from modformer.train.trainer import Trainer

TINY = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.n_pairs=1", "task.test_size=32",
        "task.validation_size=16", "train.steps=2", "train.batch_size=8", "train.eval_every=2",
        "train.checkpoint_every=2", "train.progress=false", "train.eval_batch_size=32"]


def one_line_error(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("edges") / "run"
    assert main(["train", "configs/retrieval.yaml", "--out", str(run), *TINY]) == 0
    return run


def test_eval_refuses_overrides_it_would_not_read(trained, capsys):
    line = one_line_error(capsys, "eval", str(trained), "train.steps=10")
    assert "eval: train.steps does not change the scoring of a trained model" in line
    assert "model.d_model does not change" in one_line_error(capsys, "eval", str(trained), "model.d_model=32")
    assert main(["eval", str(trained), "train.eval_batch_size=7", "task.test_size=16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["test"]["examples"] == 16


def test_attention_refuses_a_repeated_sequence_longer_than_the_model(trained, capsys, tmp_path):
    line = one_line_error(capsys, "attention", str(trained), "--repeated", "8", "--out", str(tmp_path / "a.png"))
    assert "--repeated 8 needs 16 positions, more than the model's 4: give --repeated 2 or less" in line
    assert not (tmp_path / "a.png").exists()
    assert main(["attention", str(trained), "--repeated", "2", "--out", str(tmp_path / "a.png")]) == 0


def test_bench_data_on_a_generated_task_is_one_line(capsys, tmp_path):
    line = one_line_error(capsys, "bench", "data", "configs/retrieval.yaml", "--out", str(tmp_path / "b"))
    assert "bench data times a text task's loader" in line and "'retrieval'" in line
    assert not (tmp_path / "b").exists()  # an axis given without values: tests/test_bench.py


def test_a_run_interrupted_while_finishing_has_no_summary_and_a_sweep_counts_one_with_a_summary_done(
        tiny_config, tmp_path, monkeypatch):
    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_plot", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Trainer(tiny_config("train.steps=2", "train.eval_every=2"), tmp_path / "run", echo=lambda m: None).run()
    assert not (tmp_path / "run" / "summary.json").exists()  # resumed, it finishes (and plots)

    # The same run killed by Ctrl-C just after its summary was written: done, not "paused".
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "summary.json").write_text(json.dumps({"test": {"accuracy": 0.5, "loss": 1.0}}))
    said = []
    record_outcome(tmp_path, {"run_id": "a", "run_dir": "runs/a"}, 130, tmp_path / "log", said.append,
                   RUN_KINDS["train"].describe)
    assert said == ["done   a: test accuracy 0.5000, loss 1.0000"]
    assert json.loads((tmp_path / "results.jsonl").read_text())["status"] == "done"
