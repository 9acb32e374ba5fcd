"""Analysis tools: induction scores on hand-built patterns, MixiT's fixed matrix, plots,
signal propagation at init and its command."""

import argparse
import json
import math

import pytest
import torch
from torch import nn

from modformer import build_model
from modformer.analysis import (signal_arguments, induction_scores, markdown_tables, plot_attention_maps,
                                plot_induction_scores, signal_propagation, token_similarity, write_reports)
from modformer.analysis.common import random_tokens
from modformer.errors import ConfigError, ModformerError
from modformer.model.config import ModelConfig
from modformer.model.hooks import HookPoint

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def small(variant="standard", **kw):
    return ModelConfig(**{"variant": variant, "vocab_size": 50, "d_model": 32, "n_layers": 2, "n_heads": 4,
                          "max_seq_len": 24, **kw})


class _PatternMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pattern = HookPoint()


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.mixer = _PatternMixer()


class InductionModel(nn.Module):
    """Every head of every layer is an exact induction head: position i attends with weight 1
    to the position right after the latest earlier occurrence of its token (else to itself)."""

    vocab_size = 50
    max_seq_len = 40

    def __init__(self, n_layers=3, n_heads=2):
        super().__init__()
        self.n_heads = n_heads
        self.blocks = nn.ModuleList(_Block() for _ in range(n_layers))

    def forward(self, tokens):  # (B, T) -> (B, H, T, T) patterns through every hook
        B, T = tokens.shape
        pattern = torch.zeros(B, self.n_heads, T, T)
        for b in range(B):
            for i in range(T):
                earlier = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
                pattern[b, :, i, earlier[-1] + 1 if earlier else i] = 1.0
        for block in self.blocks:
            block.mixer.pattern(pattern)
        return pattern


def test_exact_induction_heads_score_one_and_modes_are_restored():
    model = InductionModel()
    model.train()
    model.blocks[1].eval()  # a part kept in eval mode on purpose stays so
    scores = induction_scores(model, vocab_size=50, half_len=12, batch=4, generator=torch.Generator().manual_seed(0))
    assert scores.shape == (3, 2)
    assert torch.equal(scores, torch.ones(3, 2))
    assert model.training and model.blocks[0].training and not model.blocks[1].training


def test_uniform_attention_scores_mean_inverse_position():
    model = build_model(small(), seed=0)
    with torch.no_grad():
        for block in model.blocks:
            block.mixer.q_proj.weight.zero_()  # all scores 0: softmax is uniform over the causal prefix
    L = 10
    scores = induction_scores(model, vocab_size=50, half_len=L, batch=3, generator=torch.Generator().manual_seed(1))
    expected = sum(1.0 / (i + 1) for i in range(L, 2 * L)) / L
    assert torch.allclose(scores, torch.full((2, 4), expected), atol=1e-6)


