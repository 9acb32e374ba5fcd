"""Benchmarks: the interleaved timer and the knowledge-cost suite on tiny shapes (no timing asserted
beyond what cannot be noise)."""

import json
import time

from modformer.bench.timing import time_interleaved

from test_checkpoint_cli import assert_clean_error, modformer


def test_interleaved_timer_runs_contenders_in_turn_and_reports_medians():
    calls = []
    t = time_interleaved({"slow": lambda: (calls.append("slow"), time.sleep(0.02)),
                          "fast": lambda: calls.append("fast")}, repeats=3, warmup=1)
    assert calls == ["slow", "fast"] + ["slow", "fast", "fast", "slow", "slow", "fast"]
    assert t["slow"] >= 0.02 > t["fast"]


def test_knowledge_cost_command(tmp_path):
    result = modformer("bench", "knowledge", "--width", "16", "--layers", "1", "--tokens", "2x8", "4x8",
                       "--repeats", "1", "--threads", "1", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "knowledge_cost.json").read_text())
    assert [(r["what"], r["mode"]) for r in rows[:4]] == [
        ("layer", "train"), ("layer", "inference"), ("1-layer model", "train"), ("1-layer model", "inference")]
    assert len(rows) == 8 and all(r["knowledge_ms"] > 0 and r["ffn_ms"] > 0 for r in rows)
    assert "| layer | train | 2x8, d=16, n_E=64 |" in result.stdout
    assert modformer("bench", "knowledge", "--tokens", "2by8").returncode == 2
    assert_clean_error(modformer("bench", "knowledge", "--width", "4"), "--width")


def test_llama_throughput_command(tmp_path):
    pytest = __import__("pytest")
    pytest.importorskip("transformers")
    result = modformer("bench", "llama", "--width", "32", "--layers", "1", "--heads", "2", "--batch", "2", "--seq", "16",
                       "--repeats", "1", "--threads", "1", "--precision", "fp32", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "llama_throughput.json").read_text())
    names = [r["contender"] for r in rows]
    assert names == ["modformer standard", "transformers LlamaForCausalLM", "modformer frozen_qk", "modformer mixit",
                     "matmul peak (GFLOP/s)"]
    assert all(r["tokens_per_s"] > 0 for r in rows) and 0 < rows[0]["mfu"] < 1
    assert_clean_error(modformer("bench", "llama", "--heads", "3"), "--heads")


def test_scaling_command(tmp_path):
    __import__("pytest").importorskip("transformers")
    result = modformer("bench", "scaling", "--widths", "16", "32", "--depths", "--seqs", "8", "--width", "32",
                       "--layers", "1", "--heads", "2", "--batch", "2", "--seq", "16", "--repeats", "1", "--threads",
                       "1", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "scaling.json").read_text())
    assert len(rows) == 3 * 4  # 3 points (2 widths, 1 length) x 4 contenders
    assert (tmp_path / "scaling.png").stat().st_size > 0 and "| seq | 8 |" in (tmp_path / "scaling.md").read_text()
    assert_clean_error(modformer("bench", "scaling", "--widths", "30", "--heads", "4"), "--widths")
