"""`modformer convert`: checkpoints and Hugging Face folders to the knowledge form and back."""

import pytest
import torch

from modformer.config import load_config
from modformer.errors import ModformerError
from modformer.knowledge.convert import convert, load_checkpoint_model
from modformer.train.checkpoint import save_checkpoint
from modformer.variants import build_model
from test_checkpoint_cli import assert_clean_error, modformer


def saved_model(tmp_path, *overrides):
    cfg = load_config(None, ["model.d_model=32", "model.n_heads=2", "task.n_pairs=3", *overrides])
    model = build_model(cfg.model, seed=3)
    with torch.no_grad():  # non-trivial norms, so the test sees them copied
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path / "model.safetensors"
    save_checkpoint(path, 7, model, None, {"config": cfg.to_dict()})
    return model, path


def saved_llama(folder, num_key_value_heads=2):
    """A tiny random LlamaForCausalLM, saved to `folder` and returned in eval mode."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=600, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=num_key_value_heads, max_position_embeddings=64)).eval()
    hf.save_pretrained(folder)
    return hf


@pytest.mark.parametrize("ffn", ["swiglu", "relu"])
def test_checkpoint_to_knowledge_and_back_keeps_logits(tmp_path, ffn):
    model, path = saved_model(tmp_path, f"model.ffn={ffn}")
    tokens = torch.randint(0, 512, (3, 8))
    result = convert(path, "knowledge", tmp_path / "k.safetensors")
    knowledge, data, step = load_checkpoint_model(tmp_path / "k.safetensors")
    assert data["model"]["variant"] == "knowledge" and step == 7
    assert result["max_logit_difference"] < 1e-5
    with torch.no_grad():
        assert (knowledge(tokens) - model(tokens)).abs().max() < 1e-4
    convert(tmp_path / "k.safetensors", "ffn", tmp_path / "f.safetensors")
    back, data, _ = load_checkpoint_model(tmp_path / "f.safetensors")
    assert data["model"]["variant"] == "standard"
    with torch.no_grad():
        assert (back(tokens) - model(tokens)).abs().max() < 1e-4


def test_hugging_face_folder_to_knowledge(tmp_path):
    hf = saved_llama(tmp_path / "hf")
    convert(tmp_path / "hf", "knowledge", tmp_path / "k.safetensors")
    knowledge, _, _ = load_checkpoint_model(tmp_path / "k.safetensors")
    tokens = torch.randint(0, 600, (2, 16))
    with torch.no_grad():
        assert (knowledge(tokens) - hf(tokens).logits).abs().max() < 1e-4


def test_hugging_face_llama_round_trip_through_the_knowledge_form(tmp_path):
    """A Llama folder -> knowledge checkpoint (one shared E) -> a Llama folder again, which
    transformers loads with the original's logits."""
    transformers = pytest.importorskip("transformers")
    hf = saved_llama(tmp_path / "hf", num_key_value_heads=1)
    convert(tmp_path / "hf", "knowledge", tmp_path / "k.safetensors")
    result = convert(tmp_path / "k.safetensors", "ffn", tmp_path / "back", hf=True)
    assert result["max_logit_difference"] < 1e-4
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    assert back.config.mlp_bias and back.config.num_key_value_heads == 1
    tokens = torch.randint(0, 600, (2, 16))
    with torch.no_grad():
        assert (back(tokens).logits - hf(tokens).logits).abs().max() < 1e-4
    assert not any(p.name.startswith(".back.partial") for p in tmp_path.iterdir())


def test_bad_conversions_are_clear_errors(tmp_path):
    _, path = saved_model(tmp_path)
    for args, message in (([str(path), "--to", "ffn"], "no knowledge layers"),
                          ([str(tmp_path / "missing"), "--to", "knowledge"], "does not exist")):
        assert_clean_error(modformer("convert", *args, "--out", tmp_path / "o.safetensors"), message)


