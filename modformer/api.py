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
from typing import Any, Callable, Mapping, Sequence

from .config import RunConfig, config_from_dict, load_config
from .configtools import apply_override
from .errors import ConfigError, ModformerError
from .evaluate import evaluate, load_run
from .sweep.report import write_report
from .sweep.runner import SweepRunner
from .sweep.slurm import SlurmLauncher, live_runs
from .sweep.spec import load_sweep
from .train.trainer import Trainer
from .variants.base import run_label

# The keys of a run's config that `evaluate_run` reads besides the task's.
EVAL_KEYS = ("train.eval_batch_size", "train.precision")

__all__ = ["config", "evaluate_run", "load_run", "sweep", "train_run"]


def config(source: str | Path | Mapping[str, Any] | RunConfig | None = None, *overrides: str) -> RunConfig:
    """A checked run config from a YAML file, plain data or a config already built, then
    `key=value` overrides, as the command line takes them.

    Args:
        source: a YAML file's path; plain data (a dict as the YAML would hold, left unchanged);
            a `RunConfig` (copied); or None for the defaults.
        *overrides: dotted `key=value` assignments, applied in order, values read as YAML
            (e.g. `"train.steps=200"`, `"sweep.seeds=[0, 1]"`).

    Returns:
        The run config, every key checked (an unknown key or a wrong type raises `ConfigError`).
    """
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


