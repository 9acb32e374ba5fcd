"""`modformer sweep --launcher slurm` against a real single-node Slurm (scripts/slurm_local.sh).

The cluster is started once per test session (and stopped after, unless it was running
before); where it cannot be (no root to install its Debian packages), these tests skip and
say why. The checks of gathering and status that need no cluster fake only the job states.
"""

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from modformer.cli import main
from modformer.api import sweep
from modformer.errors import ConfigError, ModformerError
from modformer.sweep import slurm as slurm_module
from modformer.sweep import status as status_module
from modformer.sweep.runner import SweepRunner, read_results
from modformer.sweep.spec import load_sweep
from modformer.sweep.status import format_status, run_statuses
from slurm_cluster import slurm_command, wait_until


# 2 variants x 2 seeds; long enough (300 steps, a checkpoint every 25) that a job can be
# cancelled mid-training, small enough to train in seconds. One thread: the same sums on
# every node and locally, so results are bit-identical.
SWEEP = {
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
    "task": {"name": "retrieval", "n_pairs": 3, "test_size": 100, "validation_size": 50},
    "train": {"steps": 300, "batch_size": 8, "eval_every": 150, "log_every": 50, "checkpoint_every": 25,
              "eval_batch_size": 100, "threads": 1},
    "sweep": {"variants": ["standard", "frozen_qk"], "seeds": [0, 1], "workers": 2,
              "slurm": {"poll_seconds": 0.5, "time": "0:10:00"}},
}


def write(folder: Path, data: dict) -> Path:
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def comparable(results: dict) -> dict:
    """Each run's held-out figures, the parts of a result that do not depend on the machine."""
    return {run_id: (r["status"], r["summary"]["validation"], r["summary"]["test"]) for run_id, r in results.items()}


