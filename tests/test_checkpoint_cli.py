"""Bad input through the command line: one clear line, exit status 2, no traceback."""

import io
import os
import warnings
from contextlib import redirect_stderr, redirect_stdout
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from modformer.cli import main
from modformer.errors import CheckpointError
from modformer.train.checkpoint import list_checkpoints, read_checkpoint

TINY = ["model.d_model=32", "task.n_pairs=3", "task.test_size=100", "train.steps=3", "train.batch_size=8",
        "train.progress=false", "train.eval_every=3", "train.eval_batch_size=100"]


def modformer(*args, cwd=None):
    """`modformer ARGS` run in this process, as `python -m modformer.cli` runs it but without
    a new interpreter's start-up (3-4 s each here): exit status, stdout and stderr. Tests
    about the process itself (signals, torchrun) start real ones."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:  # argparse's errors and --help
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(here)
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def assert_clean_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("modformer: error:"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    result = modformer("train", "configs/retrieval.yaml", "--out", out, *TINY)
    assert result.returncode == 0, result.stderr
    assert "test metric" in result.stdout and "n_pairs" in result.stdout
    return out


def test_eval_reproduces_the_final_metrics(trained):
    result = modformer("eval", trained, "--json")
    assert result.returncode == 0, result.stderr
    import json
    summary = json.loads((trained / "summary.json").read_text())
    assert json.loads(result.stdout)["test"] == summary["test"]


def test_config_errors(tmp_path):
    assert_clean_error(modformer("train", tmp_path / "nope.yaml"), "not found", "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  stepz: 3\n")
    assert_clean_error(modformer("train", bad, "--out", tmp_path / "o"), "train.stepz")
    assert_clean_error(modformer("train", "configs/retrieval.yaml", "--out", tmp_path / "o", "train.lr=abc"),
                       "train.lr")
    assert_clean_error(modformer("train", "configs/retrieval.yaml", "--out", tmp_path / "o", "model.n_heads=3"),
                       "model.n_heads")
    assert not (tmp_path / "o").exists()


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert_clean_error(modformer("train", "configs/retrieval.yaml", "--out", blocker / "run", *TINY),
                       "cannot write", str(blocker))
    assert blocker.read_text() == "not a folder"


def test_existing_run_without_resume(trained):
    assert_clean_error(modformer("train", "configs/retrieval.yaml", "--out", trained, *TINY), "--resume")


def test_no_abbreviated_options_and_no_resume_without_its_folder(tmp_path):
    """`--resum` was taken for `--resume` (argparse's abbreviations), and `--resume` without
    `--out` trained a new run in a fresh folder: both refused, nothing trained."""
    result = modformer("train", "configs/retrieval.yaml", "--out", tmp_path / "run", "--resum", *TINY)
    assert result.returncode == 2 and "--resum" in result.stderr and not (tmp_path / "run").exists()
    result = modformer("train", "configs/retrieval.yaml", "--resume", *TINY, cwd=tmp_path)
    assert_clean_error(result, "--resume", "--out")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("kind", ["garbage", "truncated", "foreign", "missing"])
def test_bad_checkpoints(trained, tmp_path, kind):
    path = tmp_path / "ckpt.safetensors"
    good = list_checkpoints(trained / "checkpoints")[-1][1]
    if kind == "garbage":
        path.write_bytes(os.urandom(1000))
    elif kind == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "foreign":
        save_file({"weight": torch.zeros(3)}, str(path))
    message = {"garbage": "corrupt", "truncated": "corrupt", "foreign": "not a modformer checkpoint",
               "missing": "not found"}[kind]
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)
    assert_clean_error(modformer("eval", path), message)


class OpensAFile:
    """Unpickling this creates a file: the side effect a hostile checkpoint would have."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickled_checkpoint_is_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"
    path = tmp_path / "ckpt.safetensors"
    torch.save({"model": OpensAFile(marker)}, path)  # a torch.load(weights_only=False) file
    with pytest.raises(CheckpointError, match="corrupt or not a safetensors file"):
        read_checkpoint(path)
    assert main(["eval", str(path)]) == 2
    assert not marker.exists()


def test_help_is_generated_from_the_config_fields():
    result = modformer("train", "--help")
    assert result.returncode == 0
    for text in ("train.steps", "optimizer steps", "model.freeze", "task.n_pairs", "--resume"):
        assert text in result.stdout
    listing = modformer("list")
    assert "standard" in listing.stdout and "retrieval" in listing.stdout
