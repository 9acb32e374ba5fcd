"""One run: one arm, one seed. Build the student (and its bridges), train it, score it.

Training loss: cross-entropy on the scored tokens (the answer, or the whole text), plus for
the distill arm w T^2 KL(teacher || student) at the same positions, the teacher's
distribution taken from its cached final states through its own output head, restricted to
the student's vocabulary. Two learning rates: one for the bridges, one for the student.

Scores: teacher-forced answer loss on the held-out items (every `eval_every` steps), and at
the end exact match of greedily generated answers on the held-out items and on training
items. Generation reads the teacher's states of the text generated so far (computed live,
with the teacher's key-value cache): no arm, the leaky one included, can see an answer it
has not generated.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..analysis.common import evaluating
from ..errors import TrainingDiverged
from ..evaluate import autocast
from ..model.config import ModelConfig
from ..tasks.base import IGNORE
from ..train.config import TrainConfig
from ..train.optim import learning_rate
from ..variants import build_model
from .alignment import causal_visibility, leaky_visibility
from .arms import Arm
from .dataset import Batch, ModulesData, Rows
from .modules_config import ModulesConfig
from .student import BridgedStudent


@dataclass
class TeacherParts:
    """What a run needs of the teacher beyond its cached states."""
    model: nn.Module  # the Hugging Face causal LM (frozen)
    layer: int
    embeddings: torch.Tensor  # (V_teacher, d_t) input embedding
    head: torch.Tensor  # (V_teacher, d_t) output head
    width: int
    precision: str
    round_bf16: bool  # cached states were stored in bf16: live ones are rounded the same way
    mean: torch.Tensor  # (d_t,) per-dimension mean of the training rows' states (for the random arm)
    std: torch.Tensor  # (d_t,)


def build_student(cfg: ModulesConfig, arm: Arm, seed: int, data: ModulesData, teacher: TeacherParts) -> nn.Module:
    """The arm's model: the student, wrapped with bridges when the arm reads anything."""
    sc = cfg.student
    d_model = teacher.width if sc.embeddings == "teacher" else sc.d_model
    if d_model % sc.n_heads or (d_model // sc.n_heads) % 2:
        raise ValueError(f"student.n_heads={sc.n_heads} must divide the student width {d_model} into even head widths")
    model_cfg = ModelConfig(vocab_size=len(data.vocab), d_model=d_model, n_layers=sc.n_layers, n_heads=sc.n_heads,
                            d_ff=sc.d_ff, max_seq_len=data.longest + cfg.train.max_new_tokens, tie_embeddings=True)
    student = build_model(model_cfg, seed)
    if sc.embeddings == "teacher":
        with torch.no_grad():
            student.embed.weight.copy_(teacher.embeddings[data.vocab])
        student.embed.weight.requires_grad_(False)
    if not arm.bridged:
        return student
    with torch.random.fork_rng(devices=[]):  # the bridges' init depends on the seed, not on what ran before
        torch.manual_seed(seed)
        bridged = BridgedStudent(student, teacher.width, cfg.bridge.places, n_heads=cfg.bridge.n_heads,
                                 dropout=cfg.bridge.dropout, adapter_bottleneck=cfg.bridge.adapter_bottleneck)
    return bridged


def random_states(teacher: TeacherParts, seed: int, rows: list[int], length: int) -> torch.Tensor:
    """(B, length, d_t) noise with the real states' per-dimension mean and std, fixed per
    (seed, cache row): the same text always gets the same noise, its prefixes included."""
    out = torch.empty(len(rows), length, teacher.width)
    for b, row in enumerate(rows):
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, row]).generate_state(1)[0]))
        out[b] = torch.randn(length, teacher.width, generator=g)
    return out * teacher.std + teacher.mean


