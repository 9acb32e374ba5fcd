"""`modformer migrate DIR`: folders an older modformer wrote (tests/data/format1: runs of two
committed results folders as they were before their migration), copied and migrated, read by
today's code exactly as before (the same resolved configs, the same figures), once (a second
migration changes nothing), and a folder it does not know refused in one line."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from modformer.cli import main
from modformer.config import config_from_dict
from modformer.configtools import to_dict
from modformer.migrate import FORMAT, migrate
from modformer.sweep.spec import load_sweep

DATA = Path(__file__).resolve().parent / "data" / "format1"
OLD = ["main_corrected",  # task condattend, MixiT recorded with mixer attention, no sweep.experiment
       "sentiment_reference_v4.53"]  # model.reference_transformers, no model.mixing.extra_positions


def resolved(path: Path) -> dict:
    return to_dict(config_from_dict(yaml.safe_load(path.read_text()), saved=True))


@pytest.mark.parametrize("name", OLD)
def test_a_committed_folder_migrates_once_and_reads_as_before(name, tmp_path, capsys):
    folder = tmp_path / Path(name).name
    shutil.copytree(DATA / name, folder)
    runs = sorted(p.parent for p in (folder / "runs").rglob("config.yaml"))
    before = {run: resolved(run / "config.yaml") for run in runs}
    assert main(["report", str(folder)]) == 0
    report = (folder / "report.md").read_text()
    done = migrate(folder)
    assert done.kind == "sweep" and done.changes["sweep.yaml"][-1] == f"format {FORMAT}"
    saved = yaml.safe_load((folder / "sweep.yaml").read_text())
    assert saved["format"] == FORMAT and saved["sweep"]["experiment"] == "train"
    for run in runs:  # today's reading of the migrated record is today's reading of the old one
        assert resolved(run / "config.yaml") == before[run]
        assert json.loads((run / "run.json").read_text())["format"] == FORMAT
    raw = [yaml.safe_load((run / "config.yaml").read_text()) for run in runs]
    assert all(r["task"]["name"] != "condattend" and "reference_transformers" not in r["model"] for r in raw)
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert all(r["summary"]["model"] == json.loads((folder / r["run_dir"] / "summary.json").read_text())["model"]
               for r in records if r["status"] == "done")
    assert main(["quote", "--check", str(folder / "README.md")]) == 0  # every figure as before
    assert main(["report", str(folder)]) == 0
    drop = lambda text: [line for line in text.splitlines() if not line.startswith("Task `")]  # noqa: E731
    assert drop((folder / "report.md").read_text()) == drop(report)  # but the task's and options' names
    assert migrate(folder).changes == {}  # once
    capsys.readouterr()
    assert main(["migrate", str(folder)]) == 0 and "nothing to do" in capsys.readouterr().out


def test_a_migrated_sweep_resumes_with_nothing_to_run(tmp_path, capsys):
    folder = tmp_path / "main_corrected"
    shutil.copytree(DATA / OLD[0], folder)
    migrate(folder)
    capsys.readouterr()
    assert main(["sweep", str(folder / "sweep.yaml"), "--out", str(folder)]) == 0
    assert "0 to run" in capsys.readouterr().err
    assert yaml.safe_load((folder / "sweep.yaml").read_text())["format"] == FORMAT  # kept by the resume


def test_a_run_folder_migrates_and_a_folder_it_does_not_know_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(DATA / OLD[0] / "runs" / "mixit" / "train.lr=0.003" / "seed0", run)
    assert migrate(run).kind == "run"
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["mixer"] == "mixing"
    assert json.loads((run / "summary.json").read_text())["model"] == "mixit"
    for folder, why in ((tmp_path / "none", "no such folder"), (tmp_path, "is not a folder modformer wrote")):
        assert main(["migrate", str(folder)]) == 2
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing written


def test_records_of_another_format_are_refused_naming_the_command(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "sweep.yaml").write_text(yaml.safe_dump({"format": FORMAT + 1, "sweep": {"variants": ["standard"]}}))
    with pytest.raises(Exception, match=rf"records of format {FORMAT + 1}.*modformer migrate {folder}"):
        load_sweep(folder / "sweep.yaml")


def test_the_committed_records_are_in_todays_format():
    """Every committed sweep was migrated once (`modformer migrate`): its sweep.yaml and its runs'
    run.json say today's format, and migrating it again would change nothing."""
    root = Path(__file__).resolve().parents[1] / "results"
    sweeps = sorted(p.parent for p in root.rglob("sweep.yaml"))
    assert sweeps
    for folder in sweeps:
        assert yaml.safe_load((folder / "sweep.yaml").read_text()).get("format") == FORMAT, folder
        for info in (folder / "runs").rglob("run.json"):
            assert json.loads(info.read_text()).get("format") == FORMAT, info
