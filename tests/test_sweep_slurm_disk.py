"""A Slurm sweep whose disk fails, on the real single-node Slurm (scripts/slurm_local.sh): a
loop-mounted ext4 that the kernel turns read-only mid-run (tests/failing_disk.py), and a
full tmpfs under a job that starts after it filled. The follower (--wait) and --status stop
in one line, exit 2, while the disk is down; nothing acknowledged is lost (slurm/jobs.jsonl
comes back whole), each failed job is recorded with its cause, and once the disk is back the
sweep submitted again ends as a local sweep does."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from modformer.sweep import slurm as slurm_module
from modformer.sweep.runner import SweepRunner, read_results
from modformer.sweep.slurm_states import LIVE, ask_squeue
from modformer.sweep.spec import load_sweep
from failing_disk import fill
from slurm_cluster import slurm_command, wait_until
from test_disk_faults import ROOT, one_line_exit_2
from test_sweep_slurm import SWEEP, comparable, curves, fake_sweep, write


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "modformer.cli", *args]


def ended(job_ids: set[str]) -> bool:
    """None of `job_ids` is in Slurm's queue any more (asked without writing to the sweep folder)."""
    queued, _ = ask_squeue(job_ids)
    return queued is not None and not any(state in LIVE for state in queued.values())


def failures(out: Path) -> list[str]:
    """The error of each failed record in results.jsonl."""
    lines = (out / "results.jsonl").read_text().splitlines()
    return [r["error"] for r in map(json.loads, lines) if r["status"] == "failed"]


@pytest.mark.slow  # a minute or two of a real cluster's jobs on 2 cores; CI runs it (.ci/run)
@pytest.mark.xdist_group("slurm")
def test_a_slurm_sweep_whose_disk_fails_mid_run_stops_in_one_line_and_ends_as_a_local_sweep(
        tmp_path, slurm_cluster, ext4_disk):
    # 1000 steps: the jobs are still training when the disk fails after the first checkpoint.
    data = {**SWEEP, "train": {**SWEEP["train"], "steps": 1000}, "sweep": {**SWEEP["sweep"], "variants": ["standard"]}}
    path = write(tmp_path, data)
    out = ext4_disk.path / "sweep"
    follower = subprocess.Popen(cli("sweep", str(path), "--out", str(out), "--launcher", "slurm", "--wait"),
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(slurm_cluster, lambda: any((out / "runs").glob("*/*/*/checkpoints/step_*.safetensors"))
               or follower.poll() is not None, 300, lambda: "no run wrote a checkpoint")
    submitted = (out / "slurm" / "jobs.jsonl").read_text()
    ext4_disk.fail()
    _, stderr = follower.communicate(timeout=300)
    one_line_exit_2(subprocess.CompletedProcess(follower.args, follower.returncode, "", stderr), out, "read-only")
    jobs = {json.loads(line)["job_id"] for line in submitted.splitlines()}
    wait_until(slurm_cluster, lambda: ended(jobs), 300, lambda: f"the jobs {jobs} did not end")
    one_line_exit_2(subprocess.run(cli("sweep", "--status", str(out)), cwd=ROOT, capture_output=True, text=True),
                    out, "read-only")

    ext4_disk.repair()
    assert (out / "slurm" / "jobs.jsonl").read_text() == submitted
    log = []
    results = slurm_module.SlurmLauncher(SweepRunner(load_sweep(path), out, echo=log.append), wait=True).launch()
    # Their logs went with the file system's uncommitted writes: the record says so.
    assert failures(out) and all("nothing in its log" in e for e in failures(out)), failures(out)
    assert (out / "slurm" / "jobs.jsonl").read_text().startswith(submitted)
    local = tmp_path / "local"
    assert comparable(results) == comparable(SweepRunner(load_sweep(path), local, echo=lambda m: None).run())
    for run_id in results:
        assert curves(out, run_id) == curves(local, run_id)


@pytest.mark.slow  # a minute of a real cluster's job on 2 cores; CI runs it (.ci/run)
@pytest.mark.xdist_group("slurm")
def test_a_slurm_job_started_on_a_full_disk_is_recorded_with_its_cause(tmp_path, slurm_cluster, small_disk):
    """It used to be recorded as `ended FAILED; no checkpoint yet`, its log empty: the
    training's one line could not be written there. The log now has room set aside for it."""
    disk, remount = small_disk
    remount("size=4m")
    held = {**SWEEP["sweep"], "variants": ["standard"], "seeds": [0],
            "slurm": {**SWEEP["sweep"]["slurm"], "sbatch": {"begin": "now+15minutes"}}}
    path = write(tmp_path, {**SWEEP, "sweep": held})
    out = disk / "sweep"
    submitted = subprocess.run(cli("sweep", str(path), "--out", str(out), "--launcher", "slurm"), cwd=ROOT,
                               capture_output=True, text=True)
    assert submitted.returncode == 0, submitted.stderr
    (job,) = [j["job_id"] for j in slurm_module.submitted_jobs(out).values()]
    fill(disk)  # while the job waits
    slurm_command(slurm_cluster, "scontrol", "update", f"JobId={job}", "StartTime=now")
    follow = cli("sweep", str(path), "--out", str(out), "--launcher", "slurm", "--wait")
    one_line_exit_2(subprocess.run(follow, cwd=ROOT, capture_output=True, text=True), out, "no space left")
    wait_until(slurm_cluster, lambda: ended({job}), 300, lambda: f"the job {job} did not end")
    one_line_exit_2(subprocess.run(cli("sweep", "--status", str(out)), cwd=ROOT, capture_output=True, text=True),
                    out, "no space left")

    (disk / "ballast").unlink()
    log = []
    released = load_sweep(path, ["sweep.slurm.sbatch={}"])
    results = slurm_module.SlurmLauncher(SweepRunner(released, out, echo=log.append), wait=True).launch()
    (error,) = failures(out)
    assert error.startswith(f"Slurm job {job} ended FAILED: modformer: error: cannot write to {out}"), error
    assert "no space left on the device" in error, error
    assert [r["status"] for r in results.values()] == ["done"] and read_results(out)


def test_a_failed_job_whose_log_is_empty_is_recorded_as_one_that_could_not_write_it(tmp_path, monkeypatch):
    """A failed training says why in its log; a log left empty means it could not write even
    that (its disk read-only, or full past the log's reserve), and the record says so rather
    than only `ended FAILED`. A killed job's log says nothing in any case."""
    ids = ["standard/default/seed0", "standard/default/seed1", "frozen_qk/default/seed0"]
    states = dict(zip(ids, ["FAILED", "FAILED", "CANCELLED"]))
    out, _ = fake_sweep(tmp_path, monkeypatch, states)
    (out / "logs" / "standard" / "default").mkdir(parents=True)
    (out / "logs" / "standard" / "default" / "seed0.log").write_text("")
    slurm_module.gather(out, states, lambda m: None)
    errors = {run_id: r["error"] for run_id, r in read_results(out).items()}
    assert errors[ids[0]].startswith("Slurm job 7_0 ended FAILED: nothing in its log, which the run could not write")
    assert errors[ids[1]].startswith("Slurm job 7_1 ended FAILED: nothing in its log")  # no log at all
    assert errors[ids[2]].startswith("Slurm job 7_2 ended CANCELLED; no checkpoint yet")
