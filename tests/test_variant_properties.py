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
from modformer.variants import Variant
from modformer.variants.base import build_model, fixed_mixer, model_label, model_mixer, run_label, same_model
from modformer.variants.stack import freeze_patterns, layer_plan, resolve_layer, resolve_layers, uniform
from modformer.variants.standard import build_decoder
from test_stacks import ScaledOptions

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
    (["model.layers={1: {ffn: gelu, freeze: ['mixer.q_proj.*', 'ffn.*']}}"],
     "standard [layers: standard, standard (ffn gelu; frozen mixer.q_proj.*, ffn.*)]"),
    (["model.layers={1: {mixer: mixing, ffn: gelu, freeze: ['ffn.*']}}"],
     "standard [layers: standard, standard (mixer mixing; ffn gelu; frozen ffn.*)]"),
    ([f"model.ffn={SCALED}"], f"standard (ffn {SCALED})"),
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
        with pytest.raises(ValueError, match=r"^model\.vocab_size and model\.max_seq_len must be resolved \(from the "
                                             r"task\) before building$"):
            build_model(unresolved, 0)


def test_a_variant_with_its_own_mixer_takes_a_python_configs_default_and_refuses_another():
    cfg = model()  # model.mixer: attention, the default
    mixit = build_model(replace(cfg, variant="mixit", mixer_options={}), 0)
    assert type(mixit.blocks[0].mixer).__name__ == "MixingMixer"
    with pytest.raises(ConfigError, match="model.mixer=mixing conflicts with model.variant=frozen_qk"):
        build_model(replace(cfg, variant="frozen_qk", mixer="mixing"), 0)
    # Its own mixer named by import path is that mixer, not a conflict.
    path = build_model(replace(cfg, variant="mixit", mixer="modformer.model.mixing:build_mixing", mixer_options={}), 0)
    assert type(path.blocks[0].mixer).__name__ == "MixingMixer"


def test_a_construction_adapts_the_model_it_builds():
    reference = build_model(model("model.variant=mixit", "model.construction=reference"), 0)
    assert "ScaledLinear" in {type(m).__name__ for m in reference.modules()}
    assert "ScaledLinear" not in {type(m).__name__ for m in build_model(model("model.variant=mixit"), 0).modules()}


def test_the_decoder_is_built_with_every_size_and_switch_of_its_config():
    cfg = model("model.norm_eps=0.001", "model.tie_embeddings=true", "model.learned_positions=true",
                "model.pad_embedding_frozen=true", "model.pad_id=3", "model.max_seq_len=40")
    m = build_model(cfg, 0)
    norms = [x for x in m.modules() if isinstance(x, torch.nn.RMSNorm)]
    assert len(norms) == 2 * cfg.n_layers + 1 and {x.eps for x in norms} == {0.001}
    assert m.lm_head is None  # tied: the head is the embedding
    assert m.positions.num_embeddings == 40 and m.max_seq_len == 40
    assert m.embed.padding_idx == 3 == m.pad_id
    plain = build_model(model("model.max_seq_len=40", "model.pad_id=5"), 0)
    assert plain.lm_head is not None and plain.positions is None and plain.embed.padding_idx is None
    assert plain.pad_id == 5  # the token a classifier's pooling skips, frozen or not


def test_every_part_is_told_its_layer_and_built_with_its_options():
    m = build_model(model("model.n_layers=3", "model.ffn=test_stacks:LayerAware"), 0)
    assert [b.ffn.layer for b in m.blocks] == [0, 1, 2]
    scaled = model(f"model.ffn={SCALED}", "model.ffn_options={scale: 3.0}")
    assert [layer.ffn_options for layer in layer_plan(scaled)] == [{"scale": 3.0, "shift": 0.0}] * 2
    assert [b.ffn.options.scale for b in build_model(scaled, 0).blocks] == [3.0, 3.0]


class Refuses(torch.nn.Module):
    """A part whose own check of its options fails while it is built."""

    Options = ScaledOptions

    def __init__(self, cfg, options):
        super().__init__()
        raise ValueError(f"scale {options.scale} is not allowed")


