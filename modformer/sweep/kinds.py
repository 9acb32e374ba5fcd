"""What one run of a sweep is: `modformer train` by default, or a kind a paper registers.

A sweep is one protocol (plan -> runs -> records -> report) for every experiment: its
variants x grid x seeds become run folders, each run by one resumable command in its own
process, by local workers or a Slurm job array, recorded in results.jsonl, followed by
`--status`, reported by `modformer report` and quoted by `modformer quote`. A run kind says
what differs: how a run's config is read, which keys a variant and a seed set, the command
that carries out one run in its folder, and how its report is written. `sweep.experiment` names
the kind: `train`, here, or one a paper's package registers (`modformer sweep --help` lists
them), whose variants may be something else than `model.variant` (an experiment's arms).

Every kind's run folder holds `summary.json` once the run is done (what marks it done), the
config it started with, and its records (`files` names them); the command resumes a stopped
run from where it stopped.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from ..config import config_from_dict
from ..configtools import to_dict
from ..errors import ModformerError
from ..registry import TASKS
from ..train.checkpoint import list_checkpoints
from ..train.preflight import preflight
from ..variants import build_model
from ..version import records_format_problem


@dataclass(frozen=True)
class RunKind:
    """One kind of run of a sweep.

    Args:
        name: the value of `sweep.experiment` that selects it.
        variant_key: the dotted config key a variant sets ("model.variant"); `variant_list`
            when the config holds a list there (a list of arms, say).
        seed_key: the dotted config key a seed sets ("train.seed"); `seed_list` likewise.
        read: plain config data -> the checked config (a dataclass with `to_dict()`).
        command: (config file, run folder) -> the `modformer` arguments that carry out the run
            there, resuming it when it has begun.
        describe: a finished run's summary -> a few words on its outcome (the `done` line,
            `--status`).
        report: the sweep folder -> the report it wrote; None: the sweep's own report of
            `modformer train` runs (modformer/sweep/report.py).
        check: check(runs, run_folder_of) refuses a sweep whose runs cannot start, before any does.
        started: run folder -> a few words on a stopped run's progress ("" when none).
        variant_list: the variant key holds a list (set to [variant]).
        seed_list: the seed key holds a list (set to [seed]).
        threads_key: the dotted config key of a run's CPU threads (null: the sweep chooses).
        files: what a finished run's folder holds: summary, records, config (the results'
            tests check that each committed run has them).
    """

    name: str
    variant_key: str
    seed_key: str
    read: Callable[[dict[str, Any]], Any]
    command: Callable[[Path, Path], list[str]]
    describe: Callable[[dict[str, Any]], str]
    report: Callable[[Path], Path] | None
    check: Callable[[Sequence[Any], Callable[[Any], Path]], None] = field(default=lambda runs, folder: None)
    started: Callable[[Path], str] = field(default=lambda folder: "")
    variant_list: bool = False
    seed_list: bool = False
    threads_key: str = "train.threads"
    files: tuple[str, ...] = ("summary.json", "metrics.jsonl", "config.yaml")


RUN_KINDS: dict[str, RunKind] = {}


def register_kind(kind: RunKind) -> RunKind:
    """Make `sweep.experiment: NAME` select this kind of run.

    Args:
        kind: the kind; its name must be new.

    Returns:
        The kind.
    """
    if kind.name in RUN_KINDS:
        raise ValueError(f"run kind '{kind.name}' is registered twice")
    RUN_KINDS[kind.name] = kind
    return kind


def run_kind(name: str) -> RunKind:
    """The kind `sweep.experiment` names, or one clear error listing the kinds there are."""
    if name not in RUN_KINDS:
        raise ModformerError(f"sweep.experiment: unknown kind of run '{name}' (known: {', '.join(RUN_KINDS)})")
    return RUN_KINDS[name]


def saved_sweep(sweep_dir: Path) -> dict[str, Any]:
    """A sweep folder's sweep.yaml as plain data; refused in one line where it cannot be read,
    or where an older (or newer) modformer wrote the folder's records (its `format`), naming the
    command that brings it up to date."""
    path = Path(sweep_dir) / "sweep.yaml"
    try:
        saved = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ModformerError(f"cannot read {path} ({e.__class__.__name__})") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("sweep"), dict):
        raise ModformerError(f"{path} holds no sweep (empty, or damaged): the sweep file and command that made the "
                             f"folder (its commands.txt) write it again")
    problem = records_format_problem(saved.get("format", 1), sweep_dir)
    if problem:
        raise ModformerError(problem)
    return saved


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """A run's summary.json, what marks it done; None where there is none, or where the file
    cannot be read as one (zero-filled or cut short by a failing disk): such a run is not
    done, and running it again resumes from its last checkpoint and writes its summary anew."""
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return summary if isinstance(summary, dict) else None


def check_format(sweep_dir: Path) -> None:
    """Refuse a sweep folder of another records format (`saved_sweep`); a folder without a
    sweep.yaml yet passes."""
    if (Path(sweep_dir) / "sweep.yaml").is_file():
        saved_sweep(sweep_dir)


def kind_in(saved: dict[str, Any]) -> RunKind:
    """The kind of run a saved sweep file (sweep.yaml, read) names."""
    return run_kind((saved.get("sweep") or {}).get("experiment"))


def kind_of(sweep_dir: Path) -> RunKind:
    """The kind of the runs of the sweep in `sweep_dir`, as its sweep.yaml says (`kind_in`)."""
    return kind_in(saved_sweep(sweep_dir))


# -- train: one `modformer train` run ---------------------------------------------------------

def _train_command(config: Path, run_dir: Path) -> list[str]:
    # A run not started yet starts; a run killed (before its first checkpoint too) continues.
    return ["train", str(config), "--out", str(run_dir), "--resume-if-any"]


def _train_describe(summary: dict[str, Any]) -> str:
    test = summary.get("test", {})
    if "accuracy" not in test:
        return ""
    return f"test accuracy {test['accuracy']:.4f}" + (f", loss {test['loss']:.4f}" if "loss" in test else "")


def _train_check(runs: Sequence[Any], folder: Callable[[Any], Path]) -> None:
    """Each distinct model built once and checked as `modformer train` does; a run that
    starts from another run's weights needs them now, unless it has its own checkpoint."""
    seen = set()
    for run in runs:
        model, task = run.config.model, run.config.task
        key = json.dumps([to_dict(model), to_dict(task), run.config.train.induction_scores], sort_keys=True,
                         default=repr)
        if key in seen:
            continue
        seen.add(key)
        built = TASKS[task.name](task)
        preflight(run.config, build_model(model, run.config.train.seed), built.seq_len, built.vocab_size)
    missing = [run for run in runs if run.config.train.init_from is not None
               and not Path(run.config.train.init_from).exists()
               and read_summary(folder(run)) is None
               and not list_checkpoints(folder(run) / "checkpoints")]
    if missing:
        raise ModformerError(f"{len(missing)} run(s) start from weights that do not exist, e.g. {missing[0].run_id}: "
                             f"train.init_from={missing[0].config.train.init_from} (train those runs first)")


def _train_started(run_dir: Path) -> str:
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    return f"checkpoint at step {checkpoints[-1][0]}" if checkpoints else ""


register_kind(RunKind("train", "model.variant", "train.seed", config_from_dict, _train_command, _train_describe,
                      None, _train_check, _train_started))


# `python -m` would put the current folder first on sys.path, ahead of PYTHONPATH and the
# installed packages, so a sweep's runs could import another copy of a part than
# `modformer train` does from the same folder; without it they search as the command does
# (PYTHONPATH, installed packages, then the current folder, which import paths append).
RUN_CLI = "import runpy, sys; del sys.path[0]; runpy.run_module('modformer.cli', run_name='__main__', alter_sys=True)"


def python_command(args: list[str]) -> list[str]:
    """`modformer ARGS` as this interpreter runs it (the sweep's children and Slurm's jobs),
    finding parts as the `modformer` command does."""
    return [sys.executable, "-c", RUN_CLI, *args]
