import math

import pytest
import torch

from modformer import build_model, capture
from modformer.model.config import ModelConfig
from modformer.model.hooks import HookPoint, hook_names, hooked
from modformer.registry import FFNS, MIXERS, VARIANTS


def small(**kw):
    return ModelConfig(**{"vocab_size": 50, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 64, **kw})


@pytest.mark.parametrize("kw", [{"variant": v} for v in VARIANTS.names()] + [{"mixer": m} for m in MIXERS.names()]
                         + [{"ffn": f} for f in FFNS.names()])
def test_every_registered_name_builds_and_runs(kw):
    model = build_model(small(**kw), seed=0)
    logits = model(torch.randint(0, 50, (2, 10)))
    assert logits.shape == (2, 10, 50) and torch.isfinite(logits).all()


@pytest.mark.parametrize("kw", [{}, {"learned_positions": True, "rope": False}, {"n_kv_heads": 2},
                                {"attn_bias": True, "ffn_bias": True, "ffn": "relu"}, {"variant": "mixit"},
                                {"variant": "mixit", "mixer_options": {"sink_head": True}}])
def test_causal(kw):
    """Changing future tokens leaves the logits of earlier positions unchanged."""
    model = build_model(small(**kw), seed=1)
    x = torch.randint(0, 50, (3, 16))
    y = x.clone()
    y[:, 9:] = torch.randint(0, 50, (3, 7))
    a, b = model(x), model(y)
    assert torch.equal(a[:, :9], b[:, :9])
    assert not torch.allclose(a[:, 9:], b[:, 9:])


def test_same_seed_same_weights_without_global_rng():
    torch.manual_seed(123)
    a = build_model(small(), seed=5)
    torch.manual_seed(456)
    b = build_model(small(), seed=5)
    c = build_model(small(), seed=6)
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), name
    assert not all(torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters()))


def naive_attention_forward(model, tokens):
    """Float64 reference: the whole decoder written out with explicit softmax attention."""
    m = model.double()
    cfg_heads = m.blocks[0].mixer.n_heads
    x = m.embed.weight[tokens]
    T = tokens.shape[1]
    for block in m.blocks:
        att = block.mixer
        h = block.mixer_norm.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + block.mixer_norm.eps)
        B = h.shape[0]
        hd = att.head_dim
        q = (h @ att.q_proj.weight.T).view(B, T, cfg_heads, hd).transpose(1, 2)
        k = (h @ att.k_proj.weight.T).view(B, T, att.n_kv_heads, hd).transpose(1, 2)
        v = (h @ att.v_proj.weight.T).view(B, T, att.n_kv_heads, hd).transpose(1, 2)
        # The tables in float32, as Hugging Face Llama (and so our model) computes them.
        inv = 1.0 / 10000.0 ** (torch.arange(0, hd, 2).float() / hd)
        ang = torch.cat([torch.outer(torch.arange(T).float(), inv)] * 2, -1)
        cos, sin = ang.cos().double(), ang.sin().double()

        def rot(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
            return t * cos + torch.cat([-t2, t1], -1) * sin

        q, k = rot(q), rot(k)
        rep = cfg_heads // att.n_kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = q @ k.transpose(-1, -2) / math.sqrt(hd)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1) @ att.o_proj.weight.T
        x = x + y
        f = block.ffn
        h = block.ffn_norm.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + block.ffn_norm.eps)
        x = x + (torch.nn.functional.silu(h @ f.gate_proj.weight.T) * (h @ f.up_proj.weight.T)) @ f.down_proj.weight.T
    x = m.norm.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + m.norm.eps)
    return x @ m.lm_head.weight.T


@pytest.mark.parametrize("kw", [{}, {"n_kv_heads": 2}])
def test_matches_float64_naive_reference(kw):
    model = build_model(small(**kw), seed=2)
    tokens = torch.randint(0, 50, (2, 12))
    ours = model.double()(tokens)
    ref = naive_attention_forward(model, tokens)
    assert (ours - ref).abs().max().item() < 1e-10


def test_captured_pattern_path_equals_fast_path():
    model = build_model(small(n_kv_heads=2), seed=3)
    tokens = torch.randint(0, 50, (2, 12))
    fast = model(tokens)
    with capture(model, "blocks.*.mixer.pattern", "blocks.*.resid_post") as acts:
        slow = model(tokens)
    torch.testing.assert_close(slow, fast, atol=1e-5, rtol=1e-5)
    pattern = acts["blocks.0.mixer.pattern"]
    assert pattern.shape == (2, 4, 12, 12)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 4, 12))
    assert torch.all(pattern.triu(1) == 0)  # causal
    assert acts["blocks.1.resid_post"].shape == (2, 12, 32)
    assert not any(isinstance(m, HookPoint) and m.active for m in model.modules())  # hooks removed on exit


def test_capture_unknown_name_is_an_error():
    model = build_model(small(), seed=0)
    assert "blocks.0.mixer.pattern" in hook_names(model)
    with pytest.raises(Exception, match="no hook point"):
        with capture(model, "blocks.*.nonesuch"):
            pass


def test_tied_embeddings_share_storage():
    model = build_model(small(tie_embeddings=True), seed=0)
    assert model.lm_head is None
    assert "lm_head.weight" not in dict(model.named_parameters())


def test_a_hooked_function_replaces_the_activation_and_runs_again_when_recomputed():
    """Zeroing the stream after the last block leaves logits of the final norm of zeros (the
    head of zeros); under activation checkpointing the hook runs in the recomputation too, so
    loss and gradients equal those without checkpointing."""
    model = build_model(small(), seed=0)
    tokens = torch.randint(0, 50, (2, 9))
    last = f"blocks.{len(model.blocks) - 1}.resid_post"
    with torch.no_grad(), hooked(model, {last: lambda _name, x: torch.zeros_like(x)}):
        assert torch.equal(model(tokens), torch.zeros(2, 9, 50))
    grads = []
    for recompute, halve in ((False, True), (True, True), (False, False)):
        model = build_model(small(), seed=0)
        model.activation_checkpointing = recompute
        model.train()
        with hooked(model, {"blocks.0.resid_mid": lambda _name, x: 0.5 * x if halve else None}):
            loss = model(tokens).square().mean()
        loss.backward()  # after the hooked block ended: the recomputation still halves
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert not torch.allclose(grads[2]["blocks.0.ffn.up_proj.weight"], grads[0]["blocks.0.ffn.up_proj.weight"])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-6, atol=1e-7, msg=name)


def test_a_hook_returning_another_shape_is_refused():
    model = build_model(small(), seed=0)
    with hooked(model, {"embed_out": lambda _name, x: x[:, :1]}), pytest.raises(Exception, match="same shape"):
        model(torch.randint(0, 50, (1, 4)))


def test_activation_patching_as_the_docs_write_it():
    """docs/internals.md: the clean run's stream after the last block, patched into a corrupted
    run, gives the clean run's logits; zeroing one head's attention changes the output."""
    model = build_model(small(), seed=0)
    tokens, corrupted = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
    with torch.no_grad():
        with capture(model, "blocks.1.resid_post") as clean:
            reference = model(tokens)
        with hooked(model, {"blocks.1.resid_post": lambda name, x: clean[name]}):
            assert torch.equal(model(corrupted), reference)
        with hooked(model, {"blocks.0.mixer.pattern": lambda name, w: w.index_fill(1, torch.tensor([1]), 0.0)}):
            assert not torch.allclose(model(tokens), reference)
