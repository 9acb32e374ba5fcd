"""`model.construction: reference` builds the MixiT reference code's models, point by point.

Each test checks one point of the reference construction on the built model, so that a
change to any of them fails here (the values pinned below are the reference's, read from
princeton-pli/MixiT; docs/papers/random-attention.md lists them with their
sources)."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from modformer import build_model, capture
from modformer.config import config_from_dict
from modformer.constructions import construction_label
from modformer.papers.random_attention.construction import POINTS
from modformer.errors import ConfigError, ModformerError
from modformer.model.mixing import MixingOptions
from modformer.model.mixing import mixing_matrices
from modformer.papers.random_attention.scaled_linear import ScaledLinear
from modformer.train.optim import build_optimizer, learning_rate

D, D_FF = 64, 256


def reference(variant="mixit", *overrides, trainer="depth.py", **model):
    """A config of `variant` in the reference construction, with `trainer`'s task (TASKS)."""
    data = {"model": {"construction": "reference", "variant": variant, "d_model": D, "n_layers": 2, "n_heads": 4,
                      **model}, "task": dict(TASKS[trainer]),
            "train": {"steps": 200}}
    for key, value in overrides:
        node = data
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return config_from_dict(data)


TASKS = {"depth.py": {"name": "retrieval", "n_pairs": 4},
         "hdmemorize_exp.py": {"name": "memorization", "n": 16},
         "trainer.py": {"name": "lm", "source": "movie_reviews", "tokenizer_vocab": 512, "seq_len": 32},
         "trainer_classifier.py": {"name": "sentiment", "source": "imdb", "tokenizer_vocab": 512, "seq_len": 32}}


def filled(variant, trainer, **train):
    """{key: value} the switch fills in for `variant` with `trainer`'s task."""
    from modformer.papers.random_attention.construction import fill_reference
    data = fill_reference({"model": {"construction": "reference", "variant": variant},
                               "task": dict(TASKS[trainer]), "train": dict(train)})
    flat = {}

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[prefix + key] = value
    walk({"model": data["model"], "train": data["train"]}, "")
    return {k: v for k, v in flat.items() if k not in ("model.construction", "model.variant", "train.steps")}


SHARED = {"model.attn_bias": True, "model.ffn_bias": True, "model.init_std": 0.02, "model.norm_eps": 1e-6,
          "model.tie_embeddings": False, "train.betas": [0.9, 0.999], "train.min_lr_ratio": 0.0,
          "train.grad_clip": 1.0}
VANILLA = {"model.learned_positions": False, "model.rope": True, "model.construction_options.skip_scale": 1.0,
           "model.construction_options.residual_scale": 1.0, "model.ffn": "swiglu", "model.construction_options.scaled_linear": None}
MIXING = {"model.learned_positions": True, "model.mixer_options.sink_head": True, "model.ffn": "shaped_leaky_glu",
          "model.mixer_options.bidirectional_drift": "reference"}
DEPTH_TRAIN = {"train.lr": 1e-2, "train.weight_decay": 1e-3, "train.schedule": "cosine", "train.warmup_steps": 500,
               "train.batch_size": 1000}
# hdmemorize_exp.py's batch: min(n^2, 256 * 128) facts, 256 for the n = 16 of TASKS.
MEMORIZE_TRAIN = {"train.lr": 5e-3, "train.weight_decay": 1e-4, "train.schedule": "cosine", "train.warmup_steps": 500,
                  "train.batch_size": 256}
HF_TRAIN = {"train.lr": 5e-4, "train.weight_decay": 0.01, "train.schedule": "linear"}
H = math.sqrt(0.5)


