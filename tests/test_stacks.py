"""Per-layer stacks (`model.layers`): each layer its own variant, mixer or feed-forward module,
frozen per layer, recorded whole, rebuilt exactly, trained, swept and refused in one line."""

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from modformer.api import load_run, train_run
from modformer.cli import main
from modformer.config import config_from_dict, load_config, part_versions
from modformer.configtools import option
from modformer.errors import ConfigError
from modformer.model.attention import SelfAttention
from modformer.model.mixing import MixingMixer
from modformer.train.mfu import flops_per_token
from modformer.variants import Variant
from modformer.variants.base import build_model, run_label
from modformer.variants.stack import layer_plan
from modformer.variants.standard import build_decoder

TINY = ["model.d_model=16", "model.n_heads=2", "task.n_pairs=2", "task.test_size=50", "task.validation_size=20",
        "train.steps=4", "train.batch_size=8", "train.eval_every=4", "train.checkpoint_every=4", "train.progress=false",
        "train.threads=1"]


def built(overrides, seed=0):
    cfg = load_config(None, overrides)
    return cfg, build_model(cfg.model, seed)


def frozen(model):
    return sorted(n for n, p in model.named_parameters() if not p.requires_grad)


def test_the_hybrid_example_builds_mixing_below_attention():
    cfg = load_config("examples/hybrid.yaml", TINY)
    model = build_model(cfg.model, 0)
    assert [type(b.mixer) for b in model.blocks] == [MixingMixer, SelfAttention]
    assert run_label(cfg.model) == "standard [layers: mixit, standard]"
    assert frozen(model) == []  # MixiT's matrix is a buffer: nothing to freeze


def test_a_mapping_names_only_the_layers_that_differ_and_freezes_only_there():
    cfg, model = built(["model.n_layers=3", "model.layers={-1: frozen_qk}", "model.ffn_bias=true",
                        "model.attn_bias=true"])
    assert [layer.variant for layer in layer_plan(cfg.model)] == ["standard", "standard", "frozen_qk"]
    assert [layer.variant for layer in cfg.model.layers] == [None, None, "frozen_qk"]  # recorded: what departs
    assert frozen(model) == ["blocks.2.mixer.k_proj.bias", "blocks.2.mixer.k_proj.weight",
                             "blocks.2.mixer.q_proj.bias", "blocks.2.mixer.q_proj.weight"]
    _, mlp = built(["model.n_layers=3", "model.layers={1: frozen_mlp}", "model.ffn_bias=true"])
    assert frozen(mlp) == sorted(n for n, _ in mlp.named_parameters() if n.startswith("blocks.1.ffn."))
    assert len(frozen(mlp)) == 6  # gate, up and down, weights and biases
    _, own = built(["model.layers=[{freeze: ['mixer.v_proj.*']}, {}]"])
    assert frozen(own) == ["blocks.0.mixer.v_proj.weight"]


def test_a_stack_of_equal_layers_is_the_model_without_one():
    """The same draws in the same order: a stack of the model's own layers changes nothing."""
    _, plain = built(["model.n_layers=3"])
    cfg, stacked = built(["model.n_layers=3", "model.layers=[standard, standard, standard]"])
    assert run_label(cfg.model) == "standard"
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), stacked.state_dict().values()))


def test_the_recorded_layers_rebuild_the_trained_model(tmp_path):
    cfg = load_config("examples/hybrid.yaml", [*TINY, "model.layers={0: {mixer: mixing}, 1: frozen_qk}"])
    run = tmp_path / "run"
    summary = train_run(cfg, run)
    assert summary["model"] == "standard [layers: standard (mixer mixing), frozen_qk]"
    saved = (run / "config.yaml").read_text()
    assert "layers:\n  - variant: null\n    mixer: mixing" in saved  # each layer's departures from the model
    model, reloaded, _, _ = load_run(run)
    assert reloaded.model.layers == cfg.model.layers
    assert [type(b.mixer) for b in model.blocks] == [MixingMixer, SelfAttention]
    rebuilt = build_model(config_from_dict(reloaded.to_dict()).model, cfg.train.seed)
    assert frozen(rebuilt) == ["blocks.1.mixer.k_proj.weight", "blocks.1.mixer.q_proj.weight"]
    versions = part_versions(reloaded)
    assert versions["model.layers[0].mixer"]["name"] == "mixing" and versions["model.layers[1].variant"]["name"] \
        == "frozen_qk"


@pytest.mark.slow
def test_a_sweep_over_the_placement_writes_a_report(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "examples/hybrid.yaml", *TINY, "sweep.seeds=[0]", "--out", str(out),
                 "sweep.grid={model.layers: [[standard, standard], [mixit, standard]]}"]) == 0
    report = (out / "report.md").read_text()
    assert '`model.layers=["mixit", "standard"]`' in report and '`model.layers=["standard", "standard"]`' in report


class LayerAware(nn.Module):
    """A mixer that remembers the index of the block it was built for."""

    def __init__(self, cfg, layer: int):
        super().__init__()
        self.layer, self.proj = layer, nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(x).cumsum(1) / torch.arange(1, x.shape[1] + 1).view(1, -1, 1)


