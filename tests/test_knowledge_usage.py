"""Entry usage of a knowledge base: the measures against hand computations, and the command."""

import json

import pytest
import torch

from modformer import build_model, capture
from modformer.analysis import entry_usage
from modformer.errors import ModformerError
from modformer.model.config import ModelConfig
from modformer.model.knowledge import KnowledgeConfig
from modformer.train.trainer import Trainer

from test_checkpoint_cli import assert_clean_error, modformer


def knowledge_model(**kw):
    cfg = ModelConfig(vocab_size=20, d_model=16, n_layers=3, n_heads=2, max_seq_len=12, variant="knowledge",
                      knowledge=KnowledgeConfig(n_entries=24, **kw))
    return build_model(cfg, seed=0)


def test_measures_match_the_captured_scores():
    model = knowledge_model()
    tokens = torch.randint(0, 20, (10, 12), generator=torch.Generator().manual_seed(0))
    usage = entry_usage(model, tokens, top_k=3, rel_tol=0.0, batch_size=4)  # batches of 4 exercise the merge
    with torch.no_grad(), capture(model, "blocks.*.ffn.scores") as acts:
        model(tokens)
    assert usage.tokens == 120 and usage.n_entries == 24 and len(usage.layers) == 3
    for i, layer in enumerate(usage.layers):
        s = acts[f"blocks.{i}.ffn.scores"].flatten(0, 1)  # ReLU: inactive means exactly zero
        assert layer.active_fraction == pytest.approx((s > 0).float().mean().item(), abs=1e-6)
        assert layer.entries_used == int((s > 0).any(0).sum())
        mass = s.abs().mean(0)
        assert [e for e, _ in layer.top_entries] == mass.topk(3).indices.tolist()
        assert layer.top_share == pytest.approx((mass.topk(3).values.sum() / mass.sum()).item(), rel=1e-5)
        token = next(iter(usage.per_token))
        assert usage.per_token[token][i] == s[tokens.flatten() == token].mean(0).topk(3).indices.tolist()
    assert all(usage.overlap[i][i] == 1.0 for i in range(3))


def test_a_model_without_knowledge_layers_is_refused():
    cfg = ModelConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, max_seq_len=12)
    with pytest.raises(ModformerError, match="knowledge variant"):
        entry_usage(build_model(cfg, seed=0), torch.zeros(2, 4, dtype=torch.long))


def test_usage_command_writes_its_report(tiny_config, tmp_path):
    Trainer(tiny_config("model.variant=knowledge", "train.steps=4"), tmp_path / "run").run()
    result = modformer("usage", tmp_path / "run", "--examples", "64", "--top", "2")
    assert result.returncode == 0, result.stderr
    assert "entries ever active" in result.stdout
    usage = json.loads((tmp_path / "run" / "usage" / "usage.json").read_text())  # inputs: 2N + 2 = 10 tokens
    assert usage["tokens"] == 64 * 10 and len(usage["layers"]) == 2
    assert usage["source"] == str(tmp_path / "run") and usage["code_version"].startswith("0.") and usage["machine"]
    assert (tmp_path / "run" / "usage" / "usage.md").read_text().startswith(f"Made by modformer {usage['code_version']}")
    assert (tmp_path / "run" / "usage" / "usage.png").stat().st_size > 0
    assert_clean_error(modformer("usage", tmp_path / "missing"), "missing")


def test_overlap_is_only_measured_between_layers_reading_the_same_base():
    usage = entry_usage(knowledge_model(groups=[[0, 1], [2]]), torch.randint(0, 20, (4, 12)), top_k=3)
    assert usage.overlap[0][1] is not None and usage.overlap[0][2] is None and usage.overlap[2][2] == 1.0


def test_usage_of_a_converted_pretrained_model_reads_a_text(tiny_teacher, tmp_path):
    """A Hugging Face Llama converted onto one shared base has no task: usage reads a text file
    with the model's own tokenizer instead."""
    from modformer.knowledge.convert import convert
    from test_convert import saved_llama

    saved_llama(tmp_path / "llama")  # vocabulary 600, which covers the tiny teacher's tokenizer (417 ids)
    convert(tmp_path / "llama", "knowledge", tmp_path / "kb.safetensors", n_entries=64, d_entry=64)
    result = modformer("usage", tmp_path / "kb.safetensors", "--text", tiny_teacher / "corpus.txt",
                       "--tokenizer", tiny_teacher, "--block-len", "8", "--out", tmp_path / "usage")
    assert result.returncode == 0, result.stderr
    usage = json.loads((tmp_path / "usage" / "usage.json").read_text())
    assert usage["n_entries"] == 64 and usage["tokens"] % 8 == 0 and usage["tokens"] >= 8 and len(usage["layers"]) == 2
    assert_clean_error(modformer("usage", tmp_path / "kb.safetensors", "--text", tiny_teacher / "corpus.txt"),
                       "--tokenizer")
