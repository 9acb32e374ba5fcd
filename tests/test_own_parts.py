"""Parts of one's own without surprises: every option recorded and the recorded model
rebuilt after the part's code changes, every part probed before anything is written (shape,
dtype, tuple, broadcast, non-finite, causal leak, a part that fails to build), analyses
checked against the model before training, a part's options shown by `modformer list`.

The parts are defined here, in a module outside the library, and named by import path
(`test_own_parts:Name`), as a user's would be."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from modformer import build_model
from modformer.api import evaluate_run
from modformer.cli import main
from modformer.config import load_config
from modformer.configtools import option
from modformer.variants import Variant
from modformer.variants.standard import build_decoder

TINY = ["model.d_model=16", "model.n_heads=2", "model.n_layers=2", "task.n_pairs=2", "task.test_size=64",
        "task.validation_size=32", "train.steps=2", "train.batch_size=8", "train.eval_every=2",
        "train.checkpoint_every=2", "train.progress=false", "train.eval_batch_size=64"]
HERE = "test_own_parts"


def causal_mean(x: torch.Tensor) -> torch.Tensor:
    """(B, T, d) -> (B, T, d): position t is the mean of positions 0..t."""
    return x.cumsum(1) / torch.arange(1, x.shape[1] + 1, device=x.device).view(1, -1, 1)


@dataclass
class ScaledMeanOptions:
    scale: float = option(2.0, "factor on the output (no parameter: only the config records it)")
    kernel: int = option(3, "unused width, an int option")


class ScaledMean(nn.Module):
    """A causal mixer: a linear map of the running mean, times `scale`."""

    Options = ScaledMeanOptions

    def __init__(self, cfg, options: ScaledMeanOptions):
        super().__init__()
        self.scale = options.scale
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.proj(causal_mean(x))


def cli(*argv: str) -> int:
    return main(list(argv))


def one_line_error(capsys, *argv: str) -> str:
    assert cli(*argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


# -- 1. every option recorded, the recorded model rebuilt --------------------------------------

def test_a_parts_defaults_are_recorded_and_rebuild_the_recorded_model(tmp_path, monkeypatch):
    run = tmp_path / "run"
    assert cli("train", "configs/retrieval.yaml", "--out", str(run), *TINY, f"model.mixer={HERE}:ScaledMean",
               "model.mixer_options={}") == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert saved["mixer_options"] == {"scale": 2.0, "kernel": 3}  # defaults included
    assert saved["ffn_options"] == {}  # swiglu takes none
    parts = json.loads((run / "run.json").read_text())["starts"][0]["parts"]
    mixer = parts["model.mixer"]
    assert mixer["name"] == f"{HERE}:ScaledMean" and mixer["import_path"] == f"{HERE}:ScaledMean"
    assert mixer["version"].startswith("sha256:") and mixer["version"].endswith(Path(__file__).name)
    assert parts["model.ffn"]["import_path"].startswith("modformer.") and parts["model.ffn"]["version"].startswith("0.")

    trained = json.loads((run / "summary.json").read_text())["test"]["loss"]

    @dataclass
    class Changed:
        scale: float = option(5.0, "a new default")
        kernel: int = option(3, "")

    monkeypatch.setattr(ScaledMean, "Options", Changed)
    assert load_config("configs/retrieval.yaml", [f"model.mixer={HERE}:ScaledMean"]).model.mixer_options["scale"] == 5
    # The run rebuilds the model it recorded (scale 2), not one of today's default (scale 5).
    assert evaluate_run(run)["test"]["loss"] == trained


# -- 2. every part probed before anything is written -------------------------------------------

class Wide(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, 2 * cfg.d_model)

    def forward(self, x):
        return self.proj(causal_mean(x))  # (B, T, 2d)


class Pair(ScaledMean):
    def forward(self, x):
        return super().forward(x), None  # a tuple


class Broadcast(nn.Module):
    """(B, 1, d): would broadcast over the positions and train silently."""

    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(x[:, :1])


class Float64(ScaledMean):
    def forward(self, x):
        return super().forward(x).double()


class NotFinite(ScaledMean):
    def forward(self, x):
        return super().forward(x) / 0.0


class Leaky(nn.Module):
    """Right shape, right dtype, but every position reads the whole sequence."""

    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(x.mean(1, keepdim=True).expand_as(x))


class Bidirectional(Leaky):
    causal = False  # on purpose: the causality check is skipped


class Boom(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        raise ValueError("no filter for this width")


class NoOptionsArgument(nn.Module):
    Options = ScaledMeanOptions

    def __init__(self, cfg):
        super().__init__()


class Pointwise(nn.Module):
    """A feed-forward module given as the mixer: trains, with a warning."""

    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(x)


class RaisesInForward(ScaledMean):
    def forward(self, x):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


class NotAModule:
    """A part that forgot to subclass nn.Module."""

    def __init__(self, cfg):
        self.d = cfg.d_model

    def __call__(self, x):
        return x


def returns_none(cfg):
    """A factory that forgot its return."""
    nn.Linear(cfg.d_model, cfg.d_model)


@pytest.mark.parametrize("part, says", [
    ("Wide", "model.mixer=test_own_parts:Wide (blocks.0.mixer, Wide) returned a tensor of shape (2, 4, 32) for an "
             "input of shape (2, 4, 16)"),
    ("Pair", "returned a tuple (a tensor of shape (2, 4, 16), a NoneType) for an input of shape (2, 4, 16)"),
    ("Broadcast", "returned a tensor of shape (2, 1, 16) for an input of shape (2, 4, 16) (it would broadcast over "
                  "the positions)"),
    ("Float64", "returned dtype torch.float64 for a torch.float32 input"),
    ("NotFinite", "returned non-finite values (nan or inf) at initialisation"),
    ("Leaky", "model.mixer=test_own_parts:Leaky (blocks.0.mixer, Leaky) is not causal: changing the token at "
              "position 2 of 4 changed its output at earlier positions"),
    ("Boom", "model.mixer=test_own_parts:Boom raised ValueError while building (test_own_parts.py:"),
    ("NoOptionsArgument", "model.mixer=test_own_parts:NoOptionsArgument is called as part(cfg, options), as it "
                          "declares Options, but its signature (cfg) does not take that"),
    ("RaisesInForward", "model.mixer=test_own_parts:RaisesInForward (blocks.0.mixer, RaisesInForward) raised "
                        "RuntimeError on a probe input"),
    ("NotAModule", "model.mixer=test_own_parts:NotAModule built NotAModule, not a module: a part must be an "
                   "nn.Module subclass, or a function returning one"),
    ("returns_none", "model.mixer=test_own_parts:returns_none built None, not a module"),
])
def test_a_wrong_part_is_one_line_before_anything_is_written(tmp_path, capsys, part, says):
    run = tmp_path / "run"
    line = one_line_error(capsys, "train", "configs/retrieval.yaml", "--out", str(run), *TINY,
                          f"model.mixer={HERE}:{part}", "task.n_pairs=1")  # sequences of 4 tokens
    assert says in line, line
    assert not run.exists()


def test_a_wrong_feed_forward_module_is_named_too(tmp_path, capsys):
    line = one_line_error(capsys, "train", "configs/retrieval.yaml", "--out", str(tmp_path / "run"), *TINY,
                          f"model.ffn={HERE}:Broadcast")
    assert line.startswith(f"modformer: error: model.ffn={HERE}:Broadcast (blocks.0.ffn, Broadcast) returned a "
                           f"tensor of shape (2, 1, 16)"), line


def test_a_bidirectional_part_on_purpose_and_a_pointwise_mixer_train(tmp_path, capsys):
    assert cli("train", "configs/retrieval.yaml", "--out", str(tmp_path / "bi"), *TINY,
               f"model.mixer={HERE}:Bidirectional") == 0
    assert cli("train", "configs/retrieval.yaml", "--out", str(tmp_path / "pw"), *TINY,
               f"model.mixer={HERE}:Pointwise") == 0
    assert f"warning: model.mixer={HERE}:Pointwise (blocks.0.mixer, Pointwise) does not mix positions" in \
        capsys.readouterr().err


def test_a_sweep_probes_its_models_before_any_run_starts(tmp_path, capsys):
    out = tmp_path / "sweep"
    line = one_line_error(capsys, "sweep", "configs/retrieval.yaml", "--out", str(out), *TINY,
                          "sweep.variants=[standard]", "sweep.seeds=[0]",
                          f"sweep.grid={{model.mixer: [attention, '{HERE}:Leaky']}}")
    assert f"model.mixer={HERE}:Leaky (blocks.0.mixer, Leaky) is not causal" in line
    assert not out.exists()


def test_induction_scores_are_checked_against_the_model_before_training(tmp_path, capsys):
    run = tmp_path / "run"
    line = one_line_error(capsys, "train", "configs/retrieval.yaml", "--out", str(run), *TINY,
                          f"model.mixer={HERE}:ScaledMean", "train.induction_scores=true")
    assert "train.induction_scores reads each block's attention pattern" in line
    assert "the mixer of block(s) 0, 1 (ScaledMean) has none" in line
    assert not run.exists()


def test_the_probe_is_cheap_and_leaves_no_trace(tiny_config):
    from modformer.model.probe import probe_model

    cfg = tiny_config().model
    model = build_model(cfg, seed=0).train()
    rng = torch.get_rng_state()
    probe_model(model, cfg.max_seq_len, {})  # warm
    start = time.perf_counter()
    for _ in range(5):
        assert probe_model(model, cfg.max_seq_len, {}) == []
    each = (time.perf_counter() - start) / 5
    assert each < 0.25, f"{each * 1e3:.1f} ms per probe"  # about 3 ms here on one core
    assert torch.equal(torch.get_rng_state(), rng) and all(m.training for m in model.modules())


# -- 6. labels say what ran; names of one part agree ---------------------------------------------

ANY_MIXER = Variant(build_decoder, description="a variant of one's own that takes any mixer")
MEAN_BY_ALIAS = Variant(build_decoder, mixer="mean", description="built with the mixer an entry point calls 'mean'")


def test_a_variant_with_a_users_mixer_is_named_by_it_and_its_folder_is_safe(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{Path(__file__).parent}:{os.environ.get('PYTHONPATH', '')}")  # the workers
    assert cli("train", "configs/retrieval.yaml", "--out", str(tmp_path / "run"), *TINY,
               f"model.mixer={HERE}:ScaledMean") == 0
    assert capsys.readouterr().out.startswith(f"standard (mixer {HERE}:ScaledMean) on retrieval")
    out = tmp_path / "sweep"
    assert cli("sweep", "configs/retrieval.yaml", "--out", str(out), *TINY, f"model.mixer={HERE}:ScaledMean",
               f"sweep.variants=['{HERE}:ANY_MIXER']", "sweep.seeds=[0]") == 0
    assert [p.name for p in (out / "runs").iterdir()] == [f"{HERE}_ANY_MIXER"]  # no ':' in a folder name
    report = (out / "report.md").read_text()
    assert f"| {HERE}:ANY_MIXER (mixer {HERE}:ScaledMean) |" in report
    # A user's own part, in our construction: the report says nothing of any paper.
    assert "paper" not in report.lower() and "depth.py" not in report and "Construction and budget" not in report


def test_an_entry_point_alias_and_the_import_path_of_one_class_agree(monkeypatch):
    from importlib.metadata import EntryPoint

    from modformer import registry
    from modformer.errors import ConfigError

    alias = EntryPoint(name="mean", value=f"{HERE}:ScaledMean", group="modformer.mixers")
    monkeypatch.setattr(registry, "entry_points", lambda group: [alias] if group == "modformer.mixers" else [])
    monkeypatch.setattr(registry.MIXERS, "_items", dict(registry.MIXERS._items))  # forget 'mean' afterwards
    for mixer in (f"{HERE}:ScaledMean", "mean"):
        cfg = load_config("configs/retrieval.yaml", [*TINY, f"model.variant={HERE}:MEAN_BY_ALIAS",
                                                     f"model.mixer={mixer}"])
        assert isinstance(build_model(cfg.model, seed=0).blocks[0].mixer, ScaledMean)
    with pytest.raises(ConfigError, match="conflicts with model.variant"):
        load_config("configs/retrieval.yaml", [*TINY, f"model.variant={HERE}:MEAN_BY_ALIAS", "model.mixer=attention"])


# -- 7. a part's options are visible -------------------------------------------------------------

def test_a_parts_options_are_shown_with_type_default_and_help(capsys, monkeypatch):
    from importlib.metadata import EntryPoint

    from modformer import registry

    expected = ["model.mixer_options.scale", "factor on the output (no parameter: only the config records it)",
                "[float, default 2.0"]
    assert cli("train", "--help", "configs/retrieval.yaml", f"model.mixer={HERE}:ScaledMean") == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: modformer train") and all(text in shown for text in expected)
    assert f"model.mixer={HERE}:ScaledMean ({HERE}:ScaledMean, sha256:" in shown
    assert cli("list", "configs/retrieval.yaml", f"model.mixer={HERE}:ScaledMean",
               "model.mixer_options.scale=4") == 0
    assert "[float, default 2.0, this config 4.0]" in capsys.readouterr().out
    # An installed package's part, by its entry point, without naming it anywhere.
    alias = EntryPoint(name="mean", value=f"{HERE}:ScaledMean", group="modformer.mixers")
    monkeypatch.setattr(registry, "entry_points", lambda group: [alias] if group == "modformer.mixers" else [])
    monkeypatch.setattr(registry.MIXERS, "_items", dict(registry.MIXERS._items))
    assert cli("list", "--options") == 0
    listed = capsys.readouterr().out
    assert f"model.mixer=mean ({HERE}:ScaledMean" in listed and all(text in listed for text in expected)
    assert "model.mixer=attention (modformer.model.attention:build_attention" in listed
    assert "model.mixer_options.qk_init_scale" in listed and "model.mixer_options.sink_head" in listed
