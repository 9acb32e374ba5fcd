"""The Python API (modformer.api): the README's example runs, and each function does what its
command does."""

import runpy
from pathlib import Path

import pytest

import modformer as mf
from modformer.errors import ConfigError

ROOT = Path(__file__).parent.parent


def test_the_python_api_example_runs_end_to_end(tmp_path, capsys):
    example = runpy.run_path(str(ROOT / "examples" / "python_api.py"))
    results = example["main"](tmp_path, seeds=(0,))  # one seed: the sweep's path, at a third of its cost
    for variant, (trained, reloaded) in results.items():
        assert trained == reloaded, variant  # the checkpoint on disk scores what training reported
    assert results["standard"][0] >= 0.9  # 200 steps of 1 or 2 pairs; 120 steps gave 0.80
    out = capsys.readouterr().out
    assert "layer 0 attention weights: (4, 4, 6, 6)" in out
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert "| standard |" in report and "| mixit |" in report


def test_config_from_data_and_from_a_config(tmp_path):
    data = {"model": {"d_model": 32}, "train": {"steps": 5}}
    cfg = mf.config(data, "train.lr=0.01")
    assert cfg.model.d_model == 32 and cfg.train.steps == 5 and cfg.train.lr == 0.01
    assert data == {"model": {"d_model": 32}, "train": {"steps": 5}}  # the caller's data is left as it was
    assert mf.config(cfg, "train.steps=7").train.steps == 7 and cfg.train.steps == 5
    with pytest.raises(ConfigError, match="train.stepz"):
        mf.config({"train": {"stepz": 5}})
    with pytest.raises(ConfigError, match="not int"):
        mf.config(3)
