"""What reading a frozen teacher costs at inference: a student alone, the same student reading
the teacher through a bridge (the teacher's states kept between steps, or recomputed), and
the teacher alone, generating the same number of tokens greedily, side by side in one process.

Contenders, each generating `new` tokens after a `prompt`-token prompt for `batch` texts:

- student alone: a modformer `Transformer` with its key-value cache (each new token costs one
  position's work);
- student + teacher, states kept: the same student with a bridge (`BridgedStudent`, at
  `place`) reading the teacher's states of the text so far; the teacher keeps its key-value
  cache and the states it has computed, so each new token costs the teacher one position too;
- student + teacher, states recomputed: the same, but the teacher re-reads the whole text
  after every new token (what generation does without the teacher's cache, e.g. over padded
  texts of several lengths);
- teacher alone: the teacher generating with its own key-value cache and output head.

The student and the teacher share a tokenizer: the student's vocabulary is the teacher's
first `vocab` ids (a stand-in for the subset of the teacher's tokens that a student trained
on a few texts keeps), and student position i reads the teacher's states 0..i. Weights are
random (speed and memory do not depend on what was learned); every contender generates
exactly `new` tokens (no end-of-text stop).

Time: the median over `repeats` interleaved whole generations (`timing.time_interleaved`),
prompt included, as tokens generated per second. Memory: the peak bytes that tensors hold
during one generation on the CPU (`memory.LiveTensorBytes`: the weights of every model the
contender runs, the caches, activations), and the weights' bytes alone. Ratios to the
student alone are the claims; absolute times depend on the machine and its load.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..model.bridged import BridgedStudent
from ..model.config import ModelConfig
from ..precision import autocast
from ..variants import build_model
from .memory import peak_step_memory
from .timing import time_interleaved

CONTENDERS = ("student alone", "student + teacher, states kept", "student + teacher, states recomputed",
              "teacher alone")


@dataclass
class InferenceRow:
    contender: str
    new_tokens: int  # generated per text
    seconds: float  # median seconds of one whole generation (batch x new_tokens tokens)
    tokens_per_s: float  # generated tokens per second
    teacher_positions: int  # positions of one text the teacher's forward passes read in one generation
    weight_bytes: int  # parameters of the models the contender runs
    peak_bytes: int  # the most bytes tensors held at once during one generation, weights included
    ratio: float  # tokens_per_s over the student alone's at the same length


def random_teacher(vocab: int = 512, width: int = 64, layers: int = 2, heads: int = 4) -> nn.Module:
    """A tiny random Hugging Face `LlamaForCausalLM` (for tests and machines without a teacher)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=1024)
    return LlamaForCausalLM(cfg).eval()


class _Teacher:
    """The teacher's final states of growing texts, kept between steps or recomputed."""

    def __init__(self, model: nn.Module, keep: bool):
        self.model, self.keep = model, keep
        self.ids = self.states = self.past = None
        self.positions = 0

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, n): the whole text so far -> its states (B, n, d_t)."""
        if self.keep and self.ids is not None:
            new = ids[:, self.ids.shape[1]:]
            out = self.model.model(input_ids=new, use_cache=True, **{_cache_name(self.model.model): self.past})
            self.states = torch.cat([self.states, out.last_hidden_state], dim=1)
            self.positions += new.shape[1]
        else:
            out = self.model.model(input_ids=ids, use_cache=self.keep)
            self.states = out.last_hidden_state
            self.positions += ids.shape[1]
        self.ids, self.past = ids, (getattr(out, _cache_name(self.model.model)) if self.keep else None)
        return self.states


def _student_alone(student: nn.Module, prompt: torch.Tensor, new: int) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        cache = student.new_cache()
        ids, step = prompt, prompt
        for _ in range(new):
            nxt = student(step, cache)[:, -1].argmax(-1, keepdim=True)
            ids, step = torch.cat([ids, nxt], 1), nxt
        return ids
    return run


def _bridged(bridged: BridgedStudent, teacher: nn.Module, prompt: torch.Tensor, new: int, keep: bool,
             counter: list[int]) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        cache = bridged.student.new_cache()
        live = _Teacher(teacher, keep)
        ids, step = prompt, prompt
        for _ in range(new):
            states = live.read(ids)
            done = ids.shape[1] - step.shape[1]  # positions the student has cached
            visible = torch.arange(done + 1, ids.shape[1] + 1).expand(ids.shape[0], -1)
            nxt = bridged(step, states, visible, cache)[:, -1].argmax(-1, keepdim=True)
            ids, step = torch.cat([ids, nxt], 1), nxt
        counter[0] = live.positions
        return ids
    return run


def _teacher_alone(teacher: nn.Module, prompt: torch.Tensor, new: int, counter: list[int]) -> Callable[[], torch.Tensor]:
    name = _cache_name(teacher)

    def run() -> torch.Tensor:
        ids, step, past, positions = prompt, prompt, None, 0
        for _ in range(new):
            out = teacher(input_ids=step, use_cache=True, **{name: past})
            positions += step.shape[1]
            past = getattr(out, name)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            ids, step = torch.cat([ids, nxt], 1), nxt
        counter[0] = positions
        return ids
    return run


def _cache_name(model: nn.Module) -> str:
    """transformers renamed `past_key_values` to `cache` in the 5.x line: whichever this one takes."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _bytes(*models: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for m in models for p in m.parameters())


