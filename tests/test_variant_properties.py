"""The variants package's contracts one by one (modformer/variants/): the labels reports and
plots print, which mixer a variant fixes, what `build_model` draws and freezes, and how a stack's
layers resolve, record and freeze. Written against mutation testing's survivors
(results/mutation/README.md): each test names a property a silent change would break."""

from dataclasses import replace

import pytest
import torch

from modformer.config import load_config
from modformer.errors import ConfigError
from modformer.model.layers import LayerConfig
from modformer.registry import VARIANTS
from modformer.variants.base import build_model, fixed_mixer, model_label, model_mixer, run_label, same_model
from modformer.variants.stack import freeze_patterns, layer_plan, resolve_layer, resolve_layers, uniform

SMALL = ["model.d_model=16", "model.n_heads=2"]
SCALED = "test_stacks:Scaled"  # a part with options, as a mixer or a feed-forward module


def model(*overrides):
    return load_config(None, [*SMALL, *overrides]).model


def trainable(m):
    return sorted(n for n, p in m.named_parameters() if p.requires_grad)


# --- which mixer a variant builds with ---------------------------------------------------------

def test_a_variant_that_fixes_its_mixer_says_which_and_others_say_none():
    assert fixed_mixer("mixit") == "mixing"
    assert fixed_mixer("frozen_qk") == "attention"
    assert fixed_mixer("standard") is None
    assert fixed_mixer("nonesuch") is None  # its loader names the unknown variant, not this
    assert fixed_mixer(None) is None and fixed_mixer(["mixit"]) is None


@pytest.mark.parametrize("section, mixer", [
    ({}, "attention"),
    ({"mixer": "mypkg:Conv"}, "mypkg:Conv"),
    ({"variant": "mixit"}, "mixing"),
    ({"variant": "mixit", "mixer": "attention"}, "mixing"),  # the variant's own wins
    ({"variant": "standard", "mixer": "mixing"}, "mixing"),
    ({"variant": "standard", "mixer": None}, "attention"),
])
def test_a_raw_model_section_builds_with_its_variants_mixer_else_its_own_else_attention(section, mixer):
    assert model_mixer(section) == mixer


def test_two_variants_are_the_same_model_where_builder_and_frozen_parts_agree():
    assert same_model(VARIANTS["mixit"], VARIANTS["standard"])  # MixiT is the standard decoder with mixing
    assert not same_model(VARIANTS["frozen_qk"], VARIANTS["standard"])  # same builder, parts frozen
    assert not same_model(VARIANTS["knowledge"], VARIANTS["standard"])  # another builder, nothing frozen
    assert same_model(VARIANTS["frozen_qk"], VARIANTS["frozen_qk"])


# --- what a run is called ----------------------------------------------------------------------

@pytest.mark.parametrize("variant, mixer, ffn, label", [
    ("standard", "attention", None, "standard"),
    ("standard", "mixing", None, "standard (mixer mixing)"),
    ("mixit", "mixing", None, "mixit"),
    ("frozen_qk", "attention", "swiglu", "frozen_qk"),  # a built-in FFN is no part of yours
    ("standard", "attention", "gelu", "standard"),
    ("standard", "attention", "mypkg.moe:MoE", "standard (ffn mypkg.moe:MoE)"),
    ("mixit", "mypkg.conv:Conv", "mypkg.moe:MoE", "mixit (mixer mypkg.conv:Conv, ffn mypkg.moe:MoE)"),
])
def test_a_model_is_called_by_its_variant_and_every_part_that_is_not_the_variants_own(variant, mixer, ffn, label):
    assert model_label(variant, mixer, ffn) == label


@pytest.mark.parametrize("overrides, label", [
    ([], "standard"),
    (["model.variant=mixit"], "mixit"),
    (["model.n_layers=4", "model.layers={0: mixit}"], "standard [layers: mixit, standard x3]"),
    (["model.n_layers=4", "model.layers={1: mixit}"], "standard [layers: standard, mixit, standard x2]"),
    (["model.n_layers=3", "model.layers={-1: frozen_qk}"], "standard [layers: standard x2, frozen_qk]"),
    (["model.layers={0: {freeze: ['mixer.q_proj.*']}}"],
     "standard [layers: standard (frozen mixer.q_proj.*), standard]"),
    (["model.layers={0: {mixer: mixing, freeze: ['ffn.*']}}"],
     "standard [layers: standard (mixer mixing; frozen ffn.*), standard]"),
    (["model.layers={1: {ffn: gelu}}"], "standard [layers: standard, standard (ffn gelu)]"),
    (["model.variant=mixit", "model.layers={1: {mixer_options: {scale: 2.0}}}"],
     "mixit [layers: mixit, mixit (own options)]"),
    ([f"model.ffn={SCALED}", "model.layers={1: {ffn_options: {shift: 1.0}}}"],
     f"standard [layers: standard (ffn {SCALED}), standard (ffn {SCALED}; own options)]"),
    ([f"model.layers={{1: {{ffn: '{SCALED}'}}}}"], f"standard [layers: standard, standard (ffn {SCALED})]"),
    ([f"model.mixer={SCALED}", "model.layers={0: {mixer_options: {scale: 2.0}}}"],
     f"standard [layers: standard (mixer {SCALED}; own options), standard (mixer {SCALED})]"),
])
def test_a_stack_is_called_by_its_layers_bottom_first_each_run_of_equal_ones_once(overrides, label):
    assert run_label(model(*overrides)) == label


# --- build_model -------------------------------------------------------------------------------

