"""The model package's contracts off the straight path (modformer/model/): options refused at
their bounds, draws that follow the model's generator, float64 mixing matrices against a naive
construction, the words of its errors, the probe's helpers. Each test was written for a
survivor of the package's mutation sample (results/mutation/model_survivors.txt)."""

import inspect
import math

import pytest
import torch

from modformer.errors import ConfigError
from modformer.model.attention import SelfAttention
from modformer.model.cache import KVCache
from modformer.model.config import ModelConfig
from modformer.model.feedforward import shaped_slope
from modformer.model.knowledge import KnowledgeBase, TokenThresholdRead
from modformer.model.mixing import MixingMixer, MixingOptions, mixing_matrices
from modformer.model.probe import _differs, where
from modformer.model.rope import RotaryEmbedding


# --- mixing ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [dict(extra_positions=-1), dict(extra_positions=2, causal=False),
                                     dict(sigma_range=(0.5, 0.2)), dict(sigma_range=(-0.1, 0.2))])
def test_mixing_options_out_of_their_bounds_are_refused(options):
    with pytest.raises(ValueError):
        MixingOptions(**options)


def test_mixing_options_at_their_bounds_are_accepted():
    assert MixingOptions(sigma_range=(0.0, 0.5)).sigma_range == (0.0, 0.5)
    assert MixingOptions(sigma_range=(0.3, 0.3)).sigma_range == (0.3, 0.3)
    assert MixingOptions(extra_positions=2).extra_positions == 2


def naive_mixing(n_heads, T, head_dim, options, seed):
    """A, drawn as the reference describes it, in float64 throughout, one element at a time."""
    g = torch.Generator().manual_seed(seed)
    low, high = options.sigma_range or (1 / math.sqrt(T * head_dim), 1 / math.sqrt(T))
    sigma = low + (high - low) * torch.rand(n_heads, 1, 1, generator=g, dtype=torch.float64)
    noise = torch.randn(n_heads, T, T, generator=g, dtype=torch.float64) * sigma
    mix = torch.zeros(n_heads, T, T, dtype=torch.float64)
    for h in range(n_heads):
        for i in range(T):
            cols = range(i + 1) if options.causal else range(T)
            count = (i + 1) if options.causal or options.bidirectional_drift == "reference" else T
            drift = sum(noise[h, i, j] for j in cols) / count
            for j in cols:
                mix[h, i, j] = (i == j) + options.scale * (noise[h, i, j] - drift)
    return mix


@pytest.mark.parametrize("options", [MixingOptions(), MixingOptions(scale=0.5, sigma_range=(0.1, 0.9)),
                                     MixingOptions(causal=False),
                                     MixingOptions(causal=False, bidirectional_drift="reference")])
def test_mixing_matrices_match_a_naive_float64_construction_and_follow_the_generator(options):
    a = mixing_matrices(3, 6, 4, options, torch.Generator().manual_seed(7))
    assert a.dtype == torch.float32
    torch.testing.assert_close(a.double(), naive_mixing(3, 6, 4, options, 7), rtol=0, atol=1e-7)
    torch.manual_seed(0)  # the global generator is not what draws A
    assert torch.equal(a, mixing_matrices(3, 6, 4, options, torch.Generator().manual_seed(7)))


def test_bidirectional_mixing_names_a_cache_as_the_reason_it_refuses():
    mixer = MixingMixer(8, 2, 4, MixingOptions(causal=False))
    with pytest.raises(ValueError, match=r"^bidirectional mixing was drawn for whole sequences of length 4, got 3 "
                                         r"tokens$"):
        mixer(torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match=r"length 4, got 4 tokens after a cache$"):
        mixer(torch.zeros(1, 4, 8), cache=KVCache(n_layers=1).layer(0))


# --- attention, positions, the feed-forward modules -------------------------------------------------

def test_attention_is_bias_free_unless_asked():
    assert all(m.bias is None for m in SelfAttention(16, 2).modules() if isinstance(m, torch.nn.Linear))


def test_bidirectional_attention_refuses_a_cache_saying_why():
    with pytest.raises(ValueError, match=r"^bidirectional attention cannot extend a cache: later tokens change "
                                         r"earlier outputs$"):
        SelfAttention(8, 2, causal=False)(torch.zeros(1, 2, 8), cache=KVCache(n_layers=1).layer(0))


def test_rope_leaves_the_first_position_as_it_is_and_names_the_length_it_cannot_reach():
    rope = RotaryEmbedding(8, 4)
    x = torch.randn(1, 2, 3, 8)
    torch.testing.assert_close(rope(x)[:, :, 0], x[:, :, 0])  # position 0: a rotation by 0
    torch.testing.assert_close(rope(x)[:, :, 1:], rope(x[:, :, 1:], 1))
    with pytest.raises(ValueError, match=r"^sequence length 5 exceeds model\.max_seq_len=4$"):
        rope(x, 2)