@pytest.mark.parametrize("overrides, where", [
    ([f"model.ffn={__name__}:Refuses"], f"model.ffn={__name__}:Refuses"),
    ([f"model.mixer={__name__}:Refuses"], f"model.mixer={__name__}:Refuses"),
])
def test_a_part_that_raises_while_built_is_one_error_naming_it(overrides, where):
    with pytest.raises(ConfigError, match=rf"^{where} raised ValueError while building.*: scale 1.0 is not allowed$"):
        build_model(model(*overrides), 0)


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


def test_a_layer_records_only_what_it_does_not_inherit():
    mixit = model("model.layers={0: mixit}").layers[0]
    assert mixit.variant == "mixit" and mixit.mixer is None  # its mixer is its variant's
    cfg = model(f"model.ffn={SCALED}", "model.ffn_options={scale: 3.0}", "model.layers={1: {ffn_options: {shift: 1.0}}}")
    assert [layer.ffn_options for layer in cfg.layers] == [{}, {"shift": 1.0}]
    assert [layer.ffn_options for layer in layer_plan(cfg)] == [{"scale": 3.0, "shift": 0.0}, {"scale": 3.0, "shift": 1.0}]
    # Another feed-forward module records every option it was built with, filled in.
    other = model("model.layers={1: {ffn: test_stacks:Scaled, ffn_options: {shift: 1.0}}}")
    assert other.layers[1].ffn_options == {"scale": 1.0, "shift": 1.0}


def test_a_layers_other_ffn_starts_from_its_own_defaults():
    cfg = model(f"model.ffn={SCALED}", "model.ffn_options={scale: 3.0}", "model.layers={1: {ffn: swiglu}}")
    assert [layer.ffn_options for layer in layer_plan(cfg)] == [{"scale": 3.0, "shift": 0.0}, {}]


def test_a_layers_bad_ffn_option_is_named_by_its_layer():
    with pytest.raises(ConfigError, match=r"^unknown config key 'model\.layers\[1\]\.ffn_options\.scael'"):
        model("model.layers={1: {ffn: test_stacks:Scaled, ffn_options: {scael: 2.0}}}")


def test_an_unchecked_stack_names_the_layer_it_refuses():
    """A ModelConfig built in Python reaches the stack's rules first when it is built."""
    cfg = replace(model(), layers=[LayerConfig(), LayerConfig(variant="mixit", mixer="attention")])
    message = r"^model\.layers\[1\]\.mixer=attention conflicts with its variant mixit, which is built with the " \
              r"'mixing' mixer$"
    for step in (layer_plan, resolve_layers):
        with pytest.raises(ConfigError, match=message):
            step(cfg)


rebuilt = Variant(lambda cfg: build_decoder(cfg), description="the decoder, by another builder")


def test_a_layer_variant_needs_the_decoders_own_builder():
    with pytest.raises(ConfigError, match=rf"^model\.layers\[0\]\.variant={__name__}:rebuilt builds a whole model of "
                                          r"its own"):
        model(f"model.layers={{0: '{__name__}:rebuilt'}}")


def test_a_knowledge_reader_is_built_with_its_configured_widths():
    m = build_model(model("model.variant=knowledge", "model.knowledge.d_key=8", "model.knowledge.threshold_hidden=4"), 0)
    reader = m.blocks[0].ffn
    linears = [x for x in reader.modules() if isinstance(x, torch.nn.Linear)]
    assert {x.out_features for x in linears if x.in_features == 16 and x is not reader.v_proj} >= {8}  # q: d -> d_k
    assert any(x.out_features == 4 for x in linears)  # the threshold network's hidden width
    default = build_model(model("model.variant=knowledge"), 0).blocks[0].ffn
    assert not any(isinstance(x, torch.nn.Linear) and x.out_features in (4, 8) for x in default.modules())


@pytest.mark.parametrize("section", ["ffn", "mixer"])
def test_a_python_configs_unchecked_part_options_are_refused_by_their_key(section):
    cfg = replace(model(f"model.{section}={SCALED}"), **{f"{section}_options": {"scael": 2.0}})
    with pytest.raises(ConfigError, match=rf"^unknown config key 'model\.{section}_options\.scael'"):
        build_model(cfg, 0)
