"""Launching a sweep on a Slurm cluster: the unfinished runs as one job array, through submitit.

Slurm and submitit do the scheduling; this module only describes the runs and gathers what
they leave. Each array task runs on its node exactly what a local worker runs
(`SweepRunner.prepare`: `python -c RUN_CLI train CONFIG --out RUN_DIR --resume-if-any` (kinds.python_command), or its run
kind's command (modformer/sweep/kinds.py), in the
submitting folder, with the submitting PYTHONPATH, so parts named by import path import there
as they do here; the node imports no modformer beyond that). The submitting side records each
ended job in the sweep's results.jsonl when it follows (--wait) or submits again. So the same
sweep folder resumes, gathers and reports as a local sweep does, whichever launcher ran which run.

Besides the local layout (modformer/sweep/runner.py) a Slurm sweep folder holds::

    slurm/jobs.jsonl              append-only: one line per submitted run (run id, job id, folder)
    slurm/submission-N/           submitit's files of the N-th submission (a fresh folder each
                                  time: Slurm's job ids may restart, and submitit would take an
                                  old job's files for a new one's)
    slurm/accounting.json         each job's last reported state, and since when sacct has been
                                  unreachable (modformer/sweep/slurm_states.py)
    slurm/submit.lock             held while one submitter reads the jobs' states, calls sbatch
                                  and appends to jobs.jsonl (modformer/lock.py)

A job that ends with its run's summary written is recorded as done; any other (a failed
training, cancelled, out of time, its node lost) as failed with its Slurm state, its last
checkpoint and, for a failed training, the last line of the run's log; submitted again, the
run continues from its last checkpoint. While following, a run whose job ran out of time or
lost its node is submitted again at once (`sweep.slurm.resubmit` times at most). A job counts
as ended only on a state sacct or squeue reported: while neither can say (accounting down),
it is UNKNOWN, which counts as live. Runs whose jobs are live are never submitted twice, and
two submitters of one sweep take turns (slurm/submit.lock); the run folder's own lock
(modformer/lock.py) keeps a second training out whatever else goes wrong.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from ..errors import ModformerError
from ..files import durable_append
from ..lock import take_lock
from ..train.records import read_records
from .kinds import RunKind, kind_of, read_summary
from .runner import SweepRunner, append_result, checked_results, done_line, read_results
from .slurm_states import LIVE, LOST_AFTER_S, query_states
from .spec import RunSpec

# Slurm states of a job that ended through no fault of its run: submitted again, the run continues.
# (PREEMPTED is in LIVE: Slurm may requeue the job itself, and a run must never train twice at once.)
RESUMABLE = {"TIMEOUT", "NODE_FAIL", "BOOT_FAIL"}

# Slurm's warning before a job's time limit, in place of submitit's USR2: submitit's handler of
# USR2 raises in a job whose function cannot be checkpointed (ours: a command), so a job whose
# run finished in its last 90 s ended FAILED. SIGURG is ignored by every process by default:
# the warning does nothing, and the SIGTERM at the limit is what makes the training save.
WARNING_SIGNAL = "URG@90"

# States of a job stopped from outside (besides RESUMABLE): the log's last line is whatever the
# training was doing, not why it ended.
KILLED = RESUMABLE | {"CANCELLED", "PREEMPTED", "LOST", "DEADLINE"}


def import_submitit():
    try:
        import submitit
    except ImportError:
        raise ModformerError("the slurm launcher needs submitit: pip install 'modformer[slurm]'") from None
    return submitit


def job_command(cmd: list[str], env: dict[str, str], log_path: Path) -> list[str]:
    """The command an array task runs on its node: the run's command (`modformer train`, or its kind's) with
    its environment added to the node's (which holds what Slurm sets there, e.g. the GPUs),
    its output appended to the run's log as a local worker's is."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # Slurm's warning signal before a time limit is SIGURG (WARNING_SIGNAL); USR2, should
    # sweep.slurm.sbatch ask for it again, would kill the training unsaved, while the SIGTERM
    # at the limit lets it save a checkpoint first.
    return ["bash", "-c", f"trap '' USR2; export {exports}; exec {shlex.join(cmd)} >>{shlex.quote(str(log_path))} 2>&1"]


def submitted_jobs(out: Path) -> dict[str, dict[str, Any]]:
    """run id -> its latest submission (job id, submitit folder), from slurm/jobs.jsonl."""
    path = Path(out) / "slurm" / "jobs.jsonl"
    return {r["run_id"]: r for r in read_records(path)} if path.exists() else {}


