"""Benchmarks: the interleaved timer, the memory count and every suite on tiny shapes (no timing
asserted beyond what cannot be noise)."""

import json
import time

import pytest
import torch
import torch.nn.functional as F

from modformer.bench.memory import LiveTensorBytes, live_state, peak_step_memory
from modformer.bench.timing import time_interleaved
from modformer.model.config import ModelConfig
from modformer.train.config import TrainConfig
from modformer.train.optim import build_optimizer
from modformer.variants import build_model

from test_checkpoint_cli import assert_clean_error, modformer


def test_interleaved_timer_runs_contenders_in_turn_and_reports_medians():
    calls = []
    t = time_interleaved({"slow": lambda: (calls.append("slow"), time.sleep(0.02)),
                          "fast": lambda: calls.append("fast")}, repeats=3, warmup=1)
    assert calls == ["slow", "fast"] + ["slow", "fast", "fast", "slow", "slow", "fast"]
    assert t["slow"] >= 0.02 > t["fast"]


def test_live_tensor_bytes_counts_each_storage_once_until_it_is_freed():
    held = torch.zeros(100)  # 400 bytes, alive before
    with LiveTensorBytes([held, held.view(10, 10)]) as m:
        a = torch.empty(1000)
        views = [a.view(10, 100).t(), a[:10]]  # no new storage
        b = torch.empty(2000)
        assert m.now == m.peak == 400 + 4000 + 8000
        del a, views
        c = torch.ones(500, dtype=torch.float64)
        held.add_(1)  # in place: nothing new
    assert (m.now, m.peak) == (400 + 8000 + 4000, 12400)
    del b, c  # freed after the count ended: it no longer listens


def test_peak_memory_of_a_training_step_and_what_checkpointing_saves():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=2, max_seq_len=64)
    tokens = torch.randint(0, 64, (4, 64), generator=torch.Generator().manual_seed(0))
    peaks = []
    for checkpointing in (False, True):
        model = build_model(cfg, seed=0)
        model.activation_checkpointing = checkpointing
        optimizer = build_optimizer(model, TrainConfig())

        def step():
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
            optimizer.step()

        step()  # the optimizer state exists from here on
        params = sum(p.numel() * 4 for p in model.parameters())
        peak = peak_step_memory(step, tokens.device, live_state(model, optimizer, tokens))
        # Alive throughout: weights, two Adam moments, last step's gradients (freed at the start) or this
        # step's; on top: activations and the (4, 64, 64) logits at least.
        assert peak > 4 * params + 4 * 64 * 64 * 4
        peaks.append(peak)
    assert peaks[1] < peaks[0]  # only block inputs kept through the forward


def test_knowledge_cost_command(tmp_path):
    result = modformer("bench", "knowledge", "--width", "16", "--layers", "1", "--tokens", "2x8", "4x8",
                       "--repeats", "1", "--threads", "1", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "knowledge_cost.json").read_text())
    from modformer.version import code_version, machine
    assert (data["code_version"], data["machine"]) == (code_version(), machine())  # what made the figures
    assert f"Made by modformer {code_version()} on {machine()}" in (tmp_path / "knowledge_cost.md").read_text()
    rows = data["rows"]
    assert [(r["what"], r["mode"]) for r in rows[:4]] == [
        ("layer", "train"), ("layer", "inference"), ("1-layer model", "train"), ("1-layer model", "inference")]
    assert len(rows) == 8 and all(r["knowledge_ms"] > 0 and r["ffn_ms"] > 0 for r in rows)
    assert "| layer | train | 2x8, d=16, n_E=64 |" in result.stdout
    assert modformer("bench", "knowledge", "--tokens", "2by8").returncode == 2
    assert_clean_error(modformer("bench", "knowledge", "--width", "4"), "--width")


def test_llama_throughput_command(tmp_path):
    pytest.importorskip("transformers")
    result = modformer("bench", "llama", "--width", "32", "--layers", "1", "--heads", "2", "--batch", "2", "--seq", "16",
                       "--repeats", "1", "--threads", "1", "--precision", "fp32", "--checkpointing", "--reference",
                       "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "llama_throughput.json").read_text())["rows"]
    names = [r["contender"] for r in rows]
    assert names == ["modformer standard", "transformers LlamaForCausalLM", "modformer standard, checkpointed",
                     "modformer frozen_qk", "modformer mixit", "modformer standard, reference",
                     "modformer frozen_qk, reference", "modformer mixit, reference", "matmul peak (GFLOP/s)"]
    assert all(r["tokens_per_s"] > 0 for r in rows) and 0 < rows[0]["mfu"] < 1
    assert all(r["peak_mib"] > 0 for r in rows[:-1]) and rows[-1]["peak_mib"] is None
    assert rows[2]["peak_mib"] < rows[0]["peak_mib"]  # checkpointing keeps less
    assert "| peak MiB |" in result.stdout
    assert_clean_error(modformer("bench", "llama", "--heads", "3"), "--heads")


def test_compile_with_reference_adds_each_reference_contender_compiled(monkeypatch):
    from modformer.bench.llama import llama_throughput

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or model)  # the wiring, not Inductor
    rows = llama_throughput(d_model=16, n_layers=1, n_heads=2, batch=2, seq_len=8, precisions=("fp32",),
                            variants=("mixit",), hf=False, compiled=True, construction="reference", repeats=1)
    by_name = {r.contender: r for r in rows}
    assert list(by_name) == ["modformer standard", "modformer standard, compiled", "modformer mixit",
                             "modformer standard, reference", "modformer standard, reference, compiled",
                             "modformer mixit, reference", "modformer mixit, reference, compiled",
                             "matmul peak (GFLOP/s)"]
    assert len(compiled) == 3 and all(by_name[n].peak_mib is None for n in by_name if n.endswith("compiled"))
    # A compiled contender's MFU counts the same FLOPs per token as its eager twin's.
    ref, ref_compiled = by_name["modformer mixit, reference"], by_name["modformer mixit, reference, compiled"]
    assert ref.mfu / ref.tokens_per_s == pytest.approx(ref_compiled.mfu / ref_compiled.tokens_per_s)