class ArmRun:
    def __init__(self, cfg: ModulesConfig, arm: Arm, seed: int, data: ModulesData, teacher: TeacherParts):
        self.cfg, self.arm, self.seed, self.data, self.teacher = cfg, arm, seed, data, teacher
        self.model = build_student(cfg, arm, seed, data, teacher)
        self.noise_len = data.longest + cfg.train.max_new_tokens

    # -- the forward pass ------------------------------------------------------------------
    def logits(self, ids: torch.Tensor, lengths: torch.Tensor, states: Callable[[], torch.Tensor]) -> torch.Tensor:
        """ids (B, S) student tokens, lengths (B,) -> (B, S, V_student). `states` gives the
        bridges' input (B, S, d_t), asked for only by arms that read one."""
        if not self.arm.bridged:
            return self.model(ids)
        visible = (leaky_visibility if self.arm.visibility == "leaky" else causal_visibility)(ids.shape[1], lengths)
        return self.model(ids, states(), visible)

    def batch_states(self, batch: Batch) -> torch.Tensor:
        if self.arm.reads == "random":
            return random_states(self.teacher, self.seed, batch.rows, self.noise_len)[:, :batch.ids.shape[1]]
        return self.data.states(batch)

    def loss(self, batch: Batch) -> torch.Tensor:
        logits = self.logits(batch.ids, batch.lengths, lambda: self.batch_states(batch))
        scored = batch.targets != IGNORE
        ce = F.cross_entropy(logits[scored].float(), batch.targets[scored])
        if not self.arm.distill:
            return ce
        w, T = self.cfg.train.distill_weight, self.cfg.train.distill_temperature
        final = self.data.states(batch, final=True)[scored]  # (N, d_t)
        teacher_logits = (final @ self.teacher.head[self.data.vocab].T).float()
        kl = F.kl_div(F.log_softmax(logits[scored].float() / T, -1), F.log_softmax(teacher_logits / T, -1),
                      log_target=True, reduction="batchmean")
        return (1 - w) * ce + w * T * T * kl

    # -- training --------------------------------------------------------------------------
    def optimizer(self) -> torch.optim.AdamW:
        tc = self.cfg.train
        groups = []
        for bridge, lr in ((True, tc.bridge_lr), (False, tc.student_lr)):
            params = [p for n, p in self.model.named_parameters() if p.requires_grad and n.startswith("bridges.") == bridge]
            for decay in (True, False):  # decay matrices, never norms or biases
                chosen = [p for p in params if (p.ndim >= 2) == decay]
                if chosen:
                    groups.append({"params": chosen, "lr": lr, "base_lr": lr,
                                   "weight_decay": tc.weight_decay if decay else 0.0})
        return torch.optim.AdamW(groups, betas=(0.9, 0.95), fused=True)

    def train(self, log: Callable[[dict[str, Any]], None]) -> tuple[float, dict[str, float]]:
        """Train for `train.steps`; `log` receives the training and evaluation records.
        Returns the mean training loss of the last logging window and the last held-out scores."""
        tc = self.cfg.train
        schedule = TrainConfig(lr=1.0, steps=tc.steps, warmup_steps=tc.warmup_steps, min_lr_ratio=0.1)
        optimizer = self.optimizer()
        params = [p for g in optimizer.param_groups for p in g["params"]]
        window, last, scores = [], math.nan, {}
        self.model.train()
        for step in range(tc.steps):
            batch = self.data.train_batch(self.seed, step, tc.batch_size, self.cfg.data.task_fraction)
            for group in optimizer.param_groups:
                group["lr"] = group["base_lr"] * learning_rate(step, schedule)
            with autocast(torch.device("cpu"), tc.precision):
                loss = self.loss(batch)
            value = loss.item()
            if not math.isfinite(value):
                raise TrainingDiverged(f"the loss became {value} at step {step + 1} of {self.arm.description}; "
                                       f"try lower learning rates")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, tc.grad_clip if tc.grad_clip > 0 else math.inf)
            optimizer.step()
            window.append(value)
            done = step + 1
            if done % tc.log_every == 0 or done == tc.steps:
                last = sum(window) / len(window)
                log({"kind": "train", "step": done, "loss": last})
                window = []
            if done % tc.eval_every == 0 or done == tc.steps:
                scores = self.answer_scores(self.data.held, "held_out")
                log({"kind": "eval", "step": done, **scores})
        return last, scores

    # -- scores ----------------------------------------------------------------------------
    @torch.no_grad()
    def answer_scores(self, rows: Rows, name: str, chunk: int = 64) -> dict[str, float]:
        """Teacher-forced answer loss and exact match (every answer token the argmax) of `rows`.
        The leaky arm reads the answer's own teacher states here: its figure is optimistic."""
        loss_sum, tokens, exact = 0.0, 0, 0
        with evaluating(self.model):
            for start in range(0, len(rows), chunk):
                batch = self.data.batch(rows, list(range(start, min(start + chunk, len(rows)))), answer_only=True)
                logits = self.logits(batch.ids, batch.lengths, lambda: self.batch_states(batch)).float()
                scored = batch.targets != IGNORE
                loss_sum += F.cross_entropy(logits[scored], batch.targets[scored], reduction="sum").item()
                tokens += int(scored.sum())
                exact += int(((logits.argmax(-1) == batch.targets) | ~scored).all(1).sum())
        return {f"{name}_answer_loss": loss_sum / max(tokens, 1), f"{name}_answer_exact_tf": exact / max(len(rows), 1)}

    @torch.no_grad()
    def generate(self, rows: Rows, indices: list[int], tokenizer, extract: Callable[[str], str],
                 chunk: int = 64) -> list[str]:
        """The answer extracted from each row's greedy continuation of its prompt."""
        by_length: dict[int, list[int]] = {}
        for i in indices:  # equal prompt lengths batch without padding
            by_length.setdefault(rows.answer_start[i], []).append(i)
        answers: dict[int, str] = {}
        with evaluating(self.model):
            for length, members in sorted(by_length.items()):
                for start in range(0, len(members), chunk):
                    part = members[start:start + chunk]
                    prompts = torch.stack([rows.ids[i][:length] for i in part])
                    generated = self._greedy(prompts, [rows.first + i for i in part])
                    for i, tokens in zip(part, generated):
                        answers[i] = extract(tokenizer.decode(tokens.tolist(), skip_special_tokens=True))
        return [answers[i] for i in indices]

    def _greedy(self, prompts: torch.Tensor, cache_rows: list[int]) -> torch.Tensor:
        """prompts (B, P) teacher ids -> (B, max_new_tokens) generated teacher ids."""
        ids = self.data.student_ids(prompts)
        stream = TeacherStream(self.teacher) if self.arm.reads == "teacher" else None
        states = stream.extend(prompts) if stream else None
        new = []
        for _ in range(self.cfg.train.max_new_tokens):
            lengths = torch.full((len(ids),), ids.shape[1])
            if self.arm.reads == "random":
                read = lambda: random_states(self.teacher, self.seed, cache_rows, self.noise_len)[:, :ids.shape[1]]  # noqa: E731
            else:
                read = lambda: states  # noqa: E731
            nxt = self.logits(ids, lengths, read)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
            new.append(nxt)
            if stream:
                states = torch.cat([states, stream.extend(self.data.teacher_ids(nxt))], dim=1)
        return self.data.teacher_ids(torch.cat(new, dim=1))


