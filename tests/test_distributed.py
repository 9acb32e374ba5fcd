"""Data-parallel training with torchrun: two gloo processes end where one process ends."""

import subprocess
import sys

import torch

from modformer.train.checkpoint import list_checkpoints, read_checkpoint

# Addition with operands of 1 to 3 digits: sequences score different numbers of answer tokens,
# so a share's mean loss is not the global mean (the loss scaling is what the test checks).
OVERRIDES = ["model.d_model=32", "task.n_digits=3", "task.min_digits=1", "task.test_size=100",
             "task.validation_size=50", "train.steps=4", "train.batch_size=16",
             "train.progress=false", "train.eval_every=4", "train.eval_batch_size=100", "train.threads=1",
             "train.lr=3e-3", "train.warmup_steps=1"]


def train(out, processes=1, *extra):
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
                if processes > 1 else [sys.executable])
    result = subprocess.run([*launcher, "-m", "modformer.cli", "train", "configs/tasks/addition.yaml", "--out", str(out),
                             *OVERRIDES, *extra], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return read_checkpoint(list_checkpoints(out / "checkpoints")[-1][1]).model


def test_two_gloo_processes_match_one_process_and_rank_0_speaks_for_both(tmp_path):
    one = train(tmp_path / "one")
    two = train(tmp_path / "two", 2)
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
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "modformer.cli", "train", "configs/tasks/addition.yaml", "--out",
                             str(tmp_path / "two"), *OVERRIDES], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "already holds a run" in result.stderr


def test_a_batch_that_does_not_split_is_refused(tmp_path):
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "modformer.cli", "train", "configs/tasks/addition.yaml", "--out", str(tmp_path / "r"),
                             *OVERRIDES, "train.batch_size=15"], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "does not split over 2 processes" in result.stderr
    assert not (tmp_path / "r").exists()
