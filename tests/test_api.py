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


def test_a_sweep_started_from_python_records_the_command_that_runs_it(tmp_path, monkeypatch):
    """commands.txt and the report's Reproduce section name the `modformer sweep` command
    equivalent to the call (quoted, to be pasted), not the notebook kernel's command line."""
    import shlex
    import sys

    import yaml

    from modformer.cli import main
    monkeypatch.setattr(sys, "argv", ["/venv/lib/ipykernel_launcher.py", "-f", "/tmp/kernel-1.json"])
    config = tmp_path / "my sweep.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"name": "retrieval", "n_pairs": 2, "test_size": 50, "validation_size": 20},
        "train": {"steps": 2, "batch_size": 8, "eval_every": 2, "eval_batch_size": 50, "progress": False},
        "sweep": {"variants": ["standard"], "seeds": [0, 1]}}))  # one run of it, of seconds
    out = tmp_path / "out dir"
    overrides = ["sweep.seeds=[0]", "train.lr=0.01"]
    report = mf.sweep(config, out, *overrides, workers=1, slurm={"time": "1:00:00"}, echo=lambda m: None)
    command = shlex.join(["modformer", "sweep", str(config), *overrides, 'sweep.slurm.time="1:00:00"',
                          "--workers", "1", "--out", str(out)])
    assert (out / "commands.txt").read_text() == command + "\n"
    assert command in report.read_text().split("## Reproduce")[1]
    # Pasted, it continues the same sweep in its folder (nothing left to train; a different sweep
    # would be refused), and the command line records itself as it was typed.
    assert main(shlex.split(command)[1:]) == 0
    assert (out / "commands.txt").read_text() == f"{command}\n{command}\n"
    assert main(["sweep", str(config), "--out", str(out), *overrides]) == 0
    assert (out / "commands.txt").read_text().splitlines()[-1] == shlex.join(
        ["modformer", "sweep", str(config), "--out", str(out), *overrides])