def test_the_shaped_slope_tends_to_one_as_width_grows():
    slope, gain = shaped_slope(64)
    assert slope == 1 - 1 / 8 and gain == pytest.approx(math.sqrt(2 / (1 + slope ** 2)))
    assert shaped_slope(256, c_minus=-2.0)[0] == 1 - 2 / 16


@pytest.mark.parametrize("key", ["n_heads", "norm_eps"])
def test_a_positive_setting_is_refused_at_zero_by_its_name(key):
    with pytest.raises(ConfigError, match=rf"^model\.{key} must be positive, got 0$"):
        ModelConfig(**{key: 0})


# --- the knowledge base ------------------------------------------------------------------------------

def test_the_knowledge_base_is_drawn_unit_normal_from_the_models_generator():
    base = KnowledgeBase(512, 64)
    base.init_parameters(0.02, torch.Generator().manual_seed(3))
    entries = base.entries.detach().clone()
    assert abs(entries.mean().item()) < 0.02 and abs(entries.std().item() - 1.0) < 0.02  # std is not read
    torch.manual_seed(1)
    base.init_parameters(0.02, torch.Generator().manual_seed(3))
    assert torch.equal(base.entries, entries)


def test_a_token_threshold_read_builds_its_per_entry_part_with_the_hidden_width():
    read = TokenThresholdRead(16, 12, 8, 8, "mlp", 5)
    widths = {m.out_features for m in read.threshold.modules() if isinstance(m, torch.nn.Linear)}
    assert widths == {5, 1}


# --- the probe's helpers -------------------------------------------------------------------------

def test_the_probe_measures_a_change_relative_to_the_first_tensors_scale():
    assert _differs(torch.tensor([1.0]), torch.tensor([2.0])) == 0.5
    assert _differs(torch.tensor([3.0, -1.0]), torch.tensor([3.0, 1.0])) == 0.5
    assert _differs(torch.zeros(0), torch.zeros(0)) == 0.0


class _Raises:
    def __deepcopy__(self, memo):
        raise RuntimeError("inner")


def test_where_names_the_innermost_frame_of_a_raised_error():
    import copy

    try:
        copy.deepcopy(_Raises())  # three frames: this test's, copy.py's, and where it was raised
    except RuntimeError as e:
        line = inspect.getsourcelines(_Raises.__deepcopy__)[1] + 1
        assert where(e) == f" (test_model_properties.py:{line})"
    assert where(RuntimeError("never raised")) == ""


def test_a_reference_construction_has_unplain_parts_and_the_library_model_none():
    from modformer.config import load_config
    from modformer.model.transformer import unplain_parts
    from modformer.variants.base import build_model

    def built(*overrides):
        return build_model(load_config(None, ["model.d_model=16", "model.n_heads=2", *overrides]).model, 0)

    reference = unplain_parts(built("model.variant=mixit", "model.construction=reference"))
    assert "blocks.0" in reference and any(name.endswith("v_proj") for name in reference)
    assert unplain_parts(built("model.variant=mixit")) == []


def test_the_bridges_defaults_are_the_reference_papers():
    from modformer.config import load_config
    from modformer.model.bridged import BridgedStudent
    from modformer.papers.llm_modules.config import BridgeSection
    from modformer.variants.base import build_model

    student = build_model(load_config(None, ["model.d_model=16", "model.n_heads=2"]).model, 0)
    bridge = BridgedStudent(student, 24).bridges["input"]  # built as the reference's, nothing given
    section = BridgeSection()
    assert (bridge.n_heads, bridge.dropout, bridge.adapter_in.out_features) == \
        (section.n_heads, section.dropout, section.adapter_bottleneck) == (8, 0.1, 256)


def test_a_models_own_tokens_and_a_parts_default_name_reach_the_probe():
    """probe_model: a model without `vocab_size` is probed with tokens 0 and 1; a wrong part is
    named by the config key of its role where the caller gave no name for it."""
    from modformer.config import load_config
    from modformer.model.probe import probe_model
    from modformer.variants.base import build_model

    class Unsized(torch.nn.Module):  # a model of yours that says nothing of its vocabulary
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, tokens):
            return self.model(tokens)

    built = build_model(load_config(None, ["model.d_model=16", "model.n_heads=2"]).model, 0)
    model = Unsized(built)
    assert probe_model(model, 8, {}) == []

    class Wide(torch.nn.Module):
        def forward(self, x):
            return torch.cat([x, x], -1)

    built.blocks[1].ffn = Wide()
    with pytest.raises(ConfigError, match=r"^model\.ffn \(model\.blocks\.1\.ffn, Wide\) returned a tensor of shape"):
        probe_model(model, 8, {"mixer": "model.mixer=attention"})


def test_an_auxiliary_loss_outside_the_model_is_counted_as_aux():
    from modformer.model.aux import AuxLoss, collecting

    inside = torch.nn.Sequential(AuxLoss(0.5))
    with collecting(inside) as terms:
        inside[0](torch.tensor(2.0))
        AuxLoss(1.0)(torch.tensor(3.0))
    assert terms.logged() == {"0": 2.0, "aux": 3.0} and float(terms.total()) == 0.5 * 2.0 + 3.0