@pytest.mark.parametrize("variant, trainer, expected", [
    ("standard", "depth.py", {**SHARED, **VANILLA, **DEPTH_TRAIN}),
    ("mixit", "depth.py", {**SHARED, **MIXING, **DEPTH_TRAIN, "model.construction_options.skip_scale": H, "model.construction_options.residual_scale": H,
                           "model.construction_options.scaled_linear": [512.0, 1.0], "model.mixer_options.extra_positions": 1}),
    ("standard", "hdmemorize_exp.py", {**SHARED, **VANILLA, **MEMORIZE_TRAIN}),
    ("mixit", "hdmemorize_exp.py", {**SHARED, **MIXING, **MEMORIZE_TRAIN, "model.construction_options.skip_scale": H,
                                    "model.construction_options.residual_scale": H, "model.construction_options.scaled_linear": [512.0, 1.0],
                                    "model.mixer_options.extra_positions": 1}),
    ("standard", "trainer.py", {**SHARED, **VANILLA, **HF_TRAIN, "train.warmup_steps": 800}),
    ("mixit", "trainer.py", {**SHARED, **MIXING, **HF_TRAIN, "train.warmup_steps": 800, "model.construction_options.skip_scale": 0.5,
                             "model.construction_options.residual_scale": math.sqrt(0.75), "model.construction_options.scaled_linear": [512.0, 1.0]}),
    ("standard", "trainer_classifier.py", {**SHARED, **VANILLA, **HF_TRAIN, "train.warmup_steps": 800,
                                           "model.mixer_options.causal": True, "model.pad_embedding_frozen": True}),
    ("mixit", "trainer_classifier.py", {**SHARED, **MIXING, **HF_TRAIN, "train.warmup_steps": 800,
                                        "model.construction_options.skip_scale": H, "model.construction_options.residual_scale": H,
                                        "model.construction_options.scaled_linear": [1.0, 1.0], "model.mixer_options.causal": False,
                                        "model.pad_embedding_frozen": True}),
])
def test_the_reference_points_are_pinned(variant, trainer, expected):
    """Every value each reference trainer's construction fills in, for both modes: a changed,
    added or dropped point fails here. Warm-up: max(int(0.04 * 20000), 500) = 800."""
    assert filled(variant, trainer, steps=20_000) == expected


def test_mixing_is_drawn_for_the_references_whole_sample():
    """depth.py feeds its whole sample, answer included, and draws the mixing for that length
    (which sets sigma_h's range); ours feeds all but the answer: the matrix we keep is the
    top-left block of one drawn a position longer. Not for tasks the reference lacks."""
    cfg = reference("mixit")
    T = cfg.model.max_seq_len
    assert T == 2 * 4 + 3 - 1 and cfg.model.mixer_options["extra_positions"] == 1  # retrieval_4: a sample of 11
    from modformer.model.mixing import MixingMixer
    mixers = []
    for length, extra in ((T, 1), (T + 1, 0)):
        mixers.append(MixingMixer(D, 4, length, MixingOptions(**{**cfg.model.mixer_options, "extra_positions": extra})))
        mixers[-1].init_parameters(0.02, torch.Generator().manual_seed(3))
    ours, longer = (m.mixing for m in mixers)
    assert ours.shape[-1] == T and torch.equal(ours, longer[:, :T, :T])
    assert reference("mixit", ("task", {"name": "khop"})).model.mixer_options["extra_positions"] == 0
    with pytest.raises(ConfigError, match="extra_positions"):
        reference("mixit", ("model.mixer_options.causal", False), ("model.mixer_options.extra_positions", 1))


def test_the_hf_trainers_warm_up_for_at_least_500_steps():
    from modformer.papers.random_attention.construction import DEFAULT_STEPS, hf_warmup
    from modformer.train.config import LoopConfig
    assert [hf_warmup({"train": {"steps": n}}) for n in (200, 12_500, 12_525, 40_000)] == [500, 500, 501, 1600]
    assert DEFAULT_STEPS == LoopConfig().steps  # a config without train.steps trains this many
    # depth.py and hdmemorize_exp.py: the task file's and hdmemorize_exp.py's fixed 500.
    assert filled("standard", "depth.py", steps=20_000)["train.warmup_steps"] == 500


def test_the_docs_table_lists_every_point():
    page = (Path(__file__).parents[1] / "docs" / "papers" / "random-attention.md").read_text()
    table = page.split("## The reference construction", 1)[1].split("\n## ", 1)[0]
    for point in POINTS:
        assert f"`{point.key}`" in table, point.key


def test_mixit_gets_learned_positions_that_reach_the_output():
    cfg = reference()
    model = build_model(cfg.model, seed=0)
    assert model.positions is not None and model.positions.weight.requires_grad
    assert model.positions.weight.std().item() == pytest.approx(0.02, rel=0.1)
    tokens = torch.full((1, model.max_seq_len), 300)  # one token repeated: only positions tell the places apart
    with torch.no_grad():
        with_positions = model(tokens)
        model.positions.weight.zero_()
        without = model(tokens)
    assert not torch.allclose(with_positions, without)


