"""Running a sweep: each run in its own process (`modformer train`, or its kind's command,
modformer/sweep/kinds.py), several at once, resumable.

Layout of a sweep directory::

    sweep.yaml                    the sweep as resolved (base config + sweep section)
    results.jsonl                 append-only: one record per finished or failed run
    runs/<variant>/<point>/seed<s>/   each run's own run directory
    configs/..., logs/...         the config each run was started with, and its output

A finished run (its `summary.json` exists) is never run again; a run with checkpoints
but no summary continues (`train --resume-if-any`). So a killed sweep, started again with the same
command, picks up where it stopped.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from ..configtools import get_dotted, set_dotted
from ..errors import Interrupted, ModformerError
from ..files import atomic_write_text, durable_append, reserve
from ..lock import take_lock
from ..train.records import read_records
from ..version import RECORDS_FORMAT
from .kinds import check_format, python_command, read_summary, run_kind, saved_sweep
from .plan import amend_plan, check_plan, fix_plan
from .spec import RunSpec, Sweep

# Sweep keys that may change between invocations (verdict: as a plan's amendment, modformer/sweep/plan.py).
IGNORED_WHEN_RESUMING = {"workers", "launcher", "slurm", "paper", "verdict"}
# Disk set aside past the end of each run's log when it is started (files.reserve).
LOG_RESERVE = 64 * 1024


def extends(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether sweep `new` is sweep `old` with more arms, seeds or values of the same grid
    axes, and nothing else changed: every run of `old` is a run of `new`, in the same folder
    (so a budget curve, say, is extended in place and only its new points train)."""
    def within(a: list, b: list) -> bool:  # values may be lists (unhashable): no sets
        return all(x in b for x in a)

    def arms(variants: list | dict | None) -> list:  # an arm and its settings, in either form
        return [[v, {}] for v in variants or []] if not isinstance(variants, dict) else \
            [[k, v or {}] for k, v in variants.items()]

    def without(d: dict, keys: tuple[str, ...]) -> dict:
        return {k: v for k, v in d.items() if k not in keys}

    o, n = old.get("sweep", {}), new.get("sweep", {})
    growing = ("variants", "seeds", "grid")
    o_grid, n_grid = o.get("grid") or {}, n.get("grid") or {}
    return (without(old, ("sweep",)) == without(new, ("sweep",)) and without(o, growing) == without(n, growing)
            and list(o_grid) == list(n_grid) and all(within(o_grid[k], n_grid[k]) for k in o_grid)
            and within(arms(o.get("variants")), arms(n.get("variants")))
            and within(o.get("seeds") or [], n.get("seeds") or []))


