"""The random-attention paper's variants: exact trainable sets, frozen parts stay put, MixiT's matrix."""

import math

import pytest
import torch

from modformer import build_model, capture
from modformer.freeze import trainable_names
from modformer.model.config import ModelConfig
from modformer.model.mixing import MixingOptions
from modformer.model.mixing import mixing_matrices
from modformer.train.checkpoint import read_checkpoint, save_checkpoint, load_model_state
from modformer.train.config import TrainConfig
from modformer.train.optim import build_optimizer


def small(**kw):
    return ModelConfig(**{"vocab_size": 40, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 16,
                          "attn_bias": True, **kw})


def layer_params(i, *names):
    return [f"blocks.{i}.{n}" for n in names]


BODY = ["mixer_norm.weight", "ffn_norm.weight"]
FFN = ["ffn.gate_proj.weight", "ffn.up_proj.weight", "ffn.down_proj.weight"]
VO = ["mixer.v_proj.weight", "mixer.v_proj.bias", "mixer.o_proj.weight", "mixer.o_proj.bias"]
QK = ["mixer.q_proj.weight", "mixer.q_proj.bias", "mixer.k_proj.weight", "mixer.k_proj.bias"]
OUTER = ["embed.weight", "norm.weight", "lm_head.weight"]

EXPECTED_TRAINABLE = {
    "standard": OUTER + [p for i in range(2) for p in layer_params(i, *BODY, *QK, *VO, *FFN)],
    "frozen_qk": OUTER + [p for i in range(2) for p in layer_params(i, *BODY, *VO, *FFN)],
    "frozen_mlp": OUTER + [p for i in range(2) for p in layer_params(i, *BODY, *QK, *VO)],
    "mixit": OUTER + [p for i in range(2) for p in layer_params(i, *BODY, *VO, *FFN)],
    "random_transformer": ["embed.weight", "lm_head.weight"],
}


@pytest.mark.parametrize("variant", sorted(EXPECTED_TRAINABLE))
def test_exact_trainable_set(variant):
    model = build_model(small(variant=variant), seed=0)
    assert sorted(trainable_names(model)) == sorted(EXPECTED_TRAINABLE[variant])


@pytest.mark.parametrize("variant", sorted(EXPECTED_TRAINABLE))
def test_fixed_parts_unchanged_after_training_steps(variant):
    model = build_model(small(variant=variant), seed=0)
    fixed = {k: v.clone() for k, v in model.state_dict().items()
             if k not in EXPECTED_TRAINABLE[variant]}
    optimizer = build_optimizer(model, TrainConfig(lr=0.05, weight_decay=0.5))
    for _ in range(3):
        model(torch.randint(0, 40, (4, 16))).logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    state = model.state_dict()
    for name, before in fixed.items():
        assert torch.equal(state[name], before), name
    assert all(not torch.equal(state[n], build_model(small(variant=variant), seed=0).state_dict()[n])
               for n in EXPECTED_TRAINABLE[variant])


@pytest.mark.parametrize("cfg", [MixingOptions(), MixingOptions(scale=3.0), MixingOptions(sink_head=True),
                                 MixingOptions(causal=False), MixingOptions(sigma_range=(0.5, 0.5))])
def test_mixing_rows_sum_to_one(cfg):
    """Every row sums to 1, but the reference's sink head's first row, which sums to 0.5."""
    mix = mixing_matrices(8, 64, 16, cfg, torch.Generator().manual_seed(0)).double()
    sums = torch.ones(8, 64, dtype=torch.float64)
    if cfg.sink_head:
        sums[0, 0] = 0.5
    torch.testing.assert_close(mix.sum(-1), sums, atol=1e-6, rtol=0)
    if cfg.causal:
        assert torch.all(mix.triu(1) == 0)
        # A causal prefix is itself a valid mixing matrix: what shorter sequences use.
        torch.testing.assert_close(mix[:, :10, :10].sum(-1), sums[:, :10], atol=1e-6, rtol=0)
    else:
        assert (mix.triu(1) != 0).any()
    if cfg.sink_head:
        assert mix[0, 5, 0] == 0.5 and mix[0, 5, 5] == 0.5 and mix[0, 0, 0] == 0.5


