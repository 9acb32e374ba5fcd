from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from modformer.config import RunConfig, load_config
from modformer.configtools import describe
from modformer.errors import ConfigError


def test_defaults_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  steps: 50\n  lr: 0.01\ntask:\n  n_pairs: 16\n")
    cfg = load_config(path, ["train.steps=7", "model.d_model=96", "model.n_heads=3"])
    assert cfg.train.steps == 7 and cfg.train.lr == 0.01
    assert cfg.task.n_pairs == 16 and cfg.model.d_model == 96
    assert cfg.train.batch_size == RunConfig().train.batch_size  # untouched default
    assert cfg.model.vocab_size == 512  # resolved from the task


def test_round_trip_through_yaml(tmp_path):
    cfg = load_config(None, ["train.betas=[0.8, 0.9]", "model.freeze=['blocks.0.*']"])
    path = tmp_path / "c.yaml"
    path.write_text(cfg.to_yaml())
    assert load_config(path) == cfg


@pytest.mark.parametrize("override, names", [
    ("train.stepz=5", "train.stepz"),
    ("modle.d_model=5", "modle"),
    ("task.n_pair=3", "task.n_pair"),
    ("train.steps=ten", "train.steps"),
    ("train.steps=1.5", "train.steps"),
    ("train.progress=3", "train.progress"),
    ("train.lr=fast", "train.lr"),
    ("train.betas=[0.9]", "train.betas"),
    ("model.n_heads=5", "model.n_heads"),
    ("model.n_kv_heads=3", "model.n_kv_heads"),
    ("model.vocab_size=100", "model.vocab_size"),
    ("model.max_seq_len=8", "model.max_seq_len"),
    ("train.precision=fp16", "train.precision"),
    ("task.name=nonesuch", "task.name"),
    ("model.variant=nonesuch", "model.variant"),
    ("model.mixer=nonesuch", "model.mixer"),
    ("model.ffn=nonesuch", "model.ffn"),
    ("task.n_pairs=200", "task.n_pairs"),
    ("train.steps", "train.steps"),
])
def test_bad_values_name_their_key(override, names):
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load_config(None, [override])


def test_bad_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(scalar)


def test_every_field_is_documented():
    rows = describe(RunConfig, "")
    assert rows and all(help_text for _, _, _, help_text in rows), [r[0] for r in rows if not r[3]]


@pytest.mark.parametrize("path", sorted(str(p) for p in (Path(__file__).parent.parent / "configs").rglob("*.yaml")))
def test_every_shipped_config_loads(path):
    """A typo in a shipped config would otherwise surface only when someone runs it; a sweep's
    every run config is built and checked."""
    from modformer.sweep.spec import load_sweep

    data = yaml.safe_load(Path(path).read_text())
    if "arms" in data:  # an LLM-Modules experiment, which `modformer llm-modules` runs in one folder
        from modformer.papers.llm_modules.config import load_llm_modules_config

        load_llm_modules_config(path)
    if "sweep" in data:  # of any kind of run (sweep.experiment)
        for profiles in ([], *([name] for name in data.get("profiles", {}))):  # the file and each profile
            sweep = load_sweep(path, profiles=profiles)
            assert {run.variant for run in sweep.runs()} == set(sweep.spec.variants)
    elif "arms" not in data:
        load_config(path)


@pytest.mark.parametrize("text, fragment", [
    ("", "is empty"),
    ("# only a comment\n", "is empty"),
    ("{}\n", "is empty"),
    ("model: {d_model: 32}\ntrain: {steps: 3}\nmodel: {d_model: 64}\n", "key 'model' is given twice in one mapping (lines 1 and 3)"),
    ("train:\n  steps: 3\n  lr: 0.1\n  steps: 4\n", "key 'steps' is given twice in one mapping (lines 2 and 4)"),
])
def test_empty_configs_and_duplicated_keys_are_refused_in_one_line(tmp_path, capsys, text, fragment):
    from modformer.cli import main

    path = tmp_path / "c.yaml"
    path.write_text(text)
    for command in (["train", str(path), "--out", str(tmp_path / "run")], ["sweep", str(path), "--out", str(tmp_path / "s")]):
        assert main(command) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and fragment in err[0] and str(path) in err[0], err
    assert not (tmp_path / "run").exists() and not (tmp_path / "s").exists()