class TeacherStream:
    """The teacher's states of a growing text, one forward pass per new token (its key-value cache)."""

    def __init__(self, teacher: TeacherParts):
        self.teacher, self.past = teacher, None
        # transformers renamed `past_key_values` to `cache` in the 5.x line; take whichever this one has.
        names = inspect.signature(teacher.model.forward).parameters
        self.cache_name = "cache" if "cache" in names else "past_key_values"

    def extend(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, n) the next tokens -> their states (B, n, d_t), float32."""
        with autocast(torch.device("cpu"), self.teacher.precision):
            out = self.teacher.model(input_ids=ids, use_cache=True, output_hidden_states=True,
                                     **{self.cache_name: self.past})
        self.past = getattr(out, self.cache_name)
        states = out.hidden_states[self.teacher.layer].float()
        return states.to(torch.bfloat16).float() if self.teacher.round_bf16 else states


def exact_match(answers: list[str], expected: list[str]) -> float:
    return sum(a == e for a, e in zip(answers, expected)) / max(len(expected), 1)


def run_arm(cfg: ModulesConfig, arm: Arm, seed: int, data: ModulesData, teacher: TeacherParts, tokenizer,
            extract: Callable[[str], str], log: Callable[[dict[str, Any]], None], eval_items: int) -> dict[str, Any]:
    """Train and score one (arm, seed); returns its summary."""
    started = time.perf_counter()
    run = ArmRun(cfg, arm, seed, data, teacher)
    train_loss, final = run.train(log)  # final: the held-out scores after the last step
    held = list(range(len(data.held)))
    seen = np.random.default_rng([seed, 0x5EE]).permutation(len(data.train))[:eval_items].tolist()
    held_answers = run.generate(data.held, held, tokenizer, extract)
    train_answers = run.generate(data.train, seen, tokenizer, extract)
    trainable = sorted(n for n, p in run.model.named_parameters() if p.requires_grad)
    return {
        "seed": seed,
        "held_out_exact": exact_match(held_answers, [data.held.items[i].expected for i in held]),
        "train_exact": exact_match(train_answers, [data.train.items[i].expected for i in seen]),
        "train_loss": train_loss,
        **final,
        **run.answer_scores(data.train, "train"),
        "held_out_answers": {data.held.items[i].prompt: a for i, a in zip(held, held_answers)},
        "trainable": {"bridge": sum(p.numel() for n, p in run.model.named_parameters()
                                    if p.requires_grad and n.startswith("bridges.")),
                      "student": sum(p.numel() for n, p in run.model.named_parameters()
                                     if p.requires_grad and not n.startswith("bridges.")),
                      "names": trainable},
        "seconds": time.perf_counter() - started,
    }
