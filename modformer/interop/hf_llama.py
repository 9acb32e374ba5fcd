"""Conversion between our standard model and Hugging Face `LlamaForCausalLM`, both directions.

The parameter layouts match one to one (separate Q/K/V/O projections, SwiGLU with
gate/up/down, rotate-half RoPE), so conversion is renaming; no weight is permuted.
Works for any Llama-family checkpoint with default RoPE (Llama, SmolLM2, TinyLlama, ...).
Needs the `hf` extra (`pip install modformer[hf]`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, ModformerError
from ..model.attention import SelfAttention
from ..model.config import ModelConfig
from ..model.feedforward import SwiGLU
from ..model.transformer import Transformer, unplain_parts
from ..variants import build_model

_LAYER_NAMES = {  # ours, within blocks.{i} -> theirs, within model.layers.{i}
    "mixer.q_proj": "self_attn.q_proj",
    "mixer.k_proj": "self_attn.k_proj",
    "mixer.v_proj": "self_attn.v_proj",
    "mixer.o_proj": "self_attn.o_proj",
    "ffn.gate_proj": "mlp.gate_proj",
    "ffn.up_proj": "mlp.up_proj",
    "ffn.down_proj": "mlp.down_proj",
    "mixer_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ModformerError("this needs Hugging Face transformers: pip install 'modformer[hf]'") from None
    return transformers


def hf_name(ours: str) -> str:
    """Our parameter name -> the `LlamaForCausalLM` one."""
    if ours.startswith("blocks."):
        _, index, rest = ours.split(".", 2)
        for mine, theirs in _LAYER_NAMES.items():
            if rest.startswith(mine + "."):
                return f"model.layers.{index}.{theirs}{rest[len(mine):]}"
    fixed = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    if ours in fixed:
        return fixed[ours]
    raise ModformerError(f"parameter '{ours}' has no counterpart in a Hugging Face Llama model")


def config_from_hf(hf_config: Any) -> ModelConfig:
    """A `ModelConfig` for the standard variant equal to a `LlamaConfig`."""
    rope = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(f"RoPE type '{rope_type}' is not supported (only the default rotary embedding)")
    theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    if head_dim * hf_config.num_attention_heads != hf_config.hidden_size:
        raise ConfigError("models whose head_dim * num_attention_heads differs from hidden_size are not supported")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ConfigError(f"hidden_act '{hf_config.hidden_act}' is not supported (Llama's SwiGLU uses silu)")
    return ModelConfig(
        variant="standard", mixer="attention", ffn="swiglu", vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size, n_layers=hf_config.num_hidden_layers,
        n_heads=hf_config.num_attention_heads, n_kv_heads=hf_config.num_key_value_heads,
        d_ff=hf_config.intermediate_size, max_seq_len=hf_config.max_position_embeddings,
        rope=True, rope_theta=float(theta), learned_positions=False,
        attn_bias=bool(getattr(hf_config, "attention_bias", False)), ffn_bias=bool(getattr(hf_config, "mlp_bias", False)),
        norm_eps=float(hf_config.rms_norm_eps), tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
    )


def hf_config_from(cfg: ModelConfig) -> Any:
    """The `LlamaConfig` of a standard model config; other architectures have no Llama form."""
    if cfg.mixer != "attention" or cfg.ffn != "swiglu" or not cfg.rope or cfg.learned_positions \
            or not cfg.mixer_options.get("causal", True):
        raise ConfigError("only a standard model (causal attention mixer, swiglu ffn, RoPE, no learned positions) "
                          "converts to LlamaForCausalLM")
    transformers = _transformers()
    return transformers.LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        attention_bias=cfg.attn_bias, mlp_bias=cfg.ffn_bias, tie_word_embeddings=cfg.tie_embeddings,
        pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )


def from_hf_llama(hf_model: torch.nn.Module) -> tuple[Transformer, ModelConfig]:
    """Our standard model holding the weights of a `LlamaForCausalLM` (same dtype as ours: float32)."""
    cfg = config_from_hf(hf_model.config)
    model = build_model(cfg, seed=0)
    theirs = hf_model.state_dict()
    state = {}
    for name in model.state_dict():
        source = hf_name(name)
        if source not in theirs:
            raise ModformerError(f"the Hugging Face model has no '{source}' (needed for our '{name}')")
        state[name] = theirs[source].detach().to(torch.float32)
    model.load_state_dict(state)
    return model, cfg


def to_hf_llama(model: Transformer, cfg: ModelConfig) -> torch.nn.Module:
    """A `LlamaForCausalLM` holding the weights of our standard model."""
    for i, block in enumerate(model.blocks):
        if not isinstance(block.mixer, SelfAttention) or not isinstance(block.ffn, SwiGLU):
            raise ModformerError(
                f"block {i} has a {type(block.mixer).__name__} mixer and a {type(block.ffn).__name__} feed-forward "
                f"module; Llama needs SelfAttention and SwiGLU (a knowledge model converts after "
                f"modformer.knowledge.fold_model)")
    unplain = unplain_parts(model)
    if unplain:
        raise ModformerError(f"{', '.join(unplain[:3])}{' ...' if len(unplain) > 3 else ''} scaled by the model's "
                             f"construction ({cfg.construction}); Llama has plain projections and unscaled skips")
    transformers = _transformers()
    hf_model = transformers.LlamaForCausalLM(hf_config_from(cfg))
    theirs = hf_model.state_dict()
    state = {hf_name(k): v.detach().clone() for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing = [k for k in theirs if k not in state and "rotary_emb" not in k]
    if missing:
        raise ModformerError(f"cannot fill the Hugging Face model's {missing[:3]}")
    hf_model.load_state_dict(state, strict=False)
    return hf_model.eval()


def load_hf_llama(name_or_path: str | Path, **kwargs: Any) -> torch.nn.Module:
    """`LlamaForCausalLM.from_pretrained` from a local folder (or a hub name when online),
    with a clear message when it cannot be found."""
    transformers = _transformers()
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=torch.float32, **kwargs)
    except (OSError, ValueError) as e:
        raise ModformerError(f"cannot load a Hugging Face model from '{name_or_path}': {str(e).splitlines()[0]}") from None