@torch.no_grad()
def bridged_inference(teacher: nn.Module, *, vocab: int = 8192, width: int | None = None, layers: int = 2,
                      heads: int = 9, d_ff: int | None = 1152, place: str = "block_1", bridge_heads: int = 8,
                      batch: int = 4, prompt: int = 16, new: tuple[int, ...] = (8, 32), repeats: int = 3,
                      precision: str = "fp32") -> tuple[list[InferenceRow], dict]:
    """One row per contender and generation length; and the facts of the setting."""
    teacher = teacher.eval()
    d_t, teacher_vocab = teacher.config.hidden_size, teacher.config.vocab_size
    vocab = min(vocab, teacher_vocab)
    width = width or d_t
    longest = prompt + max(new)
    student = build_model(ModelConfig(vocab_size=vocab, d_model=width, n_layers=layers, n_heads=heads, d_ff=d_ff,
                                      max_seq_len=longest, tie_embeddings=True), seed=0).eval()
    torch.manual_seed(0)
    bridged = BridgedStudent(student, d_t, [place], n_heads=bridge_heads).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, prompt), generator=g)
    rows: list[InferenceRow] = []
    device = torch.device("cpu")
    for n in new:
        counters = {name: [0] for name in CONTENDERS}
        runs = {
            CONTENDERS[0]: (_student_alone(student, ids, n), [student]),
            CONTENDERS[1]: (_bridged(bridged, teacher, ids, n, True, counters[CONTENDERS[1]]), [bridged, teacher]),
            CONTENDERS[2]: (_bridged(bridged, teacher, ids, n, False, counters[CONTENDERS[2]]), [bridged, teacher]),
            CONTENDERS[3]: (_teacher_alone(teacher, ids, n, counters[CONTENDERS[3]]), [teacher]),
        }
        with autocast(device, precision):
            kept, recomputed = runs[CONTENDERS[1]][0](), runs[CONTENDERS[2]][0]()
            if not torch.equal(kept, recomputed):  # the same tokens either way, or the timing compares two things
                raise AssertionError("the bridged student generated other tokens with the teacher's states kept "
                                     "than recomputed")
            seconds = time_interleaved({name: fn for name, (fn, _) in runs.items()}, repeats=repeats, warmup=1)
            peaks = {name: peak_step_memory(fn, device, [p for m in models for p in m.parameters()])
                     for name, (fn, models) in runs.items()}
        base = batch * n / seconds[CONTENDERS[0]]
        for name, (_, models) in runs.items():
            speed = batch * n / seconds[name]
            rows.append(InferenceRow(name, n, seconds[name], speed, counters[name][0], _bytes(*models), peaks[name],
                                     speed / base))
    facts = {"teacher_parameters": sum(p.numel() for p in teacher.parameters()), "teacher_width": d_t,
             "teacher_layers": teacher.config.num_hidden_layers, "teacher_vocab": teacher_vocab,
             "student_parameters": sum(p.numel() for p in student.parameters()),
             "bridge_parameters": sum(p.numel() for p in bridged.bridges.parameters()),
             "student": f"width {width}, {layers} blocks, {heads} heads, d_ff {d_ff}, vocabulary {vocab}",
             "place": place, "batch": batch, "prompt": prompt, "precision": precision, "repeats": repeats}
    return rows, facts


def markdown(rows: list[InferenceRow], facts: dict, threads: int, teacher_name: str) -> str:
    mib = 2 ** 20
    lines = [f"torch {torch.__version__}, {threads} thread(s), CPU, {facts['precision']}. Teacher: {teacher_name} "
             f"({facts['teacher_parameters'] / 1e6:,.1f} M parameters, width {facts['teacher_width']}, "
             f"{facts['teacher_layers']} layers, vocabulary {facts['teacher_vocab']:,}), read after its final norm. "
             f"Student: {facts['student']} ({facts['student_parameters'] / 1e6:,.1f} M parameters), one bridge at "
             f"{facts['place']} ({facts['bridge_parameters'] / 1e6:,.2f} M). Greedy generation of {facts['batch']} "
             f"texts after a {facts['prompt']}-token prompt, random weights; median of {facts['repeats']} "
             f"interleaved generations; every contender uses its key-value cache.", "",
             "| new tokens | contender | tokens/s | / student alone | teacher positions read per text | weights MiB | "
             "peak MiB |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.new_tokens} | {r.contender} | {r.tokens_per_s:,.1f} | {r.ratio:.3f} | {r.teacher_positions:,} | "
              f"{r.weight_bytes / mib:,.1f} | {r.peak_bytes / mib:,.1f} |" for r in rows]
    return "\n".join(lines) + "\n"
