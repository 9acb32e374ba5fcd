"""Ctrl-C saves a checkpoint and exits cleanly; the resumed run ends bit-identical."""

import signal
import subprocess
import sys
import time

import torch

from modformer.api import train_run
from modformer.config import load_config
from modformer.train.checkpoint import list_checkpoints, read_checkpoint
from modformer.train.records import read_records

ARGS = ["model.d_model=32", "task.n_pairs=3", "task.test_size=200", "train.steps=150", "train.batch_size=16",
        "train.progress=false", "train.eval_every=50", "train.checkpoint_every=25", "train.log_every=5",
        "train.threads=1"]


def train(out, *extra):
    return [sys.executable, "-m", "modformer.cli", "train", "configs/retrieval.yaml", "--out", str(out), *ARGS, *extra]


def test_ctrl_c_saves_and_resume_matches_an_uninterrupted_run(tmp_path):
    # The uninterrupted run in this process (a subprocess costs seconds of imports); the same
    # config, one thread in both, so the two must end bit-identical.
    train_run(load_config("configs/retrieval.yaml", ARGS), tmp_path / "whole", echo=lambda message: None)

    proc = subprocess.Popen(train(tmp_path / "cut"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list_checkpoints(tmp_path / "cut" / "checkpoints") and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted at step" in err and "--resume" in err
    (stopped, _), = list_checkpoints(tmp_path / "cut" / "checkpoints")[-1:]
    assert 0 < stopped < 150

    # Resumed in this process: what is under test here is the saving on a signal, not the start.
    train_run(load_config("configs/retrieval.yaml", ARGS), tmp_path / "cut", resume=True, echo=lambda message: None)
    a = read_checkpoint(list_checkpoints(tmp_path / "whole" / "checkpoints")[-1][1])
    b = read_checkpoint(list_checkpoints(tmp_path / "cut" / "checkpoints")[-1][1])
    assert a.step == b.step == 150
    for k in a.model:
        assert torch.equal(a.model[k], b.model[k]), k
    for k in a.optimizer:
        assert torch.equal(a.optimizer[k], b.optimizer[k]), k

    def records(run):
        return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_records(run / "metrics.jsonl")]

    assert records(tmp_path / "whole") == records(tmp_path / "cut")
