"""Parts written outside modformer (examples/parts: a causal convolution mixer with its own
options, a squared-ReLU feed-forward module), named by import path from a folder outside
the repository, through every command: train, resume, sweep (worker processes), report,
eval, generate; and the contract every part keeps (causal, freezable, seeded, reloadable)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from modformer import build_model
from modformer.cli import main
from modformer.config import load_config
from modformer.train.checkpoint import list_checkpoints, read_checkpoint
from text_corpus import write_text_corpus

ROOT = Path(__file__).parent.parent
CONV, SQRELU = "myparts.causal_conv:CausalConv", "myparts.squared_relu:SquaredReLU"
TINY = ["model.d_model=32", "model.n_heads=2", "task.n_pairs=2", "task.test_size=200", "task.validation_size=100",
        "train.steps=6", "train.batch_size=16", "train.eval_every=6", "train.checkpoint_every=2",
        "train.keep_checkpoints=5", "train.progress=false"]


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """A working folder outside the repository holding the parts as package `myparts`, and a
    config naming them; the current directory is that folder."""
    shutil.copytree(ROOT / "examples" / "parts", tmp_path / "myparts")
    config = yaml.safe_load((ROOT / "examples" / "conv_retrieval.yaml").read_text())
    config["model"].update(mixer=CONV, ffn=SQRELU)
    (tmp_path / "conv.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    return tmp_path


def one_line_error(capsys, *argv):
    assert main(list(argv)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def test_a_plugin_part_in_every_command(outside, capsys):
    run = outside / "run"
    assert main(["train", "conv.yaml", "--out", str(run), *TINY]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert (saved["mixer"], saved["mixer_options"], saved["ffn"]) == (CONV, {"kernel": 8}, SQRELU)
    model = read_checkpoint(list_checkpoints(run / "checkpoints")[-1][1]).model
    assert model["blocks.0.mixer.conv.weight"].shape == (32, 1, 8)  # the option reached the part

    # Resumed after a kill at step 4, it ends where the uninterrupted run ended.
    killed = outside / "killed"
    shutil.copytree(run, killed)
    (killed / "summary.json").unlink()
    for step, path in list_checkpoints(killed / "checkpoints"):
        if step > 4:
            path.unlink()
    assert main(["train", "conv.yaml", "--out", str(killed), *TINY, "--resume"]) == 0
    resumed = read_checkpoint(list_checkpoints(killed / "checkpoints")[-1][1]).model
    assert all(torch.equal(model[k], resumed[k]) for k in model)

    # eval reloads it and scores what training reported.
    capsys.readouterr()
    assert main(["eval", str(run), "--json"]) == 0
    import json
    trained = json.loads((run / "summary.json").read_text())["test"]["accuracy"]
    assert json.loads(capsys.readouterr().out)["test"]["accuracy"] == trained

    # A sweep's worker process imports the parts from the config alone (one run: which
    # parameters a variant freezes in a part is test_a_plugin_part_keeps_the_part_contract's).
    assert main(["sweep", "conv.yaml", "--out", str(outside / "sweep"), *TINY, "sweep.variants=[frozen_mlp]",
                 "sweep.seeds=[0]"]) == 0
    report = (outside / "sweep" / "report.md").read_text()
    assert f"| frozen_mlp (mixer {CONV}, ffn {SQRELU}) |" in report and "failed" not in report  # named by what ran

    # Where the part cannot be imported, reloading says which module is missing.
    elsewhere = outside / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run([sys.executable, "-m", "modformer.cli", "eval", str(run)], cwd=elsewhere,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "cannot import module 'myparts.causal_conv'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_plugin_parts_options_are_checked_like_ours(outside, capsys):
    assert "model.mixer_options.kernal" in one_line_error(capsys, "train", "conv.yaml", *TINY,
                                                          "model.mixer_options.kernal=3")
    assert "model.mixer_options.kernel: expected int" in one_line_error(capsys, "train", "conv.yaml", *TINY,
                                                                        "model.mixer_options.kernel=wide")
    assert "model.mixer_options: kernel must be at least 1" in one_line_error(
        capsys, "train", "conv.yaml", *TINY, "model.mixer_options.kernel=0")
    assert "takes no options" in one_line_error(capsys, "train", "conv.yaml", *TINY, "model.ffn_options.width=3")
    assert "cannot import module 'myparts.nope'" in one_line_error(capsys, "train", "conv.yaml", *TINY,
                                                                   "model.mixer=myparts.nope:X")
    assert "has no 'Nope'" in one_line_error(capsys, "train", "conv.yaml", *TINY, "model.mixer=myparts.causal_conv:Nope")
    assert not (outside / "runs").exists()


def test_a_plugin_part_keeps_the_part_contract(outside):
    cfg = load_config("conv.yaml", TINY).model
    model = build_model(cfg, seed=0).eval()
    x = torch.randint(0, cfg.vocab_size, (2, 6))
    y = x.clone()
    y[:, 4:] = (y[:, 4:] + 1) % cfg.vocab_size
    with torch.no_grad():
        assert torch.equal(model(x)[:, :4], model(y)[:, :4])  # causal: later tokens change nothing before them
        assert not torch.allclose(model(x)[:, 4:], model(y)[:, 4:])
    frozen = build_model(load_config("conv.yaml", [*TINY, "model.variant=frozen_mlp"]).model, seed=0)
    assert {n for n, p in frozen.named_parameters() if not p.requires_grad} == \
        {f"blocks.{i}.ffn.{w}.weight" for i in (0, 1) for w in ("up", "down")}
    assert not model.supports_cache()


def test_generation_from_a_part_without_a_cache(outside, capsys):
    text = write_text_corpus(outside / "text", documents=8, sentences=20)
    run = outside / "lm"
    assert main(["train", str(ROOT / "configs" / "tasks" / "lm_tiny.yaml"), "--out", str(run), f"task.source={text}",
                 f"model.mixer={CONV}", "model.mixer_options.kernel=4", "train.steps=10", "train.progress=false"]) == 0
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "the king", "--tokens", "6"]) == 0
    assert capsys.readouterr().out.startswith("the king")
