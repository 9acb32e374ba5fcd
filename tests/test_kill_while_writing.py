"""A run killed while it writes a checkpoint: what it leaves is cleaned up when it resumes, and
a damaged latest checkpoint is set aside and the run resumes from the previous intact one."""

import os
import subprocess
import sys

import pytest
import torch

from modformer.cli import main
from modformer.files import remove_stale_temporaries
from modformer.train.checkpoint import list_checkpoints, read_checkpoint

ARGS = ["model.d_model=32", "task.n_pairs=3", "task.test_size=100", "task.validation_size=50", "train.steps=6",
        "train.batch_size=8", "train.progress=false", "train.eval_every=6", "train.checkpoint_every=2",
        "train.eval_batch_size=100", "train.keep_checkpoints=3"]

# The trainer, killed (SIGKILL) in the middle of writing its second checkpoint: half of the
# file is written under our temporary name and under safetensors' own (`.tmp` and six
# characters: what a real kill inside safetensors' writer was seen to leave here).
KILLED_WHILE_WRITING = """
import os, signal, sys
from safetensors.torch import save
import modformer.train.checkpoint as checkpoint
real, calls = checkpoint.save_file, []

def save_file(tensors, filename, metadata=None):
    calls.append(filename)
    if len(calls) < 2:
        return real(tensors, filename, metadata=metadata)
    data = save(tensors, metadata=metadata)
    for path in (filename, os.path.join(os.path.dirname(filename), ".tmpAb3dE9")):
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)

checkpoint.save_file = save_file
from modformer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_while_writing_a_checkpoint_leaves_nothing_after_it_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, "train", "configs/retrieval.yaml",
                             "--out", str(out), *ARGS], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    ckpts = out / "checkpoints"
    leftovers = sorted(p.name for p in ckpts.iterdir() if p.name.startswith("."))
    assert len(leftovers) == 2 and ".tmpAb3dE9" in leftovers, leftovers
    assert [s for s, _ in list_checkpoints(ckpts)] == [2]

    assert main(["train", "configs/retrieval.yaml", "--out", str(out), *ARGS, "--resume"]) == 0
    assert "removed 2 temporary file(s)" in capsys.readouterr().err
    assert sorted(p.name for p in ckpts.iterdir()) == [f"step_000000{s}.safetensors" for s in (2, 4, 6)]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_only_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    names = [f".step_0000002.safetensors.tmp-{dead_pid}", f".cache.partial-{dead_pid}",  # a dead writer's
             f".summary.json.tmp-{os.getppid()}",  # a live process's (pytest's parent): being written now
             ".tmpAb3dE9", "step_0000002.safetensors", "notes.tmp-1"]  # safetensors'; a checkpoint; not ours
    for name in names:
        (tmp_path / name).mkdir() if "partial" in name else (tmp_path / name).write_text("x")
    assert [p.name for p in remove_stale_temporaries(tmp_path)] == names[:2][::-1]
    assert [p.name for p in remove_stale_temporaries(tmp_path, safetensors=True)] == [".tmpAb3dE9"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:3] + names[4:])


@pytest.mark.parametrize("damage", ["cut in half", "64 random bytes in its tensors"])
def test_a_damaged_latest_checkpoint_is_set_aside_and_the_run_resumes_from_the_previous(tmp_path, capsys, damage):
    """A checkpoint cut short is no safetensors file; one with bytes changed inside its tensor
    data (header and size intact) loads as other numbers, which the checksum catches (before
    it, the loss turned NaN and the message called the damaged file the last good one). Either
    is moved aside, kept, and the run resumes from the previous checkpoint to the same end."""
    import random

    whole, out = tmp_path / "whole", tmp_path / "run"
    for run in (whole, out):
        assert main(["train", "configs/retrieval.yaml", "--out", str(run), *ARGS, "train.steps=4"]) == 0
    (_, previous), (_, latest) = list_checkpoints(out / "checkpoints")
    data = bytearray(latest.read_bytes())
    if damage == "cut in half":
        data = data[: len(data) // 2]
    else:
        header = 8 + int.from_bytes(data[:8], "little")  # safetensors: a length, the JSON header, the tensors
        at = random.Random(0).randrange(header, len(data) - 64)
        data[at:at + 64] = random.Random(1).randbytes(64)
    latest.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["train", "configs/retrieval.yaml", "--out", str(out), *ARGS, "train.steps=4", "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"moved aside to {latest.name}.damaged" in err and f"previous intact checkpoint, {previous.name} (step 2)" in err
    assert (latest.parent / f"{latest.name}.damaged").read_bytes() == bytes(data)  # kept, never deleted
    a, b = read_checkpoint(list_checkpoints(whole / "checkpoints")[-1][1]), read_checkpoint(latest)
    assert a.step == b.step == 4 and all(torch.equal(a.model[k], b.model[k]) for k in a.model)


def test_with_no_intact_checkpoint_the_resume_stops_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "configs/retrieval.yaml", "--out", str(out), *ARGS, "train.steps=4"]) == 0
    for _, path in list_checkpoints(out / "checkpoints"):
        path.write_bytes(path.read_bytes()[:100])
    capsys.readouterr()
    assert main(["train", "configs/retrieval.yaml", "--out", str(out), *ARGS, "train.steps=4", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no earlier checkpoint is intact" in err[0], err
    assert len(list_checkpoints(out / "checkpoints")) == 2  # nothing moved
