"""modformer from Python: what each command does, as functions a notebook or script calls.

    import modformer as mf

    cfg = mf.config("configs/retrieval.yaml", "model.variant=mixit", "train.steps=100")
    summary = mf.train_run(cfg, "runs/mixit")           # the same run as `modformer train`
    print(summary["test"]["accuracy"])
    model, cfg, task, step = mf.load_run("runs/mixit")  # the trained model, ready to probe
    scores = mf.evaluate_run("runs/mixit")              # what `modformer eval` prints
    report = mf.sweep("configs/random_attention.yaml", "runs/ra", "sweep.seeds=[0,1,2]")

The command line is a thin layer over these; each returns what the command prints. (The
training function is `train_run`, not `train`: `modformer.train` is the package of the loop.)
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from .config import RunConfig, config_from_dict, load_config
from .configtools import apply_override
from .errors import ConfigError, ModformerError
from .evaluate import evaluate, load_run
from .sweep.report import write_report
from .sweep.runner import SweepRunner
from .sweep.slurm import SlurmLauncher, live_runs
from .sweep.spec import load_sweep
from .train.trainer import Trainer
from .variants.base import model_label

# The keys of a run's config that `evaluate_run` reads besides the task's.
EVAL_KEYS = ("train.eval_batch_size", "train.precision")

__all__ = ["config", "evaluate_run", "load_run", "sweep", "train_run"]


def config(source: str | Path | Mapping[str, Any] | RunConfig | None = None, *overrides: str) -> RunConfig:
    """A checked run config from a YAML file, plain data (a dict as the YAML would hold) or a
    config already built, then `key=value` overrides, as the command line takes them."""
    if isinstance(source, RunConfig):
        source = source.to_dict()
    if source is None or isinstance(source, (str, Path)):
        return load_config(source, overrides)
    if not isinstance(source, Mapping):
        raise ConfigError(f"a config is a YAML path, a mapping or a RunConfig, not {type(source).__name__}")
    data = copy.deepcopy(dict(source))  # overrides must not change the caller's data
    for assignment in overrides:
        apply_override(data, assignment)
    return config_from_dict(data)


def train_run(cfg: RunConfig | str | Path | Mapping[str, Any], out: str | Path, *, resume: bool = False,
              echo=None) -> dict[str, Any]:
    """Train one run into the folder `out` (resumably, as `modformer train --out OUT
    [--resume]`); returns its summary (validation and test metrics, parameters, speed).
    The run records the process's command line (the script's) as the command that made it."""
    cfg = cfg if isinstance(cfg, RunConfig) else config(cfg)
    return Trainer(cfg, Path(out), resume=resume, echo=echo).run()


def evaluate_run(path: str | Path, *overrides: str) -> dict[str, Any]:
    """Score a run directory's latest checkpoint (or a checkpoint file) on its task's test
    set, as `modformer eval`; overrides may change evaluation keys (batch size, precision)."""
    for assignment in overrides:  # what eval does not read is refused, not ignored
        key = assignment.partition("=")[0]
        if not (key.startswith("task.") or key in EVAL_KEYS):
            raise ConfigError(f"eval: {key} does not change the scoring of a trained model (eval reads task.* keys, "
                              f"{', '.join(EVAL_KEYS)}); drop it, or train again with it")
    model, cfg, task, step = load_run(path, overrides)
    result = evaluate(model, task, batch_size=cfg.train.eval_batch_size, precision=cfg.train.precision)
    result.update(task.model_metrics(result, model.parameter_counts()))
    return {"variant": cfg.model.variant, "model": model_label(cfg.model.variant, cfg.model.mixer),
            "task": cfg.task.name, "seed": cfg.train.seed, "step": step,
            "parameters": model.parameter_counts(), "test": result}


def sweep(config_path: str | Path, out: str | Path, *overrides: str, workers: int | None = None,
          launcher: str | None = None, slurm: Mapping[str, Any] | None = None, wait: bool = False,
          profiles: Sequence[str] = (), echo=None, command: Sequence[str] | None = None) -> Path | None:
    """Run (or continue) the sweep of a config with a `sweep` section into `out`, as
    `modformer sweep`; returns the path of its Markdown report. `profiles`: the file's named
    profiles to apply, in order, before `overrides` (e.g. ["budget"]). `launcher` and `slurm`
    (keys of sweep.slurm) override the file's; with launcher slurm the runs are submitted as
    one job array and, unless `wait`, None is returned at once (submit again to gather).
    `command`: the command line recorded as the one that started the sweep (commands.txt,
    the report's Reproduce section); by default the equivalent `modformer sweep` command."""
    spec = load_sweep(config_path, overrides, profiles)
    if workers is not None:
        spec.spec.workers = workers
    if launcher is not None:
        spec.spec.launcher = launcher
    if slurm:
        spec.spec.slurm = replace(spec.spec.slurm, **slurm)  # checked again by SlurmConfig.__post_init__
    spec.spec.__post_init__()
    if command is None:
        command = _sweep_command(config_path, out, overrides, workers=workers, launcher=launcher, slurm=slurm,
                                 wait=wait, profiles=profiles)
    runner = SweepRunner(spec, Path(out), echo=echo, command=command)
    if spec.spec.launcher == "slurm":
        if SlurmLauncher(runner, wait=wait).launch() is None:
            return None
    else:
        live = live_runs(Path(out), spec.spec.slurm.lost_after_s)
        if live:
            raise ModformerError(f"{len(live)} run(s) of {out} are queued or running in Slurm, e.g. {live[0]}: "
                                 f"follow them with --launcher slurm --wait, or scancel them, before training locally")
        runner.run()
    return write_report(Path(out))


def _sweep_command(config_path: str | Path, out: str | Path, overrides: Sequence[str], *, workers: int | None,
                   launcher: str | None, slurm: Mapping[str, Any] | None, wait: bool,
                   profiles: Sequence[str]) -> list[str]:
    """The `modformer sweep` command that runs what `sweep(...)` was called with: keys of
    `slurm` as overrides of sweep.slurm (JSON values, which YAML reads back as they were),
    after the caller's overrides, as `sweep` applies them after."""
    command = ["modformer", "sweep", str(config_path), *overrides,
               *(f"sweep.slurm.{key}={json.dumps(value)}" for key, value in (slurm or {}).items())]
    for profile in profiles:
        command += ["--profile", profile]
    if workers is not None:
        command += ["--workers", str(workers)]
    if launcher is not None:
        command += ["--launcher", launcher]
    if wait:
        command.append("--wait")
    return [*command, "--out", str(out)]
