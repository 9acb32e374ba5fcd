"""Training throughput of our models against Hugging Face `LlamaForCausalLM`, side by side.

Every contender trains on the same random batch (B, T) with the same optimizer (fused
AdamW over trainable parameters, decay on matrices only), precision and thread count, in
one process, in turn (`time_interleaved`): our standard model, the same weights in
`LlamaForCausalLM` (`to_hf_llama`), and our Frozen-QK and MixiT variants. Model FLOPs
utilisation uses each contender's own training FLOPs per token (`flops_per_token`:
6 N + 12 L T d for attention, N the matrix parameters of the blocks and head; 6 N + 6 L T d
for MixiT, whose fixed mixing has no scores), against the machine's matrix-multiply peak
measured by `matmul_peak` (modformer.train.mfu) in the same run.

After the timing, one more step of each contender is measured for peak memory
(`peak_step_memory`: the most bytes tensors hold at once during the step, parameters,
gradients, optimizer state and activations included). Optional contenders: the standard
model with activation checkpointing (its recomputation is not counted as useful FLOPs, so
its MFU shows the cost) and the standard model under `torch.compile` (compiled during the
untimed warm-up steps), and, with `construction` (a registered construction's name, e.g. a
paper's reference code), the standard model and each variant built in that construction,
each compiled as well when `compiled` is set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..constructions import constructed_model
from ..model.config import ModelConfig
from ..precision import autocast
from ..registry import VARIANTS
from ..train.config import TrainConfig
from ..train.mfu import flops_per_token, matmul_peak, training_flops_per_token
from ..train.optim import build_optimizer
from ..variants import build_model
from .memory import live_state, peak_step_memory
from .timing import time_interleaved


@dataclass
class ThroughputRow:
    contender: str
    precision: str
    shape: str
    step_ms: float
    tokens_per_s: float
    mfu: float  # of the measured matmul peak, with the contender's own FLOPs per token (`flops_per_token`)
    peak_mib: float | None  # peak tensor memory of a training step (`peak_step_memory`); None: not measurable


def _step(model: nn.Module, tokens: torch.Tensor, precision: str, logits_of: Callable,
          compiled: bool = False) -> tuple[Callable[[], None], Callable[[], float | None]]:
    """(one training step, a measurement of its peak memory in MiB)."""
    optimizer = build_optimizer(model, TrainConfig(lr=1e-4))
    forward = torch.compile(model) if compiled else model

    def step() -> None:
        # First: the previous step's gradients are not held through this step's forward.
        optimizer.zero_grad(set_to_none=True)
        with autocast(tokens.device, precision):
            logits = logits_of(forward(tokens))
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()

    def memory() -> float | None:
        if compiled and tokens.device.type != "cuda":
            return None  # the CPU count would see the eager model run in its place (memory.py)
        return peak_step_memory(step, tokens.device, live_state(model, optimizer, tokens)) / 2 ** 20
    return step, memory


def llama_throughput(*, d_model: int = 256, n_layers: int = 4, n_heads: int = 4, vocab_size: int = 512,
                     batch: int = 16, seq_len: int = 256, precisions: tuple[str, ...] = ("fp32", "bf16"),
                     variants: tuple[str, ...] = ("frozen_qk", "mixit"), hf: bool = True, checkpointing: bool = False,
                     compiled: bool = False, construction: str | None = None, repeats: int = 5) -> list[ThroughputRow]:
    sizes = dict(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_seq_len=seq_len)
    cfg = ModelConfig(**sizes)
    tokens = torch.randint(0, vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    ours = build_model(cfg, seed=0)
    contenders = {"modformer standard": (ours, lambda out: out, False)}
    if hf:
        from ..interop.hf_llama import to_hf_llama
        contenders["transformers LlamaForCausalLM"] = (to_hf_llama(ours, cfg).train(), lambda out: out.logits, False)
    if checkpointing:
        recomputing = build_model(cfg, seed=0)
        recomputing.activation_checkpointing = True
        contenders["modformer standard, checkpointed"] = (recomputing, lambda out: out, False)
    if compiled:
        contenders["modformer standard, compiled"] = (build_model(cfg, seed=0), lambda out: out, True)
    # Each contender's own FLOPs (MixiT computes no scores); the others are the standard model's.
    flops = {name: training_flops_per_token(cfg, seq_len) for name in contenders}
    for name in variants:
        built = replace(cfg, variant=name, mixer=VARIANTS[name].mixer or cfg.mixer)
        contenders[f"modformer {name}"] = (build_model(built, seed=0), lambda out: out, False)
        flops[f"modformer {name}"] = flops_per_token(built, seq_len)[0]
    for name in ("standard", *variants) if construction else ():
        built = constructed_model(construction, name, **sizes)
        # Compiled too with `compiled`: the form long runs of that construction train in.
        forms = [(f", {construction}", False)] + ([(f", {construction}, compiled", True)] if compiled else [])
        for suffix, compile_it in forms:
            contenders[f"modformer {name}{suffix}"] = (build_model(built, seed=0), lambda out: out, compile_it)
            flops[f"modformer {name}{suffix}"] = flops_per_token(built, seq_len)[0]
    rows = []
    for precision in precisions:
        peak = matmul_peak(precision)
        steps = {name: _step(model, tokens, precision, logits_of, compiled=c)
                 for name, (model, logits_of, c) in contenders.items()}
        times = time_interleaved({name: step for name, (step, _) in steps.items()}, repeats=repeats, warmup=2)
        for name, seconds in times.items():
            rate = batch * seq_len / seconds
            rows.append(ThroughputRow(name, precision, f"{batch}x{seq_len}, d={d_model}, L={n_layers}",
                                      1e3 * seconds, rate, rate * flops[name] / peak, steps[name][1]()))
        rows.append(ThroughputRow("matmul peak (GFLOP/s)", precision, "2048^3", 0.0, peak / 1e9, 1.0, None))
    return rows


def mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def markdown(rows: list[ThroughputRow], threads: int) -> str:
    unmeasured = any(r.peak_mib is None for r in rows if not r.contender.startswith("matmul peak"))
    lines = [f"torch {torch.__version__}, {threads} thread(s), CPU. Median of interleaved training steps "
             "(forward, backward, fused AdamW); ratio against our standard model at the same precision. Peak MiB: "
             "the most memory tensors hold at once during one step (parameters, gradients, optimizer state, "
             "activations, temporaries; see modformer/bench/memory.py)"
             + ("; n/a: compiled code on the CPU, which that count cannot see." if unmeasured else "."), "",
             "| contender | precision | batch x seq, sizes | step ms | tokens/s | ratio | MFU | peak MiB |",
             "|---|---|---|---|---|---|---|---|"]
    base = {r.precision: r.tokens_per_s for r in rows if r.contender == "modformer standard"}
    for r in rows:
        if r.contender.startswith("matmul peak"):
            lines.append(f"| {r.contender} | {r.precision} | {r.shape} | | {r.tokens_per_s:,.1f} | | | |")
        else:
            lines.append(f"| {r.contender} | {r.precision} | {r.shape} | {r.step_ms:.1f} | {r.tokens_per_s:,.0f} | "
                         f"{r.tokens_per_s / base[r.precision]:.3f} | {r.mfu:.1%} | {mib(r.peak_mib)} |")
    return "\n".join(lines) + "\n"
