"""Job states only as Slurm reported them, and one submitter at a time, against stand-ins
for Slurm's commands (small scripts on PATH that print what a test sets, or fail as sacct
does when slurmdbd is down). The real cluster's versions are in tests/test_sweep_slurm.py."""

import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from modformer.api import sweep
from modformer.errors import ModformerError
from modformer.sweep import slurm as slurm_module
from modformer.sweep.runner import SweepRunner
from modformer.sweep.slurm_config import time_minutes
from modformer.sweep.slurm_states import expand_array, read_accounting
from modformer.sweep.spec import load_sweep
from modformer.sweep.status import run_statuses

SWEEP = {
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
    "task": {"name": "retrieval", "n_pairs": 3, "test_size": 100, "validation_size": 50},
    "train": {"steps": 20, "batch_size": 8, "threads": 1},
    "sweep": {"variants": ["standard", "frozen_qk"], "seeds": [0, 1], "launcher": "slurm",
              "slurm": {"poll_seconds": 0.01, "lost_after_s": 5, "time": "0:10:00"}},
}

# Each command prints the file of its name under $FAKE, or fails with its `.fail` file's text.
# sbatch also appends a line to sbatch.calls and takes 0.5 s, so that two submitters overlap.
SCRIPT = """#!/bin/sh
name=$(basename "$0")
if [ -f "$FAKE/$name.fail" ]; then cat "$FAKE/$name.fail" >&2; exit 1; fi
if [ "$name" = sbatch ]; then echo call >> "$FAKE/sbatch.calls"; sleep 0.5; fi
[ -f "$FAKE/$name" ] && cat "$FAKE/$name"
exit 0
"""
DB_DOWN = "sacct: error: Problem talking to the database: Connection refused\n"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The folder whose files the stand-in commands print; they are first on PATH."""
    folder = tmp_path / "fake"
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("sacct", "squeue", "sbatch", "srun", "scancel"):
        (bin_dir / name).write_text(SCRIPT)
        (bin_dir / name).chmod(0o755)
    (folder / "sbatch").write_text("Submitted batch job 52\n")
    monkeypatch.setenv("FAKE", str(folder))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return folder


def submitted(tmp_path: Path, submitted_s: float) -> tuple[Path, dict]:
    """A sweep folder whose 4 runs were submitted as jobs 52_0..52_3 at `submitted_s`."""
    out = tmp_path / "out"
    runner = SweepRunner(load_sweep(write(tmp_path)), out, echo=lambda m: None)
    runs, _ = runner.pending()
    (out / "slurm").mkdir()
    jobs = {run.run_id: {"run_id": run.run_id, "job_id": f"52_{i}", "folder": "slurm/submission-1",
                         "submitted_s": submitted_s, "base": runner.base_record(run)} for i, run in enumerate(runs)}
    (out / "slurm" / "jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs.values()))
    return out, jobs


def test_an_accounting_outage_never_makes_a_job_lost_and_nothing_is_trained_again(tmp_path, fake):
    out, jobs = submitted(tmp_path, submitted_s=0.0)  # long past lost_after_s
    ids = list(jobs)
    (fake / "sacct").write_text("52_0|COMPLETED\n52_[1-3%2]|PENDING\n")  # a throttled array's pending tasks
    assert slurm_module.job_states(out, jobs) == dict(zip(ids, ["COMPLETED", "PENDING", "PENDING", "PENDING"]))

    # slurmdbd stops: sacct fails. squeue still lists one task; the others are no longer
    # listed by anyone. None of them is taken for ended; the finished one stays finished.
    (fake / "sacct.fail").write_text(DB_DOWN)
    (fake / "squeue").write_text("52_1|RUNNING\n")
    log = []
    for _ in range(3):  # polls: the outage is reported once
        states = slurm_module.job_states(out, jobs, lost_after_s=1, echo=log.append)
    assert states == dict(zip(ids, ["COMPLETED", "RUNNING", "UNKNOWN", "UNKNOWN"]))
    assert len(log) == 1 and "Slurm accounting unreachable (sacct: error: Problem talking" in log[0], log
    since = read_accounting(out)["unreachable_since"]
    assert since is not None
    rows = {run_id: (status, detail) for run_id, status, detail in run_statuses(out)}
    assert rows[ids[2]] == ("unknown", f"Slurm job 52_2: unknown (accounting unreachable since {since}; "
                                       f"last reported PENDING)")
    assert rows[ids[1]][0] == "running"

    # Neither a local sweep nor a submission touches them.
    with pytest.raises(ModformerError, match="3 run.s. of .* are queued or running in Slurm"):
        sweep(str(out / "sweep.yaml"), out, launcher="local")
    assert set(slurm_module.live_runs(out, lost_after_s=1)) == set(ids[1:])

    # Accounting is back, and says so once; a job it and squeue both no longer know is LOST.
    (fake / "sacct.fail").unlink()
    (fake / "sacct").write_text("52_0|COMPLETED\n52_1|RUNNING\n52_2|PENDING\n")
    (fake / "squeue").write_text("")
    log.clear()
    states = slurm_module.job_states(out, jobs, lost_after_s=1, echo=log.append)
    assert states == dict(zip(ids, ["COMPLETED", "RUNNING", "PENDING", "LOST"]))
    assert log == [f"Slurm accounting answers again (unreachable since {since})"]
    assert read_accounting(out)["unreachable_since"] is None


def test_a_job_not_listed_yet_is_unknown_until_the_threshold_and_a_completing_one_is_live(tmp_path, fake):
    out, jobs = submitted(tmp_path, submitted_s=time.time())
    ids = list(jobs)
    assert set(slurm_module.job_states(out, jobs, lost_after_s=60).values()) == {"UNKNOWN"}  # just submitted
    assert set(slurm_module.job_states(out, jobs, lost_after_s=0).values()) == {"LOST"}
    # scancel'ed: sacct says CANCELLED at once, squeue COMPLETING while the training saves.
    (fake / "sacct").write_text("52_0|CANCELLED by 0\n52_1|TIMEOUT\n")
    (fake / "squeue").write_text("52_0|COMPLETING\n52_1|TIMEOUT\n")
    states = slurm_module.job_states(out, jobs, lost_after_s=60)
    assert states[ids[0]] == "COMPLETING" and states[ids[1]] == "TIMEOUT"
    assert "COMPLETING" in slurm_module.LIVE and "TIMEOUT" not in slurm_module.LIVE
    # Both down: nothing is known, nothing is LOST, however old.
    (fake / "sacct.fail").write_text(DB_DOWN)
    (fake / "squeue.fail").write_text("squeue: error: Unable to contact slurm controller\n")
    assert set(slurm_module.job_states(out, jobs, lost_after_s=0).values()) == {"TIMEOUT", "UNKNOWN"}


def test_two_simultaneous_submissions_submit_each_run_once(tmp_path, fake, monkeypatch):
    path = write(tmp_path)
    out = tmp_path / "out"
    start, logs = threading.Barrier(2), [[], []]
    # Both submitters meet where they read which runs are live; their pending() calls take
    # turns only because two threads of one process share temporary file names (two
    # commands are two processes).
    real_lock, real_pending, turns = slurm_module.submission_lock, SweepRunner.pending, threading.Lock()

    def meet_then_lock(out):
        start.wait(timeout=60)
        return real_lock(out)

    def pending(self):
        with turns:
            return real_pending(self)

    monkeypatch.setattr(slurm_module, "submission_lock", meet_then_lock)
    monkeypatch.setattr(SweepRunner, "pending", pending)
    errors = []

    def submitter(log):
        try:
            slurm_module.SlurmLauncher(SweepRunner(load_sweep(path), out, echo=log.append)).launch()
        except Exception as e:  # a thread's exception would otherwise only be printed
            errors.append(e)

    threads = [threading.Thread(target=submitter, args=(log,)) for log in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert (fake / "sbatch.calls").read_text() == "call\n"  # one job array
    assert len((out / "slurm" / "jobs.jsonl").read_text().splitlines()) == 4
    said = sorted(next(m.split(": ", 1)[1] for m in log if m.startswith("sweep ")) for log in logs)
    assert said == ["4 runs, 0 already finished, 0 queued or running in Slurm, 4 to submit",
                    "4 runs, 0 already finished, 4 queued or running in Slurm, 0 to submit"]


def test_the_time_limit_reaches_submitit_as_whole_minutes(tmp_path, fake):
    assert [time_minutes(t) for t in ("90", "1:30", "4:00:00", "1-12", "1-00:30", "1-0:0:30")] == \
        [90, 2, 240, 2160, 1470, 1441]
    executor = slurm_module.SlurmLauncher(SweepRunner(load_sweep(write(tmp_path)), tmp_path / "o"))._executor(
        tmp_path / "o")
    assert executor.parameters["time"] == 10 and isinstance(executor.parameters["time"], int)  # "0:10:00"


def write(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


def test_array_ids_expand_as_sacct_and_squeue_write_them():
    assert expand_array("52_[2-3%2]") == ["52_2", "52_3"]
    assert expand_array("52_[0,4-5]") == ["52_0", "52_4", "52_5"]
    assert expand_array("52_1") == ["52_1"] and expand_array("53") == ["53"]
