"""`modformer migrate DIR`: folders an older modformer wrote (tests/data/format1 and format2:
committed results folders as they were before each migration, their README.md as today's page
quotes them), copied and migrated, read by today's code exactly as before (the same resolved
configs, the same figures), once (a second migration changes nothing), and a folder it does
not know refused in one line."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from modformer.cli import main
from modformer.config import config_from_dict
from modformer.configtools import to_dict
from modformer.migrate import FORMAT, migrate
from modformer.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "format1"
OLD = ["main_corrected",  # task condattend, MixiT recorded with mixer attention, no sweep.experiment
       "sentiment_reference_v4.53"]  # model.reference_transformers, no mixing extra_positions
# Format 2: the built-in mixers' options in model.attention and model.mixing.
FORMAT2 = ["retrieval_circuits",  # the grid axis model.attention.qk_init_scale: run folders renamed
           "sentiment_corrected"]  # model.attention.causal and model.mixing.causal, one option of every arm


def resolved(path: Path) -> dict:
    return to_dict(config_from_dict(yaml.safe_load(path.read_text())))


@pytest.mark.parametrize("data,name", [(DATA, n) for n in OLD] + [(DATA.parent / "format2", n) for n in FORMAT2])
def test_an_older_folder_is_refused_then_migrates_once_into_the_committed_records(data, name, tmp_path, capsys):
    folder = tmp_path / Path(name).name
    shutil.copytree(data / name, folder)
    assert main(["report", str(folder)]) == 2  # today's readers refuse records of format 1, naming the command
    assert f"modformer migrate {folder}" in capsys.readouterr().err
    done = migrate(folder)
    assert done.kind == "sweep" and done.changes["sweep.yaml"][-1] == f"format {FORMAT}"
    saved = yaml.safe_load((folder / "sweep.yaml").read_text())
    assert saved["format"] == FORMAT and saved["sweep"]["experiment"] == "train"
    # Each record rewritten is the committed folder's, which this command migrated once (results/).
    committed = ROOT / "results" / "random_attention" / name
    runs = sorted(p.parent for p in (folder / "runs").rglob("config.yaml"))
    assert runs and {r.relative_to(folder) for r in runs} <= \
        {p.parent.relative_to(committed) for p in (committed / "runs").rglob("config.yaml")}  # renamed alike
    for kind in ("configs", "logs"):  # the start configs and logs of a renamed grid point moved with its runs
        assert {p.relative_to(folder) for p in (folder / kind).rglob("*")} <= \
            {p.relative_to(committed) for p in (committed / kind).rglob("*")}
    for run in runs:
        for record in ("config.yaml", "summary.json", "run.json"):
            assert (run / record).read_text() == (committed / run.relative_to(folder) / record).read_text()
        resolved(run / "config.yaml")  # and today's code reads it
    # They still rebuild it (the committed folder's may go on: a later plan amendment, say).
    assert (committed / "commands.txt").read_text().startswith((folder / "commands.txt").read_text())
    lines = {json.loads(line)["run_id"]: line for line in (committed / "results.jsonl").read_text().splitlines()}
    assert all(line == lines[json.loads(line)["run_id"]] for line in (folder / "results.jsonl").read_text().splitlines())
    assert main(["quote", "--check", str(folder / "README.md")]) == 0  # every figure as the old code quoted it
    assert main(["report", str(folder)]) == 0
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


def test_no_reader_outside_the_migrations_knows_a_former_name():
    """Former keys, task names and readers of older records live in the migrations alone
    (modformer/migrate.py and each paper's migrations module): the library reads today's."""
    import re

    package = Path(__file__).resolve().parents[1] / "modformer"
    former = re.compile(r"[\"']condattend[\"']|reference_transformers|reference_init|today_task_name|today_names|read_older"
                        r"|LEGACY|(?<!llm_)modules\.lock|seed_\{|saved=True|setdefault\(\"experiment\"")
    allowed = {package / "migrate.py", *package.glob("papers/*/migrations.py")}
    naming = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                    if p not in allowed and former.search(p.read_text()))
    assert naming == [], naming


ONE_FOLDER_SWEEP = Path(__file__).resolve().parents[1] / "results" / "llm_modules" / "facts_two_bridges_one_layer"


def lay_out_one_folder(folder: Path) -> list[dict]:
    """The committed sweep ONE_FOLDER_SWEEP's runs laid out in `folder` as `modformer llm-modules`
    once wrote them (runs/ARM/seed_S/, one config.yaml naming every arm and seed, split.json);
    returns the sweep's results records."""
    sweep = ONE_FOLDER_SWEEP
    rows = [json.loads(line) for line in (sweep / "results.jsonl").read_text().splitlines()]
    for row in rows:
        run = folder / "runs" / row["variant"] / f"seed_{row['seed']}"
        run.mkdir(parents=True)
        for name in ("summary.json", "metrics.jsonl"):
            shutil.copy2(sweep / row["run_dir"] / name, run / name)
    first = sweep / rows[0]["run_dir"]
    cfg = yaml.safe_load((first / "config.yaml").read_text())
    cfg["arms"], cfg["seeds"] = list(dict.fromkeys(r["variant"] for r in rows)), sorted({r["seed"] for r in rows})
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    shutil.copy2(first / "split.json", folder / "split.json")
    return rows


def test_an_llm_modules_folder_of_the_one_folder_layout_becomes_its_sweep(tmp_path):
    """`modformer llm-modules` once ran every arm and seed in one folder: laid out so from a
    committed sweep's runs, migrated, it is that sweep again, its report the committed one."""
    sweep, folder = ONE_FOLDER_SWEEP, tmp_path / "two_bridges"
    rows = lay_out_one_folder(folder)
    assert migrate(folder).kind == "sweep"
    assert yaml.safe_load((folder / "sweep.yaml").read_text())["format"] == FORMAT
    moved = {r["run_id"]: r["summary"] for r in map(json.loads, (folder / "results.jsonl").read_text().splitlines())}
    assert moved == {r["run_id"]: r["summary"] for r in rows}
    committed, _ = (sweep / "report.md").read_text().rsplit("\n\n", 1)
    assert (folder / "report.md").read_text().rsplit("\n\n", 1)[0] == committed
    assert migrate(folder).changes == {}  # once


def test_a_run_folder_of_format_1_is_not_continued_until_migrated(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(DATA / OLD[0] / "runs" / "standard" / "train.lr=0.003" / "seed0", run)
    config = ROOT / "configs" / "retrieval.yaml"
    assert main(["train", str(config), "--out", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"holds records of format 1, not this modformer's {FORMAT}" in err and f"modformer migrate {run}" in err
    assert len(err.strip().splitlines()) == 1


def test_the_config_a_checkpoint_embeds_is_migrated_with_its_tensors_untouched(tmp_path, capsys):
    from modformer.evaluate import load_run
    from modformer.train.checkpoint import checkpoint_path, read_checkpoint, save_checkpoint
    from modformer.variants import build_model

    run = tmp_path / "run"
    shutil.copytree(DATA / OLD[0] / "runs" / "mixit" / "train.lr=0.003" / "seed0", run)
    old = yaml.safe_load((run / "config.yaml").read_text())  # task condattend, MixiT as mixer attention
    today = tmp_path / "today"
    shutil.copytree(run, today)
    migrate(today)
    cfg = config_from_dict(yaml.safe_load((today / "config.yaml").read_text()))
    model = build_model(cfg.model, cfg.train.seed)
    path = checkpoint_path(run / "checkpoints", 5)
    path.parent.mkdir()
    save_checkpoint(path, 5, model, None, {"config": old, "code_version": "old"})
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: the config it records is not read today" in err and "modformer migrate RUN_DIR" in err
    assert len(err.strip().splitlines()) == 1

    done = migrate(run)
    assert done.changes[str(path.relative_to(run))] == ["embedded config: " + c for c in
                                                         done.changes["config.yaml"]]
    saved = read_checkpoint(path)
    assert saved.meta["config"] == yaml.safe_load((run / "config.yaml").read_text())
    assert saved.meta["code_version"] == "old" and saved.step == 5
    loaded, _, task, step = load_run(run)
    assert step == 5 and task.cfg.name == "retrieval"
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    before = path.read_bytes()
    assert migrate(run).changes == {} and path.read_bytes() == before  # once


def test_a_summarys_construction_label_is_written_again_from_its_config(tmp_path):
    """Older summaries labelled a run "reference" where its optimizer departs from the
    reference script's; the label is words about the recorded config, written again in full."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "results/random_attention/addition_budget/runs/frozen_qk/train.steps=1200/seed0", run)
    summary = json.loads((run / "summary.json").read_text())
    figures = {k: v for k, v in summary.items() if k != "construction"}
    summary["construction"] = "reference"
    (run / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    done = migrate(run)
    label = json.loads((run / "summary.json").read_text())["construction"]
    assert label == "reference (depth.py) except lr 0.003, warm-up 30, batch 512"
    assert done.changes["summary.json"] == [f"summary.construction: 'reference' -> '{label}' (from its config)"]
    assert {k: v for k, v in json.loads((run / "summary.json").read_text()).items() if k != "construction"} == figures

    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"]["construction"] = "some_paper.unknown"  # a construction no installed paper registers
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    summary["construction"] = "whatever its paper wrote"
    (run / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    assert migrate(run).changes == {}


def test_the_reference_scales_move_into_its_construction_options_or_go_where_nothing_reads_them():
    """Records format 4: residual_scale, skip_scale and scaled_linear left the model config. A
    construction that declares them (the random-attention reference) gets them as options; a
    config of another holding the value every model had drops them; any other value is refused,
    since nothing would build it."""
    from modformer.errors import ModformerError
    from modformer.migrate import _config

    reference = {"model": {"construction": "reference", "residual_scale": 0.75, "skip_scale": 0.5,
                           "scaled_linear": [512.0, 1.0], "construction_options": {"transformers": "v4.50"}}}
    assert len(_config(reference, True)) == 3
    assert reference["model"] == {"construction": "reference", "construction_options": {
        "transformers": "v4.50", "residual_scale": 0.75, "skip_scale": 0.5, "scaled_linear": [512.0, 1.0]}}
    assert config_from_dict({**reference, "task": {"name": "retrieval"}}).model.construction_options["skip_scale"] == 0.5
    corrected = {"model": {"variant": "mixit", "residual_scale": 1.0, "skip_scale": 1.0, "scaled_linear": None}}
    assert all("dropped" in line for line in _config(corrected, True)) and corrected == {"model": {"variant": "mixit"}}
    assert _config(corrected, True) == []  # once
    with pytest.raises(ModformerError, match=r"^model\.skip_scale=0\.5: construction 'corrected' has no such option"):
        _config({"model": {"skip_scale": 0.5}}, True)


def test_a_grid_point_named_by_its_python_text_is_renamed_plainly_and_resumes(tmp_path, capsys):
    """Records format 4: a list-valued grid point was `model.layers=__mixit_,__standard__`; its
    folders and records move to `model.layers=mixit+standard` (the committed folder, migrated
    once, is what a copy named the former way becomes), and the sweep resumes with nothing to run."""
    from modformer.migrate import _former_name
    from modformer.point_names import grid_points, point_names

    committed = ROOT / "results" / "random_attention" / "lm_layers"
    folder = tmp_path / "lm_layers"
    shutil.copytree(committed, folder)
    points = grid_points(yaml.safe_load((folder / "sweep.yaml").read_text())["sweep"]["grid"])
    former = dict(zip(point_names(points), point_names(points, _former_name)))
    assert all("__" in old and "+" in new for new, old in former.items())
    for kind in ("runs", "logs", "configs"):  # laid out as the former code named them
        for point in [p for arm in (folder / kind).iterdir() for p in arm.iterdir() if p.name in former]:
            point.rename(point.parent / former[point.name])
    for path in [folder / "results.jsonl", *(folder / "runs").rglob("run.json")]:
        text = path.read_text()
        for new, old in former.items():
            text = text.replace(f"/{new}/", f"/{old}/")
        path.write_text(text)
    done = migrate(folder)
    assert "grid points renamed" in done.changes["results.jsonl"]
    for path in [folder / "results.jsonl", *(folder / "runs").rglob("run.json"), *(folder / "configs").rglob("*.yaml")]:
        assert path.read_text() == (committed / path.relative_to(folder)).read_text()
    assert migrate(folder).changes == {}
    capsys.readouterr()
    assert main(["sweep", str(folder / "sweep.yaml"), "--out", str(folder)]) == 0
    assert "0 to run" in capsys.readouterr().err