def test_sink_head_is_exactly_half_on_token_zero_and_half_on_itself():
    """modeling_llama.py: eye * 0.5, then column 0 set to 0.5, so [0, 0] is 0.5 (not 1) and
    row 0 sums to 0.5."""
    model = build_model(reference().model, seed=0)
    T = model.max_seq_len
    sink = 0.5 * torch.eye(T)
    sink[:, 0] = 0.5
    assert sink[0, 0] == 0.5 and sink[0].sum() == 0.5 and torch.all(sink[1:].sum(-1) == 1.0)
    for block in model.blocks:
        assert torch.equal(block.mixer.mixing[0], sink)
        assert not torch.equal(block.mixer.mixing[1], sink)


def assert_block_scales(model, skip, branch):
    """Block 0 computes skip * x + branch * mixer(..), then the same with the FFN."""
    block, seen = model.blocks[0], {}
    block.register_forward_pre_hook(lambda m, args: seen.__setitem__("x", args[0].detach()))
    block.mixer.register_forward_hook(lambda m, args, out: seen.__setitem__("mixed", out.detach()))
    block.ffn.register_forward_hook(lambda m, args, out: seen.__setitem__("ffn", out.detach()))
    with capture(model, "blocks.0.resid_*") as acts:
        model(torch.randint(0, 512, (3, model.max_seq_len)))
    torch.testing.assert_close(acts["blocks.0.resid_mid"], skip * seen["x"] + branch * seen["mixed"])
    torch.testing.assert_close(acts["blocks.0.resid_post"], skip * acts["blocks.0.resid_mid"] + branch * seen["ffn"])


def test_skip_and_branch_are_both_scaled_by_sqrt_half():
    assert_block_scales(build_model(reference().model, seed=0), math.sqrt(0.5), math.sqrt(0.5))


def test_mlp_is_gated_shaped_leaky_relu_with_its_gain():
    ffn = build_model(reference().model, seed=0).blocks[0].ffn
    slope = 1 - 1 / math.sqrt(D)
    assert ffn.slope == pytest.approx(slope)
    assert ffn.gain == pytest.approx(nn.init.calculate_gain("leaky_relu", slope))
    x = torch.randn(5, D, dtype=torch.float64)
    ffn = ffn.double()

    def lin(p, v):
        return (v @ p.weight.T + p.bias) * p.output_scale

    gate = lin(ffn.gate_proj, x)
    expected = lin(ffn.down_proj, ffn.gain * torch.where(gate > 0, gate, slope * gate) * lin(ffn.up_proj, x))
    torch.testing.assert_close(ffn(x), expected)


def test_every_projection_is_a_scaled_linear_with_the_reference_factor():
    model = build_model(reference().model, seed=0)
    stream = math.sqrt(512 / D)
    factors = {"mixer.v_proj": stream, "mixer.o_proj": stream, "ffn.gate_proj": stream, "ffn.up_proj": stream,
               "ffn.down_proj": math.sqrt(1 / D_FF)}
    for i, block in enumerate(model.blocks):
        for name, factor in factors.items():
            proj = block.get_submodule(name)
            assert isinstance(proj, ScaledLinear), f"blocks.{i}.{name}"
            assert proj.output_scale == pytest.approx(factor)
            x = torch.randn(2, proj.in_features)
            torch.testing.assert_close(proj(x), F.linear(x, proj.weight, proj.bias) * factor)
    assert isinstance(model.lm_head, ScaledLinear) and model.lm_head.output_scale == pytest.approx(stream)
    assert {type(m) for m in model.modules() if isinstance(m, nn.Linear)} == {ScaledLinear}


@pytest.mark.parametrize("variant", ["mixit", "standard", "frozen_qk"])
def test_biases_on_init_std_and_norm_eps(variant):
    model = build_model(reference(variant).model, seed=0)
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and n != "lm_head"}
    assert linears and all(m.bias is not None for m in linears.values())
    weights = torch.cat([m.weight.flatten() for m in linears.values()])
    assert weights.std().item() == pytest.approx(0.02, rel=0.02)
    assert all(m.eps == 1e-6 for m in model.modules() if isinstance(m, nn.RMSNorm))
    assert model.lm_head is not None


