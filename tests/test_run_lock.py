"""One writer per run folder: a second training of a folder in training refuses at once,
names the holder, exits 2 and writes nothing; the lock goes with its holder's process."""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modformer.api import train_run
from modformer.cli import main
from modformer.config import load_config
from modformer.lock import FolderBusy, take_lock
from modformer.train.records import read_records

ARGS = ["model.d_model=32", "task.n_pairs=3", "task.test_size=100", "task.validation_size=50", "train.steps=60",
        "train.batch_size=8", "train.progress=false", "train.eval_every=30", "train.checkpoint_every=10",
        "train.log_every=5", "train.eval_batch_size=100", "train.threads=1"]

HOLD = "import sys, time; from modformer.lock import take_lock; take_lock(sys.argv[1], wait=False); " \
       "print('held', flush=True); time.sleep(60)"


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` by relative path, with its content's hash."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def records(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_records(run / "metrics.jsonl")]


@pytest.mark.slow  # a training in a subprocess and two more in this one: ~25 s; CI runs it (.ci/run)
def test_a_second_training_of_a_folder_in_training_refuses_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "modformer.cli", "train", "configs/retrieval.yaml", "--out",
                              str(out), *ARGS], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Stopped (SIGSTOP) once it holds the lock and has logged: the folder stays still while
        # the second training tries, so any file that training wrote would show.
        deadline = time.time() + 120
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
            assert first.poll() is None and time.time() < deadline, "the first training did not start logging"
            time.sleep(0.002)
        first.send_signal(signal.SIGSTOP)
        before = snapshot(out)
        assert json.loads((out / "train.lock").read_text())["pid"] == first.pid

        for resume in ([], ["--resume"]):  # without --resume too: refused as busy, not as "already holds a run"
            assert main(["train", "configs/retrieval.yaml", "--out", str(out), *ARGS, *resume]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "is being trained by" in err[0], err
            assert f"pid {first.pid} on {socket.gethostname()} since " in err[0]
            assert snapshot(out) == before  # nothing written, nothing removed
    finally:
        first.send_signal(signal.SIGCONT)
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr

    # The folder holds exactly one training: its log equals an uninterrupted run's, one start.
    train_run(load_config("configs/retrieval.yaml", ARGS), tmp_path / "alone", echo=lambda m: None)
    assert records(out) == records(tmp_path / "alone")
    assert len(json.loads((out / "run.json").read_text())["starts"]) == 1

    # Once the first has ended, the folder is free again: resumed at its last step, it finishes.
    assert main(["train", "configs/retrieval.yaml", "--out", str(out), *ARGS, "--resume"]) == 0


def test_a_killed_holder_releases_the_lock_and_a_waiter_gets_it(tmp_path):
    path = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusy, match=f"pid {holder.pid} on "):
            take_lock(path, wait=False)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        with take_lock(path, wait=True) as lock:  # the kernel released it with the process
            assert lock.held and json.loads(path.read_text())["pid"] == os.getpid()
            with pytest.raises(FolderBusy):  # a second open file, even in this process, is refused
                take_lock(path, wait=False)
        assert not lock.held
        take_lock(path, wait=False).release()
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_new_holders_record_leaves_no_tail_of_a_longer_old_one(tmp_path):
    """A killed holder leaves its record; the next holder's, shorter here, replaces it whole: the
    file is exactly the new record, one JSON line, with nothing of the old one after it."""
    path = tmp_path / "x.lock"
    old = json.dumps({"host": "elsewhere", "pid": 1, "started": "then", "command": ["old-holder " * 5000]}) + "\n"
    path.write_text(old)
    with take_lock(path, wait=False):
        text = path.read_text()
        assert len(text) < len(old)  # shorter: a record written over it without truncating would leave a tail
        assert text.count("\n") == 1 and text.endswith("}\n") and "old-holder" not in text
        assert json.loads(text)["pid"] == os.getpid()
    assert path.read_text() == ""  # emptied when released
