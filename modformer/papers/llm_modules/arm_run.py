"""One run: one arm, one seed. Build the student (and its bridges), train it, score it.

The student is a modformer `Transformer` or a Hugging Face causal LM (`HFStudent`), reading
with the teacher's tokenizer or its own (`pairing`).

Training loss: cross-entropy on the scored tokens (the answer, or the whole text), plus for
the distill arm w T^2 KL(teacher || student) at the same positions, the teacher's
distribution taken from its cached final states through its own output head, restricted to
the student's vocabulary. Two learning rates: one for the bridges, one for the student.

Scores: teacher-forced answer loss on the held-out items (every `eval_every` steps), and at
the end exact match of greedily generated answers on the held-out items and on training
items (`generation`: the bridges read only the text generated so far).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...analysis.common import evaluating
from ...errors import Interrupted, ModformerError
from ...model.config import ModelConfig
from ...tasks.base import IGNORE
from ...train.checkpoint import read_checkpoint, save_checkpoint
from ...train.loop import TrainingLoop, resolve_device
from ...train.optim import build_optimizer
from ...variants import build_model
from ...version import code_version, machine
from .arms import ARMS, Arm
from .dataset import Batch, LLMModulesData, Rows
from .generation import generate
from ...interop.hf_student import load_hf_student
from .config import LLMModulesConfig
from ...model.bridged import BridgedStudent
from ...model.hooks import capture, hooked


@dataclass
class TeacherParts:
    """What a run needs of the teacher beyond its cached states."""
    model: nn.Module  # the Hugging Face causal LM (frozen)
    layers: tuple[int, ...]  # the layers the bridges read (each once)
    final_layer: int | None  # the key of the final layer's states in the data's caches (distill arm), if cached
    embeddings: torch.Tensor  # (V_teacher, d_t) input embedding
    head: torch.Tensor  # (V_teacher, d_t) output head
    width: int
    precision: str
    round_bf16: bool  # cached states were stored in bf16: live ones are rounded the same way
    mean: torch.Tensor  # (L, d_t) per-dimension mean of the training rows' states of each of `layers`
    std: torch.Tensor  # (L, d_t)   (the random arm's noise has these)


def build_student(cfg: LLMModulesConfig, arm: Arm, seed: int, data: LLMModulesData, teacher: TeacherParts) -> nn.Module:
    """The arm's model: the student, wrapped with bridges when the arm reads anything."""
    sc = cfg.student
    longest = data.longest + cfg.train.max_new_tokens
    if sc.model == "modformer":
        student = _modformer_student(cfg, seed, data, teacher, longest)
    else:
        student = load_hf_student(sc.model, sc.pretrained and not arm.scratch, seed)
        if student.vocab_size < data.vocab.size:
            raise ModformerError(f"student.model={sc.model} has {student.vocab_size} output rows, fewer than its "
                                 f"tokenizer's {data.vocab.size} ids")
        if student.max_length is not None and student.max_length < longest:
            raise ModformerError(f"student.model={sc.model} reads at most {student.max_length} tokens; the "
                                 f"experiment's texts need {longest}")
    if not arm.bridged:
        return student
    with torch.random.fork_rng(devices=[]):  # the bridges' init depends on the seed, not on what ran before
        torch.manual_seed(seed)
        try:
            bridged = BridgedStudent(student, teacher.width, cfg.bridge.places, n_heads=cfg.bridge.n_heads,
                                     dropout=cfg.bridge.dropout, adapter_bottleneck=cfg.bridge.adapter_bottleneck)
        except ValueError as e:  # a place the student lacks, heads that do not divide its width
            raise ModformerError(f"bridge: {e}") from None
    if cfg.bridge.gate == "fixed":  # the gate is set at its hook point (`ArmRun.forced_gate`): its weights do nothing
        for bridge in bridged.bridges.values():
            bridge.gate.requires_grad_(False)
    return bridged