@pytest.mark.parametrize("variant", ["standard", "frozen_qk"])
def test_attention_models_are_plain_llama(variant):
    model = build_model(reference(variant).model, seed=0)
    assert {type(m) for m in model.modules() if isinstance(m, nn.Linear)} == {nn.Linear}
    assert model.positions is None
    for block in model.blocks:
        assert block.mixer.rope is not None and type(block.ffn).__name__ == "SwiGLU"
        assert block.skip_scale == 1.0 and block.residual_scale == 1.0


def test_causal_rows_sum_to_one_and_bidirectional_rows_follow_the_reference_formula():
    T, H, hd = 12, 4, 16
    g = torch.Generator().manual_seed(3)
    causal = mixing_matrices(H, T, hd, MixingOptions(bidirectional_drift="reference"), g).double()
    torch.testing.assert_close(causal.sum(-1), torch.ones(H, T, dtype=torch.float64), atol=1e-6, rtol=0)
    low, high = 1 / math.sqrt(T * hd), 1 / math.sqrt(T)
    cfg = MixingOptions(causal=False, bidirectional_drift="reference")
    mix = mixing_matrices(H, T, hd, cfg, torch.Generator().manual_seed(5)).double()
    # The same draws by hand: sigma per head, then the noise, drift over i + 1.
    g = torch.Generator().manual_seed(5)
    sigma = low + (high - low) * torch.rand(H, 1, 1, generator=g, dtype=torch.float64)
    noise = torch.randn(H, T, T, generator=g, dtype=torch.float64) * sigma
    sums = noise.sum(-1)
    i = torch.arange(T, dtype=torch.float64)
    torch.testing.assert_close(mix.sum(-1), 1 + sums * (1 - T / (i + 1)), atol=1e-6, rtol=0)
    assert (mix.sum(-1)[:, :-1] - 1).abs().max() > 1e-3  # early rows do not sum to 1
    corrected = mixing_matrices(H, T, hd, MixingOptions(causal=False), torch.Generator().manual_seed(5)).double()
    torch.testing.assert_close(corrected.sum(-1), torch.ones(H, T, dtype=torch.float64), atol=1e-6, rtol=0)


def test_reference_optimizer_settings():
    cfg = reference("standard", ("train.steps", 2000))
    assert (cfg.train.lr, cfg.train.weight_decay, cfg.train.betas, cfg.train.min_lr_ratio, cfg.train.warmup_steps,
            cfg.train.batch_size, cfg.train.schedule) == (1e-2, 1e-3, (0.9, 0.999), 0.0, 500, 1000, "cosine")
    opt = build_optimizer(build_model(cfg.model, seed=0), cfg.train)
    assert all(group["betas"] == (0.9, 0.999) for group in opt.param_groups)
    assert learning_rate(cfg.train.steps, cfg.train) == pytest.approx(0.0, abs=1e-12)


def test_explicit_keys_win_and_the_label_names_them():
    cfg = reference("mixit", ("train.weight_decay", 0.1), learned_positions=False)
    assert cfg.model.learned_positions is False and cfg.train.weight_decay == 0.1
    assert cfg.model.mixer_options["sink_head"] is True
    assert construction_label(cfg.to_dict()) == (
        "reference (depth.py) except model.learned_positions=False, weight decay 0.1")
    # The optimizer's departures are named too, lr included: a run at lr 3e-3 is not the script's.
    assert construction_label(reference("mixit", ("train.lr", 3e-3), ("train.warmup_steps", 20),
                                        ("train.batch_size", 256)).to_dict()) == (
        "reference (depth.py) except lr 0.003, warm-up 20, batch 256")
    assert construction_label(reference("mixit").to_dict()) == "reference (depth.py)"
    # The resolved config reloads to the same config (a resume reads config.yaml).
    assert config_from_dict(cfg.to_dict()) == cfg


def test_corrected_is_the_default_and_changes_nothing():
    data = {"model": {"variant": "mixit", "d_model": D}, "task": {"name": "retrieval", "n_pairs": 4}}
    cfg = config_from_dict(data)
    assert construction_label(cfg.to_dict()) == "corrected"
    assert (cfg.model.learned_positions, cfg.model.mixer_options["sink_head"], cfg.model.construction_options,
            cfg.model.ffn, cfg.train.lr) == (False, False, {}, "swiglu", 1e-3)
    model = build_model(cfg.model, seed=0)
    assert {type(m) for m in model.modules() if isinstance(m, nn.Linear)} == {nn.Linear}
    assert all(b.skip_scale == 1 and b.residual_scale == 1 for b in model.blocks)


