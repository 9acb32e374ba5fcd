"""Parity with Hugging Face transformers on tiny random Llama models built from configs."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from modformer import build_model  # noqa: E402
from modformer.interop.hf_llama import from_hf_llama, to_hf_llama  # noqa: E402
from modformer.model.config import ModelConfig  # noqa: E402


def tiny_llama(**kw):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=kw.pop("kv", 4), max_position_embeddings=128, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": kw.pop("theta", 10000.0)}, **kw)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # HF initialises norms to 1 and biases to 0: randomise them so they are tested
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("kw", [{}, {"kv": 2, "theta": 500000.0}, {"attention_bias": True, "mlp_bias": True},
                                {"tie_word_embeddings": True}])
def test_hf_weights_give_the_same_logits(kw):
    hf = tiny_llama(**kw)
    ours, cfg = from_hf_llama(hf)
    tokens = torch.randint(0, 97, (3, 40))
    with torch.no_grad():
        expected = hf(tokens).logits
        got = ours(tokens)
    assert (got - expected).abs().max().item() < 1e-4
    assert cfg.tie_embeddings == bool(kw.get("tie_word_embeddings", False))


@pytest.mark.parametrize("kw", [{}, {"n_kv_heads": 2, "attn_bias": True, "ffn_bias": True, "tie_embeddings": True}])
def test_our_weights_give_the_same_logits_in_hf(kw):
    cfg = ModelConfig(vocab_size=80, d_model=48, n_layers=2, n_heads=4, max_seq_len=64, rope_theta=1e4, **kw)
    ours = build_model(cfg, seed=3)
    with torch.no_grad():
        for p in ours.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    hf = to_hf_llama(ours, cfg)
    tokens = torch.randint(0, 80, (2, 30))
    with torch.no_grad():
        assert (hf(tokens).logits - ours(tokens)).abs().max().item() < 1e-4
    back, back_cfg = from_hf_llama(hf)
    assert back_cfg.n_kv_heads in (None, cfg.kv_heads)
    for (name, p), q in zip(ours.state_dict().items(), back.state_dict().values()):
        assert torch.equal(p, q), name


def test_greedy_generations_are_token_identical():
    hf = tiny_llama()
    ours, _ = from_hf_llama(hf)
    prompt = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
        seq = prompt
        for _ in range(12):
            seq = torch.cat([seq, ours(seq)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(seq, theirs)


def test_rope_tables_equal_hugging_face_at_long_positions():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from modformer.model.rope import RotaryEmbedding

    config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=8192,
                                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    theirs = LlamaRotaryEmbedding(config)
    positions = torch.arange(8192)[None]
    cos, sin = theirs(torch.zeros(1, dtype=torch.float32), positions)
    ours = RotaryEmbedding(64, 8192, 500000.0)
    assert torch.equal(ours.cos, cos[0]) and torch.equal(ours.sin, sin[0])


def test_non_default_rope_is_refused():
    from modformer.errors import ConfigError
    from modformer.interop.hf_llama import config_from_hf

    config = transformers.LlamaConfig(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0})
    with pytest.raises(ConfigError, match="linear"):
        config_from_hf(config)


@pytest.mark.parametrize("variant", ["mixit", "knowledge"])
def test_models_without_a_llama_form_are_refused(variant):
    from modformer.errors import ModformerError

    cfg = ModelConfig(variant=variant, vocab_size=40, d_model=32, n_layers=1, n_heads=2, max_seq_len=16)
    with pytest.raises(ModformerError, match="Llama needs SelfAttention and SwiGLU"):
        to_hf_llama(build_model(cfg, seed=0), cfg)
