"""Key-value cache: cached generation equals uncached, for every causal mixer and position scheme."""

import pytest
import torch

from modformer import build_model
from modformer.generate import greedy_generate
from modformer.model.config import ModelConfig


def model(**kw):
    cfg = ModelConfig(**{"vocab_size": 50, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 24, **kw})
    m = build_model(cfg, seed=0)
    with torch.no_grad():  # sharper than at init, so that greedy choices are not near-ties
        for p in m.parameters():
            p.mul_(4.0) if p.ndim > 1 else None
    return m.double()


CASES = [{}, {"n_kv_heads": 2}, {"attn_bias": True}, {"rope": False, "learned_positions": True},
         {"variant": "mixit"}, {"variant": "knowledge"}, {"mixer": "mixing", "mixer_options": {"sink_head": True}}]


@pytest.mark.parametrize("kw", CASES, ids=[str(c) for c in CASES])
def test_cached_generation_equals_uncached(kw):
    m = model(**kw)
    prompt = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    cached, cached_logits = greedy_generate(m, prompt, 10)
    plain, plain_logits = greedy_generate(m, prompt, 10, use_cache=False)
    assert torch.equal(cached, plain)
    assert (cached_logits - plain_logits).abs().max() < 1e-10
    assert len(set(cached[:, 7:].flatten().tolist())) > 1  # not a degenerate repetition


@pytest.mark.parametrize("captured", [False, True])
def test_a_prompt_fed_in_pieces_gives_the_logits_of_one_pass(captured):
    """Also with the attention weights captured (the explicit path), whose last rows then
    match the whole pass's."""
    from contextlib import nullcontext

    from modformer import capture

    m = model()
    tokens = torch.randint(0, 50, (2, 15), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        with capture(m, "blocks.*.mixer.pattern") as whole_acts:
            whole = m(tokens)
        cache = m.new_cache()
        with capture(m, "blocks.*.mixer.pattern") if captured else nullcontext() as acts:
            pieces = torch.cat([m(tokens[:, :6], cache), m(tokens[:, 6:7], cache), m(tokens[:, 7:], cache)], dim=1)
    assert cache.length == 15 and (pieces - whole).abs().max() < 1e-10
    if captured:  # the last call's 8 queries against all 15 keys
        assert (acts["blocks.1.mixer.pattern"] - whole_acts["blocks.1.mixer.pattern"][:, :, 7:]).abs().max() < 1e-10


def test_generation_uses_every_position_and_no_more():
    m = model()
    tokens, logits = greedy_generate(m, torch.zeros(1, 20, dtype=torch.long), 5)  # feeds 24 positions
    assert tokens.shape == (1, 25) and logits.shape == (1, 5, 50)
    with pytest.raises(ValueError, match="max_seq_len=24"):
        greedy_generate(m, torch.zeros(1, 20, dtype=torch.long), 6)
    with pytest.raises(ValueError, match="at least one token"):
        greedy_generate(m, torch.zeros(1, 0, dtype=torch.long), 3)
    assert greedy_generate(m, torch.zeros(2, 3, dtype=torch.long), 0)[1].dtype == torch.float64
