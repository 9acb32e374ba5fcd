"""Training options that trade memory or compile time for speed: activation checkpointing
gives the same gradients, and a compiled run saves the plain model's parameter names."""

import shutil

import pytest
import torch
import torch.nn.functional as F

from modformer.model.config import ModelConfig
from modformer.train.checkpoint import list_checkpoints
from modformer.variants import build_model

from test_trainer import assert_same_run, final_state, run

SHORT = ["model.d_model=32", "train.steps=2", "train.eval_every=2", "train.log_every=1", "train.checkpoint_every=1",
         "train.keep_checkpoints=5", "task.test_size=100", "task.validation_size=100",
         "train.eval_batch_size=100"]


def gradients(model, tokens):
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()).backward()
    return {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("variant", ["standard", "mixit", "frozen_qk", "random_transformer"])
def test_activation_checkpointing_gives_the_same_gradients(variant):
    cfg = ModelConfig(variant=variant, vocab_size=50, d_model=32, n_layers=3, n_heads=4, max_seq_len=16)
    model = build_model(cfg, seed=0)
    tokens = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(0))
    plain = gradients(model, tokens)
    calls = []
    model.blocks[1].register_forward_pre_hook(lambda *a: calls.append(1))
    model.activation_checkpointing = True
    recomputed = gradients(model, tokens)
    assert len(calls) == 2  # the forward, and its recomputation in backward
    assert plain.keys() == recomputed.keys()
    for name, grad in plain.items():
        if grad is None:  # frozen: no gradient either way
            assert recomputed[name] is None, name
        else:
            torch.testing.assert_close(recomputed[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    assert any(g is None for g in plain.values()) == (variant in ("frozen_qk", "random_transformer"))
    with torch.no_grad():  # nothing to recompute for: the blocks run once
        calls.clear()
        model(tokens)
        assert len(calls) == 1


def test_the_trainer_checkpoints_when_asked(tiny_config, tmp_path, monkeypatch):
    import modformer.model.transformer as transformer

    calls = []
    original = transformer.checkpoint
    monkeypatch.setattr(transformer, "checkpoint", lambda *a, **kw: (calls.append(1), original(*a, **kw))[1])
    run(tiny_config(*SHORT), tmp_path / "plain")
    assert not calls
    run(tiny_config(*SHORT, "train.activation_checkpointing=true"), tmp_path / "ckpt")
    assert len(calls) == 2 * 2  # 2 steps x 2 blocks; evaluation (no gradients) runs the blocks once
    a, b = final_state(tmp_path / "plain").model, final_state(tmp_path / "ckpt").model
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.fixture
def cheap_compile(monkeypatch):
    """torch.compile with the eager backend: a real compiled module (Dynamo traces the model,
    the parameter names gain `_orig_mod.`) without the C++ compilation that costs ~40 s here."""
    compiled = []

    def compile_(model, **kw):
        compiled.append(original(model, backend="eager", **kw))
        return compiled[-1]

    original = torch.compile
    monkeypatch.setattr(torch, "compile", compile_)
    return compiled


@pytest.mark.slow  # torch.compile of a training and of its resume: ~25 s; CI runs it (.ci/run)
def test_compiled_run_saves_the_plain_names_and_resumes(tiny_config, tmp_path, cheap_compile):
    run(tiny_config(*SHORT), tmp_path / "plain")
    run(tiny_config(*SHORT, "train.compile=true"), tmp_path / "compiled")
    assert len(cheap_compile) == 1 and "_orig_mod.embed.weight" in cheap_compile[0].state_dict()
    # Same names as an uncompiled run, and (eager backend: same arithmetic) the same numbers.
    assert_same_run(tmp_path / "plain", tmp_path / "compiled")
    # A compiled run resumes from its own checkpoint to the same end.
    shutil.copytree(tmp_path / "compiled", tmp_path / "resumed")
    list_checkpoints(tmp_path / "resumed" / "checkpoints")[-1][1].unlink()
    run(tiny_config(*SHORT, "train.compile=true"), tmp_path / "resumed", resume=True)
    assert_same_run(tmp_path / "compiled", tmp_path / "resumed")


@pytest.mark.slow
def test_compiled_training_matches_uncompiled(tiny_config, tmp_path):
    """A real torch.compile (inductor, C++ for the CPU; about a minute here): the same losses
    to float tolerance (fused kernels sum in another order)."""
    from modformer.train.records import read_records

    cfg = ["train.steps=6", "train.log_every=1", "train.eval_every=6", "train.checkpoint_every=0"]
    run(tiny_config(*cfg), tmp_path / "plain")
    run(tiny_config(*cfg, "train.compile=true"), tmp_path / "compiled")
    losses = [[r["loss"] for r in read_records(out / "metrics.jsonl") if r["kind"] == "train"]
              for out in (tmp_path / "plain", tmp_path / "compiled")]
    assert len(losses[0]) == 6
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=1e-5)
    assert final_state(tmp_path / "plain").model.keys() == final_state(tmp_path / "compiled").model.keys()


def test_auto_precision_follows_the_hardware(tiny_config, tmp_path, monkeypatch):
    """`auto` is bf16 only where the device computes it natively (a bf16 autocast emulated on
    an AVX2 CPU was measured 6x slower than float32), and the run records what it chose."""
    import modformer.precision as precision
    from modformer.train.trainer import Trainer

    cpu = torch.device("cpu")
    assert precision.resolve_precision("fp32", cpu) == "fp32" and precision.resolve_precision("bf16", cpu) == "bf16"
    for native, chosen in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(precision, "native_bf16", lambda device, native=native: native)
        assert precision.resolve_precision("auto", cpu) == chosen
        assert isinstance(precision.autocast(cpu, "auto"), torch.autocast) == native
    summary = Trainer(tiny_config("train.precision=auto", "train.steps=2"), tmp_path / "run", echo=lambda m: None).run()
    assert summary["precision"] == "fp32"  # native_bf16 says False (patched above)