def read_results(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    """run id -> its latest record in results.jsonl (a folder of another records format refused).
    A line that is no record of a run's outcome (no run id, no status, a "done" without its
    summary: damaged) is left out, and its run counts as not recorded: the sweep records it
    again from its summary, or runs it."""
    check_format(sweep_dir)
    path = Path(sweep_dir) / "results.jsonl"
    if not path.exists():
        return {}
    return {r["run_id"]: r for r in read_records(path) if isinstance(r.get("run_id"), str) and (
        r.get("status") == "failed" or r.get("status") == "done" and isinstance(r.get("summary"), dict))}


def run_config(sweep_dir: Path, record: dict[str, Any]) -> dict[str, Any] | None:
    """The config one run of a sweep trained with (its run folder's config.yaml, as plain
    data), or None where the folder is gone."""
    path = Path(sweep_dir) / record.get("run_dir", f"runs/{record['run_id']}") / "config.yaml"
    return yaml.safe_load(path.read_text()) or {} if path.exists() else None


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


class SweepRunner:
    def __init__(self, sweep: Sweep, out: str | Path, *, echo: Callable[[str], None] | None = None,
                 command: Sequence[str] | None = None, amend: str | None = None):
        self.sweep = sweep
        self.amend = amend  # why this start changes the sweep's plan (modformer/sweep/plan.py)
        self._amended = False
        self.out = Path(out)
        # The command recorded in commands.txt as the one that (re)started the sweep; by
        # default, the one that continues it from its resolved sweep.yaml.
        self.command = list(command) if command is not None else [
            "modformer", "sweep", str(self.out / "sweep.yaml"), "--out", str(self.out)]
        self.echo = echo or (lambda msg: print(msg, file=sys.stderr))
        self._lock = threading.Lock()
        self._children: set[subprocess.Popen] = set()
        self._stopping = False
        self._probed = False
        self.kind = run_kind(sweep.spec.experiment)

    def _check_same_sweep(self) -> None:
        saved = self.out / "sweep.yaml"
        mine = self.sweep.to_dict()
        if saved.exists():
            old = saved_sweep(self.out)  # one line where it cannot be read, or is of another format
            old.pop("format", None)  # the records' format, not the sweep's

            def strip(d: dict[str, Any]) -> dict[str, Any]:  # what resuming ignores
                return {**d, "sweep": {k: v for k, v in d.get("sweep", {}).items() if k not in IGNORED_WHEN_RESUMING}}

            if not extends(strip(old), strip(mine)):  # the same sweep extends itself
                raise ModformerError(f"{self.out} holds a different sweep (compare {saved}); use another "
                                     f"--out, or the same sweep file and overrides (more variants, seeds "
                                     f"or values of the same grid axes may be added)")
            amended = check_plan(self.out, old["sweep"], mine["sweep"], None if self._amended else self.amend)
            if self.amend and not amended and not self._amended:
                raise ModformerError(f"--amend: this command changes nothing of the plan of {self.out}; leave --amend "
                                     f"out")
        elif (self.out / "config.yaml").exists() or (self.out / "metrics.jsonl").exists():
            raise ModformerError(f"{self.out} is a run's folder (config.yaml, metrics.jsonl), not a sweep's: give "
                                 f"the sweep its own --out")
        self._create_folder()
        first = not saved.exists()
        atomic_write_text(saved, yaml.safe_dump({"format": RECORDS_FORMAT, **mine}, sort_keys=False))
        if first:
            fix_plan(self.out, mine["sweep"])
        elif amended:
            amend_plan(self.out, old["sweep"], mine["sweep"], self.amend, amended)
            self._amended = True
            self.echo(f"plan of {self.out} amended: {'; '.join(amended)}")
        durable_append(self.out / "commands.txt", shlex.join(self.command) + "\n")  # how it was (re)started

    def _create_folder(self) -> None:
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ModformerError(f"cannot create sweep folder {self.out}: {e.strerror or e}") from None

    def run_dir(self, run: RunSpec) -> Path:
        return self.out / "runs" / run.run_id

    def _record(self, record: dict[str, Any]) -> None:
        with self._lock:
            append_result(self.out, record)

    def base_record(self, run: RunSpec) -> dict[str, Any]:
        return {"run_id": run.run_id, "variant": run.variant, "point": dict(run.point), "seed": run.seed,
                "run_dir": str(self.run_dir(run).relative_to(self.out))}

    def prepare(self, run: RunSpec, threads: int) -> tuple[list[str], dict[str, str], Path]:
        """Write the config `run` starts with; return its command (`modformer train`, or its
        kind's), the environment variables it needs beyond the caller's, and its log file.
        Every launcher starts a run this way: a local worker here, a Slurm job on its node."""
        run_dir = self.run_dir(run)
        config = run.config.to_dict()
        train = config.get("train") or {}
        if "progress" in train:
            train["progress"] = False
        if train.get("log_to") and train.get("log_group") is None:
            train["log_group"] = self.out.name  # the trackers group a sweep's runs
        if get_dotted(config, self.kind.threads_key) is None:
            # A run keeps the thread count it started with: another count sums floats in
            # another order, and its resumption would no longer be bit-identical.
            started = run_dir / "config.yaml"
            try:
                set_dotted(config, self.kind.threads_key, get_dotted(yaml.safe_load(started.read_text()),
                                                                     self.kind.threads_key, strict=True)
                           if started.exists() else threads, "train")
            except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
                raise ModformerError(f"cannot read the config {started} of a started run "
                                     f"({e.__class__.__name__}); remove that run's folder to retrain it") from None
        cfg_path = self.out / "configs" / f"{run.run_id}.yaml"
        log_path = self.out / "logs" / f"{run.run_id}.log"
        cfg_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cfg_path, yaml.safe_dump(config, sort_keys=False))
        # Room for the run's last words: should the disk be full when it runs (a Slurm job
        # may start hours later), its log still takes the line that says so.
        reserve(log_path, LOG_RESERVE)
        cmd = python_command(self.kind.command(cfg_path, run_dir))
        return cmd, {"OMP_NUM_THREADS": str(get_dotted(config, self.kind.threads_key))}, log_path

    def _run_one(self, run: RunSpec, threads: int) -> None:
        """Run `run`'s command (its kind's) in its own process, and record how it ended."""
        if self._stopping:
            return
        cmd, env, log_path = self.prepare(run, threads)
        with open(log_path, "a") as log:
            # Started under the lock that `stop` takes: a run is either never started or
            # registered in time to be asked to stop. Own session: a Ctrl-C reaches the
            # children only through `stop`, once, so each saves a checkpoint.
            with self._lock:
                if self._stopping:
                    return
                self.echo(f"start  {run.run_id}")
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**os.environ, **env})
                self._children.add(proc)
            code = proc.wait()
            with self._lock:
                self._children.discard(proc)
        with self._lock:
            record_outcome(self.out, self.base_record(run), code, log_path, self.echo, self.kind.describe,
                           self.kind.started)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            for proc in self._children:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)

    def pending(self) -> tuple[list[RunSpec], list[RunSpec]]:
        """(every run, the unfinished ones): runs that finished unrecorded are recorded now,
        and runs that start from missing weights are refused before anything starts."""
        runs = self.sweep.runs()
        if not self._probed:  # once, before the sweep folder or any run exists
            self.kind.check(runs, self.run_dir)
            self._probed = True
        self._check_same_sweep()
        records = read_results(self.out)
        unknown = sorted(set(records) - {run.run_id for run in runs})
        if unknown:  # e.g. an extended grid whose point names changed: its runs would be lost from the report
            raise ModformerError(f"{self.out} holds runs this sweep does not name (e.g. {unknown[0]}); use another --out")
        done = {k for k, r in records.items() if r["status"] == "done"}
        todo = []
        for run in runs:
            if run.run_id in done:
                continue
            summary = read_summary(self.run_dir(run))
            if summary is not None:  # finished, but the sweep was killed before recording it
                self._record({**self.base_record(run), "status": "done", "summary": summary})
                continue
            todo.append(run)
        return runs, todo

    def run(self) -> dict[str, dict[str, Any]]:
        """Run every unfinished run, each by its kind's command; return the results by run id.
        One local sweep at a time runs a folder (its lock `sweep.lock`): a second would score
        the finished runs again, be refused each run's own lock and share each run's log."""
        if not self._probed:  # every config checked, and the models probed, before the folder exists
            self.kind.check(self.sweep.runs(), self.run_dir)
            self._probed = True
        self._create_folder()
        with take_lock(self.out / "sweep.lock", wait=False,
                       busy="{path}: another sweep is running this folder ({holder}); let it finish, or follow it "
                            "with modformer sweep --status"):
            return self._run()

    def record_plan(self) -> Path:
        """Record the sweep (sweep.yaml), its plan (plan.yaml, or an amendment where `amend`
        says why) and the command, and start nothing: a plan fixed before its first run, or
        the parameters of its verdicts declared after its runs. Returns plan.yaml's path."""
        self.sweep.runs()  # every run's config checked
        self._create_folder()
        with take_lock(self.out / "sweep.lock", wait=False,
                       busy="{path}: another sweep is running this folder ({holder}); record its plan when it ends"):
            self._check_same_sweep()
        return self.out / "plan.yaml"

    def _run(self) -> dict[str, dict[str, Any]]:
        runs, todo = self.pending()
        workers = self.sweep.spec.workers
        threads = max(1, (os.cpu_count() or 1) // workers)
        key = self.kind.threads_key
        chosen = [get_dotted(run.config.to_dict(), key) for run in todo]
        fixed = sorted(set(chosen) - {None})  # where the config sets them
        default = None in chosen or not todo
        each = " or ".join([*(f"{t} ({key})" for t in fixed), *([str(threads)] if default else [])]) + \
            " thread(s)"
        self.echo(f"sweep {self.out}: {len(runs)} runs, {len(runs) - len(todo)} already finished, "
                  f"{len(todo)} to run with {workers} worker(s) of {each}")
        pool = ThreadPoolExecutor(max_workers=workers)
        futures = [pool.submit(self._run_one, run, threads) for run in todo]
        # Explicit handlers: a sweep started in the background inherits an ignored SIGINT.
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, _raise_keyboard_interrupt)
        try:
            for future in futures:
                future.result()
        except KeyboardInterrupt:
            self.echo("interrupted: asking the runs in progress to save and stop ...")
            self.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            raise Interrupted(f"sweep interrupted; run the same command again to continue {self.out}") from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        pool.shutdown(wait=True)
        return checked_results(self.out)


