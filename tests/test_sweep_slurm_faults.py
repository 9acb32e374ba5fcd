"""A Slurm sweep under faults, on the real single-node Slurm (scripts/slurm_local.sh): two
submitters at once, accounting (slurmdbd) and then the controller going away while the jobs
are queued past the LOST threshold. Each run is trained once, and its records equal the
same sweep trained locally. (The same logic against stand-in commands, in seconds:
tests/test_slurm_states.py.)"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modformer.api import sweep
from modformer.cli import main
from modformer.errors import ModformerError
from modformer.sweep import slurm as slurm_module
from modformer.sweep.runner import SweepRunner
from modformer.sweep.spec import load_sweep
from modformer.sweep.status import run_statuses
from slurm_cluster import SCRIPT, wait_until
from test_sweep_slurm import SWEEP, comparable, curves, write


def stop_daemon(conf: str, name: str) -> None:
    pid = (Path(conf).parent.parent / "pids" / f"{name}.pid").read_text().strip()
    subprocess.run(["kill", "-TERM", pid], check=True)
    for _ in range(100):  # until it has exited (its pid is gone)
        if subprocess.run(["kill", "-0", pid], capture_output=True).returncode != 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} did not stop")


def restart_cluster() -> None:
    started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]


@pytest.mark.slow  # a minute or two of a real cluster's jobs on 2 cores; CI runs it (.ci/run)
@pytest.mark.xdist_group("slurm")
def test_an_outage_and_two_submitters_never_train_a_run_twice(tmp_path, slurm_cluster):
    # One variant, 2 seeds, held in the queue (begin in 15 minutes); LOST after 1 s.
    held = {**SWEEP["sweep"], "variants": ["standard"],
            "slurm": {**SWEEP["sweep"]["slurm"], "lost_after_s": 1, "sbatch": {"begin": "now+15minutes"}}}
    path = write(tmp_path, {**SWEEP, "sweep": held})
    out = tmp_path / "slurm"
    command = [sys.executable, "-m", "modformer.cli", "sweep", str(path), "--out", str(out), "--launcher", "slurm"]

    # Two submitters at once: one submits both runs, the other none.
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    said = sorted(p.communicate(timeout=300)[1] for p in procs)
    assert all(p.returncode == 0 for p in procs), said
    assert sum("0 queued or running in Slurm, 2 to submit" in s for s in said) == 1, said
    assert sum("2 queued or running in Slurm, 0 to submit" in s for s in said) == 1, said
    jobs = slurm_module.submitted_jobs(out)
    assert len((out / "slurm" / "jobs.jsonl").read_text().splitlines()) == 2
    assert len({j["job_id"].split("_")[0] for j in jobs.values()}) == 1

    try:
        # Accounting goes away, the jobs stay queued past lost_after_s: the controller still
        # says PENDING; nothing is LOST, resubmitted or trained locally.
        time.sleep(1.5)
        stop_daemon(slurm_cluster, "slurmdbd")
        assert [s for _, s, _ in run_statuses(out)] == ["queued", "queued"]
        log = []
        assert slurm_module.SlurmLauncher(SweepRunner(load_sweep(path), out, echo=log.append)).launch() is None
        assert any("2 queued or running in Slurm, 0 to submit" in m for m in log), log
        with pytest.raises(ModformerError, match="2 run.s. of .* are queued or running in Slurm"):
            sweep(str(path), out, launcher="local")

        # The controller too: now nobody can say, and the runs are unknown, never ended.
        stop_daemon(slurm_cluster, "slurmctld")
        rows = run_statuses(out)
        assert [s for _, s, _ in rows] == ["unknown", "unknown"]
        assert all("unknown (accounting unreachable since " in d and "last reported PENDING" in d for _, _, d in rows)
        assert slurm_module.live_runs(out, lost_after_s=1) == list(jobs)
    finally:
        restart_cluster()  # cancels the held jobs: this cluster's start cancels what its state kept
    wait_until(slurm_cluster, lambda: set(slurm_module.job_states(out, jobs).values()) == {"CANCELLED"}, 300,
               lambda: f"the held jobs were not all cancelled: {slurm_module.job_states(out, jobs)}")

    # Submitted again, released at once and followed: the cancellation is gathered, and each
    # run trained once, as the same sweep trained locally.
    log = []
    released = load_sweep(path, ["sweep.slurm.sbatch={}"])
    results = slurm_module.SlurmLauncher(SweepRunner(released, out, echo=log.append), wait=True).launch()
    assert sum("ended CANCELLED" in m for m in log) == 2 and any("2 to submit" in m for m in log), log
    local = tmp_path / "local"
    expected = SweepRunner(load_sweep(path), local, echo=lambda m: None).run()
    assert comparable(results) == comparable(expected)
    for run_id in jobs:
        assert curves(out, run_id) == curves(local, run_id)
        assert len(json.loads((out / "runs" / run_id / "run.json").read_text())["starts"]) == 1
    assert main(["sweep", "--status", str(out)]) == 0


@pytest.mark.slow  # a job of a minute on a real cluster
@pytest.mark.xdist_group("slurm")
def test_a_job_that_finishes_its_run_within_its_last_90_seconds_ends_completed(tmp_path, slurm_cluster):
    # A 1-minute limit: Slurm's warning signal (90 s before the limit) comes at once. Under
    # submitit's USR2 the job ended FAILED although its run finished (the handler raised).
    one = {**SWEEP["sweep"], "variants": ["standard"], "seeds": [0], "slurm": {**SWEEP["sweep"]["slurm"], "time": "1"}}
    path = write(tmp_path, {**SWEEP, "sweep": one})
    out = tmp_path / "slurm"
    results = slurm_module.SlurmLauncher(SweepRunner(load_sweep(path), out, echo=lambda m: None), wait=True).launch()
    assert [r["status"] for r in results.values()] == ["done"]
    assert set(slurm_module.job_states(out, slurm_module.submitted_jobs(out)).values()) == {"COMPLETED"}
