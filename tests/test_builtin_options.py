"""Our own mixers are ordinary parts: attention's and MixiT's options are their `Options`, set as
`model.mixer_options`, per layer in `model.layers` and per arm of a sweep, recorded whole;
the former model-wide sections are refused in one line naming where their keys went, and
`modformer migrate` rewrites what older versions recorded (tests/test_migrate.py)."""

import shlex

import torch
import yaml

from modformer.cli import main
from modformer.config import load_config
from modformer.configtools import from_dict
from modformer.migrate_options import command_sections, sweep_sections
from modformer.model.attention import AttentionOptions, build_attention
from modformer.model.mixing import MixingOptions, build_mixing
from modformer.registry import MIXERS
from modformer.sweep.spec import Sweep, SweepConfig
from modformer.variants.base import build_model

TINY = ["model.d_model=16", "model.n_heads=2", "task.n_pairs=2", "task.test_size=50", "task.validation_size=20"]


def test_the_built_in_mixers_declare_their_options_as_any_part():
    assert MIXERS["attention"] is build_attention and build_attention.Options is AttentionOptions
    assert MIXERS["mixing"] is build_mixing and build_mixing.Options is MixingOptions
    cfg = load_config(None, [*TINY, "model.variant=mixit", "model.mixer_options.scale=2.0"])
    assert cfg.model.mixer_options == {"scale": 2.0, "sigma_range": None, "sink_head": False, "causal": True,
                                       "bidirectional_drift": "row_sum", "extra_positions": 0}  # recorded whole
    assert load_config(None, TINY).model.mixer_options == {"causal": True, "qk_init_scale": 1.0}


def test_one_layer_has_its_own_attention_options():
    """Q and K 8x in layer 0 only: the same draws as the default model's, scaled there alone."""
    base = load_config(None, [*TINY, "model.variant=frozen_qk"])
    own = load_config(None, [*TINY, "model.variant=frozen_qk", "model.layers={0: {mixer_options: {qk_init_scale: 8.0}}}"])
    assert own.model.layers[0].mixer_options == {"qk_init_scale": 8.0} and own.model.layers[1].mixer_options == {}
    plain, scaled = (dict(build_model(c.model, seed=0).named_parameters()) for c in (base, own))
    for name, p in plain.items():
        if name.startswith("blocks.0.mixer.") and name.endswith(("q_proj.weight", "k_proj.weight")):
            torch.testing.assert_close(scaled[name], 8.0 * p)
        else:
            assert torch.equal(scaled[name], p), name


def test_a_mixit_layer_in_a_standard_model_takes_its_own_mixing_options():
    cfg = load_config(None, [*TINY, "model.n_layers=2", "model.layers={0: {variant: mixit, mixer_options: {sink_head: true}}}"])
    layer = cfg.model.layers[0]
    assert layer.mixer_options["sink_head"] is True and set(layer.mixer_options) == set(MixingOptions.__dataclass_fields__)
    model = build_model(cfg.model, seed=0)
    sink = 0.5 * torch.eye(model.blocks[0].mixer.mixing.shape[-1])
    sink[:, 0] = 0.5
    assert torch.equal(model.blocks[0].mixer.mixing[0], sink)
    assert model.blocks[1].mixer.causal and not hasattr(model.blocks[1].mixer, "mixing")


def test_an_option_of_one_arms_mixer_goes_in_that_arm_and_a_shared_one_in_the_base():
    base = {"model": {"d_model": 16, "n_heads": 2, "mixer_options": {"causal": False}},
            "task": {"name": "retrieval", "n_pairs": 2, "test_size": 50, "validation_size": 20}}
    spec = from_dict(SweepConfig, {"variants": {"standard": {}, "mixit_wide": {"variant": "mixit",
                                                                               "model.mixer_options.scale": 2.0}}})
    runs = {run.variant: run.config.model for run in Sweep(base, spec).runs()}
    assert runs["standard"].mixer_options == {"causal": False, "qk_init_scale": 1.0}
    assert runs["mixit_wide"].mixer_options["scale"] == 2.0 and runs["mixit_wide"].mixer_options["causal"] is False


def test_the_former_sections_are_refused_in_one_line_naming_where_their_keys_went(tmp_path, capsys):
    for override in ("model.attention.causal=false", "model.mixing.scale=2"):
        assert main(["train", "configs/retrieval.yaml", "--out", str(tmp_path / "run"), override]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and "model.mixer_options" in err[0] and "modformer migrate" in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_recorded_sweep_gives_each_arm_the_options_its_mixer_read():
    """MixiT's extra_positions in a sweep of three variants: its arm's alone; attention's and
    mixing's causal alike: the base's."""
    split = {"model": {"mixing": {"extra_positions": 0}}, "sweep": {"variants": ["standard", "frozen_qk", "mixit"]}}
    assert sweep_sections(split)
    assert "mixing" not in split["model"] and split["sweep"]["variants"] == {
        "standard": {}, "frozen_qk": {}, "mixit": {"model.mixer_options.extra_positions": 0}}
    shared = {"model": {"attention": {"causal": False}, "mixing": {"causal": False}},
              "sweep": {"variants": ["standard", "mixit"], "grid": {"model.attention.qk_init_scale": [1.0, 8.0]}}}
    sweep_sections(shared)
    assert shared["model"] == {"mixer_options": {"causal": False}}
    assert shared["sweep"] == {"variants": ["standard", "mixit"], "grid": {"model.mixer_options.qk_init_scale": [1.0, 8.0]}}


def test_a_recorded_command_still_rebuilds_its_runs():
    def migrated(line: str) -> str:
        words = shlex.split(line)
        command_sections(words)
        return shlex.join(words)

    cfg = "modformer sweep configs/experiments/random_attention/sentiment.yaml"
    assert migrated(f"{cfg} model.attention.causal=false model.mixing.causal=false --out x") == \
        f"{cfg} model.mixer_options.causal=false --out x"
    arms = yaml.safe_load(shlex.split(migrated(f"{cfg} 'sweep.variants=[standard, mixit]' model.mixing.extra_positions=0"))[3]
                          .partition("=")[2])
    assert arms == {"standard": {}, "mixit": {"model.mixer_options.extra_positions": 0}}
    assert migrated(f"{cfg} 'sweep.variants=[standard]' model.mixing.extra_positions=0") == \
        f"{cfg} 'sweep.variants=[standard]'"  # no listed variant read it
    assert migrated(f"{cfg} 'sweep.grid={{model.attention.qk_init_scale: [8.0]}}'") == \
        f"{cfg} 'sweep.grid={{model.mixer_options.qk_init_scale: [8.0]}}'"