def test_scores_use_only_the_given_generator():
    model = build_model(small(), seed=0)
    state = torch.get_rng_state()
    a = induction_scores(model, vocab_size=50, half_len=8, batch=4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state)
    b = induction_scores(model, vocab_size=50, half_len=8, batch=4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_mixit_scores_read_its_fixed_matrix():
    model = build_model(small("mixit"), seed=3)
    L = 9
    scores = induction_scores(model, vocab_size=50, half_len=L, batch=2, generator=torch.Generator().manual_seed(0))
    queries = torch.arange(L, 2 * L)
    for layer, block in enumerate(model.blocks):
        stripe = block.mixer.mixing[:, queries, queries - L + 1].mean(-1)  # (H,)
        assert torch.allclose(scores[layer], stripe, atol=1e-6)
    assert scores.abs().sum() > 0  # really drawn, not the zero placeholder


@pytest.mark.parametrize("variant", ["standard", "mixit"])
def test_too_long_sequences_are_refused(variant):
    model = build_model(small(variant), seed=0)  # max_seq_len 24
    with pytest.raises(ValueError, match="max_seq_len=24"):
        induction_scores(model, vocab_size=50, half_len=13, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="vocab"):
        induction_scores(model, vocab_size=51, half_len=4, generator=torch.Generator().manual_seed(0))


def test_random_tokens_are_distinct_when_the_vocabulary_allows():
    g = torch.Generator().manual_seed(0)
    rows = random_tokens(5, 20, 20, g)
    assert all(len(set(r.tolist())) == 20 for r in rows)
    rows = random_tokens(5, 23, 10, g)  # too few tokens: each at most ceil(23/10) = 3 times
    assert rows.shape == (5, 23) and all(torch.bincount(r, minlength=10).max() <= 3 for r in rows)


def test_plots_write_png_files(tmp_path):
    for variant in ("standard", "mixit"):
        model = build_model(small(variant), seed=0)
        path = plot_attention_maps(model, torch.arange(12), tmp_path / f"{variant}.png", title=variant)
        assert path.read_bytes().startswith(PNG_MAGIC)
    records = [(100, torch.rand(2, 4, generator=torch.Generator().manual_seed(0))), (0, [[0.1] * 4, [0.2] * 4])]
    assert plot_induction_scores(records, tmp_path / "scores.png").read_bytes().startswith(PNG_MAGIC)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixit.png", "scores.png", "standard.png"]  # no temp files
    with pytest.raises(ValueError, match="same"):
        plot_induction_scores([(0, torch.zeros(2, 4)), (1, torch.zeros(3, 4))], tmp_path / "bad.png")


def test_token_similarity_by_hand():
    same = torch.tensor([[1.0, 2.0, 3.0]]).repeat(4, 1).unsqueeze(0)  # (1, 4, 3): four equal tokens
    stats = token_similarity(same)
    assert stats["cosine"] == pytest.approx(1.0)
    assert stats["covariance"] == pytest.approx(2.0 / 3.0)  # centred (-1, 0, 1): 2 / d
    assert stats["variance"] == pytest.approx(2.0 / 3.0)
    basis = torch.eye(4).unsqueeze(0)  # orthogonal tokens
    stats = token_similarity(basis)
    assert stats["cosine"] == pytest.approx(0.0)
    assert stats["covariance"] == pytest.approx(-1.0 / 16.0)  # centred e_i - 1/4: -4/16 / d


def test_signal_propagation_is_finite_and_writes_reports(tmp_path):
    depths = [1, 3]
    state = torch.get_rng_state()
    results = signal_propagation(depths=depths, width=16, heads=2, vocab_size=32, seq_len=8, batch=2, seeds=2,
                                 all_layers=True)
    assert torch.equal(torch.get_rng_state(), state)  # model building is fenced off from the global RNG
    assert [(r["variant"], r["depth"]) for r in results] == [
        (v, d) for v in ("standard", "mixit", "random_transformer") for d in depths]
    for r in results:
        for measure in ("covariance", "cosine", "variance"):
            assert math.isfinite(r[measure]) and math.isfinite(r[f"{measure}_std"])
            assert len(r[f"{measure}_by_layer"]) == r["depth"]
            assert r[f"{measure}_by_layer"][-1] == pytest.approx(r[measure])
    paths = write_reports(results, tmp_path / "out", {"note": "test"})
    assert json.loads(paths["json"].read_text())["rows"] == results
    markdown = paths["markdown"].read_text()
    assert "| mixit |" in markdown and "depth 3" in markdown
    assert "differ only in what trains): standard, random_transformer." in markdown
    assert paths["plot"].read_bytes().startswith(PNG_MAGIC)


def test_random_transformer_tokens_grow_alike_with_depth():
    # Measured at defaults (width 128, seq 64): cosine 0.42 at depth 2, 0.89 at depth 16.
    results = signal_propagation(["random_transformer", "mixit"], [2, 16], width=64, heads=4, vocab_size=64,
                                 seq_len=16, batch=4, seeds=1)
    cos = {(r["variant"], r["depth"]): r["cosine"] for r in results}
    assert cos["random_transformer", 16] > cos["random_transformer", 2] + 0.3
    assert max(cos["mixit", 2], cos["mixit", 16]) < 0.1  # MixiT keeps tokens apart


def test_signal_rejects_bad_input():
    with pytest.raises(ConfigError, match="unknown variant 'nope'"):
        signal_propagation(["nope"], [2])
    with pytest.raises(ConfigError, match="depths"):
        signal_propagation(["mixit"], [0])
    with pytest.raises(ConfigError, match="n_heads"):
        signal_propagation(["mixit"], [2], width=30, heads=4)
    with pytest.raises(ConfigError, match="model.no_such_key"):
        signal_propagation(["mixit"], [2], model_options={"no_such_key": 1})


def _parser():
    parser = argparse.ArgumentParser(prog="modformer")
    signal_arguments(parser.add_subparsers(dest="command").add_parser("signal"))
    return parser


def test_signal_command_prints_the_table(tmp_path, capsys):
    args = _parser().parse_args(["signal", "--out", str(tmp_path), "--variants", "mixit", "--depths", "1", "2",
                                 "--width", "16", "--heads", "2", "--seq-len", "6", "--batch", "2", "--seeds", "1",
                                 "--set", "norm_eps=0.001", "mixer_options.sink_head=true"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| mixit |" in out and "depth 2" in out
    settings = json.loads((tmp_path / "signal.json").read_text())["settings"]
    assert settings["model_options"] == {"norm_eps": 0.001, "mixer_options": {"sink_head": True}}
    from modformer.version import code_version, machine
    assert (settings["code_version"], settings["machine"]) == (code_version(), machine())  # what made the figures
    assert f"modformer {code_version()} on {machine()}" in (tmp_path / "signal.md").read_text()
    bad = _parser().parse_args(["signal", "--out", str(tmp_path), "--variants", "nope"])
    with pytest.raises(ModformerError, match="unknown variant"):
        bad.func(bad)


def test_markdown_layout():
    measures = {"covariance": 0.5, "covariance_std": 0.01, "cosine": 0.5, "cosine_std": 0.01,
                "variance": 0.5, "variance_std": 0.01}
    text = markdown_tables([{"variant": v, "depth": d, "seeds": 2, **measures} for v in ("a", "b") for d in (2, 4)])
    assert text.count("| variant | depth 2 | depth 4 |") == 3
    assert "| a | 0.5 ± 0.01 | 0.5 ± 0.01 |" in text


def test_attention_command_plots_a_validation_example_and_the_induction_probe(tiny_config, tmp_path):
    from modformer.train.trainer import Trainer
    from test_checkpoint_cli import assert_clean_error, modformer

    Trainer(tiny_config("train.steps=2"), tmp_path / "run", echo=lambda m: None).run()
    for args, name in (([], "attention.png"), (["--repeated", "4", "--out", tmp_path / "probe.png"], "../probe.png")):
        result = modformer("attention", tmp_path / "run", *args)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "run" / name).stat().st_size > 0
    assert_clean_error(modformer("attention", tmp_path / "run", "--example", "100000"), "--example")
