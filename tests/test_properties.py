"""Properties checked directly, each the one a realistic bug would break while every other
test still passed (issue 28, item 9: bugs planted one at a time that the suite missed).
Each test names the bug it catches."""

from __future__ import annotations

import copy
import math
import pickle
from dataclasses import replace

import pytest
import torch
from torch import nn

from modformer import build_model
from modformer.errors import CheckpointError, Interrupted
from modformer.evaluate import evaluate
from modformer.generate import sample_generate
from modformer.model.config import ModelConfig
from modformer.model.knowledge import KnowledgeRead, TokenThresholdRead
from modformer.registry import TASKS
from modformer.train.checkpoint import list_checkpoints, read_checkpoint
from modformer.train.optim import learning_rate
from modformer.train.trainer import Trainer


def quiet(cfg, out, **kw):
    return Trainer(cfg, out, echo=lambda message: None, **kw)


# (a) read_checkpoint falling back to torch.load(path, weights_only=False) --------------------

class Planted:
    """Unpickling it runs code: writes a file next to the checkpoint."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("name", ["step_4.pt", "step_4.ckpt", "checkpoint"])  # not *.safetensors: any suffix
def test_a_pickled_file_is_refused_without_being_unpickled(tmp_path, name):
    path, marker = tmp_path / name, tmp_path / "ran"
    torch.save({"model": Planted(marker), "step": 4}, path)
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        read_checkpoint(path)
    path.write_bytes(pickle.dumps(Planted(marker)))  # plain pickle, not torch's zip
    with pytest.raises(CheckpointError):
        read_checkpoint(path)
    assert not marker.exists()  # nothing of the file ran


# (b) warm-up starting at lr 0 instead of lr / warmup -----------------------------------------

def test_warmup_starts_at_the_peak_over_warmup_and_the_first_step_uses_it(tiny_config, tmp_path):
    cfg = tiny_config("train.steps=1", "train.warmup_steps=10", "train.lr=0.01", "train.eval_every=1")
    assert [learning_rate(s, cfg.train) for s in range(3)] == pytest.approx([0.001, 0.002, 0.003])
    trainer = quiet(cfg, tmp_path / "run")
    trainer.run()
    groups = trainer.optimizer.param_groups  # as step 0 set them: it trained at lr / 10
    assert [g["lr"] / g.get("lr_scale", 1.0) for g in groups] == pytest.approx([0.001] * len(groups))


# (c) gradient clipping never applied (the logged norm is the norm before clipping) ----------

def test_the_gradients_the_optimizer_steps_with_are_clipped(tiny_config, tmp_path):
    trainer = quiet(tiny_config("train.steps=1", "train.grad_clip=1e-4", "train.eval_every=1"), tmp_path / "run")
    trainer.run()
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in trainer.trainable]))
    logged = [r for r in trainer.metrics.records() if r.get("kind") == "train"][0]["grad_norm"]
    assert logged > 1e-2  # the norm before clipping, as logged
    assert norm <= 1e-4 * (1 + 1e-4)  # what AdamW stepped with


# (d) per-slice metrics reading the whole set's slice values for each evaluation batch -------

class KnowsSome(nn.Module):
    """Right on the examples it was told (every third one of the set), wrong elsewhere."""

    def __init__(self, data, vocab):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.vocab = vocab
        self.known = {tuple(x.tolist()): y for i, (x, y) in enumerate(zip(data.inputs, data.targets)) if i % 3 == 0}
        self.wrong = {tuple(x.tolist()): y for x, y in zip(data.inputs, data.targets)}

    def forward(self, inputs):
        rows = []
        for x in inputs:
            key = tuple(x.tolist())
            y = self.known[key] if key in self.known else (self.wrong[key] + 1) % self.vocab
            rows.append(nn.functional.one_hot(y.clamp(min=0), self.vocab).float())  # IGNORE (< 0): unscored
        return torch.stack(rows)


def test_per_slice_accuracy_is_each_examples_own_slice_in_every_batch(tiny_config):
    cfg = tiny_config("task.test_size=60")
    task = TASKS[cfg.task.name](cfg.task)
    data = task.test_set()
    model = KnowsSome(data, task.vocab_size)
    result = evaluate(model, task, batch_size=7, data=data)  # 9 batches, the last one short
    (name, values), = data.slices.items()
    right = torch.arange(len(data)) % 3 == 0
    for value in values.unique().tolist():
        chosen = values == value
        got = result["slices"][name][str(value)]
        assert got["examples"] == int(chosen.sum())
        assert got["accuracy"] == pytest.approx(right[chosen].float().mean().item())
    assert result["accuracy"] == pytest.approx(right.float().mean().item())


# (e) sampling multiplying logits by the temperature instead of dividing ----------------------

class FixedLogits(nn.Module):
    """Logits [0, 1] at every position, whatever the tokens."""

    max_seq_len, vocab_size = None, 2

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(2, 1)

    def supports_cache(self):
        return False

    def forward(self, tokens, cache=None):
        return torch.tensor([0.0, 1.0]).expand(*tokens.shape, 2)


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sampling_draws_from_softmax_of_logits_over_temperature(temperature):
    prompt = torch.zeros(4000, 1, dtype=torch.long)
    tokens, _ = sample_generate(FixedLogits(), prompt, 1, temperature=temperature,
                                generator=torch.Generator().manual_seed(0))
    expected = torch.tensor([0.0, 1.0 / temperature]).softmax(-1)[1].item()  # 0.881 at 0.5, 0.622 at 2
    assert tokens[:, 1].float().mean().item() == pytest.approx(expected, abs=0.03)


# (g) Ctrl-C not saving at the step where it stops ---------------------------------------------

def test_an_interrupted_run_saves_the_step_it_stopped_at(tiny_config, tmp_path, monkeypatch):
    calls = []

    def after_three(self):
        calls.append(1)
        return len(calls) == 3

    monkeypatch.setattr(Trainer, "stop_requested", after_three)
    trainer = quiet(tiny_config("train.steps=12", "train.checkpoint_every=5"), tmp_path / "run")
    with pytest.raises(Interrupted, match="interrupted at step 3"):
        trainer.run()
    (step, path), = list_checkpoints(tmp_path / "run" / "checkpoints")
    assert step == 3  # not the regular checkpoint's step (5), which was never reached
    saved = read_checkpoint(path).model
    assert all(torch.equal(saved[k], v) for k, v in trainer.model.state_dict().items())


# (h) a knowledge edit taking one step more than extra_steps ----------------------------------

def test_an_edit_stops_extra_steps_after_every_request_is_answered():
    from modformer.knowledge.editing import EditConfig, Request, answered, edit

    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=40, max_seq_len=8, d_model=16, n_heads=2, n_layers=1), seed=0).eval()
    g = torch.Generator().manual_seed(1)
    requests = [Request(tuple(torch.randint(0, 40, (4,), generator=g).tolist()), (int(a),))
                for a in torch.randint(0, 40, (3,), generator=g)]
    cfg = EditConfig(lr=3e-2, max_steps=200, extra_steps=0)
    first = copy.deepcopy(model)
    done = edit(first, requests, ["blocks.0.ffn.*"], cfg)
    assert done.answered and 0 < done.steps < 200
    # One step fewer does not answer them all: the edit stopped at the first step that did.
    fewer = copy.deepcopy(model)
    edit(fewer, requests, ["blocks.0.ffn.*"], replace(cfg, max_steps=done.steps - 1))
    assert not answered(fewer, requests).all()
    margin = edit(copy.deepcopy(model), requests, ["blocks.0.ffn.*"], replace(cfg, extra_steps=3))
    assert margin.steps == done.steps + 3


# (i) memorization's bits per parameter divided by all parameters, not the trainable ones -------

def test_memorization_capacity_is_bits_per_trainable_parameter():
    from modformer.tasks.memorization import capacity_bits_per_parameter

    task = TASKS["memorization"](TASKS["memorization"].Config(n=16))
    assert capacity_bits_per_parameter(100, 16, 50) == pytest.approx(100 * 4 / 50)
    assert task.model_metrics({"recalled": 100.0}, {"total": 1000, "trainable": 50}) == \
        {"bits_per_parameter": pytest.approx(100 * 4 / 50)}


# (j) the knowledge ladder counting 2 instead of 3 coefficient matrices per layer -------------

def test_the_ladders_budget_counts_every_coefficient_map_of_a_built_shared_base():
    from modformer.knowledge.fold import unfold_model_approximate
    from modformer.papers.knowledge.ladder import coefficient_parameters

    d, d_ff, L, n_entries, d_entry = 16, 48, 2, 32, 24
    model = build_model(ModelConfig(vocab_size=30, max_seq_len=8, d_model=d, n_heads=2, n_layers=L, d_ff=d_ff),
                        seed=0)
    shared, _ = unfold_model_approximate(model, n_entries, d_entry)

    def fixed(w):  # the identity factor the factorization fixes (sqrt(d_k) I or I): not a coefficient map
        return w.shape[0] == w.shape[1] and torch.allclose(w, w[0, 0] * torch.eye(w.shape[0]))

    counted = shared.knowledge.entries.numel()
    for block in shared.blocks:
        for read in block.ffn.reads:
            counted += sum(p.numel() for p in (getattr(block.ffn, read).q_proj.weight,
                                               getattr(block.ffn, read).k_proj.weight) if not fixed(p))
        counted += block.ffn.v_proj.weight.numel()
    assert len(shared.blocks[0].ffn.reads) == 2  # gate and up, with v (down): 3 maps per layer
    assert coefficient_parameters(L, d, n_entries, d_entry, shared=True) == counted


# the knowledge read's 1/sqrt(d_k) scale, on each of its code paths ------------------------------

@pytest.mark.parametrize("tokens, n_entries, d_entry, d_key, path", [
    (2, 64, 64, 64, "few tokens, wide base: W_K applied to each query"),
    (8, 4, 8, 8, "at least n_E tokens: W_Q folded into the keys"),
    (15, 16, 64, 4, "otherwise: keys formed once"),
])
@pytest.mark.parametrize("read_class", [KnowledgeRead, TokenThresholdRead])
def test_the_knowledge_read_is_scaled_by_one_over_sqrt_dk_on_every_path(tokens, n_entries, d_entry, d_key, path,
                                                                      read_class):
    torch.manual_seed(0)
    d_model = 12
    read = read_class(d_model, n_entries, d_entry, d_key, "linear", 4).double()
    h, entries = torch.randn(1, tokens, d_model, dtype=torch.float64), torch.randn(n_entries, d_entry,
                                                                                    dtype=torch.float64)
    expected = (h @ read.q_proj.weight.T) @ (entries @ read.k_proj.weight.T).T / math.sqrt(d_key) \
        + read.threshold(entries)
    if read_class is TokenThresholdRead:
        expected = expected + read.token_threshold(h)
    assert torch.allclose(read(h, entries), expected, atol=1e-10), path
    # ... and through the fold into an FFN, whose up projection carries the same scale.
    from modformer.knowledge.fold import fold
    from modformer.model.knowledge import KnowledgeBase, KnowledgeFFN

    if read_class is KnowledgeRead:
        base = KnowledgeBase(n_entries, d_entry).double()
        with torch.no_grad():
            base.entries.copy_(entries)
        layer = KnowledgeFFN(base, d_model, d_key=d_key, activation="relu", threshold="linear").double()
        assert torch.allclose(fold(layer)(h), layer(h), atol=1e-10)