def test_an_unknown_construction_is_refused():
    with pytest.raises(ConfigError, match="model.construction"):
        config_from_dict({"model": {"construction": "paper"}, "task": {"name": "retrieval", "n_pairs": 4}})


def test_attention_models_label_their_deviations_and_keep_q_k_plain():
    cfg = reference("standard", ("model.construction_options.skip_scale", 0.5),
                    ("model.construction_options.scaled_linear", [512, 1]))
    assert construction_label(cfg.to_dict()) == ("reference (depth.py) except model.construction_options.skip_scale=0.5, "
                                                 "model.construction_options.scaled_linear=[512, 1]")
    attention = build_model(cfg.model, seed=0).blocks[0].mixer
    assert type(attention.q_proj) is nn.Linear and type(attention.k_proj) is nn.Linear
    assert isinstance(attention.v_proj, ScaledLinear)


def test_the_resolved_config_survives_a_yaml_round_trip():
    import yaml
    cfg = reference("mixit", ("train.lr", 3e-3))
    assert config_from_dict(yaml.safe_load(cfg.to_yaml())) == cfg


def test_bad_or_conflicting_input_is_one_clear_error():
    with pytest.raises(ConfigError, match="model.variant"):
        reference([1])
    with pytest.raises(ConfigError, match="tie_embeddings"):
        build_model(reference("mixit", tie_embeddings=True).model, seed=0)
    for key, value, says in (("skip_scale", 0, "skip_scale must be positive"),
                             ("scaled_linear", [512, -1], "bases must be positive"),
                             ("residual_scaling", 1, "residual_scaling")):
        with pytest.raises(ConfigError, match=says):
            reference("mixit", (f"model.construction_options.{key}", value))


def test_conversions_refuse_what_they_would_lose():
    from modformer.interop.hf_llama import hf_config_from, to_hf_llama
    pytest.importorskip("transformers")
    hf_config_from(reference("standard").model)  # plain Llama with biases: converts
    with pytest.raises(ConfigError, match="LlamaForCausalLM"):
        hf_config_from(reference("mixit").model)
    for key, value, says in (("scaled_linear", [512, 1], r"blocks\.0\.mixer\.v_proj, blocks\.0\.mixer\.o_proj"),
                             ("skip_scale", 0.5, r"^blocks\.0, blocks\.1 scaled")):
        cfg = reference("standard", (f"model.construction_options.{key}", value)).model
        with pytest.raises(ModformerError, match=says):
            to_hf_llama(build_model(cfg, seed=0), cfg)


def test_signal_propagation_builds_the_reference_construction():
    from modformer.analysis.signal import _model_config
    cfg = _model_config("mixit", 2, 64, 4, 512, 16, {"construction": "reference"})
    assert cfg.learned_positions and cfg.mixer_options["sink_head"] and cfg.ffn == "shaped_leaky_glu"


def test_reports_read_construction_and_budget_from_runs_configs(tmp_path):
    import yaml
    from modformer.papers.random_attention.report import run_facts as _run_facts
    cfg = reference("mixit", ("train.batch_size", 256))
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    old = {"run_id": "a", "run_dir": "runs/a", "summary": {"test": {}}}
    assert _run_facts(tmp_path, old) == ("reference (depth.py) except batch 256",
                                         "51,200 sequences (0.0512% of depth.py's 1e+08), width 64 (0.125x the paper's 512)")
    # The label is computed from config.yaml, not taken from a summary's shorter one.
    assert _run_facts(tmp_path, {**old, "summary": {"construction": "reference", "test": {}}})[0] == (
        "reference (depth.py) except batch 256")
    with pytest.raises(ModformerError, match="run b has no config.yaml"):  # a run's records are whole, or refused
        _run_facts(tmp_path, {"run_id": "b", "run_dir": "runs/b", "summary": {}})


def test_language_modelling_mixit_has_skip_half_and_branch_sqrt_three_quarters():
    """trainer.py passes skip_scaling 0.5: skip 0.5, branch sqrt(1 - 0.25) = 0.866."""
    model = build_model(reference("mixit", trainer="trainer.py").model, seed=0)
    assert_block_scales(model, 0.5, math.sqrt(0.75))
    assert model.lm_head.output_scale == pytest.approx(math.sqrt(512 / D))


