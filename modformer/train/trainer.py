"""The training loop: one run of one config in one run directory, resumable bit for bit.

A run directory holds `config.yaml` (resolved), `run.json` (command, code version),
`metrics.jsonl`, `checkpoints/step_N.safetensors`, `summary.json` (final held-out metrics),
`curves.png`, and `train.lock`: while a training runs, it holds that file's lock, so that a
second training of the same folder (from any launcher or host) refuses before it writes
anything (modformer/lock.py).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import yaml

from ..analysis.induction import induction_scores, plot_induction_scores
from ..config import RunConfig, config_from_dict, part_versions
from ..configtools import flatten
from ..constructions import construction_label
from ..errors import CheckpointError, ConfigError, Interrupted, ModformerError, TrainingDiverged
from ..evaluate import checkpoint_file, evaluate
from ..files import atomic_write_text, remove_stale_temporaries
from ..installed_papers import paper_versions
from ..lock import FolderLock, take_lock
from ..precision import resolve_precision
from ..registry import TASKS, VARIANTS
from ..tasks.base import IGNORE
from ..variants import build_model
from ..variants.base import run_label
from ..version import RECORDS_FORMAT, code_version, machine, records_format_problem
from .budget import trained
from .checkpoint import (Checkpoint, checkpoint_path, list_checkpoints, load_model_state, read_checkpoint,
                         save_checkpoint)
from .distributed import init_world
from .loop import TrainingLoop, resolve_device
from .mfu import utilisation
from .optim import build_optimizer, schedule_description
from .plots import plot_training_curves
from .preflight import induction_half_len, preflight
from .records import MetricsLog, NullMetricsLog
from .tracking import RunInfo, check_installed, open_trackers

# Keys that may change when a run is resumed: they change neither the weights nor the logged
# numbers (the trackers only show them). (train.steps shapes the learning-rate schedule and train.threads the order of
# float sums, so a change of either would break bit-identical resumption.)
RESUMABLE_CHANGES = {"train.progress", "train.log_to", "train.log_group", "train.mlflow_uri"}

LOCK_FILE = "train.lock"  # held by the one training of a run folder (modformer/lock.py)


class Trainer(TrainingLoop):
    """A run of one config's task: the one training loop (`loop.py`) reading the task's
    batches and loss, in a run directory."""

    def __init__(self, cfg: RunConfig, run_dir: str | Path, *, resume: bool | str = False,
                 command: list[str] | None = None, echo: Callable[[str], None] | None = None):
        super().__init__()
        if not (resume is False or resume is True or resume == "if_any"):
            raise ValueError(f"resume must be False, True or 'if_any', got {resume!r}")
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.resume = bool(resume)
        self.resume_required = resume is True  # 'if_any' (a sweep's run) starts where there is none
        self.created: set[str] | None = None  # what the folder held before this start (None: it made the folder)
        self.discarded = False  # a new run that diverged before it logged anything: its files removed
        self.command = command if command is not None else sys.argv
        self.echo = echo or (lambda msg: print(msg, file=sys.stderr))
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")
        self.lock: FolderLock | None = None

    # -- run directory -------------------------------------------------------------------
    def _lock(self) -> None:
        """Take the run folder's lock (once) and keep it until the run ends; refuse (exit 2,
        nothing written) if another training holds it. Taken before any other check of the
        folder, so that two trainings never both see it free."""
        if self.lock is None:
            self.lock = take_lock(self.run_dir / LOCK_FILE, wait=False, busy=(
                f"{self.run_dir} is being trained by {{holder}}: one training per run folder (lock file "
                f"{{path}}); wait for it to end or stop it, or choose another --out"))

    def _prepare_run_dir(self) -> None:
        if self.resume_required and not (self.run_dir / "config.yaml").exists() \
                and not list_checkpoints(self.ckpt_dir):
            raise ModformerError(f"{self.run_dir} holds no run to resume (no config.yaml, no checkpoint): check the "
                                 f"folder's name, or start a new run there without resuming")
        # (the lock, taken first, is this start's too)
        self.created = set(os.listdir(self.run_dir)) - {LOCK_FILE} if self.run_dir.is_dir() else None
        # A missing folder is made here, not earlier: a run refused for its config leaves none behind.
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ModformerError(f"cannot write to output folder {self.run_dir}: {e.strerror or e}") from None
        self._lock()
        saved = self.run_dir / "config.yaml"
        holds_run = saved.exists() or bool(list_checkpoints(self.ckpt_dir))
        if holds_run and not self.resume:
            raise ModformerError(f"{self.run_dir} already holds a run: resume it (modformer train --resume, "
                                 f"train_run(..., resume=True)) or choose another folder")
        if self.resume and saved.exists():
            self._check_format()
            self._check_same_config(saved)
        if self.resume:
            # A run killed while writing leaves temporary files (a checkpoint's size each).
            stale = [*remove_stale_temporaries(self.run_dir), *remove_stale_temporaries(self.ckpt_dir, safetensors=True)]
            if stale:
                self.echo(f"removed {len(stale)} temporary file(s) a killed run left in {self.run_dir}")
        try:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            probe = self.run_dir / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise ModformerError(f"cannot write to output folder {self.run_dir}: {e.strerror or e}") from None
        atomic_write_text(saved, self.cfg.to_yaml())
        self.task.save(self.run_dir)
        # run.json keeps one entry per start, so a resumed run still shows how it began.
        info_path = self.run_dir / "run.json"
        starts = json.loads(info_path.read_text()).get("starts", []) if self.resume and info_path.exists() else []
        starts.append({"command": self.command, "code_version": code_version(), "torch": torch.__version__,
                       "machine": machine(), "parts": part_versions(self.cfg), "papers": paper_versions(),
                       "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        atomic_write_text(info_path, json.dumps({"format": RECORDS_FORMAT, "starts": starts}, indent=2) + "\n")

    def _on_main(self, step: Callable[[], Any]) -> None:
        """Run `step` on rank 0 only (the one that writes); if it fails, every rank stops
        with its message (one rank alone raising would leave the others waiting)."""
        problem = None
        if self.world.main:
            try:
                step()
            except ModformerError as e:
                problem = e
        if self.world.any(problem is not None):
            raise problem or ModformerError(f"rank 0 could not prepare {self.run_dir} (its message says why)")

    def _check_format(self) -> None:
        """A run folder an older modformer wrote is not continued until it is brought up to date."""
        info = self.run_dir / "run.json"
        try:
            written = json.loads(info.read_text()).get("format", 1) if info.exists() else RECORDS_FORMAT
        except (OSError, ValueError, AttributeError) as e:
            raise ModformerError(f"cannot resume: {info} is unreadable ({e.__class__.__name__})") from None
        problem = records_format_problem(written, self.run_dir)
        if problem:
            raise ModformerError(f"cannot resume: {problem}")

    def _check_same_config(self, saved: Path) -> None:
        try:
            old = config_from_dict(yaml.safe_load(saved.read_text()))
        except (OSError, UnicodeDecodeError) as e:
            raise ModformerError(f"cannot resume: the saved {saved} is unreadable ({e.__class__.__name__})") from None
        except (ConfigError, yaml.YAMLError) as e:
            raise ModformerError(f"cannot resume: the saved {saved} is unreadable ({e})") from None
        before, after = flatten(old.to_dict()), flatten(self.cfg.to_dict())
        changed = sorted(k for k in set(before) | set(after)
                         if before.get(k) != after.get(k) and k not in RESUMABLE_CHANGES)
        if changed:
            detail = ", ".join(f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in changed[:4])
            raise ModformerError(f"cannot resume {self.run_dir} with a different config ({detail}); "
                                 f"only {', '.join(sorted(RESUMABLE_CHANGES))} may change")

    # -- checkpoints -----------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        return {"config": self.cfg.to_dict(), "schedule": schedule_description(self.cfg.train),
                "optimizer": {"name": "AdamW", "groups": [{k: v for k, v in g.items() if k != "params"}
                                                          for g in self.optimizer.param_groups]},
                "code_version": code_version(), **self.loop_state()}

    def save(self, step: int) -> None:
        if not self.world.main:
            self.last_saved = step
            return
        # The records up to here are synced first, and the checkpoint carries a copy of them:
        # a resume from it restores any that a failing disk lost from metrics.jsonl.
        self.metrics.sync()
        covered = [r for r in self.metrics.records() if self._covered(r, step)]
        save_checkpoint(checkpoint_path(self.ckpt_dir, step), step, self.model, self.optimizer,
                        {**self._meta(), "records": covered})
        for _, old in list_checkpoints(self.ckpt_dir)[:-self.cfg.train.keep_checkpoints]:
            old.unlink()
        self.last_saved = step

    def _restore(self) -> int:
        found = list_checkpoints(self.ckpt_dir)
        if not found:
            self.echo(f"no checkpoint in {self.ckpt_dir}; starting from step 0")
            self.metrics.keep(lambda r: False)  # whatever a killed run logged is redone
            return 0
        ckpt, step, path = self._latest_intact(found)
        if ckpt.step != step:
            raise CheckpointError(f"{path} is named for step {step} but holds step {ckpt.step}")
        self.restore(ckpt, path)
        # Drop what a killed run logged after this checkpoint, and a finished run's test
        # score, which is recomputed at the end; restore what the checkpoint covers and the
        # file lost (a disk that failed or went read-only before the records were synced).
        kept = [r for r in self.metrics.records() if self._covered(r, step)]
        carried = ckpt.meta.get("records")
        if carried is not None and kept != carried:
            lost = [r for r in carried if r not in kept]
            self.metrics.replace(carried)
            steps = sorted({r.get("step", 0) for r in lost})
            self.echo(f"{self.metrics.path}: {len(lost)} record(s) up to step {step} were missing or damaged"
                      + (f" (steps {steps[0]}-{steps[-1]})" if steps else "") + "; restored from the checkpoint")
        else:
            self.metrics.replace(kept)
        self.echo(f"resumed {self.run_dir} from step {step}")
        return step

    @staticmethod
    def _covered(record: dict[str, Any], step: int) -> bool:
        """Whether a checkpoint at `step` covers a metrics record: logged by then, and not a
        finished run's test score (recomputed at the end)."""
        return record.get("step", 0) <= step and record.get("split") != "test"

    def _latest_intact(self, found: list[tuple[int, Path]]) -> tuple[Checkpoint, int, Path]:
        """The newest checkpoint that reads back intact (its checksum matches), as (checkpoint,
        step, path). A damaged newer one is moved aside as `<name>.damaged` (kept, never
        deleted), saying so; with none intact, one line and nothing moved."""
        damaged = []
        for step, path in reversed(found):
            try:
                ckpt = read_checkpoint(path)
            except CheckpointError as e:
                damaged.append((path, e))
                continue
            for bad, why in damaged:  # the newer ones, which a resume would otherwise read again
                bad.rename(bad.with_name(bad.name + ".damaged"))
                self.echo(f"{why}; moved aside to {bad.name}.damaged, and the run resumes from the previous intact "
                          f"checkpoint, {path.name} (step {step})")
            return ckpt, step, path
        raise CheckpointError(f"{damaged[0][1]}; no earlier checkpoint is intact: move the damaged one(s) aside to "
                              f"start the run again from step 0")

    # -- the loop --------------------------------------------------------------------------
    def _setup(self) -> int:
        """Build everything; return the step to start from."""
        cfg, tc = self.cfg, self.cfg.train
        check_installed(tc.log_to)  # a missing tracker package stops the run before it starts
        # First: under torchrun each process takes its own GPU, and builds its model there.
        self.world, self.device = init_world(resolve_device(tc.device))
        self.world.share(tc.batch_size)  # a batch that does not split is refused before anything is written
        # A folder that exists may be in training now: refuse at once, before building anything.
        self._on_main(lambda: self._lock() if self.run_dir.is_dir() else None)
        if tc.threads is not None:
            torch.set_num_threads(tc.threads)
        self.task = TASKS[cfg.task.name](cfg.task)
        self.model = build_model(cfg.model, tc.seed).to(self.device)
        self.model.activation_checkpointing = tc.activation_checkpointing
        # A resumed run that has its own checkpoint never needs its source again (it may be gone).
        if tc.init_from is not None and not (self.resume and list_checkpoints(self.ckpt_dir)):
            source = checkpoint_file(Path(tc.init_from))
            load_model_state(self.model, read_checkpoint(source).model, source)  # copied onto the model's device
        # Every part probed, and every analysis asked for checked, before anything is written.
        preflight(cfg, self.model, self.task.seq_len, self.task.vocab_size, self.echo)
        # The held-out sets are drawn before timing starts, and before the run directory: data
        # that cannot be read (a text source offline, say) leaves no run behind.
        self.task.test_set()
        # Only now: a bad init_from (missing, foreign, of another shape) must leave no run behind.
        self._on_main(self._prepare_run_dir)
        if not self.world.main:  # other ranks write nothing, and read the checkpoints rank 0 writes
            self.metrics = NullMetricsLog(self.metrics.path)
        self.optimizer = build_optimizer(self.model, tc)
        self.settings, self.peak_lr, self.log = tc, tc.lr, self.metrics.append
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.last_eval: dict[str, Any] | None = None
        start = self._restore() if self.resume else 0
        if self.world.main and tc.log_to:
            info = RunInfo(run_dir=self.run_dir, name=str(self.run_dir), config=cfg.to_dict(), start_step=start,
                           group=tc.log_group or self.run_dir.resolve().parent.name, mlflow_uri=tc.mlflow_uri)
            self.metrics.track(open_trackers(tc.log_to, info))
        self.step_model = self.world.wrap(self.model)  # evaluation and checkpoints use the plain model
        if tc.compile:  # checkpoints and evaluation keep using the plain model (no `_orig_mod.` in names)
            self.step_model = torch.compile(self.step_model)
        if start > tc.steps:
            raise ModformerError(f"{self.run_dir} is already at step {start}, past train.steps={tc.steps}")
        return start

    def train_batch(self, step: int):
        tc = self.cfg.train
        batch = self.task.train_batch(tc.seed, step, tc.batch_size)
        if self.world.size > 1:
            batch = batch.narrow(*self.world.share(tc.batch_size))
        return batch.to(self.device)

    def batch_loss(self, batch) -> tuple[torch.Tensor, float, int]:
        logits = self.step_model(batch.inputs)
        if self.world.size > 1:  # this share's token sum, over the global token count (see distributed.py)
            total = self.world.sum((batch.targets != IGNORE).sum().float())
            loss = self.task.loss(logits, batch, reduction="sum") * self.world.size / total
            loss_value = (self.world.sum(loss.detach()) / self.world.size).item()
        else:
            loss = self.task.loss(logits, batch)
            loss_value = loss.item()
        return loss, loss_value, batch.inputs.numel() * self.world.size  # the global batch's tokens

    def reduce_aux(self, values: dict[str, float]) -> dict[str, float]:
        if self.world.size == 1 or not values:
            return values
        names = sorted(values)  # every rank holds the same model, so the same names: one reduction
        mean = self.world.sum(torch.tensor([values[n] for n in names], device=self.device)) / self.world.size
        return dict(zip(names, mean.tolist()))

    def describe(self) -> str:
        return f" (run {self.run_dir})"

    def validate(self, done: int) -> None:
        self.last_eval = self._evaluate("validation")
        self.metrics.append({"kind": "eval", "split": "validation", "step": done, **self.last_eval})
        if self.cfg.train.induction_scores:
            self.metrics.append({"kind": "induction", "step": done, "scores": self._induction().tolist()})

    def stop_requested(self) -> bool:
        # torchrun signals its workers one by one: all stop after the same step.
        return self.world.any(self.interrupts.requested)

    def progress_postfix(self) -> dict[str, str]:
        # A task without accuracy (a regression) shows its loss only.
        return {} if self.last_eval is None or "accuracy" not in self.last_eval else {
            "acc": f"{self.last_eval['accuracy']:.3f}"}

    def run(self) -> dict[str, Any]:
        """Train to `train.steps` (from the latest checkpoint with resume); return the summary."""
        try:
            self.loop(self._setup(), desc=f"{self.cfg.model.variant}/{self.cfg.task.name}",
                      show_progress=self.world.main)
            return self._finish()
        except TrainingDiverged as e:
            # A new run with nothing to resume and nothing logged leaves no folder that looks like
            # a run; one that logged records keeps them (the curve that diverged), to be read.
            self.discarded = self.world.main and not self.resume and self.last_saved is None \
                and not self.metrics.path.exists()
            if self.discarded:
                self.metrics.close([])
                self._remove_what_this_start_wrote()
                raise TrainingDiverged(f"{e} Nothing of this run is kept: {self.run_dir} is as it was before") from None
            raise
        finally:  # the trackers' runs end with the run, stopped or failed too, with the plots there are
            try:
                self.metrics.close([p for p in (self.run_dir / "curves.png", self.run_dir / "induction.png")
                                    if p.exists()])
            finally:  # last: nothing of this training writes into the folder after the lock is given up
                if self.lock is not None:
                    self.lock.release()
                if self.discarded:  # the lock last, and the folder if this start made it
                    if self.created is None:
                        shutil.rmtree(self.run_dir, ignore_errors=True)
                    else:
                        (self.run_dir / LOCK_FILE).unlink(missing_ok=True)

    def _remove_what_this_start_wrote(self) -> None:
        """Remove what this start added to the folder, its lock excepted (still held: no other
        training can start there meanwhile; the folder itself goes once the lock is given up,
        if this start made it)."""
        keep = self.created if self.created is not None else set()
        for name in set(os.listdir(self.run_dir)) - keep - {LOCK_FILE}:
            path = self.run_dir / name
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)

    def stop(self, done: int) -> None:
        if self.world.main:
            self._plot()
        raise Interrupted(f"interrupted at step {done}; checkpoint saved. Continue with: "
                          f"modformer train {self.run_dir / 'config.yaml'} --out {self.run_dir} --resume")

    def _finish(self) -> dict[str, Any]:
        """Score the test set once, write summary.json and the plots."""
        cfg, tc = self.cfg, self.cfg.train
        if self.last_eval is None:  # resumed a finished run: nothing was evaluated in this process
            self.last_eval = self._evaluate("validation")
        test = self._evaluate("test")
        self.metrics.append({"kind": "eval", "split": "test", "step": tc.steps, **test})
        parameters = self.model.parameter_counts()
        # From the log, not this process: a run resumed at its last step trains nothing here.
        speeds = [r["tokens_per_s"] for r in self.metrics.records() if r.get("kind") == "train"]
        tokens_per_s = sum(speeds) / len(speeds) if speeds else 0.0
        precision = resolve_precision(tc.precision, self.device)
        summary = {
            "step": tc.steps,
            "variant": cfg.model.variant,
            "model": run_label(cfg.model),  # what ran: the variant, and a mixer of yours
            "task": cfg.task.name,
            "seed": tc.seed,
            "parameters": parameters,
            "tokens_per_s": tokens_per_s,
            "mfu": utilisation(cfg.model, self._seq_len(), tokens_per_s, precision, self.device, self.world.size,
                               builds_own_ffn=VARIANTS[cfg.model.variant].own_ffn is not None),
            **({"aux": self.last_aux} if self.last_aux else {}),  # the last logged window's auxiliary losses
            "validation": self.last_eval,
            "test": {**test, **self.task.model_metrics(test, parameters)},
            "code_version": code_version(),
            "construction": construction_label(cfg.to_dict()),
            "budget": trained(cfg.to_dict()),
            "precision": precision,  # what `auto` chose here
        }
        if self.world.main:  # the summary last: a run with one is done, its plots drawn (a sweep counts on it)
            self._plot()
            self.metrics.sync()  # the test record on disk before the summary says the run is done
            atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary

    def _seq_len(self) -> int:
        """The length of the training batches' sequences (the last step's batch)."""
        return int(self.train_batch(max(self.cfg.train.steps - 1, 0)).inputs.shape[-1])

    def _evaluate(self, split: str) -> dict[str, Any]:
        data = self.task.validation_set() if split == "validation" else self.task.test_set()
        return evaluate(self.model, self.task, batch_size=self.cfg.train.eval_batch_size,
                        precision=self.cfg.train.precision, data=data)

    def _induction(self) -> torch.Tensor:
        """(n_layers, n_heads) induction scores on the same random tokens at every call."""
        return induction_scores(self.model, vocab_size=self.task.vocab_size,
                                half_len=induction_half_len(self.model.max_seq_len), batch=32,
                                generator=torch.Generator(self.device).manual_seed(self.cfg.train.seed))

    def _plot(self) -> None:
        if not self.metrics.path.exists():
            return
        title = f"{run_label(self.cfg.model)} on {self.cfg.task.name}"
        plot_training_curves(self.metrics.path, self.run_dir / "curves.png", title=title)
        scores = [(r["step"], r["scores"]) for r in self.metrics.records() if r.get("kind") == "induction"]
        if scores:
            plot_induction_scores(scores, self.run_dir / "induction.png", title=f"induction scores: {title}")
