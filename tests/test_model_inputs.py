"""Parts that read the model's inputs (`ModelInputs`): the token ids, the embedding output,
the positions and the padding reach a part at training, evaluation, cached generation, under
activation checkpointing and through torch.compile, and a run of such parts resumes
bit-identically."""

import shutil

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from modformer.model.config import ModelConfig
from modformer.model.inputs import ModelInputs
from modformer.train.checkpoint import list_checkpoints
from modformer.variants import build_model

from test_train_options import SHORT, cheap_compile  # noqa: F401  (a fixture)
from test_trainer import assert_same_run, run

STATIC = "examples.decon_attention.decon_attention.sourced_qk:StaticEmbQK"
MEMORY = "examples.parts.token_memory:TokenMemoryFFN"
READING = [f"model.mixer={STATIC}", f"model.ffn={MEMORY}"]


def model(**kw) -> nn.Module:
    cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=3, n_heads=4, max_seq_len=16, mixer=STATIC, ffn=MEMORY, **kw)
    return build_model(cfg, seed=0)


def tokens(b=3, t=16):
    return torch.randint(1, 50, (b, t), generator=torch.Generator().manual_seed(0))


def test_each_block_gets_the_inputs_with_its_own_layer_index():
    m = model(pad_id=0)
    seen = []
    for block in m.blocks:
        block.ffn.register_forward_pre_hook(lambda mod, args, kwargs: seen.append(kwargs["inputs"]), with_kwargs=True)
    x = tokens()
    x[0, -3:] = 0  # padding at the end of the first sequence
    m(x)
    assert [i.layer for i in seen] == [0, 1, 2] and {i.n_layers for i in seen} == {3}
    first = seen[0]
    assert torch.equal(first.tokens, x) and torch.equal(first.positions, torch.arange(16))
    assert torch.equal(first.padding_mask, x != 0) and first.embed is m.embed
    torch.testing.assert_close(first.embedded, m.embed(x))
    assert model().blocks[0].ffn_reads_inputs  # and a model without model.pad_id has no padding mask:
    seen.clear()
    no_pad = model()
    no_pad.blocks[0].ffn.register_forward_pre_hook(lambda mod, a, kw: seen.append(kw["inputs"]), with_kwargs=True)
    no_pad(x)
    assert seen[0].padding_mask is None


def test_the_outputs_depend_on_the_ids_through_the_channel():
    """StaticEmbQK's pattern is a function of the tokens alone: the same hidden state with other
    tokens gives another output, and the token memory adds zero at padding."""
    m = model(pad_id=0)
    block = m.blocks[1]
    x = torch.randn(1, 16, 32)
    a, b = tokens(1), tokens(1).flip(-1)

    def inputs(ids):
        return ModelInputs(ids, m.embed(ids), torch.arange(16), ids != 0, m.embed, layer=1, n_layers=3)

    assert not torch.allclose(block.mixer(x, inputs=inputs(a)), block.mixer(x, inputs=inputs(b)))
    padded = torch.zeros_like(a)
    with torch.no_grad():
        m.blocks[1].ffn.memory.weight[0] = 1.0
        plain = m.blocks[1].ffn.down(F.gelu(m.blocks[1].ffn.up(x)))
        torch.testing.assert_close(m.blocks[1].ffn(x, inputs=inputs(padded)), plain)
    with pytest.raises(ValueError, match="reads the model's inputs"):
        block(x)


def test_cached_generation_gives_the_logits_of_one_pass():
    m = model(pad_id=0).eval()
    x = tokens(2)
    with torch.no_grad():
        whole = m(x)
        cache = m.new_cache()
        pieces = [m(x[:, :7], cache=cache), m(x[:, 7:8], cache=cache), m(x[:, 8:], cache=cache)]
    assert m.supports_cache()
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=1e-5, atol=1e-6)


def test_activation_checkpointing_gives_the_same_gradients():
    m = model()

    def gradients():
        m.zero_grad(set_to_none=True)
        logits = m(tokens())
        F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens()[:, 1:].flatten()).backward()
        return {name: p.grad.clone() for name, p in m.named_parameters()}

    plain = gradients()
    m.activation_checkpointing = True
    recomputed = gradients()
    assert plain["embed.weight"].abs().sum() > 0
    for name, grad in plain.items():
        torch.testing.assert_close(recomputed[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_a_run_of_parts_reading_the_inputs_trains_and_resumes_bit_identically(tiny_config, tmp_path):
    """Retrieval of 2 pairs with StaticEmbQK in every layer and the token memory as every FFN,
    as `test_tiny_training_reaches_95_percent` trains the standard model: >= 95% (measured
    99.5% and 99.8%, seeds 0 and 1)."""
    cfg = tiny_config(*READING, "task.n_pairs=2", "train.steps=150", "train.batch_size=128", "train.warmup_steps=15",
                      "train.eval_every=75", "train.checkpoint_every=75", "task.test_size=1000", "train.threads=1")
    summary = run(cfg, tmp_path / "whole")
    assert summary["test"]["accuracy"] >= 0.95
    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    list_checkpoints(tmp_path / "resumed" / "checkpoints")[-1][1].unlink()
    run(cfg, tmp_path / "resumed", resume=True)
    assert_same_run(tmp_path / "whole", tmp_path / "resumed")


@pytest.mark.slow  # torch.compile of a training (eager backend): ~10 s
def test_a_compiled_run_of_parts_reading_the_inputs_matches_the_plain_one(tiny_config, tmp_path, cheap_compile):
    run(tiny_config(*READING, *SHORT), tmp_path / "plain")
    run(tiny_config(*READING, *SHORT, "train.compile=true"), tmp_path / "compiled")
    assert len(cheap_compile) == 1
    assert_same_run(tmp_path / "plain", tmp_path / "compiled")