@pytest.mark.parametrize("trainer", ["trainer.py", "trainer_classifier.py"])
def test_the_hf_trainers_schedule_is_linear_warm_up_then_linear_decay_to_zero(trainer):
    train = reference("standard", ("train.steps", 2000), trainer=trainer).train
    assert (train.lr, train.weight_decay, train.warmup_steps, train.schedule) == (5e-4, 0.01, 500, "linear")
    lrs = [learning_rate(s, train) for s in (0, 499, 500, 1250, 2000)]
    assert lrs == pytest.approx([5e-4 / 500, 5e-4, 5e-4, 2.5e-4, 0.0])


def test_the_classifier_scales_projections_by_base_one():
    """trainer_classifier.py passes no base_hidden_size: base 1, so V, O, gate, up and the
    score head are scaled by sqrt(1/d), down by sqrt(1/d_ff)."""
    model = build_model(reference("mixit", trainer="trainer_classifier.py").model, seed=0)
    for name in ("mixer.v_proj", "mixer.o_proj", "ffn.gate_proj", "ffn.up_proj"):
        assert model.blocks[1].get_submodule(name).output_scale == pytest.approx(math.sqrt(1 / D)), name
    assert model.blocks[1].ffn.down_proj.output_scale == pytest.approx(math.sqrt(1 / D_FF))
    assert model.lm_head.output_scale == pytest.approx(math.sqrt(1 / D))
    assert not model.blocks[0].mixer.cfg.causal and (model.blocks[0].mixer.mixing.triu(1) != 0).any()


@pytest.mark.parametrize("variant", ["standard", "frozen_qk", "mixit"])
def test_the_classifier_pad_row_is_zero_and_never_trained(variant):
    cfg = reference(variant, trainer="trainer_classifier.py")
    pad = cfg.model.pad_id
    assert pad == 1  # the trained BPE's pad token
    model = build_model(cfg.model, seed=0)
    assert torch.all(model.embed.weight[pad] == 0) and model.embed.weight[0].abs().sum() > 0
    opt = build_optimizer(model, cfg.train)
    tokens = torch.randint(0, 512, (4, model.max_seq_len))
    tokens[:, -5:] = pad
    for group in opt.param_groups:
        group["lr"] = 1e-2
    before = model.embed.weight.detach().clone()
    model(tokens).square().mean().backward()
    assert torch.all(model.embed.weight.grad[pad] == 0)
    opt.step()
    assert torch.all(model.embed.weight[pad] == 0) and not torch.equal(model.embed.weight[0], before[0])
    # Not in the corrected construction, nor for the algorithmic tasks.
    assert build_model(reference(variant).model, seed=0).embed.padding_idx is None


def test_the_classifier_attention_reading_is_named_and_chosen():
    causal = reference("standard", trainer="trainer_classifier.py")
    assert causal.model.mixer_options["causal"] is True
    assert construction_label(causal.to_dict()) == "reference (trainer_classifier.py, transformers v4.50 reading)"
    bidirectional = reference("standard", trainer="trainer_classifier.py", construction_options={"transformers": "v4.53"})
    assert bidirectional.model.mixer_options["causal"] is False
    assert construction_label(bidirectional.to_dict()) == (
        "reference (trainer_classifier.py, transformers v4.53 reading)")
    # The mixing attention reads is_causal=False itself: bidirectional in both readings.
    assert reference("mixit", trainer="trainer_classifier.py").model.mixer_options["causal"] is False
    assert construction_label(reference("mixit", trainer="trainer.py").to_dict()) == "reference (trainer.py)"
    with pytest.raises(ConfigError, match="construction_options"):
        reference("standard", trainer="trainer_classifier.py", construction_options={"transformers": "4.53"})
    # A config written when the reading was model.reference_transformers is refused (naming the key);
    # `modformer migrate` moves it (tests/test_migrate.py).
    with pytest.raises(ConfigError, match="model.reference_transformers"):
        reference("standard", trainer="trainer_classifier.py", reference_transformers="v4.53")


