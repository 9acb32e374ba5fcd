"""A part's options may be typed with Literal, Enum, lists, tuples, optionals and nested
dataclasses: strings choose, config.yaml records plain values that read back, `--help CONFIG`
shows the choices, and an annotation a config cannot give is refused in one line."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

import pytest
import torch
import yaml
from torch import nn

from modformer.cli import main
from modformer.config import config_from_dict, load_config
from modformer.configtools import option
from modformer.errors import ConfigError
from modformer.variants.base import build_model

HERE = "test_option_types"


class Activation(enum.Enum):
    RELU = "relu"
    TANH = "tanh"


@dataclass
class Window:
    size: int = option(2, "positions averaged")


@dataclass
class GatedOptions:
    gate: Literal["sigmoid", "silu"] = option("sigmoid", "the gate's nonlinearity")
    activation: Activation = option(Activation.RELU, "the value's nonlinearity")
    scales: tuple[float, float] = option((1.0, 1.0), "value and gate scales")
    mask: list[int] | None = option(None, "positions never read")
    window: Window = option(default_factory=Window, help="the running mean")


class GatedMean(nn.Module):
    """A causal running mean of a gated value; which gate and activation its options say."""

    Options = GatedOptions

    def __init__(self, cfg, options: GatedOptions):
        super().__init__()
        self.options = options
        self.value, self.gate = nn.Linear(cfg.d_model, cfg.d_model), nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        gate = torch.sigmoid if self.options.gate == "sigmoid" else nn.functional.silu
        act = torch.relu if self.options.activation is Activation.RELU else torch.tanh
        h = act(self.value(x)) * gate(self.gate(x))
        return h.cumsum(1) / torch.arange(1, x.shape[1] + 1, device=x.device).view(1, -1, 1)


class BadOptions:
    """Not a dataclass."""


class NotADataclass(GatedMean):
    Options = BadOptions


@dataclass
class SetOptions:
    seen: set = option(None, "a set, which YAML cannot give")


class SetPart(GatedMean):
    Options = SetOptions


def test_choices_are_given_as_strings_recorded_plain_and_read_back():
    cfg = load_config(None, [f"model.mixer={HERE}:GatedMean", "model.mixer_options={gate: silu, activation: tanh}"])
    assert cfg.model.mixer_options == {"gate": "silu", "activation": "tanh", "scales": [1.0, 1.0], "mask": None,
                                       "window": {"size": 2}}
    text = cfg.to_yaml()  # an Enum is recorded by its value, so the YAML is plain
    again = config_from_dict(yaml.safe_load(text))
    model = build_model(again.model, 0)
    assert model.blocks[0].mixer.options == GatedOptions(gate="silu", activation=Activation.TANH)
    by_name = load_config(None, [f"model.mixer={HERE}:GatedMean", "model.mixer_options.activation=TANH"])
    assert by_name.model.mixer_options["activation"] == "tanh"


def test_the_defaults_train_and_the_run_records_them(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "configs/retrieval.yaml", f"model.mixer={HERE}:GatedMean", "model.d_model=16",
                 "train.steps=3", "train.batch_size=4", "task.test_size=20", "task.validation_size=10",
                 "train.eval_every=3", "train.progress=false", "--out", str(out)]) == 0
    saved = yaml.safe_load((out / "config.yaml").read_text())["model"]["mixer_options"]
    assert saved["gate"] == "sigmoid" and saved["activation"] == "relu"


def test_help_shows_the_choices(capsys):
    assert main(["train", "--help", "configs/retrieval.yaml", f"model.mixer={HERE}:GatedMean",
                 "model.mixer_options={gate: silu, window: {size: 3}}"]) == 0
    out = capsys.readouterr().out
    assert "model.mixer_options.gate" in out and "one of sigmoid, silu" in out and "one of relu, tanh" in out
    assert "default 'sigmoid', this config 'silu'" in out
    assert "positions averaged [int, default 2, this config 3]" in out  # a nested option's value too


@pytest.mark.parametrize("value, message", [
    ("{gate: tanh}", "model.mixer_options.gate: expected one of sigmoid, silu, got 'tanh'"),
    ("{activation: gelu}", "model.mixer_options.activation: expected one of relu, tanh, got 'gelu'"),
    ("{scales: [1.0]}", "model.mixer_options.scales: expected tuple"),
])
def test_a_wrong_choice_names_its_key(value, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("|", r"\|")):
        load_config(None, [f"model.mixer={HERE}:GatedMean", f"model.mixer_options={value}"])


@pytest.mark.parametrize("part, message", [
    ("NotADataclass", "its Options must be a dataclass"),
    ("SetPart", "option 'seen' has the type <class 'set'>, which a config cannot give"),
])
def test_options_a_config_cannot_give_are_refused_in_one_line(part, message, capsys, tmp_path):
    assert main(["train", "configs/retrieval.yaml", f"model.mixer={HERE}:{part}", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "r").exists()