def checked_results(out: Path) -> dict[str, dict[str, Any]]:
    """The results of a sweep whose launcher has finished; one clear error if some failed."""
    results = read_results(out)
    failed = [k for k, r in results.items() if r["status"] == "failed"]
    if failed:
        raise ModformerError(f"{len(failed)} run(s) failed, e.g. {failed[0]}: {results[failed[0]]['error']} "
                             f"(logs under {Path(out) / 'logs'}; rerun the sweep to retry them)")
    return results


def append_result(out: Path, record: dict[str, Any]) -> None:
    """Append one record to results.jsonl in a single O_APPEND write, so that the line stays
    whole beside another process's (two `modformer sweep` commands gathering one Slurm sweep),
    and durably (`files.durable_append`)."""
    durable_append(Path(out) / "results.jsonl", json.dumps(record) + "\n")


def done_line(run_id: str, summary: dict[str, Any], describe: Callable[[dict[str, Any]], str]) -> str:
    outcome = describe(summary)
    return f"done   {run_id}" + (f": {outcome}" if outcome else "")


def record_outcome(out: Path, base: dict[str, Any], code: int, log_path: Path,
                   echo: Callable[[str], None], describe: Callable[[dict[str, Any]], str],
                   started: Callable[[Path], str] = lambda run_dir: "") -> None:
    """Record how one run's command ended (exit status `code`): done with its summary, or
    failed with the last line of its log (`describe`: the run kind's words on a summary;
    `started`: its words on what a stopped run kept). An interrupted run (130) is not
    recorded: started again, it continues from what it kept, or from the start."""
    run_id, run_dir = base["run_id"], Path(out) / base["run_dir"]
    # A summary is written last (plots drawn): with one, the run is done, whatever ended its
    # process then (a Ctrl-C, a kill just after).
    summary = read_summary(run_dir)
    if summary is not None:
        append_result(out, {**base, "status": "done", "summary": summary})
        echo(done_line(run_id, summary, describe))
    elif code == 130:
        kept = started(run_dir)
        echo(f"paused {run_id} ({kept} kept)" if kept else f"paused {run_id} (no checkpoint yet: it starts again)")
    else:
        tail = log_path.read_text().strip().splitlines()[-1:] if log_path.exists() else []
        error = (tail or ["(no output)"])[0]
        append_result(out, {**base, "status": "failed", "exit_code": code, "error": error})
        echo(f"FAILED {run_id} (exit {code}): {error}  [log: {log_path}]")
