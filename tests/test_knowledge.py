"""The knowledge base (arXiv 2501.00823): exact fold and unfold, one shared E, the knowledge variant."""

import copy

import pytest
import torch
import torch.nn.functional as F

from modformer import build_model, capture
from modformer.config import load_config
from modformer.errors import ConfigError, ModformerError
from modformer.freeze import trainable_names
from modformer.knowledge import (fold, fold_model, folded_config, unfold, unfold_approximate, unfold_model,
                                 unfolded_config)
from modformer.model.config import ModelConfig
from modformer.model.feedforward import ActivationFFN, ReLUFFN, ShapedLeakyReLUFFN, SwiGLU
from modformer.model.knowledge import KnowledgeBase, KnowledgeConfig, KnowledgeFFN
from modformer.train.checkpoint import load_model_state, read_checkpoint, save_checkpoint
from modformer.train.config import TrainConfig
from modformer.train.optim import build_optimizer

F64 = torch.float64
ACTIVATIONS = ["relu", "gelu", "silu", "swiglu"]
THRESHOLDS = ["mlp", "linear", "none"]
FOLDED_TYPE = {"relu": ReLUFFN, "gelu": ActivationFFN, "silu": ActivationFFN, "swiglu": SwiGLU}


@pytest.fixture(autouse=True)
def one_thread():
    """These tensors are tiny: handing them to a second thread costs more than it saves, and
    on a busy machine many times more (conftest puts the thread count back)."""
    torch.set_num_threads(1)