def test_scaling_command(tmp_path):
    pytest.importorskip("transformers")
    result = modformer("bench", "scaling", "--widths", "16", "32", "--depths", "--seqs", "8", "--width", "32",
                       "--layers", "1", "--heads", "2", "--batch", "2", "--seq", "16", "--repeats", "1", "--threads",
                       "1", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--depths given without values: that axis is left out" in result.stderr  # not silently
    rows = json.loads((tmp_path / "scaling.json").read_text())["rows"]
    assert len(rows) == 3 * 4  # 3 points (2 widths, 1 length) x 4 contenders
    assert all(r["peak_mib"] > 0 for r in rows)
    assert rows[4]["peak_mib"] > rows[0]["peak_mib"]  # width 32 holds more than width 16 (standard model)
    assert (tmp_path / "scaling.png").stat().st_size > 0 and "| seq | 8 |" in (tmp_path / "scaling.md").read_text()
    assert_clean_error(modformer("bench", "scaling", "--widths", "30", "--heads", "4"), "--widths")


def test_the_teacher_cache_runs_the_teacher_in_the_first_epoch_only():
    from modformer.bench.teacher_cache import teacher_cache_epochs

    rows, facts = teacher_cache_epochs(d_model=16, n_layers=1, n_heads=2, vocab_size=32, rows=10, seq_len=8, batch=4,
                                       epochs=3)
    assert facts["batches"] == 3 and facts["cache_bytes"] > 4 * 16 * facts["tokens"]
    assert [(r.no_cache_calls, r.cache_calls) for r in rows] == [(3, 3), (3, 0), (3, 0)]  # a second build: 0 calls


def test_teacher_cache_command(tmp_path):
    result = modformer("bench", "teacher-cache", "--width", "16", "--layers", "1", "--heads", "2", "--rows", "6",
                       "--seq", "8", "--batch", "4", "--epochs", "2", "--dtype", "bf16", "--threads", "1",
                       "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "teacher_cache.json").read_text())["rows"]
    assert [(r["epoch"], r["no_cache_calls"], r["cache_calls"]) for r in rows] == [(1, 2, 2), (2, 2, 0)]
    assert all(r["ratio"] > 0 for r in rows) and "| 2 | 2 |" in result.stdout
    assert "tokens/s in float32" in result.stdout and "`precision: auto` runs" in result.stdout
    assert_clean_error(modformer("bench", "teacher-cache", "--rows", "0"), "sizes must be positive")


def test_bridged_inference_counts_what_each_contender_asks_of_the_teacher():
    """States kept: the teacher reads the prompt once and then one position per new token
    (the last token is never read); recomputed: the whole text at every step; the teacher
    alone reads as the kept one. Both bridged contenders generate the same tokens (checked
    inside); the student alone is the ratios' base; memory counts the weights at least."""
    from modformer.bench.bridged_inference import CONTENDERS, bridged_inference, random_teacher

    teacher = random_teacher(vocab=64, width=16, layers=1, heads=2)
    rows, facts = bridged_inference(teacher, vocab=48, width=16, layers=2, heads=2, d_ff=32, bridge_heads=2,
                                    batch=2, prompt=3, new=(4,), repeats=1)
    assert [r.contender for r in rows] == list(CONTENDERS) and facts["student"].endswith("vocabulary 48")
    positions = {r.contender: r.teacher_positions for r in rows}
    assert positions == {"student alone": 0, "student + teacher, states kept": 3 + 3,
                         "student + teacher, states recomputed": 3 + 4 + 5 + 6, "teacher alone": 3 + 3}
    assert rows[0].ratio == 1 and all(r.tokens_per_s > 0 and r.peak_bytes >= r.weight_bytes > 0 for r in rows)
    assert rows[1].weight_bytes == rows[2].weight_bytes > rows[3].weight_bytes


def test_bridged_inference_command(tmp_path):
    result = modformer("bench", "bridged-inference", "--teacher", "random", "--vocab", "64", "--width", "16",
                       "--heads", "2", "--d-ff", "32", "--bridge-heads", "2", "--batch", "1", "--prompt", "2",
                       "--new", "2", "--repeats", "1", "--threads", "1", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "bridged_inference.json").read_text())
    assert len(record["rows"]) == 4 and record["rows"][0]["ratio"] == 1 and "machine" in record
    assert "| 2 | teacher alone |" in result.stdout
    assert_clean_error(modformer("bench", "bridged-inference", "--teacher", "random", "--new", "0"),
                       "must be positive")
    assert_clean_error(modformer("bench", "bridged-inference", "--teacher", "random", "--place", "block_7"),
                       "--place must be")


def test_a_bench_config_is_a_sweep_files_base_without_its_profiles():
    from modformer.bench.data import load_bench_config

    cfg = load_bench_config("configs/experiments/random_attention/retrieval.yaml", ["train.batch_size=8"], "mixit")
    assert (cfg.model.d_model, cfg.model.variant, cfg.train.batch_size) == (64, "mixit", 8)