def test_a_model_wide_key_changed_on_a_recorded_stack_reaches_the_layers_that_inherit_it():
    """config.yaml records each layer's departures, so `model.ffn=gelu` on a run's config is
    every layer's but the one that names its own; options merge over the model's."""
    cfg = load_config(None, ["model.n_layers=3", "model.layers={0: mixit, 2: {ffn: relu}}"])
    again = config_from_dict({**cfg.to_dict(), "model": {**cfg.to_dict()["model"], "ffn": "gelu"}})
    assert [(layer.variant, layer.ffn) for layer in layer_plan(again.model)] == [
        ("mixit", "gelu"), ("standard", "gelu"), ("standard", "relu")]
    assert [type(b.ffn).__name__ for b in build_model(again.model, 0).blocks][1] != \
        [type(b.ffn).__name__ for b in build_model(cfg.model, 0).blocks][1]
    merged = load_config(None, [f"model.mixer={__name__}:Scaled", "model.mixer_options={scale: 2.0, shift: 1.0}",
                                "model.layers={1: {mixer_options: {shift: 3.0}}}"])
    assert [layer.mixer_options for layer in layer_plan(merged.model)] == [{"scale": 2.0, "shift": 1.0},
                                                                          {"scale": 2.0, "shift": 3.0}]
    assert merged.model.layers[1].mixer_options == {"shift": 3.0}
    assert run_label(merged.model) == f"standard [layers: standard (mixer {__name__}:Scaled), standard (mixer " \
                                      f"{__name__}:Scaled; own options)]"


@dataclass
class ScaledOptions:
    scale: float = option(1.0, "output scale")
    shift: float = option(0.0, "output shift")


class Scaled(nn.Module):
    Options = ScaledOptions

    def __init__(self, cfg, options: ScaledOptions):
        super().__init__()
        self.options, self.proj = options, nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.options.scale * self.proj(x) + self.options.shift


def test_a_part_is_told_its_layer():
    _, model = built(["model.n_layers=3", f"model.mixer={__name__}:LayerAware"])
    assert [b.mixer.layer for b in model.blocks] == [0, 1, 2]


def test_flops_count_each_layers_own_parts():
    """A stack of one MixiT and one attention layer does the mean of the two uniform models' work."""
    cfg = load_config(None, ["model.layers=[mixit, standard]"]).model
    mixing = load_config(None, ["model.variant=mixit"]).model
    attention = load_config(None, []).model
    assert flops_per_token(cfg, 64)[0] == (flops_per_token(mixing, 64)[0] + flops_per_token(attention, 64)[0]) / 2


@pytest.mark.parametrize("overrides, message", [
    (["model.layers=[mixit]"], "has 1 entries for model.n_layers=2"),
    (["model.layers={2: mixit}"], "layer 2 does not exist in a model of 2 layers"),
    (["model.layers={1: mixit, -1: standard}"], "names layer 1 twice"),
    (["model.layers={0: knowledge}"], "model.layers[0].variant=knowledge builds a whole model of its own"),
    (["model.layers={0: random_transformer}"], "freezes ['norm.*'], outside the blocks"),
    (["model.layers={0: {variant: mixit, mixer: attention}}"], "conflicts with its variant mixit"),
    (["model.layers={0: nonesuch}"], "unknown variant 'nonesuch'"),
    (["model.layers={0: {mixer: mixing, mixer_options: {sclae: 2}}}"], "unknown config key 'model.layers[0].mixer_options.sclae'"),
    (["model.variant=knowledge", "model.layers={0: {ffn: gelu}}"], "not read by model.variant=knowledge"),
    (["model.variant=knowledge", "model.layers={0: frozen_qk}"], "builds every layer's feed-forward module itself"),
    (["model.construction=reference", "model.layers=[mixit, standard]"], "builds every layer of a model in one mode"),
])
def test_a_bad_stack_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        load_config(None, overrides)


def test_a_bad_stack_from_the_command_line_exits_2(tmp_path, capsys):
    assert main(["train", "examples/hybrid.yaml", "model.layers=[mixit]", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "has 1 entries for model.n_layers=2" in err and "Traceback" not in err and not (tmp_path / "r").exists()


frozen_vo = Variant(build_decoder, freeze=("blocks.*.mixer.v_proj.*", "blocks.*.mixer.o_proj.*"), mixer="attention",
                    description="V and O projections fixed at init")


def test_a_variant_of_yours_works_for_the_model_and_for_one_layer():
    """docs/own-parts.md's example: a variant named by import path, then in the last layer only."""
    _, whole = built(["model.variant=test_stacks:frozen_vo"])
    assert frozen(whole) == ["blocks.0.mixer.o_proj.weight", "blocks.0.mixer.v_proj.weight",
                             "blocks.1.mixer.o_proj.weight", "blocks.1.mixer.v_proj.weight"]
    cfg, last = built(["model.layers={-1: test_stacks:frozen_vo}"])
    assert frozen(last) == ["blocks.1.mixer.o_proj.weight", "blocks.1.mixer.v_proj.weight"]
    assert run_label(cfg.model) == "standard [layers: standard, test_stacks:frozen_vo]"