def _student_of(model: nn.Module) -> nn.Module:
    return model.student if isinstance(model, BridgedStudent) else model


def _modformer_student(cfg: LLMModulesConfig, seed: int, data: LLMModulesData, teacher: TeacherParts,
                       longest: int) -> nn.Module:
    sc = cfg.student
    d_model = teacher.width if sc.embeddings == "teacher" else sc.d_model
    if d_model % sc.n_heads or (d_model // sc.n_heads) % 2:
        raise ModformerError(f"student.n_heads={sc.n_heads} must divide the student width {d_model} into even head "
                             f"widths")
    model_cfg = ModelConfig(vocab_size=data.vocab.size, d_model=d_model, n_layers=sc.n_layers, n_heads=sc.n_heads,
                            d_ff=sc.d_ff, max_seq_len=longest, tie_embeddings=True)
    student = build_model(model_cfg, seed)
    if sc.embeddings == "teacher":
        with torch.no_grad():
            student.embed.weight.copy_(teacher.embeddings[data.vocab.ids])
        student.embed.weight.requires_grad_(False)
    return student


class ArmRun(TrainingLoop):
    """One arm and seed trained through the one training loop (`train/loop.py`): its batches
    mix task items and corpus texts, its loss is the arm's, its evaluation the held-out
    answers, its checkpoint one file that the experiment removes when the run is done."""

    def __init__(self, cfg: LLMModulesConfig, arm: Arm, seed: int, data: LLMModulesData, teacher: TeacherParts, pairing):
        super().__init__()
        self.cfg, self.arm, self.seed, self.data, self.teacher, self.pairing = cfg, arm, seed, data, teacher, pairing
        self.settings = cfg.train
        self.device = resolve_device(cfg.train.device)
        self.model = build_student(cfg, arm, seed, data, teacher).to(self.device)
        if cfg.train.activation_checkpointing:
            _student_of(self.model).activation_checkpointing = True
        # The random arm's noise has one length, so that a text gets the same noise in every
        # batch; with its own tokenizer a generated student token may bring several teacher
        # states and a tail.
        self.noise_len = data.most_keys + cfg.train.max_new_tokens * (1 if pairing.shared else 48)
        # Every bridge's gate, set to this value at its hook point in every forward pass (None:
        # the learned gate): bridge.gate_value with bridge.gate fixed; `run_arm` sets each of
        # bridge.eval_gates in turn after training.
        self.forced_gate: float | None = cfg.bridge.gate_value if cfg.bridge.gate == "fixed" else None

    # -- the forward pass ------------------------------------------------------------------
    def forward(self, ids: torch.Tensor, states: dict[int, torch.Tensor] | None,
                visible: torch.Tensor | None) -> torch.Tensor:
        """ids (B, S) student rows, states: teacher layer -> (B, K, d_t), visible (B, S, K) bool ->
        logits (B, S, V); each bridge reads its layer's states. Arms without a bridge ignore
        `states` and `visible`."""
        return self._call(self.model, ids.to(self.device), states, visible)

    def _call(self, model: nn.Module, ids: torch.Tensor, states: dict[int, torch.Tensor] | None,
              visible: torch.Tensor | None) -> torch.Tensor:
        if not self.arm.bridged:
            return model(ids)
        states = {place: states[layer] for place, layer in self.cfg.place_layers.items()}
        if self.forced_gate is None:
            return model(ids, states, visible)
        value = self.forced_gate
        with hooked(self.model, {"bridges.*.gate_value": lambda _name, g: torch.full_like(g, value)}):
            return model(ids, states, visible)

    def logits(self, batch: Batch, model: nn.Module | None = None) -> torch.Tensor:
        """(B, S, V) logits of a batch of rows (through `model`, default the plain student), its
        bridges reading its cached states or noise."""
        model = self.model if model is None else model
        ids = batch.ids.to(self.device)
        if not self.arm.bridged:
            return model(ids)
        states = (self.noise(batch.rows, batch.keys) if self.arm.reads == "random" else
                  {layer: self.data.states(batch, layer) for layer in self.teacher.layers})
        return self._call(model, ids, states, batch.visibility(self.arm.visibility == "leaky"))

    def noise(self, rows: list[int], length: int) -> dict[int, torch.Tensor]:
        """layer -> (B, length, d_t) noise with that layer's per-dimension mean and std of the
        real states, fixed per (seed, cache row): the same text always gets the same noise, its
        prefixes included. The layers' noises are independent draws from one stream per row (with
        one layer, the stream of earlier versions), so a layer's noise depends on which layers
        are read together."""
        if length > self.noise_len:
            raise ModformerError(f"a generated text needs {length} teacher positions, more than the random arm's "
                                 f"{self.noise_len}; lower train.max_new_tokens")
        n_layers, width = len(self.teacher.layers), self.teacher.width
        out = torch.empty(len(rows), self.noise_len, n_layers, width)
        for b, row in enumerate(rows):
            g = torch.Generator().manual_seed(int(np.random.SeedSequence([self.seed, row]).generate_state(1)[0]))
            out[b] = torch.randn(self.noise_len, n_layers * width, generator=g).view(self.noise_len, n_layers, width)
        noise = out[:, :length] * self.teacher.std + self.teacher.mean  # (B, length, L, d_t)
        return {layer: noise[:, :, j] for j, layer in enumerate(self.teacher.layers)}

    def loss(self, batch: Batch, model: nn.Module | None = None) -> torch.Tensor:
        logits = self.logits(batch, model)
        targets = batch.targets.to(self.device)
        scored = targets != IGNORE
        ce = F.cross_entropy(logits[scored].float(), targets[scored])
        if not self.arm.distill:
            return ce
        w, T = self.cfg.train.distill_weight, self.cfg.train.distill_temperature
        final = self.data.states(batch, self.teacher.final_layer)[scored.cpu()]  # (N, d_t): shared tokenizer
        teacher_logits = (final @ self.teacher.head[self.data.vocab.ids].T).float().to(self.device)
        kl = F.kl_div(F.log_softmax(logits[scored].float() / T, -1), F.log_softmax(teacher_logits / T, -1),
                      log_target=True, reduction="batchmean")
        return (1 - w) * ce + w * T * T * kl

    # -- training: what the one loop reads ----------------------------------------------
    def train_batch(self, step: int) -> Batch:
        tc = self.cfg.train
        return self.data.train_batch(self.seed, step, tc.batch_size, self.cfg.data.task_fraction)

    def batch_loss(self, batch: Batch) -> tuple[torch.Tensor, float, int]:
        loss = self.loss(batch, self.step_model)
        return loss, loss.item(), batch.ids.numel()

    def validate(self, done: int) -> None:
        self.scores = self.answer_scores(self.data.held, "held_out")
        self.log({"kind": "eval", "step": done, **self.scores})

    def save(self, done: int) -> None:
        """Every train.checkpoint_every steps and when stopped; never at the end, where the
        run's summary replaces its checkpoint."""
        if self.checkpoint is None or done == self.settings.steps:
            return
        save_checkpoint(self.checkpoint, done, self.model, self.optimizer, {**self.loop_state(), "scores": self.scores})
        self.last_saved = done

    def stop(self, done: int) -> None:
        saved = "its state is saved; run the same command again to continue" if self.last_saved == done else \
            "no state is saved (train.checkpoint_every is 0): it will start again"
        raise Interrupted(f"{self.arm_name} seed {self.seed} interrupted at step {done}; {saved}")

    def describe(self) -> str:
        return f" of {self.arm.description}"

    def learning_rates(self, step: int) -> dict[str, float]:
        tc, factor = self.cfg.train, self.learning_rate(step)
        return {"student_lr": factor * tc.student_lr, **({"bridge_lr": factor * tc.bridge_lr} if self.arm.bridged else {})}

    def train(self, log: Callable[[dict[str, Any]], None], checkpoint: Path | None = None) -> tuple[float, dict[str, float]]:
        """Train for `train.steps`; `log` receives the training and evaluation records.
        Returns the mean training loss of the last logging window and the last held-out scores.

        Dropout draws from torch's global generator, seeded here from the run's seed: a run is
        a function of (config, arm, seed), never of what ran before it in the process. With
        `checkpoint` (a file), the state is saved there every `train.checkpoint_every` steps and
        a run that finds one continues from it, bit for bit as if it had not stopped."""
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed)
            return self._train(log, checkpoint)

    def _train(self, log: Callable[[dict[str, Any]], None], checkpoint: Path | None) -> tuple[float, dict[str, float]]:
        tc = self.cfg.train
        self.log, self.checkpoint, self.scores = log, checkpoint, {}
        # One schedule with peak 1, scaled per group by the bridges' and the student's rates.
        self.peak_lr = 1.0
        lr_of = lambda name: tc.bridge_lr if name.startswith("bridges.") else tc.student_lr  # noqa: E731
        self.optimizer = build_optimizer(self.model, tc, lr_of, peak_lr=1.0)
        # The clipped norm sums the bridges' gradients first, as it always has (the float sum
        # depends on the order; committed results reproduce bit for bit).
        self.trainable = sorted((p for g in self.optimizer.param_groups for p in g["params"]),
                                key=self._clip_order().__getitem__)
        self.step_model = torch.compile(self.model) if tc.compile else self.model
        start = 0
        if checkpoint is not None and checkpoint.is_file():
            saved = read_checkpoint(checkpoint)
            self.restore(saved, checkpoint)
            start, self.scores = saved.step, saved.meta["scores"]
        self.loop(start, desc=f"{self.arm_name}/seed {self.seed}")
        return self.last_train_loss, self.scores

    def _clip_order(self) -> dict[nn.Parameter, tuple[int, int, int]]:
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        return {p: (not n.startswith("bridges."), p.ndim < 2, i) for i, (n, p) in enumerate(named)}

    @property
    def arm_name(self) -> str:
        return next((name for name, arm in ARMS.items() if arm == self.arm), self.arm.description)

    # -- scores ----------------------------------------------------------------------------
    @torch.no_grad()
    def answer_scores(self, rows: Rows, name: str, chunk: int = 64) -> dict[str, float]:
        """Teacher-forced answer loss and exact match (every answer token the argmax) of `rows`.
        The leaky arm reads the answer's own teacher states here: its figure is optimistic."""
        loss_sum, tokens, exact = 0.0, 0, 0
        with evaluating(self.model):
            for start in range(0, len(rows), chunk):
                batch = self.data.batch(rows, list(range(start, min(start + chunk, len(rows)))), answer_only=True)
                logits = self.logits(batch).float()
                targets = batch.targets.to(self.device)
                scored = targets != IGNORE
                loss_sum += F.cross_entropy(logits[scored], targets[scored], reduction="sum").item()
                tokens += int(scored.sum())
                exact += int(((logits.argmax(-1) == targets) | ~scored).all(1).sum())
        return {f"{name}_answer_loss": loss_sum / max(tokens, 1), f"{name}_answer_exact_tf": exact / max(len(rows), 1)}

    @torch.no_grad()
    def gate_means(self, rows: Rows, chunk: int = 64) -> dict[str, float]:
        """bridge place -> the mean of its gate over every position and feature of `rows`'
        texts (padding included), teacher-forced, as the run's gates stand (learned or forced)."""
        sums: dict[str, float] = {}
        count = 0
        with evaluating(self.model):
            for start in range(0, len(rows), chunk):
                batch = self.data.batch(rows, list(range(start, min(start + chunk, len(rows)))), answer_only=True)
                with capture(self.model, "bridges.*.gate_value") as gates:
                    self.logits(batch)
                for name, g in gates.items():
                    place = name.split(".")[1]
                    sums[place] = sums.get(place, 0.0) + g.float().mean().item() * g.shape[0]
                count += batch.ids.shape[0]
        return {place: total / max(count, 1) for place, total in sums.items()}

