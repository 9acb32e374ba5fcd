"""How a sweep runs, stops and says where it stands, off the straight path: the runner's
records and words, a stopped run's status, Slurm's submissions, states and settings. Each test
was written for a survivor of the sweep package's mutation sample
(results/mutation/sweep_survivors.txt) and names the property a silent change would break."""

import contextlib
import json
import os
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import yaml

from modformer.errors import ConfigError, ModformerError
from modformer.sweep import slurm as slurm_module
from modformer.sweep import slurm_states
from modformer.sweep.runner import SweepRunner, read_results, record_outcome
from modformer.sweep.slurm_config import SlurmConfig
from modformer.sweep.spec import load_sweep
from test_sweep_properties import _planned, one_slurm_job_statuses


def runner_of(out, **kw):
    return SweepRunner(load_sweep(out / "sweep.yaml"), out, echo=kw.pop("echo", lambda *_: None), **kw)


# --- the local runner ---------------------------------------------------------------------------

def test_the_runner_speaks_on_stderr_by_default(tmp_path, capsys):
    _, out = _planned(tmp_path)
    capsys.readouterr()
    SweepRunner(load_sweep(out / "sweep.yaml"), out).echo("a line")
    said = capsys.readouterr()
    assert said.err == "a line\n" and said.out == ""


def test_an_amendment_that_changes_nothing_is_refused_in_words(tmp_path):
    config, out = _planned(tmp_path)
    with pytest.raises(ModformerError, match=rf"^--amend: this command changes nothing of the plan of {out}; "
                                             r"leave --amend out$"):
        SweepRunner(load_sweep(config), out, echo=lambda *_: None, amend="no reason").record_plan()


def test_a_started_runs_unreadable_config_is_refused_with_the_fix(tmp_path):
    _, out = _planned(tmp_path)
    runner = runner_of(out)
    run = runner.sweep.runs()[0]
    runner.run_dir(run).mkdir(parents=True)
    (runner.run_dir(run) / "config.yaml").write_text("train: [1\n")
    with pytest.raises(ModformerError, match=rf"^cannot read the config {runner.run_dir(run) / 'config.yaml'} of a "
                                             r"started run \(ParserError\); remove that run's folder to retrain it$"):
        runner.prepare(run, threads=1)


def test_a_failed_runs_record_holds_its_exit_status_and_its_logs_last_line(tmp_path):
    _, out = _planned(tmp_path)
    runner = runner_of(out)
    runner.kind = replace(runner.kind, command=lambda cfg, run_dir: ["train", str(tmp_path / "nowhere.yaml")])
    run = runner.sweep.runs()[0]
    runner._run_one(run, threads=1)
    record = read_results(out)[run.run_id]
    last = (out / "logs" / f"{run.run_id}.log").read_text().strip().splitlines()[-1]
    assert last.startswith("modformer: error: ") and "nowhere.yaml" in last
    assert record == {**runner.base_record(run), "status": "failed", "exit_code": 2, "error": last}


def test_a_run_stopped_with_a_checkpoint_is_paused_and_keeps_it(tmp_path):
    said = []
    base = {"run_id": "a", "run_dir": "runs/a"}
    record_outcome(tmp_path, base, 130, tmp_path / "log", said.append, lambda s: "",
                   started=lambda run_dir: "checkpoint at step 40")
    assert said == ["paused a (checkpoint at step 40 kept)"] and not (tmp_path / "results.jsonl").exists()


def test_a_run_finished_but_unrecorded_is_recorded_done_and_not_run_again(tmp_path):
    _, out = _planned(tmp_path)
    runner = runner_of(out)
    finished = runner.sweep.runs()[1]
    runner.run_dir(finished).mkdir(parents=True)
    (runner.run_dir(finished) / "summary.json").write_text(json.dumps({"test": {"accuracy": 1.0, "loss": 0.0}}))
    runs, todo = runner.pending()
    assert [r.run_id for r in todo] == [runs[0].run_id]
    assert read_results(out)[finished.run_id] == {**runner.base_record(finished), "status": "done",
                                                  "summary": {"test": {"accuracy": 1.0, "loss": 0.0}}}


