"""Model FLOPs utilisation: the FLOPs formula against the built model, and what a run records."""

import pytest
import torch

from modformer.model.config import ModelConfig
from modformer.sweep.report import _mfu
from modformer.tasks.retrieval import Retrieval
from modformer.train.mfu import OWN, STANDARD, flops_per_token, training_flops_per_token
from modformer.variants import build_model

from test_trainer import run


@pytest.mark.parametrize("kv_heads", [4, 2])  # grouped-query attention shrinks k and v
def test_flops_per_token_is_six_per_matrix_weight_of_the_standard_model_plus_attention(kv_heads):
    cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=kv_heads, max_seq_len=16)
    model = build_model(cfg, seed=0)
    # every 2-D weight but the embedding (a lookup, no multiply)
    matrix_weights = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and name != "embed.weight")
    seq_len = 16
    assert training_flops_per_token(cfg, seq_len) == 6 * matrix_weights + 12 * cfg.n_layers * seq_len * cfg.d_model


def test_a_run_records_its_mfu_against_a_peak_measured_in_the_run(tiny_config, tmp_path):
    summary = run(tiny_config(), tmp_path / "run")
    mfu = summary["mfu"]
    cfg = tiny_config()
    assert mfu["seq_len"] == Retrieval(cfg.task).train_batch(0, 0, 2).inputs.shape[-1]
    assert mfu["flops_per_token"] == training_flops_per_token(cfg.model, mfu["seq_len"])
    peak = mfu["matmul_peak_gflops"] * 1e9
    assert mfu["mfu"] == pytest.approx(summary["tokens_per_s"] * mfu["flops_per_token"] / peak)
    assert 0 < mfu["mfu"] < 1
    assert _mfu([summary]) == f"{mfu['mfu']:.1%}"
    assert _mfu([{"tokens_per_s": 1.0}]) == "n/a"  # records from before summaries held it
    assert mfu["flops_of"] == OWN
    assert _mfu([{"mfu": {"mfu": 0.5, "flops_of": STANDARD}}]) == "50.0%*"  # the standard model's: an estimate


@pytest.mark.parametrize("ffn, matrices", [("swiglu", 3), ("gelu", 2), ("shaped_leaky_glu", 3)])
def test_mfu_counts_the_models_own_flops_where_its_parts_are_known(ffn, matrices):
    """MixiT has no q, k and no scores: its own count, not the standard model's (which gave
    MixiT more than 100% MFU); a part of one's own is labelled as the standard's estimate."""
    for mixer in ("attention", "mixing"):
        cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=16, ffn=ffn, mixer=mixer,
                          variant="mixit" if mixer == "mixing" else "standard")
        model = build_model(cfg, seed=0)
        matrix_weights = sum(p.numel() for name, p in model.named_parameters()
                             if p.dim() == 2 and name != "embed.weight")
        mixing = 12 if mixer == "attention" else 6
        assert flops_per_token(cfg, 16) == (6 * matrix_weights + mixing * 2 * 16 * 32, OWN)
    mine = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=16,
                       mixer="examples.parts.causal_conv:CausalConv")
    assert flops_per_token(mine, 16) == (training_flops_per_token(mine, 16), STANDARD)
    assert flops_per_token(ModelConfig(vocab_size=50, max_seq_len=16), 16, builds_own_ffn=True)[1] == STANDARD


def test_mfu_divides_the_tokens_of_every_process_by_every_processs_peak(monkeypatch):
    """`tokens_per_s` counts the tokens of all processes together; each process has its own peak:
    MFU = tokens/s x FLOPs per token / (peak x processes)."""
    from modformer.train import mfu as mfu_module

    monkeypatch.setattr(mfu_module, "matmul_peak", lambda *args, **kwargs: 1e9)
    cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
    flops = training_flops_per_token(cfg, 16)
    one, four = (mfu_module.utilisation(cfg, 16, 1000.0, "fp32", torch.device("cpu"), n)["mfu"] for n in (1, 4))
    assert one == pytest.approx(1000.0 * flops / 1e9) and four == pytest.approx(one / 4)


def test_a_run_of_two_processes_records_the_mfu_of_each(tiny_config, tmp_path, monkeypatch):
    """The trainer gives the MFU its world's size: a run that trains in a world of 2 (here this one
    process in a gloo group, taken as rank 0 of 2) records half the MFU of its tokens/s on one
    process's peak."""
    import torch.distributed as dist

    from modformer.train import mfu as mfu_module
    from modformer.train import trainer as trainer_module
    from modformer.train.distributed import World

    monkeypatch.setattr(mfu_module, "matmul_peak", lambda *args, **kwargs: 1e9)
    monkeypatch.setattr(trainer_module, "init_world", lambda device: (World(0, 2, device), device))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        summary = run(tiny_config("train.steps=2", "train.eval_every=2", "train.checkpoint_every=0",
                                  "train.log_every=1", "model.d_model=16", "model.n_layers=1", "model.n_heads=2",
                                  "task.test_size=20", "task.validation_size=20", "train.eval_batch_size=20",
                                  "train.batch_size=4"), tmp_path / "run")
    finally:
        dist.destroy_process_group()
    mfu = summary["mfu"]
    assert mfu["matmul_peak_gflops"] == 1.0
    assert mfu["mfu"] == pytest.approx(summary["tokens_per_s"] * mfu["flops_per_token"] / (1e9 * 2))
