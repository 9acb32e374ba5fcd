"""An LLM-Modules experiment run as a sweep (`sweep.experiment: llm_modules`): its arms are
the variants, each run its own process, the records and report those of the experiment
folder, and `--status`, resume and `modformer report` as for every sweep."""

import json

import pytest
import yaml

from modformer.cli import main
from modformer.sweep.spec import load_sweep
from modules_fixtures import run_arms, tiny_config

UNTIMED = {"seconds", "held_out_answers"}  # wall time; the answers are compared on their own


def sweep_file(tmp_path, tiny_teacher, **sweep):
    data = tiny_config(tiny_teacher).to_dict()
    data["sweep"] = {"experiment": "llm_modules", "variants": ["alone", "teacher"], "seeds": [0], "workers": 2, **sweep}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow  # two worker processes and the same runs in this one: about a minute on 2 cores
def test_the_arms_as_a_sweep_give_the_runs_results(tiny_teacher, tmp_path, monkeypatch, capsys):
    """Two arms as two worker processes: each run's summary equals the same arm and seed
    trained in this process (but for the time taken), the report is the experiment's,
    `--status` names each run's outcome, and a second call trains nothing."""
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file(tmp_path, tiny_teacher)), "--out", str(out)]) == 0
    records = {r["run_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(records) == {"alone/default/seed0", "teacher/default/seed0"}
    assert all(r["status"] == "done" for r in records.values())
    folder = run_arms(tiny_config(tiny_teacher, "arms=[alone,teacher]"), tmp_path / "folder")
    for alone in folder:
        swept = records[f"{alone['arm']}/default/seed0"]["summary"]
        assert {k: v for k, v in swept.items() if k not in UNTIMED} == \
            {k: v for k, v in alone.items() if k not in UNTIMED}
        assert swept["held_out_answers"] == alone["held_out_answers"]
    report = (out / "report.md").read_text()
    assert report.startswith("# LLM Modules: facts") and "| alone | 1 |" in report and "| teacher | 1 |" in report
    assert "Runs: 2 done" in report and (out / "curves.png").stat().st_size > 0
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0 and (out / "report.md").read_text() == report
    capsys.readouterr()
    assert main(["sweep", "--status", str(out)]) == 0
    status = capsys.readouterr().out
    assert "teacher/default/seed0" in status and "held-out exact match" in status and "2 runs: 2 done" in status
    assert main(["sweep", str(sweep_file(tmp_path, tiny_teacher)), "--out", str(out)]) == 0
    assert "0 to run" in capsys.readouterr().err


def test_a_grid_over_the_experiments_keys_and_the_arms_as_variants_only(tiny_teacher, tmp_path):
    sweep = load_sweep(sweep_file(tmp_path, tiny_teacher, grid={"train.steps": [2, 3]}, seeds=[0, 1]))
    runs = sweep.runs()
    assert len(runs) == 2 * 2 * 2
    assert {(r.config.arms[0], r.config.seeds[0], r.config.train.steps) for r in runs} == {
        (a, s, n) for a in ("alone", "teacher") for s in (0, 1) for n in (2, 3)}
    with pytest.raises(Exception, match="sweep.grid.arms: set it with sweep.variants"):
        load_sweep(sweep_file(tmp_path, tiny_teacher, grid={"arms": [["alone"]]}))
    with pytest.raises(Exception, match="arms must be among|unknown arm|no_such_arm"):
        load_sweep(sweep_file(tmp_path, tiny_teacher, variants=["no_such_arm"]))
    with pytest.raises(Exception, match="sweep.experiment must be one of train, .*llm_modules"):
        load_sweep(sweep_file(tmp_path, tiny_teacher, experiment="nonesuch"))


def test_one_run_needs_one_arm_and_one_seed(tiny_teacher, tmp_path, capsys):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(tiny_config(tiny_teacher, "arms=[alone,teacher]").to_yaml())
    assert main(["llm-modules", str(cfg), "--out", str(tmp_path / "run"), "--one-run"]) == 2
    assert "--one-run trains one arm and one seed" in capsys.readouterr().err


@pytest.mark.slow  # a real single-node Slurm (scripts/slurm_local.sh); CI runs it (.ci/run)
@pytest.mark.xdist_group("slurm")
def test_the_arms_on_slurm_give_the_local_sweeps_results(tiny_teacher, tmp_path, monkeypatch, slurm_cluster, capsys):
    """`--launcher slurm --wait`: one job array of the two arms, followed to its end, the same
    summaries (but for time) as the same sweep trained by local workers, one report."""
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path / "cache"))  # the jobs inherit the environment
    path = sweep_file(tmp_path, tiny_teacher, slurm={"poll_seconds": 0.5, "time": "0:10:00"})
    assert main(["sweep", str(path), "--out", str(tmp_path / "slurm"), "--launcher", "slurm", "--wait"]) == 0
    assert main(["sweep", str(path), "--out", str(tmp_path / "local")]) == 0
    read = lambda out: {r["run_id"]: {k: v for k, v in r["summary"].items() if k != "seconds"}  # noqa: E731
                        for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    slurm, local = read(tmp_path / "slurm"), read(tmp_path / "local")
    assert len(slurm) == 2 and slurm == local
    assert "| teacher | 1 |" in (tmp_path / "slurm" / "report.md").read_text()
    capsys.readouterr()
    assert main(["sweep", "--status", str(tmp_path / "slurm")]) == 0
    assert "2 runs: 2 done" in capsys.readouterr().out