def test_a_model_is_a_function_of_its_seed_and_leaves_the_callers_generator_alone():
    cfg = model()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b, c = build_model(cfg, 0), build_model(cfg, 0), build_model(cfg, 1)
    assert torch.equal(torch.get_rng_state(), before)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["blocks.0.mixer.q_proj.weight"], sc["blocks.0.mixer.q_proj.weight"])


def test_an_unresolved_model_config_is_refused_before_building():
    cfg = model()
    for unresolved in (replace(cfg, vocab_size=None), replace(cfg, max_seq_len=None)):
        with pytest.raises(ValueError, match="must be resolved"):
            build_model(unresolved, 0)


def test_a_variant_with_its_own_mixer_takes_a_python_configs_default_and_refuses_another():
    cfg = model()  # model.mixer: attention, the default
    mixit = build_model(replace(cfg, variant="mixit", mixer_options={}), 0)
    assert type(mixit.blocks[0].mixer).__name__ == "MixingMixer"
    with pytest.raises(ConfigError, match="model.mixer=mixing conflicts with model.variant=frozen_qk"):
        build_model(replace(cfg, variant="frozen_qk", mixer="mixing"), 0)


def test_train_only_leaves_exactly_its_parameters_to_train_and_the_variants_freeze_still_applies():
    m = build_model(model("model.variant=frozen_qk", "model.train_only=['blocks.*.mixer.*']"), 0)
    assert trainable(m) == ["blocks.0.mixer.o_proj.weight", "blocks.0.mixer.v_proj.weight",
                            "blocks.1.mixer.o_proj.weight", "blocks.1.mixer.v_proj.weight"]


# --- stacks ------------------------------------------------------------------------------------

def test_freeze_patterns_apply_a_layers_variant_and_its_own_freezes_to_that_layer_alone():
    cfg = model("model.n_layers=3", "model.layers={0: frozen_mlp, 2: {freeze: ['mixer.q_proj.*']}}",
                "model.freeze=['embed.*']")
    assert freeze_patterns(cfg) == ["blocks.0.ffn.*", "blocks.2.mixer.q_proj.*", "embed.*"]
    # A model variant's patterns outside the blocks stay model-wide in a stack; a whole-block one goes per layer.
    body = model("model.variant=random_transformer", "model.layers={1: {mixer: mixing}}")
    assert freeze_patterns(body) == ["norm.*", "blocks.0.*", "blocks.1.*"]
    assert freeze_patterns(model("model.variant=random_transformer")) == ["blocks.*", "norm.*"]


def test_a_layer_takes_the_mixer_its_variant_fixes_else_its_own_else_the_models():
    cfg = model("model.variant=mixit", "model.n_layers=3", "model.layers={1: standard, 2: {mixer: mixing}}")
    assert [layer.mixer for layer in layer_plan(cfg)] == ["mixing", "attention", "mixing"]
    own = model(f"model.mixer={SCALED}", "model.layers={1: frozen_qk}")
    assert [layer.mixer for layer in layer_plan(own)] == [SCALED, "attention"]


def test_a_layers_options_merge_over_the_models_where_the_part_is_the_models():
    cfg = model("model.variant=mixit", "model.mixer_options={scale: 0.5}", "model.layers={1: {mixer_options: {sink_head: true}}}")
    below, above = layer_plan(cfg)
    assert below.mixer_options == cfg.mixer_options and below.mixer_options["scale"] == 0.5
    assert above.mixer_options == {**cfg.mixer_options, "sink_head": True}
    # Recorded: only what departs from the model.
    assert [layer.mixer_options for layer in cfg.layers] == [{}, {"sink_head": True}]
    # Another part starts from its own defaults, not the model's part's options.
    other = model(f"model.mixer={SCALED}", "model.mixer_options={scale: 3.0}", "model.layers={1: {mixer: attention}}")
    assert [layer.mixer_options.get("scale") for layer in layer_plan(other)] == [3.0, None]


def test_a_stack_of_the_models_own_layers_records_no_stack_and_is_uniform():
    cfg = model("model.layers=[standard, {mixer: attention}]")
    assert cfg.layers == [] and uniform(cfg)
    assert not uniform(model("model.layers={1: {freeze: ['ffn.*']}}"))
    assert not uniform(model(f"model.ffn={SCALED}", "model.layers={1: {ffn_options: {shift: 1.0}}}"))
    assert not uniform(model(f"model.mixer={SCALED}", "model.layers={1: {mixer_options: {shift: 1.0}}}"))
    assert not uniform(model("model.layers={1: {ffn: gelu}}"))
    assert not uniform(model("model.layers={1: {mixer: mixing}}"))


def test_resolving_a_recorded_stack_again_changes_nothing():
    cfg = model("model.n_layers=3", "model.layers={0: mixit, 2: {ffn: gelu, freeze: ['mixer.v_proj.*']}}")
    assert resolve_layers(cfg) == cfg
    assert layer_plan(resolve_layers(cfg)) == layer_plan(cfg)


def test_a_knowledge_models_layer_may_name_its_own_ffn_but_no_other():
    cfg = model("model.variant=knowledge", "model.ffn=relu")
    assert resolve_layer(cfg, LayerConfig(ffn="relu"), 0).ffn == "relu"
    with pytest.raises(ConfigError, match=r"model.layers\[1\].ffn is not read"):
        resolve_layer(cfg, LayerConfig(ffn="gelu"), 1)
    with pytest.raises(ConfigError, match=r"model.layers\[0\].ffn_options is not read"):
        resolve_layer(cfg, LayerConfig(ffn_options={"shift": 1.0}), 0)