def curves(out: Path, run_id: str) -> list[dict]:
    lines = (out / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"} for line in lines]


@pytest.mark.slow  # two minutes of a real cluster's jobs on 2 cores; CI runs it (.ci/run)
@pytest.mark.xdist_group("slurm")
def test_cancelled_and_resubmitted_slurm_sweep_equals_a_local_sweep(tmp_path, slurm_cluster, capsys):
    # One variant, 2 seeds: 2 jobs, one cancelled while the other runs (a job costs seconds
    # of imports on a 2-core machine; more jobs would show nothing more).
    path = write(tmp_path, {**SWEEP, "sweep": {**SWEEP["sweep"], "variants": ["standard"]}})
    out = tmp_path / "slurm"
    assert main(["sweep", str(path), "--out", str(out), "--launcher", "slurm", "--array-parallelism", "2"]) == 0
    assert "submitted" in capsys.readouterr().out
    jobs = slurm_module.submitted_jobs(out)
    assert len(jobs) == 2 and len({j["job_id"].split("_")[0] for j in jobs.values()}) == 1  # one job array

    # Cancel the first run to write a checkpoint, mid-training.
    deadline = time.time() + 300
    victim = None
    while victim is None and time.time() < deadline:
        for run_id in jobs:
            if list((out / "runs" / run_id / "checkpoints").glob("step_*.safetensors")):
                victim = run_id
                break
        time.sleep(0.05)
    assert victim is not None, "no run wrote a checkpoint within 300 s"
    slurm_command(slurm_cluster, "scancel", jobs[victim]["job_id"])

    # Submitted again while the others may still run: none is submitted twice, and the sweep
    # is followed to its end; the cancelled run is recorded as such, then continues.
    seen = []  # (seconds since the cancel, state) at each change, for the failure message

    def ended() -> bool:
        state = slurm_module.job_states(out, {victim: jobs[victim]})[victim]
        if not seen or seen[-1][1] != state:
            seen.append((round(time.time() - cancelled, 1), state))
        return state not in slurm_module.LIVE

    cancelled = time.time()
    wait_until(slurm_cluster, ended, 300, lambda: f"the cancelled job {jobs[victim]['job_id']} did not end "
                                                 f"(states seen, by seconds since the cancel: {seen})")
    assert dict((r, s) for r, s, _ in run_statuses(out))[victim] == "cancelled"
    log = []
    results = slurm_module.SlurmLauncher(SweepRunner(load_sweep(path), out, echo=log.append), wait=True).launch()
    assert any(f"FAILED {victim}: Slurm job {jobs[victim]['job_id']} ended CANCELLED" in m for m in log)
    assert any("1 to submit" in m for m in log), log  # only the cancelled run, the other finished or still runs
    assert all(r["status"] == "done" for r in results.values()) and len(results) == 2
    assert len(json.loads((out / "runs" / victim / "run.json").read_text())["starts"]) == 2  # continued
    assert "2 runs: 2 done" in format_status(out)

    # The same sweep trained locally: the same figures, curves included.
    local = tmp_path / "local"
    expected = SweepRunner(load_sweep(path), local, echo=lambda m: None).run()
    assert comparable(results) == comparable(expected)
    assert curves(out, victim) == curves(local, victim)

    # Submitted once more: nothing left to train; gathered and reported as a local sweep.
    assert main(["sweep", str(path), "--out", str(out), "--launcher", "slurm"]) == 0
    assert "sweep finished" in capsys.readouterr().out and (out / "report.md").exists()


@pytest.mark.xdist_group("slurm")
def test_a_job_sacct_never_heard_of_is_not_waited_on(tmp_path, slurm_cluster):
    jobs = {"a": {"job_id": "987654_0", "folder": "f", "submitted_s": 0.0},
            "b": {"job_id": "987654_1", "folder": "f", "submitted_s": time.time()}}
    assert slurm_module.job_states(tmp_path, jobs) == {"a": "LOST", "b": "UNKNOWN"}  # b: just submitted
    assert "LOST" not in slurm_module.LIVE and "UNKNOWN" in slurm_module.LIVE


def fake_sweep(tmp_path: Path, monkeypatch, states: dict[str, str]) -> tuple[Path, dict]:
    """A sweep folder whose runs were submitted as jobs 7_0.. and are in `states` (run id -> Slurm state)."""
    data = {**SWEEP, "sweep": {**SWEEP["sweep"], "launcher": "slurm"}}
    out = tmp_path / "out"
    runner = SweepRunner(load_sweep(write(tmp_path, data)), out, echo=lambda m: None)
    runs, _ = runner.pending()
    (out / "slurm").mkdir()
    jobs = {run.run_id: {"run_id": run.run_id, "job_id": f"7_{i}", "folder": "slurm/submission-1",
                         "base": runner.base_record(run)} for i, run in enumerate(runs)}
    (out / "slurm" / "jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs.values()))
    monkeypatch.setattr(slurm_module, "job_states", lambda out, jobs, **kw: {r: states[r] for r in jobs})
    monkeypatch.setattr(status_module, "job_states", slurm_module.job_states)
    return out, jobs


def test_status_and_gathering_follow_the_job_states(tmp_path, monkeypatch):
    ids = ["standard/default/seed0", "standard/default/seed1", "frozen_qk/default/seed0", "frozen_qk/default/seed1"]
    states = dict(zip(ids, ["PENDING", "RUNNING", "CANCELLED", "FAILED"]))
    out, jobs = fake_sweep(tmp_path, monkeypatch, states)
    (out / "logs" / "frozen_qk" / "default").mkdir(parents=True)
    (out / "logs" / "frozen_qk" / "default" / "seed1.log").write_text("Traceback ...\nValueError: bad thing\n")
    table = format_status(out)
    assert [s for _, s, _ in run_statuses(out)] == ["queued", "running", "cancelled", "failed"]
    assert "4 runs: 1 running, 1 queued, 1 failed, 1 cancelled" in table

    with pytest.raises(ModformerError, match="2 run.s. of .* are queued or running in Slurm"):
        sweep(str(out / "sweep.yaml"), out, launcher="local")  # never trained locally while Slurm may be training them

    log = []
    slurm_module.gather(out, states, log.append)
    results = read_results(out)
    assert set(results) == set(ids[2:])  # live jobs are never recorded
    assert results[ids[2]]["slurm_state"] == "CANCELLED" and results[ids[2]]["status"] == "failed"
    assert "ValueError: bad thing" in results[ids[3]]["error"]
    slurm_module.gather(out, states, log.append)  # gathered once only
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    assert [s for _, s, _ in run_statuses(out)] == ["queued", "running", "cancelled", "failed"]


@pytest.mark.parametrize("resubmit", [0, 2])
def test_following_submits_again_a_run_out_of_time_but_never_a_failed_one(tmp_path, monkeypatch, resubmit):
    ids = ["standard/default/seed0", "standard/default/seed1", "frozen_qk/default/seed0", "frozen_qk/default/seed1"]
    # The first jobs (7_*): one runs out of time, one loses its node (its next jobs too), one
    # fails, one is cancelled. A resubmitted job (8_*) of the first finishes.
    first = dict(zip(ids, ["TIMEOUT", "NODE_FAIL", "FAILED", "CANCELLED"]))
    out, jobs = fake_sweep(tmp_path, monkeypatch, first)
    submitted = []

    def states(out, jobs, **kw):
        return {r: first[r] if j["job_id"].startswith("7_") else "COMPLETED" if r == ids[0] else "NODE_FAIL"
                for r, j in jobs.items()}

    def submit(self, todo):  # a job that finishes writes its run's summary, as a training does
        submitted.append([run.run_id for run in todo])
        lines = {run.run_id: {"run_id": run.run_id, "job_id": f"8_{len(submitted)}", "folder": "slurm/submission-2",
                              "base": self.runner.base_record(run)} for run in todo}
        with open(out / "slurm" / "jobs.jsonl", "a") as f:
            f.write("".join(json.dumps(line) + "\n" for line in lines.values()))
        if ids[0] in lines:
            summary = out / lines[ids[0]]["base"]["run_dir"] / "summary.json"
            summary.parent.mkdir(parents=True, exist_ok=True)
            summary.write_text(json.dumps({"test": {"accuracy": 1.0, "loss": 0.0}}))
        return lines

    monkeypatch.setattr(slurm_module, "job_states", states)
    monkeypatch.setattr(slurm_module.SlurmLauncher, "_submit", submit)
    runner = SweepRunner(load_sweep(out / "sweep.yaml", [f"sweep.slurm.resubmit={resubmit}",
                                                         "sweep.slurm.poll_seconds=0.01"]), out, echo=lambda m: None)
    slurm_module.SlurmLauncher(runner, wait=True)._follow(set(ids))

    results = read_results(out)
    if resubmit == 0:
        assert submitted == []
        assert [results[r]["status"] for r in ids] == ["failed"] * 4
        return
    # the out-of-time run and the one on a lost node at once, the latter again, `resubmit`
    # times in all; never the failed or cancelled one
    assert submitted == [ids[:2], [ids[1]]]
    assert results[ids[0]]["status"] == "done"
    assert results[ids[1]]["slurm_state"] == "NODE_FAIL" and results[ids[1]]["slurm_job"] == "8_2"
    assert [results[r]["slurm_state"] for r in ids[2:]] == ["FAILED", "CANCELLED"]


def test_slurm_options_are_checked_and_bad_input_is_one_line(tmp_path, capsys):
    data = {**SWEEP, "sweep": {**SWEEP["sweep"], "slurm": {"time": 14400}}}  # YAML's reading of 4:00:00
    with pytest.raises(ConfigError, match="in quotes"):
        load_sweep(write(tmp_path, data))
    with pytest.raises(ConfigError, match="sweep.slurm.gpus"):
        load_sweep(write(tmp_path, {**SWEEP, "sweep": {**SWEEP["sweep"], "slurm": {"gpus": 1}}}))
    assert main(["sweep", "--status", str(tmp_path / "nowhere")]) == 2
    assert main(["sweep", str(write(tmp_path, SWEEP)), "--launcher", "slurm", "--time", "four hours",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("modformer: error: ") for line in err)


def test_without_submitit_the_slurm_launcher_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if not installed
    assert main(["sweep", str(write(tmp_path, SWEEP)), "--launcher", "slurm", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["modformer: error: the slurm launcher needs submitit: pip install 'modformer[slurm]'"]
    assert not (tmp_path / "o").exists()
