"""One run of an LLM-Modules experiment: one arm and one seed, trained in its own folder as one
run of a sweep (`sweep.experiment: llm_modules`; the kind's command is `modformer llm-modules
CONFIG --out RUN --one-run`).

    RUN/config.yaml             the resolved config (one arm, one seed)
    RUN/split.json              the task's training and held-out items (and what the teacher knew)
    RUN/student_tokenizer/      the student's BPE, when student.tokenizer is bpe:N
    RUN/metrics.jsonl           what it logged
    RUN/checkpoint.safetensors  while it trains: a stopped run continues from there
    RUN/summary.json            written last: the run is done
    RUN/llm_modules.lock        held while the run trains (modformer/lock.py)

One process at a time per run folder: a second is refused at once, before it writes
anything, naming the first. A finished run (its summary.json exists) is never redone and a
stopped one continues from its last checkpoint. Teacher states are cached once per
(teacher, layer, texts) under the modformer cache folder and shared by every arm, seed and
later experiment.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import yaml

from ...configtools import from_dict, to_dict
from ...data.tokenizer import TextTokenizer, load_tokenizer, train_bpe
from ...errors import ModformerError
from ...files import atomic_write_folder, atomic_write_text, cache_root, output_folder
from ...lock import FolderLock, take_lock
from ...precision import resolve_precision
from ...train.checkpoint import read_checkpoint
from ...train.loop import resolve_device
from ...train.records import MetricsLog
from .arm_run import TeacherParts, run_arm
from .arms import ARMS
from ...interop.teacher_cache import TeacherStateCache, fingerprint
from .dataset import LLMModulesData, Vocabulary, encode_corpus, encode_items
from ...data.facts import all_facts, known_facts
from ...interop.hf_student import load_student_tokenizer
from .config import LLMModulesConfig
from ...interop.packaged import load_teacher
from ...data.pairing import SharedTokenizer, TwoTokenizers
from .stratos import boxed_answer, stratos_items
from ...interop.teacher import Teacher
from .texts import EXTRACT, arithmetic_items, fact_items, load_corpus, split_items

EVAL_ITEMS = 200  # training (and arithmetic held-out) items whose generated answers are scored
LOCK_FILE = "llm_modules.lock"  # held by the one process training a run folder


def _comparable(cfg: LLMModulesConfig) -> dict[str, Any]:
    """What must not change in a run's folder: its whole config, the layers read compared per
    bridge however written."""
    out = to_dict(cfg)
    out["teacher"]["layer"], out["bridge"]["teacher_layers"] = None, list(cfg.place_layers.values())
    if cfg.train.epochs is not None:  # the steps follow from the epochs (the saved config holds them resolved)
        out["train"]["steps"] = None
    return out


class LLMModulesExperiment:
    def __init__(self, cfg: LLMModulesConfig, out: Path, echo=print):
        self.cfg, self.out, self.echo = cfg, Path(out), echo

    @property
    def teacher_device(self) -> torch.device:
        return resolve_device(self.cfg.teacher.device or self.cfg.train.device)

    def _started(self) -> bool:
        """Whether the run has begun here (before that, a failed start leaves nothing to keep)."""
        return (self.out / "metrics.jsonl").is_file()

    def _check_folder(self) -> None:
        saved = self.out / "config.yaml"
        if saved.exists() and self._started():
            try:  # read with today's defaults: a field added since then, at its default, is no change
                before = from_dict(LLMModulesConfig, yaml.safe_load(saved.read_text()))
            except (ModformerError, yaml.YAMLError, TypeError) as e:
                raise ModformerError(f"{saved} cannot be read as an experiment config ({e}); choose another "
                                     f"--out") from None
            if _comparable(before) != _comparable(self.cfg):
                raise ModformerError(f"{self.out} holds an experiment with another config; choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(saved, self.cfg.to_yaml())

    def prepare(self) -> None:
        """Load the teacher, choose and split the items, encode the texts, cache the states."""
        cfg = self.cfg
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        self._check_folder()
        started = time.perf_counter()
        model, self.tokenizer = load_teacher(cfg.teacher.name)
        model.to(self.teacher_device)
        layers = self._layers(model)
        items = self._fitting(self._items(model))
        if cfg.data.max_items is not None and cfg.data.max_items < len(items):
            items = random.Random(cfg.data.split_seed).sample(items, cfg.data.max_items)
        train, held = split_items(items, cfg.data.held_out, cfg.data.split_seed)
        if len(held) > EVAL_ITEMS:  # thousands of sums: score a fixed sample
            held = random.Random(cfg.data.split_seed).sample(held, EVAL_ITEMS)
        split = {"task": cfg.data.task, "items": len(items), "train": [i.text for i in train],
                 "held_out": [i.text for i in held]}
        saved = self.out / "split.json"
        if saved.is_file() and self._started() and json.loads(saved.read_text()) != split:  # another version's texts
            raise ModformerError(f"{self.out} was started with other task texts than this modformer makes; "
                                 f"choose another --out")
        atomic_write_text(saved, json.dumps(split, indent=1) + "\n")
        texts = [] if cfg.data.corpus is None else load_corpus(cfg.data.corpus, cfg.data.corpus_rows, cfg.data.split_seed,
                                                               cfg.data.corpus_column)
        self.pairing, size = self._pairing([i.text for i in train] + texts)
        corpus = encode_corpus(self.pairing, texts, cfg.data.max_tokens, first=len(train)) if texts else None
        train_rows = encode_items(self.pairing, train, first=0)
        held_rows = encode_items(self.pairing, held, first=len(train) + (len(corpus) if corpus else 0))
        if self.pairing.shared:  # the teacher's tokens the texts use, every fact's answer included
            used = [torch.tensor(r) for g in (train_rows, held_rows, corpus) if g for r in g.ids]
            if cfg.data.task == "facts":
                used += [torch.tensor(self.tokenizer(i.text).input_ids) for i in fact_items(all_facts())]
            vocab = Vocabulary.subset(torch.cat(used))
        else:
            vocab = Vocabulary.whole(size)
        self.data = LLMModulesData(train_rows, corpus, held_rows, vocab, cfg.data.loss_on)
        self.extract = {**EXTRACT, "stratos": boxed_answer}[cfg.data.task]
        self._resolve_epochs(len(train))
        cfg = self.cfg
        final = self._final_layer(model, layers)
        self.data.caches = self._caches(model, layers if final in layers or final is None else [*layers, final])
        self.teacher = self._teacher_parts(model, final)
        self.echo(f"teacher {cfg.teacher.name} ({cfg.reading()}), {len(train)} training and {len(held)} "
                  f"held-out {cfg.data.task} items, {len(corpus) if corpus else 0} corpus texts, student vocabulary "
                  f"{self.data.vocab.size}, {cfg.train.steps} steps per run; prepared in "
                  f"{time.perf_counter() - started:.0f} s")

    def _fitting(self, items: list) -> list:
        """The items of at most `data.max_item_tokens` student tokens (all when it is null)."""
        limit = self.cfg.data.max_item_tokens
        if limit is None:
            return items
        pairing, _ = self._pairing([])  # not bpe:N (the config refuses it): no training texts needed
        kept = [i for i in items if len(pairing.student_ids(i.text)) <= limit]
        self.echo(f"{len(kept)} of {len(items)} {self.cfg.data.task} items fit in {limit} student tokens")
        if len(kept) < 2:
            raise ModformerError(f"data.max_item_tokens={limit} leaves {len(kept)} of the {len(items)} task items; "
                                 f"raise it")
        return kept

    def _resolve_epochs(self, n_train: int) -> None:
        """With train.epochs: the steps it takes, written into the config (and its saved copy)."""
        tc = self.cfg.train
        if tc.epochs is None:
            return
        steps = math.ceil(tc.epochs * n_train / self.data.task_rows(tc.batch_size, self.cfg.data.task_fraction))
        self.cfg = replace(self.cfg, train=replace(tc, steps=steps))
        atomic_write_text(self.out / "config.yaml", self.cfg.to_yaml())

    def _pairing(self, training_texts: list[str]) -> tuple[SharedTokenizer | TwoTokenizers, int]:
        """How texts become student and teacher tokens, and the student tokenizer's size."""
        spec = self.cfg.student_tokenizer
        if spec == "teacher":
            return SharedTokenizer(self.tokenizer), len(self.tokenizer)
        if spec == "own":
            student = load_student_tokenizer(self.cfg.student.model)
            return TwoTokenizers(student, self.tokenizer.backend_tokenizer), student.get_vocab_size(with_added_tokens=True)
        if spec.startswith("bpe:"):
            folder = self.out / "student_tokenizer"  # kept: a continued experiment reads with the same one
            if (folder / "special.json").is_file():
                trained = TextTokenizer.load(folder)
            else:
                trained = train_bpe(training_texts, int(spec[4:]))
                atomic_write_folder(folder, trained.save)
        else:
            trained = load_tokenizer(spec, key="student.tokenizer")
        return TwoTokenizers(trained.tokenizer, self.tokenizer.backend_tokenizer), trained.vocab_size

    def _items(self, model) -> list:
        cfg = self.cfg
        if cfg.data.task == "arithmetic":
            return arithmetic_items(cfg.data.arithmetic_digits)
        if cfg.data.task == "stratos":
            return stratos_items(cfg.data.task_source, cfg.data.task_column)
        facts = all_facts()
        if cfg.teacher.known_only:
            key = hashlib.sha256("|".join([cfg.teacher.name, *(f.text for f in facts)]).encode()).hexdigest()[:32]
            known_file = cache_root() / "known-facts" / f"{key}.json"
            if known_file.is_file():
                known_texts = set(json.loads(known_file.read_text()))
                facts = [f for f in facts if f.text in known_texts]
            else:
                self.echo(f"asking the teacher {len(facts)} facts (once; the answer is cached in {known_file})")
                facts = known_facts(model, self.tokenizer, facts)
                known_file.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(known_file, json.dumps([f.text for f in facts]))
            self.echo(f"the teacher completes {len(facts)} of {len(all_facts())} facts correctly")
        return fact_items(facts)

    def _layers(self, model) -> list[int]:
        """The teacher layers the bridges read, checked against the teacher before any work."""
        layers = self.cfg.read_layers
        key = "bridge.teacher_layers" if self.cfg.bridge.teacher_layers is not None else "teacher.layer"
        teacher = Teacher(model)
        n = teacher.n_layers
        for layer in layers:
            try:
                teacher.check_layer(layer)
            except ModformerError as e:
                raise ModformerError(f"{key}: {e}") from None
        spelled: dict[int, int] = {}
        for layer in layers:  # -1 and n are one layer: name it one way, or its states are cached twice
            other = spelled.setdefault(layer % (n + 1), layer)
            if other != layer:
                raise ModformerError(f"{key} names one teacher layer twice, as {other} and {layer}; write it one way")
        return layers

    def _final_layer(self, model, layers: list[int]) -> int | None:
        """Where the distill arm finds the teacher's final states: a layer read anyway, or -1."""
        if not any(ARMS[a].distill for a in self.cfg.arms):
            return None
        n = model.config.num_hidden_layers
        return next((layer for layer in layers if layer % (n + 1) == n), -1)

    def _caches(self, model, layers: list[int]) -> dict[int, TeacherStateCache]:
        """layer -> the teacher's states of every sequence, those not cached yet from one pass."""
        cfg = self.cfg
        rows = [torch.tensor(ids, dtype=torch.long) for ids, _ in self.data.sequences]
        keep = [k for _, k in self.data.sequences]
        keep = None if all(k is None for k in keep) else keep  # whole texts only (one tokenizer)
        precision = resolve_precision(cfg.teacher.precision, self.teacher_device)
        folders = {layer: cache_root() / "teacher-states" / fingerprint(cfg.teacher.name, layer,
                                                                        cfg.teacher.cache_dtype, rows, keep, precision)
                   for layer in layers}
        started = time.perf_counter()
        caches = TeacherStateCache.build_layers(Teacher(model), cfg.teacher.name, rows, folders,
                                                dtype=cfg.teacher.cache_dtype, batch_size=cfg.teacher.batch_size,
                                                keep=keep, precision=precision)
        for layer, folder in folders.items():
            self.echo(f"teacher states of layer {layer}: {folder} ({sum(len(r) for r in rows):,} tokens)")
        self.echo(f"teacher states ready in {time.perf_counter() - started:.1f} s")
        return caches

    def _teacher_parts(self, model, final: int | None) -> TeacherParts:
        cfg = self.cfg
        train_rows = list(range(len(self.data.train) + (len(self.data.corpus) if self.data.corpus else 0)))
        layers = tuple(cfg.read_layers)
        mean, std = [], []
        for layer in layers:
            states = torch.cat([self.data.caches[layer].get([r])[0][0] for r in train_rows])  # (tokens, d_t)
            mean.append(states.mean(0))
            std.append(states.std(0))
        return TeacherParts(model=model, layers=layers, final_layer=final,
                            embeddings=model.get_input_embeddings().weight.detach().cpu(),
                            head=model.get_output_embeddings().weight.detach().float().cpu(),
                            width=model.config.hidden_size,
                            precision=resolve_precision(cfg.teacher.precision, self.teacher_device),
                            round_bf16=cfg.teacher.cache_dtype == "bf16",
                            mean=torch.stack(mean), std=torch.stack(std))

    def run_one(self) -> dict[str, Any]:
        """The config's one arm and seed, trained (or continued) in the folder itself, as a
        sweep's run: returns its result (summary.json)."""
        if len(self.cfg.arms) != 1 or len(self.cfg.seeds) != 1:
            raise ModformerError(f"--one-run trains one arm and one seed; the config names arms {self.cfg.arms} and "
                                 f"seeds {self.cfg.seeds}")
        with self._locked():
            if (self.out / "summary.json").exists():
                return json.loads((self.out / "summary.json").read_text())
            self.prepare()
            return self._train_one(self.cfg.arms[0], self.cfg.seeds[0], self.out)

    def _locked(self) -> FolderLock:
        """The run folder's lock; refused at once where another process holds it."""
        output_folder(self.out)
        return take_lock(self.out / LOCK_FILE, wait=False, busy=(
            f"{self.out} is being trained by {{holder}}: one process per run folder (lock file {{path}}); wait for "
            f"it to end or stop it, or choose another --out"))

    def _train_one(self, arm_name: str, seed: int, folder: Path) -> dict[str, Any]:
        """Train (or continue) one arm and seed in `folder`; its summary.json marks it done."""
        folder.mkdir(parents=True, exist_ok=True)
        checkpoint = folder / "checkpoint.safetensors"
        resumed = read_checkpoint(checkpoint).step if checkpoint.is_file() else 0
        log = MetricsLog(folder / "metrics.jsonl")
        log.keep(lambda r: r["step"] <= resumed)  # what a stopped run logged after its last save is redone
        self.echo(f"{arm_name} seed {seed}: training" + (f" from step {resumed}" if resumed else ""))
        result = {"arm": arm_name, **run_arm(self.cfg, ARMS[arm_name], seed, self.data, self.teacher,
                                             self.pairing, self.extract, log.append, EVAL_ITEMS, checkpoint),
                  "precision": {"teacher": resolve_precision(self.cfg.teacher.precision, self.teacher_device),
                                "train": resolve_precision(self.cfg.train.precision,
                                                           resolve_device(self.cfg.train.device))}}
        atomic_write_text(folder / "summary.json", json.dumps(result, indent=1) + "\n")
        checkpoint.unlink(missing_ok=True)  # the run is done: its summary and metrics are what is kept
        self.echo(f"{arm_name} seed {seed}: held-out exact match {result['held_out_exact']:.3f}, training "
                  f"items {result['train_exact']:.3f}, held-out answer loss "
                  f"{result['held_out_answer_loss']:.3f} ({result['seconds']:.0f} s)")
        return result