def test_the_initialisation_readings_are_named_and_chosen():
    """released: 0.02, as the reference's code runs; commented: 1/sqrt(width), its commented-out line."""
    released, commented = reference("standard"), reference("standard", construction_options={"init": "commented"})
    assert (released.model.init_std, commented.model.init_std) == (0.02, 1 / math.sqrt(D))
    assert construction_label(commented.to_dict()) == "reference (depth.py, init 1/sqrt(width))"
    assert construction_label(reference("standard", init_std=0.05).to_dict()) == (
        "reference (depth.py) except model.init_std=0.05")
    weights = build_model(commented.model, seed=0).blocks[0].mixer.q_proj.weight
    assert abs(weights.std().item() - 1 / math.sqrt(D)) < 0.01
    # The older keys are read by `modformer migrate` alone: moved for the reference construction,
    # dropped for another one, where nothing read them.
    from modformer.papers.random_attention.migrations import migrate_older_configs

    corrected = {"model": {"reference_transformers": "v4.50", "reference_init": "released"}}
    assert migrate_older_configs(corrected, saved=True) and corrected == {"model": {}}
    old = {"model": {"construction": "reference", "variant": "mixit", "reference_init": "commented"}}
    assert len(migrate_older_configs(old, saved=True)) == 2  # the key moved; extra_positions written out
    assert old["model"]["construction_options"] == {"init": "commented"}
    assert old["model"]["mixer_options"] == {"extra_positions": 0}
    assert migrate_older_configs(old, saved=True) == []  # once


def test_a_frozen_pad_row_needs_a_pad_token():
    with pytest.raises(ConfigError, match="pad_embedding_frozen needs a pad token: task retrieval"):
        config_from_dict({"model": {"pad_embedding_frozen": True}, "task": {"name": "retrieval", "n_pairs": 4}})
    cfg = config_from_dict({"model": {"pad_embedding_frozen": True, "pad_id": 0},
                            "task": {"name": "retrieval", "n_pairs": 4}})
    assert build_model(cfg.model, seed=0).embed.padding_idx == 0
    with pytest.raises(ConfigError, match="model.pad_id=600 is not a token"):
        config_from_dict({"model": {"pad_id": 600, "vocab_size": 512}, "task": {"name": "retrieval", "n_pairs": 4}})


@pytest.mark.parametrize("trainer", ["depth.py", "trainer.py"])
def test_frozen_mlp_freezes_every_feed_forward_parameter_biases_included(trainer):
    """The reference construction turns model.ffn_bias on: Frozen-MLP's frozen set is exactly
    every `blocks.*.ffn.*` parameter, its biases included, and nothing else."""
    cfg = reference("frozen_mlp", trainer=trainer)
    assert cfg.model.ffn_bias
    model = build_model(cfg.model, seed=0)
    ffn = {n for n, _ in model.named_parameters() if n.startswith("blocks.") and ".ffn." in n}
    assert {n for n in ffn if n.endswith(".bias")} and len({n.split(".")[1] for n in ffn}) == cfg.model.n_layers
    assert {n for n, p in model.named_parameters() if not p.requires_grad} == ffn


def test_the_hf_warm_up_truncates_a_fractional_four_percent():
    """utils.py's max(int(0.04 * max_steps), 500) at step counts whose 4% is fractional: int
    truncates (501.48 and 501.52 and 501.96 -> 501), neither rounds nor takes the ceiling."""
    from modformer.papers.random_attention.construction import hf_warmup
    steps = [12_525, 12_537, 12_538, 12_549, 12_550, 40_010]
    assert [hf_warmup({"train": {"steps": n}}) for n in steps] == [501, 501, 501, 501, 502, 1600]
    assert filled("standard", "trainer.py", steps=12_549)["train.warmup_steps"] == 501  # what the switch fills in


def test_a_retrieval_config_with_no_train_keys_trains_as_depth_py():
    """No train section at all: depth.py's optimizer, the task file's warm-up and batch."""
    train = config_from_dict({"model": {"construction": "reference"}, "task": {"name": "retrieval"}}).train
    assert (train.lr, train.warmup_steps, train.batch_size, train.weight_decay, train.schedule, train.min_lr_ratio,
            train.betas, train.grad_clip) == (1e-2, 500, 1000, 1e-3, "cosine", 0.0, (0.9, 0.999), 1.0)


def test_the_committed_reports_name_every_departure_from_the_reference_script():
    """The long retrieval runs trained at lr 3e-3, warm-up 20, batch 256: their report says so."""
    report = (Path(__file__).parents[1] / "results" / "random_attention" / "retrieval_budget" / "report.md").read_text()
    assert "| mixit | reference (depth.py) except model.mixer_options.extra_positions=0, lr 0.003, warm-up 20, batch 256 |" \
        in report
    assert "(12.8% of depth.py's 1e+08)" in report