def gate_key(value: float) -> str:
    """The key of a forced gate value in a summary (a dotted metric path cannot hold a point):
    0 -> "0", 0.25 -> "0_25", 1 -> "1"."""
    return f"{float(value):g}".replace(".", "_")


def exact_match(answers: list[str], expected: list[str]) -> float:
    """The share of answers equal to the expected one, over the items that have one (a stratos
    reply without a boxed final answer expects "" and is not scored)."""
    scored = [(a, e) for a, e in zip(answers, expected) if e]
    return sum(a == e for a, e in scored) / max(len(scored), 1)


def run_arm(cfg: LLMModulesConfig, arm: Arm, seed: int, data: LLMModulesData, teacher: TeacherParts, pairing,
            extract: Callable[[str], str], log: Callable[[dict[str, Any]], None], eval_items: int,
            checkpoint: Path | None = None) -> dict[str, Any]:
    """Train (continuing from `checkpoint` if it exists) and score one (arm, seed); returns its summary."""
    started = time.perf_counter()
    run = ArmRun(cfg, arm, seed, data, teacher, pairing)
    train_loss, final = run.train(log, checkpoint)  # final: the held-out scores after the last step
    held = list(range(len(data.held)))
    seen = np.random.default_rng([seed, 0x5EE]).permutation(len(data.train))[:eval_items].tolist()
    held_answers = [extract(text) for text in generate(run, data.held, held)]
    train_answers = [extract(text) for text in generate(run, data.train, seen)]
    trainable = sorted(n for n, p in run.model.named_parameters() if p.requires_grad)
    forced = {}
    if arm.bridged:
        learned = run.forced_gate
        for value in cfg.bridge.eval_gates:  # the trained run, scored with its gates forced to each value
            run.forced_gate = float(value)
            held_v = [extract(text) for text in generate(run, data.held, held)]
            train_v = [extract(text) for text in generate(run, data.train, seen)]
            forced[gate_key(value)] = {
                "gate": float(value),
                "held_out_exact": exact_match(held_v, [data.held.items[i].expected for i in held]),
                "train_exact": exact_match(train_v, [data.train.items[i].expected for i in seen]),
                **run.answer_scores(data.held, "held_out"),
                "held_out_answers": {data.held.items[i].prompt: a for i, a in zip(held, held_v)}}
        run.forced_gate = learned
    return {
        "seed": seed,
        "held_out_exact": exact_match(held_answers, [data.held.items[i].expected for i in held]),
        "train_exact": exact_match(train_answers, [data.train.items[i].expected for i in seen]),
        "train_loss": train_loss,
        **final,
        **run.answer_scores(data.train, "train"),
        "held_out_answers": {data.held.items[i].prompt: a for i, a in zip(held, held_answers)},
        **({"gate_mean": run.gate_means(data.held)} if arm.bridged and run.forced_gate is None else {}),
        **({"forced_gate": forced} if forced else {}),
        "trainable": {"bridge": sum(p.numel() for n, p in run.model.named_parameters()
                                    if p.requires_grad and n.startswith("bridges.")),
                      "student": sum(p.numel() for n, p in run.model.named_parameters()
                                     if p.requires_grad and not n.startswith("bridges.")),
                      "names": trainable},
        "seconds": time.perf_counter() - started,
        # What made the figures, as a training run's summary records it: a figure is only as
        # good as the commit and the machine that can be named for it.
        "code_version": code_version(),
        "machine": machine(),
        "torch": torch.__version__,
    }