def job_states(out: Path, jobs: dict[str, dict[str, Any]], *, lost_after_s: float = LOST_AFTER_S,
               echo: Callable[[str], None] | None = None) -> dict[str, str]:
    """run id -> the Slurm state of its latest job, as sacct or squeue reported it; UNKNOWN
    (live) where neither does (modformer/sweep/slurm_states.py)."""
    return query_states(out, jobs, lost_after_s=lost_after_s, echo=echo)


def gather(out: Path, states: dict[str, str], echo: Callable[[str], None], kind: RunKind | None = None) -> None:
    """Record each run whose latest job has ended (by `states`) and is not recorded yet: done
    where it wrote its summary, else failed with its Slurm state, its last checkpoint and, for
    a training that failed, the last line of its log (a job killed by scancel, its time limit
    or a lost node stopped a training that had nothing to say), or that the log is empty: the
    run could not write even its error there (a disk full past the log's reserve, read-only
    or failing). `kind`: what the runs are (None: as the folder's sweep.yaml says)."""
    kind = kind or kind_of(out)
    jobs, results = submitted_jobs(out), read_results(out)
    for run_id, state in states.items():
        job, record = jobs[run_id], results.get(run_id, {})
        if state in LIVE or record.get("slurm_job") == job["job_id"] or record.get("status") == "done":
            continue
        base = {**job["base"], "slurm_job": job["job_id"]}
        run_dir = Path(out) / base["run_dir"]
        summary = read_summary(run_dir)
        if summary is not None:
            append_result(out, {**base, "status": "done", "summary": summary})
            echo(done_line(run_id, summary, kind.describe))
            continue
        log = Path(out) / "logs" / f"{run_id}.log"
        started = kind.started(run_dir)
        saved = f"last {started}" if started else "no checkpoint yet"
        tail = log.read_text().strip().splitlines()[-1:] if log.exists() else []
        if state in KILLED:
            said = ""
        elif tail:
            said = f": {tail[0]}"
        else:  # a failed run says why in its log, unless it could not write there at all
            said = ": nothing in its log, which the run could not write (its disk read-only, full or failing?)"
        error = f"Slurm job {job['job_id']} ended {state}{said}; {saved}, kept: submit the sweep again to continue it"
        append_result(out, {**base, "status": "failed", "slurm_state": state, "error": error})
        echo(f"FAILED {run_id}: {error}  [log: {log}]")


def live_runs(out: Path, lost_after_s: float = LOST_AFTER_S) -> list[str]:
    """Runs of the sweep in `out` whose latest Slurm job may still run, UNKNOWN ones included
    (none for a sweep never submitted to Slurm): a local launcher must not train them now."""
    jobs = submitted_jobs(out)
    states = job_states(out, jobs, lost_after_s=lost_after_s) if jobs else {}
    return [run_id for run_id, state in states.items() if state in LIVE]


def submission_lock(out: Path):
    """The sweep folder's submission lock, waited for: reading which runs are live, calling
    sbatch and appending to slurm/jobs.jsonl is one step, so that two `modformer sweep`
    commands submitting at once never both submit a run (the second sees the first's jobs)."""
    (Path(out) / "slurm").mkdir(parents=True, exist_ok=True)
    return take_lock(Path(out) / "slurm" / "submit.lock", wait=True)