def test_a_sweep_whose_runs_cannot_start_is_refused_before_its_folder_exists(tmp_path):
    config, _ = _planned(tmp_path)
    out = tmp_path / "new"
    runner = SweepRunner(load_sweep(config), out, echo=lambda *_: None)

    def refuse(runs, folder_of):
        raise ModformerError("these runs cannot start")

    runner.kind = replace(runner.kind, check=refuse)
    with pytest.raises(ModformerError, match="cannot start"):
        runner.run()
    assert not out.exists()


def test_a_stopped_runs_status_names_its_latest_checkpoint(tmp_path):
    from modformer.sweep.status import run_statuses

    _, out = _planned(tmp_path)
    checkpoints = out / "runs" / "standard" / "default" / "seed0" / "checkpoints"
    checkpoints.mkdir(parents=True)
    for step in (2, 10):
        (checkpoints / f"step_{step:07d}.safetensors").write_bytes(b"x")
    rows = {run_id: (status, detail) for run_id, status, detail in run_statuses(out)}
    assert rows["standard/default/seed0"] == ("started", "checkpoint at step 10")
    assert rows["mixit/default/seed0"] == ("not started", "")


# --- Slurm ----------------------------------------------------------------------------------------

class FakeSubmitit:
    """submitit as `SlurmLauncher._submit` uses it: an executor that makes its folder, takes
    parameters, and hands out array job ids (or refuses, as sbatch does)."""

    class FailedJobError(RuntimeError):
        pass

    def __init__(self, refuse: str | None = None):
        self.refuse, self.executors = refuse, []
        self.helpers = SimpleNamespace(CommandFunction=lambda *a, **kw: (a, kw))
        self.core = SimpleNamespace(utils=SimpleNamespace(FailedJobError=self.FailedJobError))

    def SlurmExecutor(self, folder):  # noqa: N802 (submitit's name)
        fake = self

        class Executor:
            def __init__(self):
                folder.mkdir(parents=True)
                self.folder, self.params, self.jobs = folder, {}, 0
                fake.executors.append(self)

            def update_parameters(self, **params):
                self.params.update(params)

            def batch(self):
                return contextlib.nullcontext()

            def submit(self, call):
                if fake.refuse:
                    raise fake.FailedJobError(fake.refuse)
                self.jobs += 1
                return SimpleNamespace(job_id=f"{40 + len(fake.executors)}_{self.jobs - 1}")

        return Executor()


def slurm_launcher(tmp_path, monkeypatch, fake, *overrides):
    from modformer.sweep.slurm import SlurmLauncher

    _, out = _planned(tmp_path)
    monkeypatch.setattr(slurm_module, "import_submitit", lambda: fake)
    runner = SweepRunner(load_sweep(out / "sweep.yaml", list(overrides)), out, echo=lambda *_: None)
    return SlurmLauncher(runner, wait=False)


def test_each_submission_gets_its_own_numbered_folder_and_every_sbatch_option_given(tmp_path, monkeypatch):
    fake = FakeSubmitit()
    launcher = slurm_launcher(tmp_path, monkeypatch, fake, "sweep.slurm.qos=high", "sweep.slurm.account=lab",
                              "sweep.slurm.partition=cpu", "sweep.slurm.mem=4G", "sweep.slurm.setup=['module load x']")
    runs = launcher.runner.sweep.runs()
    first, second = launcher._submit(runs[:1]), launcher._submit(runs[1:])
    assert [e.folder.name for e in fake.executors] == ["submission-1", "submission-2"]
    assert first[runs[0].run_id]["folder"] == "slurm/submission-1"
    assert second[runs[1].run_id]["folder"] == "slurm/submission-2"
    params = fake.executors[0].params
    assert {k: params[k] for k in ("qos", "account", "partition", "mem", "setup")} == {
        "qos": "high", "account": "lab", "partition": "cpu", "mem": "4G", "setup": ["module load x"]}
    assert "constraint" not in params and "gpus_per_node" not in params  # not given: not asked for