def test_a_sweep_needs_a_sweep_section(tmp_path, capsys):
    from modformer.cli import main

    path = tmp_path / "c.yaml"
    path.write_text("model: {d_model: 32}\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no 'sweep' section" in err[0], err
    assert not (tmp_path / "s").exists()
    # Sweep keys given on the command line make one.
    from modformer.sweep.spec import load_sweep
    assert load_sweep(path, ["sweep.variants=[standard, mixit]"]).spec.variants == ["standard", "mixit"]


def test_a_variant_built_with_one_mixer_refuses_another_and_fills_it_in():
    from modformer.config import config_from_dict

    assert load_config(None, ["model.variant=mixit"]).model.mixer == "mixing"  # the saved config says what was built
    assert load_config(None, ["model.variant=frozen_qk"]).model.mixer == "attention"
    assert load_config(None, ["model.variant=knowledge", "model.mixer=mixing"]).model.mixer == "mixing"  # any mixer
    for variant, mixer in (("mixit", "attention"), ("frozen_qk", "mixing")):
        with pytest.raises(ConfigError, match=f"model.mixer={mixer} conflicts with model.variant={variant}"):
            load_config(None, [f"model.variant={variant}", f"model.mixer={mixer}"])
    # A run's own record reads as a new config does: one from before variants filled in their mixer
    # (the default, attention, beside MixiT) is refused; `modformer migrate` rewrites it (test_migrate.py).
    with pytest.raises(ConfigError, match="model.mixer=attention conflicts with model.variant=mixit"):
        config_from_dict({"model": {"variant": "mixit", "mixer": "attention"}})


def test_a_variant_given_the_mixer_of_another_is_refused_and_names_it():
    from modformer.config import config_from_dict

    # standard with the mixing mixer is MixiT (same builder, nothing frozen): a report would call it standard.
    with pytest.raises(ConfigError, match="model.variant=standard with model.mixer=mixing is the 'mixit' variant"):
        load_config(None, ["model.variant=standard", "model.mixer=mixing"])
    # Frozen-QK's mixer is attention too, but frozen_qk freezes Q and K: standard with attention is itself.
    assert load_config(None, ["model.variant=standard", "model.mixer=attention"]).model.variant == "standard"
    # So is a run's own record (none was written so: tests/test_results_commands.py reads them all).
    with pytest.raises(ConfigError, match="is the 'mixit' variant"):
        config_from_dict({"model": {"variant": "standard", "mixer": "mixing"}})


def test_the_knowledge_variant_refuses_a_feed_forward_it_would_not_read():
    from modformer.config import config_from_dict

    for override in ("model.ffn=gelu", "model.ffn_options={width: 3}"):
        with pytest.raises(ConfigError, match=f"model.{override.split('=')[0][6:]}=.* is not read by "
                                              "model.variant=knowledge"):
            load_config(None, ["model.variant=knowledge", override])
    cfg = load_config(None, ["model.variant=knowledge", "model.knowledge.activation=gelu"])
    assert cfg.model.ffn == "swiglu" and cfg.model.knowledge.activation == "gelu"
    # A sweep's shared section may name the FFN the knowledge reader folds into.
    assert load_config(None, ["model.variant=knowledge", "model.ffn=gelu", "model.knowledge.activation=gelu"])
    # The reference construction fills in model.ffn for the variants that read it only.
    mixing = load_config(None, ["model.variant=knowledge", "model.mixer=mixing", "model.construction=reference"])
    assert mixing.model.ffn == "swiglu"
    assert load_config(None, ["model.variant=mixit", "model.construction=reference"]).model.ffn == "shaped_leaky_glu"
    with pytest.raises(ConfigError, match="is not read by model.variant=knowledge"):  # a run's record too
        config_from_dict({"model": {"variant": "knowledge", "ffn": "gelu"}})


def test_build_model_refuses_a_variant_mixer_conflict_made_in_python():
    from modformer.model.config import ModelConfig
    from modformer.variants.base import build_model

    cfg = ModelConfig(variant="mixit", vocab_size=8, max_seq_len=4, d_model=8, n_heads=2, n_layers=1)
    assert build_model(cfg, 0).blocks[0].mixer.__class__.__name__ == "MixingMixer"  # the default mixer: filled in
    with pytest.raises(ConfigError, match="model.mixer=my_conv conflicts with model.variant=mixit"):
        build_model(replace(cfg, mixer="my_conv"), 0)