def test_mixing_noise_scale_per_head_lies_in_the_sigma_range():
    T, hd = 256, 16
    mix = mixing_matrices(16, T, hd, MixingOptions(), torch.Generator().manual_seed(1)).double()
    # Below the diagonal A_ij = N_ij - drift_i; the drift is small next to the spread of N.
    below = torch.ones(T, T, dtype=torch.bool).tril(-1)
    stds = torch.stack([(m - m.diagonal().diag())[below].std() for m in mix])
    assert torch.all(stds > 0.9 / math.sqrt(T * hd)) and torch.all(stds < 1.1 / math.sqrt(T))
    assert stds.max() / stds.min() > 1.5  # heads draw their own sigma


def test_mixit_has_no_queries_or_keys_and_its_matrix_is_captured():
    model = build_model(small(variant="mixit"), seed=0)
    assert not any("q_proj" in n or "k_proj" in n for n, _ in model.named_parameters())
    with capture(model, "blocks.*.mixer.pattern") as acts:
        model(torch.randint(0, 40, (3, 10)))
    assert acts["blocks.1.mixer.pattern"].shape == (3, 4, 10, 10)
    assert torch.equal(acts["blocks.1.mixer.pattern"][0], model.blocks[1].mixer.mixing[:, :10, :10])


def test_mixing_matrix_travels_in_checkpoints(tmp_path):
    cfg = small(variant="mixit")
    model = build_model(cfg, seed=0)
    other = build_model(cfg, seed=1)
    assert not torch.equal(model.blocks[0].mixer.mixing, other.blocks[0].mixer.mixing)
    save_checkpoint(tmp_path / "m.safetensors", 0, model, None, {"config": {}})
    load_model_state(other, read_checkpoint(tmp_path / "m.safetensors").model, "m")
    tokens = torch.randint(0, 40, (2, 16))
    assert torch.equal(model(tokens), other(tokens))


def test_bidirectional_mixing_refuses_other_lengths():
    model = build_model(small(variant="mixit", mixer_options={"causal": False}), seed=0)
    model(torch.randint(0, 40, (2, 16)))
    with pytest.raises(ValueError, match="length 16"):
        model(torch.randint(0, 40, (2, 10)))


def test_mixit_mixes_values_without_a_per_sequence_copy_of_its_matrix():
    """MixiT's output is A v per head; its backward keeps A once, not a (B x H, T, T) copy
    (what a broadcast `A @ v` keeps), and captured patterns give the same output."""
    from modformer.model.mixing import mix_values

    g = torch.Generator().manual_seed(0)
    mix, v = torch.randn(4, 12, 12, generator=g, dtype=torch.float64), torch.randn(3, 4, 12, 8, generator=g,
                                                                                  dtype=torch.float64)
    assert torch.allclose(mix_values(mix, v), (mix @ v).transpose(1, 2), atol=1e-12)
    model = build_model(small(variant="mixit", max_seq_len=64), seed=0)
    tokens = torch.randint(0, 40, (8, 64))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        logits = model(tokens)
    assert max(saved) < 8 * 4 * 64 * 64  # the largest is the logits', B x T x vocab; none is B x H x T x T
    with capture(model, "blocks.*.mixer.pattern"):
        assert torch.allclose(model(tokens), logits, atol=1e-5)


def test_qk_init_scale_widens_the_frozen_scores_and_nothing_else():
    """The attention's qk_init_scale multiplies the init std of Q and K only; at 1 the draws are
    the default initialisation's, so every earlier run's model is unchanged."""
    from modformer.errors import ConfigError

    cfg = small(variant="frozen_qk", d_model=256, init_std=0.02)
    base = build_model(cfg, seed=0)
    wide = build_model(small(variant="frozen_qk", d_model=256, init_std=0.02,
                             mixer_options={"qk_init_scale": 4.0}), seed=0)
    for name, p in base.named_parameters():
        q = dict(wide.named_parameters())[name]
        if ".q_proj.weight" in name or ".k_proj.weight" in name:
            torch.testing.assert_close(q, 4.0 * p)  # the same draws, scaled
            assert not q.requires_grad
        else:
            assert torch.equal(q, p), name
    with pytest.raises(ConfigError, match="qk_init_scale must be positive"):
        build_model(small(variant="frozen_qk", mixer_options={"qk_init_scale": 0.0}), seed=0)