def test_an_sbatch_refusal_is_one_line_naming_its_first_line(tmp_path, monkeypatch):
    launcher = slurm_launcher(tmp_path, monkeypatch, FakeSubmitit("sbatch: error: Invalid qos specification\ndetail"))
    with pytest.raises(ModformerError, match=r"^sbatch refused the sweep's job array: sbatch: error: Invalid qos "
                                             r"specification$"):
        launcher._submit(launcher.runner.sweep.runs())


def test_a_launch_gathers_ended_jobs_and_submits_only_what_is_neither_live_nor_done(tmp_path, monkeypatch):
    """Between pending() and the jobs' states one job finished (its summary written): gathered as
    done, it is counted finished and not submitted again; the failed one is submitted again."""
    launcher = slurm_launcher(tmp_path, monkeypatch, FakeSubmitit())
    runner = launcher.runner
    runs = runner.sweep.runs()
    (runner.out / "slurm").mkdir(parents=True, exist_ok=True)
    jobs = [{"run_id": r.run_id, "job_id": f"7_{i}", "folder": "slurm/submission-1", "base": runner.base_record(r)}
            for i, r in enumerate(runs)]
    (runner.out / "slurm" / "jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs))

    def states(ids):
        summary = runner.run_dir(runs[1]) / "summary.json"
        summary.parent.mkdir(parents=True, exist_ok=True)
        summary.write_text(json.dumps({"test": {"accuracy": 1.0, "loss": 0.0}}))
        return {runs[0].run_id: "FAILED", runs[1].run_id: "COMPLETED"}

    said, submitted = [], []
    launcher.echo = said.append
    monkeypatch.setattr(launcher, "_states", states)
    monkeypatch.setattr(launcher, "_submit", lambda todo: submitted.append([r.run_id for r in todo]) or {
        r.run_id: {"job_id": "8_0"} for r in todo})
    launcher.launch()
    assert submitted == [[runs[0].run_id]]
    assert f"sweep {runner.out}: 2 runs, 1 already finished, 0 queued or running in Slurm, 1 to submit" in said
    assert read_results(runner.out)[runs[1].run_id]["status"] == "done"


def test_sacct_is_asked_for_every_array_at_once_and_squeue_for_this_users_jobs(monkeypatch):
    asked = []
    monkeypatch.setattr(slurm_states, "_run", lambda cmd: asked.append(cmd) or ("", ""))
    slurm_states.ask_sacct({"12_0", "12_1", "9_3"})
    slurm_states.ask_squeue({"12_0"})
    assert asked[0] == ["sacct", "-X", "-n", "-o", "JobID,State", "--parsable2", "-j", "12,9"]  # one call
    assert asked[1] == ["squeue", "-h", "-r", "-u", str(os.getuid()), "-o", "%i|%T"]


def test_a_job_is_lost_at_once_with_lost_after_s_0_and_never_with_a_negative_one():
    assert SlurmConfig(lost_after_s=0).lost_after_s == 0
    with pytest.raises(ConfigError, match=r"^sweep\.slurm\.lost_after_s must not be negative, got -1$"):
        SlurmConfig(lost_after_s=-1)


@pytest.mark.parametrize("last, detail", [
    (None, "Slurm job 9_1: unknown (not listed by sacct or squeue yet)"),
    ("RUNNING", "Slurm job 9_1: unknown (not listed by sacct or squeue yet; last reported RUNNING)"),
])
def test_an_unknown_jobs_status_says_why_and_its_last_reported_state_where_there_was_one(
        tmp_path, monkeypatch, last, detail):
    rows = one_slurm_job_statuses(tmp_path, monkeypatch, "UNKNOWN", {"states": {"9_1": last}} if last else None)
    assert rows["mixit/default/seed0"] == ("unknown", detail)


@pytest.mark.parametrize("state, word", [("CANCELLED", "cancelled"), ("FAILED", "failed"), ("OUT_OF_MEMORY", "failed")])
def test_a_job_that_ended_unrecorded_is_cancelled_or_failed_in_lower_case(tmp_path, monkeypatch, state, word):
    rows = one_slurm_job_statuses(tmp_path, monkeypatch, state)
    assert rows["mixit/default/seed0"] == (word, f"Slurm job 9_1 ended {state}")


def test_a_failed_runs_error_is_the_last_line_of_a_longer_log(tmp_path):
    log = tmp_path / "log"
    log.write_text("step 10\nTraceback (most recent call last):\nRuntimeError: boom\n")
    said = []
    record_outcome(tmp_path, {"run_id": "a", "run_dir": "runs/a"}, 1, log, said.append, lambda s: "")
    assert read_results(tmp_path)["a"]["error"] == "RuntimeError: boom"
    assert said == [f"FAILED a (exit 1): RuntimeError: boom  [log: {log}]"]


def test_a_run_is_announced_as_it_starts(tmp_path):
    _, out = _planned(tmp_path)
    said = []
    runner = runner_of(out, echo=said.append)
    runner.kind = replace(runner.kind, command=lambda cfg, run_dir: ["list"])
    run = runner.sweep.runs()[0]
    runner._run_one(run, threads=1)
    assert said[0] == f"start  {run.run_id}"


def test_a_run_starts_from_a_config_in_the_order_its_sections_and_keys_are_declared(tmp_path):
    from modformer.config import RunConfig

    _, out = _planned(tmp_path)
    runner = runner_of(out)
    run = runner.sweep.runs()[0]
    runner.prepare(run, threads=1)
    started = yaml.safe_load((out / "configs" / f"{run.run_id}.yaml").read_text())
    declared = RunConfig().to_dict()
    assert list(started) == list(declared) and list(started["model"]) == list(declared["model"])


@pytest.mark.parametrize("start", ["run", "record_plan"])
def test_a_folder_another_sweep_holds_is_refused_at_once(tmp_path, start):
    from modformer.lock import FolderBusy, take_lock

    config, out = _planned(tmp_path)
    runner = SweepRunner(load_sweep(config), out, echo=lambda *_: None)
    with take_lock(out / "sweep.lock", wait=False):
        with pytest.raises(FolderBusy, match="another sweep is running this folder"):
            getattr(runner, start)()
    assert not (out / "results.jsonl").exists()


def test_a_launch_with_wait_follows_every_job_it_submitted(tmp_path, monkeypatch):
    launcher = slurm_launcher(tmp_path, monkeypatch, FakeSubmitit())
    launcher.wait = True
    followed = []
    monkeypatch.setattr(launcher, "_follow", followed.append)
    monkeypatch.setattr(launcher, "_submit", lambda todo: {r.run_id: {"job_id": "8_0"} for r in todo})
    launcher.launch()
    assert followed == [{r.run_id for r in launcher.runner.sweep.runs()}]


def test_the_launcher_tells_its_own_listener_when_accounting_is_unreachable(tmp_path, monkeypatch):
    launcher = slurm_launcher(tmp_path, monkeypatch, FakeSubmitit())
    said = []
    launcher.echo = said.append
    monkeypatch.setattr(slurm_states, "_run", lambda cmd: (None, f"{cmd[0]}: connection refused"))
    states = launcher._states({"standard/default/seed0": {"job_id": "7_0", "submitted_s": 0.0}})
    assert states == {"standard/default/seed0": "UNKNOWN"}
    assert said and said[0].startswith("Slurm accounting unreachable (sacct: connection refused")


def test_a_slurm_command_that_hangs_is_taken_as_unreachable(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "sacct"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(slurm_states, "ASK_TIMEOUT_S", 0.3)
    started = time.monotonic()
    text, error = slurm_states._run(["sacct", "-X"])
    assert text is None and error.startswith("sacct: ") and "timed out after 0.3 seconds" in error
    assert time.monotonic() - started < 10