def train_run(cfg: RunConfig | str | Path | Mapping[str, Any], out: str | Path, *, resume: bool | str = False,
              echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train one run into the folder `out`, resumably, as `modformer train --out OUT [--resume]`.

    The run records the process's command line (the script's) as the command that made it.

    The summary it returns, which summary.json records, has the keys:

    - `step`: the steps trained (`train.steps`).
    - `variant`, `task`, `seed`: the config's `model.variant`, `task.name`, `train.seed`.
    - `model`: what ran: the variant, and the mixer where it is not the variant's.
    - `parameters`: `{"total": ..., "trainable": ...}`, parameter counts.
    - `tokens_per_s`: mean training speed over the logged steps.
    - `mfu`: `{"flops_per_token", "flops_of", "seq_len", "matmul_peak_gflops", "mfu"}`:
        the model's training FLOPs per token (and whose they are), the matrix-multiply peak
        measured in the run, and the fraction of it reached.
    - `validation`: the last validation evaluation's metrics (as `test`, without the
        model metrics).
    - `test`: the test set's metrics: the task's (`accuracy`, `token_accuracy`, `loss`
        by default), `examples`, `slices` (`{slice name: {value: {"accuracy",
        "token_accuracy", "examples"}}}`), and metrics of the task that need the model's
        size (e.g. memorization's bits per parameter).
    - `code_version`: the package version and git commit that trained it.
    - `construction`: how its construction names it: `"corrected"`, or the label of the
        construction `model.construction` names (e.g. the random-attention paper's
        `"reference (SCRIPT) except ..."`, every departure from that script named).
    - `budget`: what the run trained on (keys `sequences`: steps x batch, `amount`: the
        same in the task's unit, `unit`: sequences, or tokens for language modelling,
        `width`: d_model); a paper's report states it against that paper's scripts.
    - `precision`: the precision it trained in (what `train.precision: auto` chose).

    Args:
        cfg: the run config, or what `config` reads one from (a YAML path, plain data).
        out: the run folder; it receives config.yaml, metrics.jsonl, checkpoints/, run.json,
            summary.json and the plots.
        resume: False: start a new run (`out` must hold none); True: continue the run in `out`
            from its latest checkpoint (from step 0 if it was stopped before its first), an
            error where `out` holds no run; "if_any": continue the run in `out` if it holds one,
            else start it there (what a sweep's runs do).
        echo: where progress messages go (one string each); by default, standard error.

    Returns:
        The run's summary, a dict with the keys above.
    """
    cfg = cfg if isinstance(cfg, RunConfig) else config(cfg)
    return Trainer(cfg, Path(out), resume=resume, echo=echo).run()


def evaluate_run(path: str | Path, *overrides: str) -> dict[str, Any]:
    """Score a run directory's latest checkpoint (or a checkpoint file) on its task's test
    set, as `modformer eval`.

    Args:
        path: a run directory (its latest checkpoint is scored) or a checkpoint file.
        *overrides: `key=value` changes of what evaluation reads: `task.*` keys (e.g. a
            larger `task.test_size`), `train.eval_batch_size`, `train.precision`; any other key
            raises `ConfigError`.

    Returns:
        `{"variant", "model", "task", "seed", "step", "parameters", "test"}`, with the meanings
            of `train_run`'s summary keys of those names.
    """
    for assignment in overrides:  # what eval does not read is refused, not ignored
        key = assignment.partition("=")[0]
        if not (key.startswith("task.") or key in EVAL_KEYS):
            raise ConfigError(f"eval: {key} does not change the scoring of a trained model (eval reads task.* keys, "
                              f"{', '.join(EVAL_KEYS)}); drop it, or train again with it")
    model, cfg, task, step = load_run(path, overrides)
    result = evaluate(model, task, batch_size=cfg.train.eval_batch_size, precision=cfg.train.precision)
    result.update(task.model_metrics(result, model.parameter_counts()))
    return {"variant": cfg.model.variant, "model": run_label(cfg.model),
            "task": cfg.task.name, "seed": cfg.train.seed, "step": step,
            "parameters": model.parameter_counts(), "test": result}


def sweep(config_path: str | Path, out: str | Path, *overrides: str, workers: int | None = None,
          launcher: str | None = None, slurm: Mapping[str, Any] | None = None, wait: bool = False,
          profiles: Sequence[str] = (), echo: Callable[[str], None] | None = None,
          command: Sequence[str] | None = None, amend: str | None = None, plan_only: bool = False) -> Path | None:
    """Run (or continue) the sweep of a config with a `sweep` section into `out`, as
    `modformer sweep`: each run trains in its own process, and finished runs are not
    trained again.

    Args:
        config_path: a YAML run config with a `sweep` section.
        out: the sweep folder (sweep.yaml, results.jsonl, runs/, the report).
        *overrides: dotted `key=value` assignments, as for `config` (`sweep.*` keys too).
        workers: runs at once; overrides `sweep.workers`.
        launcher: `"local"` or `"slurm"`; overrides `sweep.launcher`.
        slurm: keys of `sweep.slurm` (e.g. `{"partition": "gpu", "time": "2:00:00"}`),
            overriding the file's.
        wait: with launcher slurm, follow the job array to its end, then gather and report.
        profiles: the file's named profiles to apply, in order, before `overrides`
            (e.g. `["budget"]`).
        echo: where progress messages go (one string each); by default, standard error.
        command: the command line recorded as the one that started the sweep (commands.txt,
            the report's Reproduce section); by default the equivalent `modformer sweep`
            command.
        amend: why the sweep's plan changes (more arms, seeds or grid values, another metric),
            recorded as an amendment in plan.yaml (modformer/sweep/plan.py); a change without
            it is refused.
        plan_only: record the sweep and its plan (or the amendment) and start no run.

    Returns:
        The path of the sweep's Markdown report (report.md in `out`); plan.yaml's with
            `plan_only`; None where launcher slurm submitted the runs without `wait` (call again
            to gather them once they are done).
    """
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
                                 wait=wait, profiles=profiles, amend=amend, plan_only=plan_only)
    runner = SweepRunner(spec, Path(out), echo=echo, command=command, amend=amend)
    if plan_only:
        return runner.record_plan()
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
                   profiles: Sequence[str], amend: str | None = None, plan_only: bool = False) -> list[str]:
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
    if amend is not None:
        command += ["--amend", amend]
    if plan_only:
        command.append("--plan-only")
    return [*command, "--out", str(out)]