def test_more_bad_conversions_are_clear_errors(tmp_path):
    _, path = saved_model(tmp_path)
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"not a checkpoint at all")
    (tmp_path / "empty").mkdir()
    (tmp_path / "outdir").mkdir()
    cases = (([str(corrupt), "--to", "knowledge", "--out", str(tmp_path / "o.safetensors")], "corrupt"),
             ([str(tmp_path / "empty"), "--to", "knowledge", "--out", str(tmp_path / "o.safetensors")], "neither"),
             ([str(path), "--to", "knowledge", "--out", str(tmp_path / "outdir")], "is a folder"),
             ([str(path), "--to", "knowledge", "--hf", "--out", str(tmp_path / "new")], "use it with --to ffn"),
             ([str(path), "--to", "ffn", "--hf", "--out", str(tmp_path / "outdir")], "already exists"))
    for args, message in cases:
        assert_clean_error(modformer("convert", *args), message)


def test_only_a_gated_knowledge_model_has_a_llama_form(tmp_path):
    _, path = saved_model(tmp_path, "model.ffn=relu")
    convert(path, "knowledge", tmp_path / "k.safetensors")
    with pytest.raises(ModformerError, match="Llama's MLP is SwiGLU"):
        convert(tmp_path / "k.safetensors", "ffn", tmp_path / "hf", hf=True)
    assert not (tmp_path / "hf").exists()


def test_a_model_its_construction_scaled_is_refused_naming_the_scaled_parts(tmp_path):
    """Folding reads each projection as a plain linear map: the reference construction's
    scaled projections (or scaled skips) would be lost, so the conversion refuses them."""
    _, path = saved_model(tmp_path, "model.construction=reference",
                          "model.construction_options.scaled_linear=[512, 1]")
    with pytest.raises(ModformerError, match=r"has parts its construction \(reference\) scales: "
                                             r"blocks\.0\.mixer\.v_proj, blocks\.0\.mixer\.o_proj, "
                                             r"blocks\.0\.ffn\.gate_proj; only plain ones convert"):
        convert(path, "knowledge", tmp_path / "k.safetensors")
    _, path = saved_model(tmp_path, "model.construction=reference")  # standard there: plain Llama
    convert(path, "knowledge", tmp_path / "k.safetensors")


def test_other_variants_are_refused(tmp_path):
    from modformer.errors import ModformerError

    _, path = saved_model(tmp_path, "model.variant=frozen_qk")
    with pytest.raises(ModformerError, match="frozen_qk"):
        convert(path, "knowledge", tmp_path / "k.safetensors")


def test_approximate_conversion_reports_layer_errors_and_the_task_before_and_after(tmp_path):
    """A smaller base (d_E below d_ff) through the command: per-layer errors and the run's
    validation loss before and after; at full width it is exact."""
    _, path = saved_model(tmp_path)  # d_ff = 128
    full = convert(path, "knowledge", tmp_path / "full.safetensors", d_entry=128)
    assert max(e["output"] for e in full["layer_errors"]) < 1e-10
    assert full["task_before"]["loss"] == pytest.approx(full["task_after"]["loss"], abs=1e-5)
    small = convert(path, "knowledge", tmp_path / "small.safetensors", n_entries=96, d_entry=24)
    assert len(small["layer_errors"]) == 2 and all(0 < e["output"] < 1.5 for e in small["layer_errors"])
    model, data, _ = load_checkpoint_model(tmp_path / "small.safetensors")
    assert model.knowledge.entries.shape == (96, 24) and data["model"]["knowledge"]["d_key"] == 24
    with pytest.raises(ModformerError, match="use them with --to knowledge"):
        convert(tmp_path / "small.safetensors", "ffn", tmp_path / "back.safetensors", d_entry=8)


def test_a_trained_run_converts_both_ways_with_its_logits(tiny_config, tmp_path):
    from modformer.train.trainer import Trainer

    Trainer(tiny_config("train.steps=8"), tmp_path / "run", echo=lambda m: None).run()
    model, _, _ = load_checkpoint_model(tmp_path / "run")
    result = convert(tmp_path / "run", "knowledge", tmp_path / "k.safetensors")
    convert(tmp_path / "k.safetensors", "ffn", tmp_path / "f.safetensors")
    knowledge, _, _ = load_checkpoint_model(tmp_path / "k.safetensors")
    back, _, _ = load_checkpoint_model(tmp_path / "f.safetensors")
    tokens = torch.randint(0, model.vocab_size, (4, 10))
    with torch.no_grad():
        assert (knowledge(tokens) - model(tokens)).abs().max() < 1e-4
        assert (back(tokens) - model(tokens)).abs().max() < 1e-4
    assert result["max_logit_difference"] < 1e-5