def randomize(module, seed, scale=0.5, only_1d=False):
    """Overwrite parameters with draws from a local generator (all, or only the 1-d ones)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if not only_1d or p.ndim == 1:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module


def randn(*shape, seed=0):
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


def max_diff(a, b):
    return (a - b).abs().max().item()


def small(knowledge=None, **kw):
    return ModelConfig(**{"vocab_size": 40, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 16,
                          "variant": "knowledge", "knowledge": knowledge or KnowledgeConfig(), **kw})


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("d, n_entries, d_entry, d_key", [(8, 16, 4, 4), (12, 5, 20, 3), (6, 32, 32, None)])
def test_fold_is_exact(activation, threshold, d, n_entries, d_entry, d_key):
    base = randomize(KnowledgeBase(n_entries, d_entry).double(), 1)
    layer = randomize(KnowledgeFFN(base, d, d_key=d_key, activation=activation, threshold=threshold,
                                   threshold_hidden=5).double(), 2)
    folded = fold(layer)
    assert type(folded) is FOLDED_TYPE[activation] and folded.up_proj.weight.shape == (n_entries, d)
    h = randn(3, 7, d)
    assert max_diff(folded(h), layer(h)) < 1e-10


FFN_MAKERS = {
    "relu": lambda: ReLUFFN(8, 24, bias=False),
    "relu_bias": lambda: ReLUFFN(8, 24, bias=True),
    "swiglu_bias": lambda: SwiGLU(8, 24, bias=True),
    "swiglu": lambda: SwiGLU(8, 24),
    "gelu": lambda: ActivationFFN(8, 24, "gelu", bias=True),
    "silu": lambda: ActivationFFN(8, 24, "silu"),
}


@pytest.mark.parametrize("kind", sorted(FFN_MAKERS))
@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_unfold_is_exact_and_folds_back(kind, threshold):
    ffns = [randomize(FFN_MAKERS[kind]().double(), seed) for seed in range(3)]
    base, layers = unfold(ffns, threshold=threshold)
    assert base.entries.shape == (24, 24) and all(layer.base is base for layer in layers)
    h = randn(2, 5, 8)
    for ffn, layer in zip(ffns, layers):
        assert max_diff(layer(h), ffn(h)) < 1e-10
        back = fold(layer)
        assert type(back) is type(ffn)
        mine = dict(back.named_parameters())
        for name, p in ffn.named_parameters():
            torch.testing.assert_close(mine.pop(name), p, atol=1e-12, rtol=0)
        assert all(torch.all(p == 0) for p in mine.values())  # biases the original did not have


@pytest.mark.parametrize("mlp_bias", [False, True])
def test_unfold_hugging_face_llama_mlps(mlp_bias):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                      num_attention_heads=4, max_position_embeddings=32, mlp_bias=mlp_bias)
    hf = transformers.LlamaForCausalLM(config).double()
    mlps = [randomize(layer.mlp, seed, scale=0.2) for seed, layer in enumerate(hf.model.layers)]
    h = randn(2, 6, 32)
    for threshold in ("linear", "mlp"):
        base, layers = unfold(mlps, threshold=threshold)
        assert base.entries.shape == (48, 48) and all(layer.activation == "swiglu" for layer in layers)
        for mlp, layer in zip(mlps, layers):
            assert max_diff(layer(h), mlp(h)) < 1e-10


def test_refuses_what_it_cannot_unfold():
    with pytest.raises(ModformerError, match="ShapedLeakyReLUFFN"):
        unfold([ShapedLeakyReLUFFN(8, 16)])
    with pytest.raises(ModformerError, match="one hidden width"):
        unfold([ReLUFFN(8, 16), ReLUFFN(8, 24)])
    base, layers = unfold([ReLUFFN(8, 16, bias=True)])
    with pytest.raises(ModformerError, match="already a knowledge layer"):
        unfold(layers)
    with pytest.raises(ModformerError, match="threshold_hidden >= 2"):
        unfold([ReLUFFN(8, 16, bias=True)], threshold="mlp", threshold_hidden=1)


@pytest.mark.parametrize("kw", [{"ffn": "swiglu", "ffn_bias": True, "attn_bias": True}, {"ffn": "relu"},
                                {"ffn": "gelu", "tie_embeddings": True, "n_kv_heads": 2}])
def test_standard_model_unfolds_and_folds_back_with_the_same_logits(kw, tmp_path):
    cfg = small(variant="standard", **kw)
    model = randomize(build_model(cfg, seed=0).double(), 1, scale=0.1, only_1d=True)
    tokens = torch.randint(0, 40, (3, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(tokens)
        knowledge = unfold_model(model)
        assert max_diff(knowledge(tokens), expected) < 1e-10
        assert max_diff(fold_model(knowledge)(tokens), expected) < 1e-10
        assert not any(isinstance(b.ffn, KnowledgeFFN) for b in model.blocks)  # the original is left as it was
        # The unfolded model is the knowledge variant of `unfolded_config`: its checkpoint loads there.
        save_checkpoint(tmp_path / "k.safetensors", 0, knowledge, None, {"config": {}})
        other = build_model(unfolded_config(cfg), seed=5).double()
        load_model_state(other, read_checkpoint(tmp_path / "k.safetensors").model, "k")
        assert max_diff(other(tokens), expected) < 1e-10


@pytest.mark.parametrize("activation, threshold", [("relu", "mlp"), ("gelu", "linear"), ("swiglu", "none"),
                                                   ("silu", "mlp")])
def test_knowledge_model_folds_into_the_standard_variant(activation, threshold):
    cfg = small(KnowledgeConfig(n_entries=40, d_entry=24, d_key=12, activation=activation, threshold=threshold))
    model = randomize(build_model(cfg, seed=0).double(), 1, scale=0.3, only_1d=True)
    tokens = torch.randint(0, 40, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(tokens)
        folded = fold_model(model)
        assert not hasattr(folded, "knowledge") and hasattr(model, "knowledge")
        assert max_diff(folded(tokens), expected) < 1e-10
        standard = build_model(folded_config(cfg), seed=3).double()
        load_model_state(standard, folded.state_dict(), "folded")
        assert max_diff(standard(tokens), expected) < 1e-10


def test_hugging_face_llama_converts_to_the_knowledge_form():
    pytest.importorskip("transformers")
    from test_hf_parity import tiny_llama

    from modformer.interop.hf_llama import from_hf_llama, to_hf_llama

    hf = tiny_llama(mlp_bias=True)
    ours, cfg = from_hf_llama(hf)
    ours = ours.double()
    tokens = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        knowledge = unfold_model(ours)
        assert max_diff(knowledge(tokens), ours(tokens)) < 1e-10
        # ... and back to a Hugging Face model (float32, as `to_hf_llama` builds it).
        back = to_hf_llama(fold_model(knowledge), folded_config(unfolded_config(cfg)))
        assert max_diff(back(tokens).logits, hf(tokens).logits) < 1e-4


def test_the_base_is_one_parameter_shared_by_every_layer():
    model = build_model(small(n_layers=3), seed=0)
    entries = model.knowledge.entries
    assert [n for n, _ in model.named_parameters() if "entries" in n] == ["knowledge.entries"]
    assert [k for k in model.state_dict() if "entries" in k] == ["knowledge.entries"]
    assert all(block.ffn.base is model.knowledge for block in model.blocks)
    model.to(dtype=F64)
    model.float().double()  # lossless: the values started in float32
    assert model.knowledge.entries is entries and entries.dtype == F64
    assert all(block.ffn.base.entries is entries for block in model.blocks)
    tokens = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(0))
    model(tokens)  # every layer reads the float64 E
    other = build_model(small(n_layers=3), seed=1).double()
    model.load_state_dict(other.state_dict())
    assert model.knowledge.entries is entries and torch.equal(model(tokens), other(tokens))
    model.load_state_dict(build_model(small(n_layers=3), seed=2).double().state_dict(), assign=True)
    assert all(block.ffn.base.entries is model.knowledge.entries for block in model.blocks)
    with pytest.raises(ValueError, match="replaces"):
        model.blocks[0].ffn.attach(KnowledgeBase(3, 4))
    twin = copy.deepcopy(model)
    assert all(block.ffn.base is twin.knowledge for block in twin.blocks)
    assert torch.equal(twin(tokens), model(tokens))


def test_checkpoint_round_trip(tmp_path):
    cfg = small(KnowledgeConfig(activation="swiglu"))
    model, other = build_model(cfg, seed=0), build_model(cfg, seed=1)
    save_checkpoint(tmp_path / "m.safetensors", 0, model, None, {"config": {}})
    load_model_state(other, read_checkpoint(tmp_path / "m.safetensors").model, "m")
    tokens = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(model(tokens), other(tokens))
    assert all(block.ffn.base is other.knowledge for block in other.blocks)


def relu_ffns(n_layers, d=8, d_ff=32, seed=0):
    return [randomize(ReLUFFN(d, d_ff, bias=True).double(), seed + i) for i in range(n_layers)]


def test_approximate_unfold_error_falls_with_the_entry_width():
    ffns = relu_ffns(3)
    joint, output = [], []
    for d_entry in (4, 8, 16, 24, 32):
        base, layers, errors = unfold_approximate(ffns, d_entry=d_entry)
        assert base.entries.shape == (32, d_entry) and len(layers) == 3
        # Eckart-Young: the sum of squared relative block errors can only fall as the rank grows.
        joint.append(sum(e["W1"] ** 2 + e["W2"] ** 2 + e["b1"] ** 2 for e in errors))
        output.append(sum(e["output"] for e in errors) / 3)
    assert all(a > b for a, b in zip(joint, joint[1:])) and all(a > b for a, b in zip(output, output[1:]))
    assert joint[0] > 1 and joint[-1] < 1e-20 and output[-1] < 1e-10
    # One layer's stacked [W_up, W_down^T, b_up] has rank <= 2d + 1 = 17 < d_ff: exact below d_ff.
    base, layers, errors = unfold_approximate(ffns[:1], d_entry=17)
    assert errors[0]["output"] < 1e-10 and base.entries.shape == (32, 17)
    h = randn(4, 8)
    assert max_diff(layers[0](h[None])[0], ffns[0](h)) < 1e-10


def test_approximate_unfold_of_gated_mlps_is_exact_at_full_width():
    ffns = [randomize(SwiGLU(8, 40, bias=True).double(), seed) for seed in range(2)]
    errors = unfold_approximate(ffns, d_entry=40)[2]
    assert all(max(e.values()) < 1e-10 for e in errors)
    assert all(e["output"] > 0.05 for e in unfold_approximate(ffns, d_entry=10)[2])


def test_approximate_unfold_prunes_the_units_that_do_nothing():
    ffns = relu_ffns(2)
    with torch.no_grad():  # 8 dead units per layer, at different places
        ffns[0].down_proj.weight[:, :8] = 0
        ffns[1].down_proj.weight[:, 20:28] = 0
    base, layers, errors = unfold_approximate(ffns, n_entries=24, d_entry=24)
    assert base.entries.shape == (24, 24) and all(e["output"] < 1e-10 for e in errors)
    base, layers, errors = unfold_approximate(ffns, n_entries=16, d_entry=12)
    assert base.entries.shape == (16, 12) and all(0 < e["output"] < 1 for e in errors)
    with pytest.raises(ModformerError, match="d_entry"):
        unfold_approximate(ffns, n_entries=16, d_entry=20)


@pytest.mark.parametrize("knowledge", [KnowledgeConfig(), KnowledgeConfig(activation="swiglu", threshold="none"),
                                       KnowledgeConfig(activation="gelu", threshold="linear", d_key=8),
                                       KnowledgeConfig(threshold="token")])
def test_the_variant_trains_every_parameter_e_among_them(knowledge):
    model = build_model(small(knowledge), seed=0)
    before = model.knowledge.entries.detach().clone()
    optimizer = build_optimizer(model, TrainConfig(lr=0.01))
    model(torch.randint(0, 40, (4, 16), generator=torch.Generator().manual_seed(0))).logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    optimizer.step()
    assert not torch.equal(model.knowledge.entries, before)


def test_freezing_everything_but_the_base_leaves_e_to_train():
    model = build_model(small(freeze=["blocks.*", "embed.*", "norm.*", "lm_head.*"]), seed=0)
    assert trainable_names(model) == ["knowledge.entries"]


@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_both_ways_of_computing_the_scores_agree(activation):
    """With at least n_E tokens W_Q is folded into the keys once per call; with fewer, each
    token is projected first. Same outputs and gradients, in float64."""
    base = randomize(KnowledgeBase(12, 6).double(), seed=1)
    layer = randomize(KnowledgeFFN(base, 8, d_key=5, activation=activation).double(), seed=2)
    h = randn(3, 7, 8)  # 21 tokens >= 12 entries: folded route
    out = layer(h)
    one_row = torch.cat([layer(h[i:i + 1, :1]) for i in range(3)])  # 1 token < 12 entries: per-token route
    assert max_diff(out[:, :1], one_row) < 1e-12
    out.square().sum().backward()
    folded_grad = base.entries.grad.clone()
    base.entries.grad = None
    sum(layer(h[i:i + 1, j:j + 1]).square().sum() for i in range(3) for j in range(7)).backward()
    assert max_diff(folded_grad, base.entries.grad) < 1e-10


def test_a_per_token_threshold_depends_on_the_token_and_refuses_to_fold():
    """The paper's N x n_E threshold: b1 differs between tokens whose scores' linear part is
    the same, which no FFN of width n_E can compute, so fold and unfold refuse it."""
    model = build_model(small(KnowledgeConfig(threshold="token", n_entries=24)), seed=0).double()
    layer = model.blocks[0].ffn
    randomize(layer.up.token_threshold, seed=3)
    h = randn(2, 5, 32)
    scores = layer.up(h, model.knowledge.entries)
    linear_part = F.linear(layer.up.q_proj(h), layer.up.k_proj(model.knowledge.entries) * layer.up.scale,
                           layer.up.threshold(model.knowledge.entries))
    assert scores.shape == (2, 5, 24) and max_diff(scores - linear_part, layer.up.token_threshold(h)) < 1e-12
    assert max_diff(scores[0, 0] - linear_part[0, 0], scores[0, 1] - linear_part[0, 1]) > 1e-3
    with pytest.raises(ModformerError, match="per-token threshold"):
        fold(layer)
    with pytest.raises(ModformerError, match="per-token threshold"):
        unfold([ReLUFFN(32, 64, bias=True)], threshold="token")


@pytest.mark.parametrize("kw", [{}, {"knowledge": KnowledgeConfig(activation="swiglu")}, {"mixer": "mixing"},
                                {"knowledge": KnowledgeConfig(threshold="token")}])
def test_causal(kw):
    model = build_model(small(**kw), seed=1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 40, (3, 16), generator=g)
    y = x.clone()
    y[:, 9:] = torch.randint(0, 40, (3, 7), generator=g)
    a, b = model(x), model(y)
    assert torch.equal(a[:, :9], b[:, :9]) and not torch.allclose(a[:, 9:], b[:, 9:])


def test_keys_are_computed_once_per_call_and_scores_are_captured():
    model = build_model(small(KnowledgeConfig(n_entries=24)), seed=0)
    calls = []
    model.blocks[0].ffn.up.k_proj.register_forward_hook(lambda m, i, o: calls.append(o.shape))
    with capture(model, "blocks.*.ffn.scores") as acts:
        model(torch.randint(0, 40, (3, 10), generator=torch.Generator().manual_seed(0)))
    assert calls == [(24, 32)]  # once for all 30 tokens, on the entries
    assert acts["blocks.1.ffn.scores"].shape == (3, 10, 24) and acts["blocks.1.ffn.scores"].min() >= 0


@pytest.mark.parametrize("override", ["model.knowledge.activation=tanh", "model.knowledge.threshold=sigmoid",
                                      "model.knowledge.n_entries=0", "model.knowledge.d_key=-1",
                                      "model.knowledge.threshold_hidden=0", "model.knowledge.d_entry=1.5",
                                      "model.knowledge.nonesuch=1"])
def test_config_errors_name_their_key(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, ["model.variant=knowledge", override])


def test_groups_of_layers_each_share_their_own_base():
    model = build_model(small(KnowledgeConfig(n_entries=12, groups=[[0, 2], [1]]), n_layers=3), seed=0)
    assert [n for n in dict(model.named_parameters()) if n.endswith("entries")] == [
        "knowledge.0.entries", "knowledge.1.entries"]
    bases = [block.ffn.base for block in model.blocks]
    assert bases[0] is bases[2] is model.knowledge[0] and bases[1] is model.knowledge[1]
    # Only layer 1 reads base 1: a loss on layer 1's output alone reaches base 1 and not base 0.
    h = torch.randn(2, 5, 32)
    model.blocks[1].ffn(h).sum().backward()
    assert model.knowledge[1].entries.grad.abs().sum() > 0 and model.knowledge[0].entries.grad is None
    folded = fold_model(model)
    tokens = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert max_diff(folded(tokens), model(tokens)) < 1e-4
    assert not hasattr(folded, "knowledge")


@pytest.mark.parametrize("groups", ["[[0], [0, 1]]", "[[0]]", "[[0, 1], []]", "[[0, 5], [1]]"])
def test_groups_must_cover_every_layer_once(groups):
    with pytest.raises(ConfigError, match="model.knowledge.groups"):
        load_config(None, ["model.variant=knowledge", "model.n_layers=2", f"model.knowledge.groups={groups}"])
