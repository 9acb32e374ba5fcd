"""A pretrained (here: tiny random) Hugging Face Llama on one shared knowledge base: the
conversion reproduces its logits, an edit through E changes E alone, and the editing
measures mean what they say on a hand-made toy fact set."""

import math

import pytest
import torch

from modformer.errors import ModformerError
from modformer.knowledge.editing import (
    EditCase,
    EditConfig,
    Request,
    answered,
    continuations,
    edit,
    measure,
    perplexity,
)
from modformer.knowledge.fold import fold_model, unfold_model_approximate

transformers = pytest.importorskip("transformers")
from modformer.interop.hf_llama import from_hf_llama  # noqa: E402


@pytest.fixture(scope="module")
def llama():
    """A tiny random LlamaForCausalLM (d_ff = 64 > d = 32, so a full-width base is wider than
    the model: the keys carry the coefficients) and our standard model of it."""
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64)).eval()
    model, _ = from_hf_llama(hf)
    return hf, model.eval()


def toy_facts(model, n=6, seed=0):
    """Hand-made toy facts: 4-token prompts; each one's true answer is the model's own greedy
    token (what it 'knows'), its new answer the token it ranks 50th."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 300, (n, 4), generator=g)
    with torch.no_grad():
        ranked = model(prompts)[:, -1].argsort(-1, descending=True)
    known = [Request(tuple(p.tolist()), (int(r[0]),)) for p, r in zip(prompts, ranked)]
    new = [Request(tuple(p.tolist()), (int(r[49]),)) for p, r in zip(prompts, ranked)]
    return known, new


def test_shared_base_at_full_rank_reproduces_the_hugging_face_logits(llama):
    hf, model = llama
    shared, errors = unfold_model_approximate(model, 64, 64)
    assert shared.knowledge.entries.shape == (64, 64) and len(errors) == 3
    assert shared.blocks[0].ffn.up.k_proj.weight.shape == (32, 64)  # d_k = d: the keys are the FFN's rows
    tokens = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (shared(tokens) - hf(tokens).logits).abs().max() < 1e-4
        assert (fold_model(shared)(tokens) - hf(tokens).logits).abs().max() < 1e-4
    # A narrower shared base is an approximation whose error each layer reports.
    narrow, errors = unfold_model_approximate(model, 64, 16)
    assert all(0.05 < e["output"] < 1 for e in errors)
    with torch.no_grad():
        assert (narrow(tokens) - hf(tokens).logits).abs().max() > 1e-3


def test_an_edit_through_e_changes_e_and_nothing_else(llama):
    _, model = llama
    shared, _ = unfold_model_approximate(model, 64, 64)
    known, new = toy_facts(shared)
    before = {k: v.clone() for k, v in shared.state_dict().items()}
    assert not answered(shared, new[:2]).any()
    result = edit(shared, new[:2], ["knowledge.entries"], EditConfig(lr=3e-2, max_steps=200))
    assert result.answered and 0 < result.steps <= 200 and result.parameters == ["knowledge.entries"]
    assert answered(shared, new[:2]).all() and result.changed > 0
    after = shared.state_dict()
    assert not torch.equal(after["knowledge.entries"], before["knowledge.entries"])
    assert all(torch.equal(after[k], v) for k, v in before.items() if k != "knowledge.entries")
    assert all(p.requires_grad for p in shared.parameters())  # flags restored


def test_baseline_edits_change_only_their_parameters(llama):
    _, model = llama
    standard = from_hf_llama(llama[0])[0].eval()
    _, new = toy_facts(standard)
    before = {k: v.clone() for k, v in standard.state_dict().items()}
    result = edit(standard, new[:1], ["blocks.1.ffn.down_proj.weight"], EditConfig(lr=1e-2, max_steps=150))
    assert result.answered
    changed = [k for k, v in standard.state_dict().items() if not torch.equal(v, before[k])]
    assert changed == ["blocks.1.ffn.down_proj.weight"]
    with pytest.raises(ModformerError, match="matches no parameter"):
        edit(standard, new[:1], ["knowledge.entries"])
    with pytest.raises(ModformerError, match="non-empty"):
        Request((), (1,))


def test_the_editing_measures_on_a_toy_fact_set(llama):
    hf, model = llama
    shared, _ = unfold_model_approximate(model, 64, 64)
    known, new = toy_facts(shared, n=8)
    # Paraphrases: the same prompt with one more leading token; their targets the new answers.
    cases = [EditCase(n, (Request((7,) + n.prompt, n.answer),)) for n in new[:2]]
    others = known[2:]
    unrelated = continuations(shared, [(5, 6, 7), (100, 101)], tokens=3)
    assert [len(r.answer) for r in unrelated] == [3, 3]
    blocks = torch.randint(0, 300, (3, 16), generator=torch.Generator().manual_seed(2))
    original = measure(shared, cases, others, unrelated, blocks)
    # The model answers its own greedy tokens and nothing it ranks 50th; its continuations are its own.
    assert original.efficacy == 0 and original.specificity == 1 and original.unrelated == 1
    with torch.no_grad():  # perplexity = exp(Hugging Face's own mean loss) on the same text
        expected = math.exp(float(hf(blocks, labels=blocks).loss))
    assert abs(original.perplexity - expected) / expected < 1e-4
    result = edit(shared, [c.request for c in cases], ["knowledge.entries"], EditConfig(lr=3e-2, max_steps=200))
    after = measure(shared, cases, others, unrelated, blocks)
    assert result.answered and after.efficacy == 1
    # Every measure is the share of its requests that `answered` counts.
    assert after.specificity == answered(shared, others).float().mean().item()
    assert after.generalisation == answered(shared, [p for c in cases for p in c.paraphrases]).float().mean().item()
    assert after.perplexity == perplexity(shared, blocks)