class SlurmLauncher:
    """Submits a sweep's unfinished runs as one job array and, with `wait`, follows them."""

    def __init__(self, runner: SweepRunner, *, wait: bool = False):
        self.runner = runner
        self.out = runner.out
        self.config = runner.sweep.spec.slurm
        self.wait = wait
        self.echo = runner.echo

    def _executor(self, folder: Path):
        submitit = import_submitit()
        c = self.config
        executor = submitit.SlurmExecutor(folder=folder)
        # The time limit in whole minutes: submitit's handler of the warning signal computes with it.
        params: dict[str, Any] = {"time": c.minutes(), "cpus_per_task": c.cpus_per_run, "array_parallelism":
                                  c.array_parallelism, "job_name": f"modformer-{self.out.name}",
                                  "additional_parameters": {"signal": WARNING_SIGNAL, **c.sbatch}}
        for key, value in (("partition", c.partition), ("mem", c.mem), ("account", c.account), ("qos", c.qos),
                           ("constraint", c.constraint), ("setup", c.setup or None),
                           ("gpus_per_node", c.gpus_per_run or None)):
            if value is not None:
                params[key] = value
        executor.update_parameters(**params)
        return executor

    def _submit(self, todo: list[RunSpec]) -> dict[str, dict[str, Any]]:
        """Submit `todo` as one array; return run id -> its line of slurm/jobs.jsonl."""
        slurm_dir = self.out / "slurm"
        slurm_dir.mkdir(parents=True, exist_ok=True)
        number = 1 + sum(1 for p in slurm_dir.glob("submission-*") if p.is_dir())
        folder = slurm_dir / f"submission-{number}"
        submitit = import_submitit()
        calls = []
        for run in todo:
            cmd, env, log_path = self.runner.prepare(run, threads=self.config.cpus_per_run)
            # The submitting folder and PYTHONPATH: parts named by import path import there as here.
            env = {**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
            calls.append(submitit.helpers.CommandFunction(job_command(cmd, env, log_path), verbose=False,
                                                          cwd=os.getcwd()))
        executor = self._executor(folder)
        try:
            with executor.batch():
                handles = [executor.submit(call) for call in calls]
        except (submitit.core.utils.FailedJobError, OSError) as e:
            first = str(e).strip().splitlines()[:1] or [e.__class__.__name__]
            raise ModformerError(f"sbatch refused the sweep's job array: {first[0]}") from None
        where = str(folder.relative_to(self.out))
        lines = {run.run_id: {"run_id": run.run_id, "job_id": handle.job_id, "folder": where,
                              "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "submitted_s": time.time(),
                              "base": self.runner.base_record(run)}
                 for run, handle in zip(todo, handles)}
        durable_append(slurm_dir / "jobs.jsonl", "".join(json.dumps(line) + "\n" for line in lines.values()))
        return lines

    def launch(self) -> dict[str, dict[str, Any]] | None:
        """Submit every unfinished run not already queued or running; with `wait`, follow
        every job of the sweep to its end. Returns the results once every run has ended, else
        None (submitted, not followed)."""
        import_submitit()  # before anything is written
        runs, todo = self.runner.pending()
        with submission_lock(self.out):  # held from reading the jobs' states to recording the new jobs
            jobs = submitted_jobs(self.out)
            states = self._states({r.run_id: jobs[r.run_id] for r in todo if r.run_id in jobs})
            gather(self.out, states, self.echo, self.runner.kind)
            live = {run_id for run_id, state in states.items() if state in LIVE}
            # A job that ended since pending() may have finished its run (gathered just now as done).
            done = {run_id for run_id, r in read_results(self.out).items() if r["status"] == "done"}
            finished = len(runs) - len(todo) + sum(run.run_id in done for run in todo)
            submit = [run for run in todo if run.run_id not in live | done]
            self.echo(f"sweep {self.out}: {len(runs)} runs, {finished} already finished, "
                      f"{len(live)} queued or running in Slurm, {len(submit)} to submit")
            if submit:
                lines = self._submit(submit)
                array = sorted({line["job_id"].split("_")[0] for line in lines.values()})
                self.echo(f"submitted {len(submit)} run(s) as Slurm job array {', '.join(array)} "
                          f"(folder {self.out / 'slurm'})")
        following = live | {run.run_id for run in submit}
        if not following:  # every run has ended: gathered, as a local sweep ends
            return checked_results(self.out)
        if not self.wait:
            self.echo(f"follow with: modformer sweep --status {self.out}; when every run has ended, submit the "
                      f"same sweep again (or with --wait) to continue stopped runs and write the report")
            return None
        self._follow(following)
        return checked_results(self.out)

    def _follow(self, run_ids: set[str]) -> None:
        """Wait until the latest job of every run in `run_ids` has ended, recording each; a run
        whose job ended in a RESUMABLE state is submitted again, up to `resubmit` times."""
        left, resubmitted = set(run_ids), Counter()
        while left:
            time.sleep(self.config.poll_seconds)
            jobs = submitted_jobs(self.out)
            states = self._states({run_id: jobs[run_id] for run_id in left})
            gather(self.out, states, self.echo, self.runner.kind)
            ended = {run_id for run_id, state in states.items() if state not in LIVE}
            left -= ended
            resumable = [r for r in sorted(ended) if states[r] in RESUMABLE and resubmitted[r] < self.config.resubmit]
            if not resumable:
                continue
            with submission_lock(self.out):
                # Another follower may have submitted it again already: then follow its job.
                latest = submitted_jobs(self.out)
                taken = {r for r in resumable if latest[r]["job_id"] != jobs[r]["job_id"]}
                left |= taken
                unfinished = {run.run_id: run for run in self.runner.pending()[1]}
                again = [unfinished[r] for r in resumable if r in unfinished and r not in taken]
                if again:
                    self._submit(again)
            for run in again:
                resubmitted[run.run_id] += 1
                self.echo(f"submitted {run.run_id} again ({states[run.run_id]}, time "
                          f"{resubmitted[run.run_id]} of {self.config.resubmit}): it continues from its "
                          f"last checkpoint")
            left |= {run.run_id for run in again}

    def _states(self, jobs: dict[str, dict[str, Any]]) -> dict[str, str]:
        return job_states(self.out, jobs, lost_after_s=self.config.lost_after_s, echo=self.echo)
