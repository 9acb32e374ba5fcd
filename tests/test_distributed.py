"""Data-parallel training with torchrun: two gloo processes end where one process ends."""

import subprocess
import sys

import pytest
import torch

from modformer.api import train_run
from modformer.cli import main
from modformer.config import load_config
from modformer.train import trainer as trainer_module
from modformer.train.checkpoint import list_checkpoints, read_checkpoint
from modformer.train.distributed import World

# Addition with operands of 1 to 3 digits: sequences score different numbers of answer tokens,
# so a share's mean loss is not the global mean (the loss scaling is what the test checks).
OVERRIDES = ["model.d_model=32", "task.n_digits=3", "task.min_digits=1", "task.test_size=100",
             "task.validation_size=50", "train.steps=4", "train.batch_size=16",
             "train.progress=false", "train.eval_every=4", "train.eval_batch_size=100", "train.threads=1",
             "train.lr=3e-3", "train.warmup_steps=1"]


def torchrun(out, *extra):
    """`modformer train` in 2 gloo processes under torchrun."""
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "modformer.cli", "train", "configs/tasks/addition.yaml", "--out", str(out),
                           *OVERRIDES, *extra], capture_output=True, text=True, timeout=300)


def last_weights(out):
    return read_checkpoint(list_checkpoints(out / "checkpoints")[-1][1]).model


@pytest.mark.slow  # two processes that each start torch and train: ~40 s on 2 cores; CI runs it (.ci/run)
def test_two_gloo_processes_match_one_process_and_rank_0_speaks_for_both(tmp_path):
    # The one process is this one (a process start costs seconds of imports).
    train_run(load_config("configs/tasks/addition.yaml", OVERRIDES), tmp_path / "one", echo=lambda m: None)
    result = torchrun(tmp_path / "two")
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = last_weights(tmp_path / "one"), last_weights(tmp_path / "two")
    assert one.keys() == two.keys()
    # Summation order differs (two shares, then an all-reduce), and Adam turns a gradient's
    # rounding into an update of up to lr where the gradient is near zero: measured here, at
    # most 5e-6 after 4 steps at lr 3e-3 (a wrong share or scaling moves weights by ~1e-3).
    for k in one:
        assert torch.allclose(one[k], two[k], atol=2e-5, rtol=0), k
    # Only rank 0 wrote: one metrics file, whose losses equal the single process's.
    lines = lambda d: [line for line in (d / "metrics.jsonl").read_text().splitlines() if '"train"' in line]  # noqa: E731
    assert len(lines(tmp_path / "two")) == len(lines(tmp_path / "one"))
    # The run directory is rank 0's to prepare; its refusal (the folder holds a run) must end
    # the other rank too, not leave it waiting in a collective.
    result = torchrun(tmp_path / "two")
    assert result.returncode != 0 and "already holds a run" in result.stderr


def test_a_batch_that_does_not_split_is_refused(tmp_path, monkeypatch, capsys):
    # Rank 0 of two, in this process: the refusal comes before any collective, so each rank
    # meets it on its own (the test above shows a refusal ending both ranks under torchrun).
    monkeypatch.setattr(trainer_module, "init_world", lambda device: (World(rank=0, size=2), device))
    assert main(["train", "configs/tasks/addition.yaml", "--out", str(tmp_path / "r"), *OVERRIDES,
                 "train.batch_size=15"]) == 2
    assert "train.batch_size=15 does not split over 2 processes" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
