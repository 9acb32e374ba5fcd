import json
import re

import pytest
import yaml

from modformer.cli import main
from modformer.errors import ConfigError, ModformerError
from modformer.sweep.report import write_report
from modformer.sweep.runner import SweepRunner, read_results
from modformer.sweep.spec import load_sweep
from modformer.version import RECORDS_FORMAT

SWEEP = {
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
    "task": {"name": "retrieval", "n_pairs": 3, "test_size": 100, "validation_size": 50},
    "train": {"steps": 6, "batch_size": 8, "eval_every": 3, "checkpoint_every": 3, "eval_batch_size": 100,
              "induction_scores": True},
    "sweep": {"variants": ["standard", "frozen_qk"], "grid": {"train.lr": [0.001, 0.01]}, "seeds": [0, 1],
              "workers": 2},
}


def write(tmp_path, data):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_same_grid_for_every_variant(tmp_path):
    sweep = load_sweep(write(tmp_path, SWEEP))
    runs = sweep.runs()
    assert len(runs) == 2 * 2 * 2
    by_variant = {}
    for run in runs:
        by_variant.setdefault(run.variant, set()).add((run.point, run.seed))
        assert run.config.model.variant == run.variant and run.config.train.seed == run.seed
        assert run.config.train.lr == dict(run.point)["train.lr"]
    assert by_variant["standard"] == by_variant["frozen_qk"]


def test_grid_points_never_share_a_folder_and_their_names_are_readable():
    from modformer.sweep.spec import point_names

    assert point_names([(("train.lr", 0.001), ("train.batch_size", 128))]) == ["train.lr=0.001,train.batch_size=128"]
    assert point_names([()]) == ["default"]
    values = ["a/b", "a_b", "a b", "x" * 300, None, "None", ["blocks.*"], "y" * 240]
    names = point_names([(("task.path", v),) for v in values])
    assert len(set(names)) == len(values)
    assert all(len(n) < 255 and "/" not in n and " " not in n for n in names)
    # a name no other point shares and short enough stays plain, a list's items joined by '+'
    assert names[-2:] == ["task.path=blocks._", "task.path=" + "y" * 240]
    assert all("~" in n for n in names[:6])
    layers = [["mixit", "mixit", "standard"], {-1: "standard"}, [], {0: {"variant": "frozen_qk"}}]
    assert point_names([(("model.layers", v), ("train.steps", 800)) for v in layers]) == [
        "model.layers=mixit+mixit+standard,train.steps=800", "model.layers=-1=standard,train.steps=800",
        "model.layers=empty,train.steps=800", "model.layers=0=variant=frozen_qk,train.steps=800"]
    assert all("~" in n for n in point_names([(("a", [1, 2]),), (("a", "1+2"),)]))  # the same plain name: hashed


@pytest.mark.parametrize("change, key", [
    ({"grid": {"train.lrr": [1]}}, "train.lrr"),
    ({"grid": {"train.seed": [1]}}, "train.seed"),
    ({"variants": ["nonesuch"]}, "model.variant"),
    ({"workerz": 2}, "sweep.workerz"),
    ({"grid": {"train.lr": []}}, "train.lr"),
])
def test_bad_sweeps_fail_before_training(tmp_path, change, key):
    data = {**SWEEP, "sweep": {**SWEEP["sweep"], **change}}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_sweep(write(tmp_path, data))


def test_sweep_runs_resumes_and_reports(tmp_path):
    out = tmp_path / "out"
    # One variant, one seed, 2 rates: 2 runs (a choice needs two settings; a report of two
    # variants is the Python API test's).
    one_seed = {**SWEEP, "sweep": {**SWEEP["sweep"], "variants": ["standard"], "seeds": [1]}}
    sweep = load_sweep(write(tmp_path, one_seed))
    results = SweepRunner(sweep, out, echo=lambda m: None).run()
    assert len(results) == 2 and all(r["status"] == "done" for r in results.values())

    # Started again: nothing is retrained.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")}
    SweepRunner(load_sweep(write(tmp_path, one_seed)), out, echo=lambda m: None).run()
    assert stamps == {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")}

    # A sweep killed while one run was training: that run has a checkpoint but no summary
    # and no record. Started again, only it continues, and it ends as it would have.
    victim = "standard/train.lr=0.01/seed1"
    before = results[victim]["summary"]
    run_dir = out / "runs" / victim
    (run_dir / "summary.json").unlink()
    (run_dir / "checkpoints" / "step_0000006.safetensors").unlink()
    lines = [line for line in (out / "results.jsonl").read_text().splitlines() if json.loads(line)["run_id"] != victim]
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    unfinished = [line for line in write_report(out).read_text().splitlines() if "no finished run yet" in line]
    assert len(unfinished) == 1 and unfinished[0].endswith(":** standard/train.lr=0.01")
    log = []
    SweepRunner(load_sweep(write(tmp_path, one_seed)), out, echo=log.append).run()
    assert any("1 already finished, 1 to run" in m for m in log)
    after = read_results(out)[victim]["summary"]
    assert after["test"] == before["test"] and after["validation"] == before["validation"]

    report = write_report(out).read_text()
    assert "## Chosen setting per variant" in report and "n_pairs" in report and "no finished run yet" not in report
    rows = [line for line in report.splitlines() if line.startswith("| standard |")]
    # The chosen setting, its other metrics, both grid points per n_pairs (3 values: few enough to
    # show every setting), and both grid points in the whole grid; no paper's section (a sweep of
    # our construction whose file names no paper).
    assert len(rows) == 1 + 1 + 2 + 2
    assert rows[0].startswith("| standard | `train.lr=")
    assert "## Construction and budget" not in report and "paper" not in report.lower()
    assert "## Test accuracy per `n_pairs`, every setting" in report and "| n_pairs=1 | n_pairs=2 | n_pairs=3 |" in report
    assert "## Other test metrics" in report and "token_accuracy" in report
    for figure in ("slices.png", "curves.png", "induction.png"):
        assert (out / figure).stat().st_size > 0 and f"]({figure})" in report


def test_another_sweep_in_the_same_folder_is_refused(tmp_path):
    out = tmp_path / "out"
    first = {**SWEEP, "sweep": {**SWEEP["sweep"], "variants": ["standard"], "seeds": [0], "grid": {}}}
    # Started (its folder and sweep.yaml written, as before its first run); training it would
    # change nothing of what is checked here.
    SweepRunner(load_sweep(write(tmp_path, first)), out, echo=lambda m: None).pending()
    saved = (out / "sweep.yaml").read_text()
    with pytest.raises(ModformerError, match="different sweep"):
        SweepRunner(load_sweep(write(tmp_path, SWEEP)), out, echo=lambda m: None).run()
    assert (out / "sweep.yaml").read_text() == saved and not (out / "runs").exists()


def test_a_sweep_grows_in_its_folder_and_trains_only_its_new_runs(tmp_path):
    """More variants, seeds or values of the same grid axes: the same folder, and only the new
    runs are left to train (a budget curve extended in place). Anything else is refused."""
    from modformer.sweep.runner import append_result

    out = tmp_path / "out"
    small = {**SWEEP, "sweep": {**SWEEP["sweep"], "variants": ["standard"], "seeds": [0], "grid": {"train.steps": [6]}}}
    runner = SweepRunner(load_sweep(write(tmp_path, small)), out, echo=lambda m: None)
    [run], _ = runner.pending()
    append_result(out, {**runner.base_record(run), "status": "done", "summary": {}})  # as if trained
    grown = {**small, "sweep": {**small["sweep"], "variants": ["standard", "mixit"], "seeds": [0, 1],
                                "grid": {"train.steps": [6, 12]}}}
    runs, todo = SweepRunner(load_sweep(write(tmp_path, grown)), out, echo=lambda m: None,
                             amend="a budget curve extended in place").pending()
    assert len(runs) == 8 and [r.run_id for r in runs if r not in todo] == [run.run_id]
    assert yaml.safe_load((out / "sweep.yaml").read_text())["sweep"]["seeds"] == [0, 1]
    for changed in ({**grown, "model": {**grown["model"], "d_model": 64}},  # the runs themselves change
                    {**grown, "sweep": {**grown["sweep"], "seeds": [1]}},  # a seed dropped
                    {**grown, "sweep": {**grown["sweep"], "grid": {"train.lr": [0.01]}}}):  # another axis
        with pytest.raises(ModformerError, match="different sweep"):
            SweepRunner(load_sweep(write(tmp_path, changed)), out, echo=lambda m: None).pending()
    # A record of a run the sweep does not name (a folder the report would lose) is refused.
    append_result(out, {"run_id": "standard/train.steps=7/seed0", "status": "done", "summary": {}})
    with pytest.raises(ModformerError, match="does not name .*train.steps=7"):
        SweepRunner(load_sweep(write(tmp_path, grown)), out, echo=lambda m: None).pending()


def test_settings_are_chosen_on_validation_over_complete_seeds():
    from modformer.sweep.report import choose

    def run(val, test):
        return {"summary": {"validation": {"accuracy": val}, "test": {"accuracy": test}}}

    groups = {
        ("a", "lr=1"): [run(0.9, 0.1), run(0.8, 0.1), run(0.85, 0.1)],  # best on validation
        ("a", "lr=2"): [run(0.5, 0.99), run(0.5, 0.99), run(0.5, 0.99)],  # best on test
        ("a", "lr=3"): [run(1.0, 1.0)],  # one lucky seed of three
    }
    assert choose(groups, "accuracy", "max", seeds=3) == {"a": "lr=1"}
    assert choose(groups, "accuracy", "min", seeds=3) == {"a": "lr=2"}


def test_report_lists_variants_and_grid_points_in_the_sweeps_order():
    from modformer.sweep.report import grid_order, point_label

    grid = {"train.steps": [200, 800, 3200], "train.lr": [0.01, 0.003]}
    variants = ["standard", "mixit"]
    points = [point_label({"train.steps": s, "train.lr": lr}) for s in (3200, 200, 800) for lr in (0.003, 0.01)]
    groups = {(v, p): [] for v in reversed(variants) for p in points}
    ordered = [key for key, _ in grid_order(groups, variants, grid)]
    assert [v for v, _ in ordered] == ["standard"] * 6 + ["mixit"] * 6
    assert [p for _, p in ordered[:6]] == [point_label({"train.steps": s, "train.lr": lr})
                                           for s in (200, 800, 3200) for lr in (0.01, 0.003)]


@pytest.mark.slow  # a whole sweep of subprocesses, interrupted and run again: over a minute; CI runs it (.ci/run)
def test_interrupted_sweep_stops_its_runs_and_continues_later(tmp_path):
    """SIGINT to a sweep started in the background (SIGINT ignored, as nohup leaves it):
    the running trainings save and stop, nothing new starts, and the same command finishes."""
    import signal
    import subprocess
    import sys
    import time

    data = {**SWEEP, "train": {**SWEEP["train"], "steps": 200, "checkpoint_every": 50, "eval_every": 100,
                               "induction_scores": False}}
    data["sweep"] = {**SWEEP["sweep"], "variants": ["standard"], "grid": {}, "seeds": [0, 1, 2]}
    path = write(tmp_path, data)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "modformer.cli", "sweep", str(path), "--out", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.time() + 120
    while not list(out.glob("runs/*/*/seed*/checkpoints/step_*")) and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "run the same command again" in err  # Ctrl-C's code, as train's
    assert "start  standard/default/seed2" not in err  # nothing started after the signal
    assert len(read_results(out)) < 3
    # The same command again, in this process (its start is not under test): it finishes.
    assert main(cmd[3:]) == 0
    assert len(read_results(out)) == 3


def test_init_from_names_each_runs_own_source(tmp_path):
    spec = {**SWEEP, "train": {**SWEEP.get("train", {}), "init_from": "stage1/runs/{variant}/default/seed{seed}"}}
    sweep = load_sweep(write(tmp_path, spec))
    assert {r.config.train.init_from for r in sweep.runs()} == {
        f"stage1/runs/{r.variant}/default/seed{r.seed}" for r in sweep.runs()}
    with pytest.raises(ModformerError, match="start from weights that do not exist"):  # before training anything
        SweepRunner(sweep, tmp_path / "out", echo=lambda m: None).run()
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_curve_gathers_the_matching_runs_of_several_sweeps(tmp_path):
    from modformer.sweep.curve import curve_points, write_curve

    def sweep_folder(name, runs):
        """A sweep folder with finished runs (variant, steps, lr, seed, accuracy), as a sweep leaves them."""
        out = tmp_path / name
        out.mkdir()
        (out / "sweep.yaml").write_text(f"format: {RECORDS_FORMAT}\n" "sweep: {experiment: train}\n")
        lines = []
        for variant, steps, lr, seed, accuracy in runs:
            run_id = f"{variant}/train.steps={steps},train.lr={lr}/seed{seed}"
            (out / "runs" / run_id).mkdir(parents=True)
            config = {"model": {"d_model": 64}, "train": {"steps": steps, "batch_size": 256, "lr": lr, "seed": seed}}
            (out / "runs" / run_id / "config.yaml").write_text(yaml.safe_dump(config))
            lines.append({"run_id": run_id, "variant": variant, "status": "done", "run_dir": f"runs/{run_id}",
                          "summary": {"test": {"accuracy": accuracy, "loss": 1 - accuracy}}})
        (out / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        return out

    first = sweep_folder("first", [("standard", 200, 0.003, s, 0.5) for s in range(3)]
                         + [("standard", 200, 0.01, s, 0.1) for s in range(3)])
    later = sweep_folder("later", [("standard", 800, 0.003, s, 0.9 + s / 100) for s in range(3)])
    points = curve_points([first, later], ["train.lr=3e-3"])  # 3e-3 and 0.003: one number
    assert {x: sorted(points["standard"][x]) for x in points["standard"]} == {
        51_200: [(0.5, "first")] * 3, 204_800: [(0.9, "later"), (0.91, "later"), (0.92, "later")]}
    table = write_curve([first, later], tmp_path / "curve.png", ["train.lr=0.003"])
    rows = [line for line in table.read_text().splitlines() if line.startswith("| standard |")]
    assert len(rows) == 2 and rows[0].endswith("| first |") and rows[1].startswith("| standard | 204,800 | 3 |")  # no paper's sweep: no mark
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert f"|\n\nReproduce:\n\n    modformer curve {first} {later} --where train.lr=0.003 --x sequences --out " \
           f"{tmp_path / 'curve.png'}\n" in table.read_text()  # the table ends, then how to make it again
    losses = curve_points([first, later], ["train.lr=0.003"], metric="loss")["standard"]
    assert sorted(v for v, _ in losses[204_800]) == pytest.approx([0.08, 0.09, 0.1])
    table = write_curve([first, later], tmp_path / "loss.png", ["train.lr=0.003"], metric="loss")
    assert "| test loss (mean" in table.read_text() and table.read_text().rstrip().endswith("--metric loss --out "
                                                                                           + str(tmp_path / "loss.png"))

    with pytest.raises(ModformerError, match="--metric perplexity: .* has no such test metric"):
        curve_points([first], metric="perplexity")
    with pytest.raises(ModformerError, match="train.learning_rate: no such config key"):
        curve_points([first], ["train.learning_rate=0.003"])
    with pytest.raises(ModformerError, match="no finished run"):
        curve_points([first], ["train.lr=0.5"])
    with pytest.raises(ModformerError, match="not a sweep directory"):
        curve_points([tmp_path / "runs"])
    # Two rates at one budget are two settings, not six seeds of one; one sweep's seeds twice
    # (the 1x point in two folders) would count each run twice.
    with pytest.raises(ModformerError, match=r"standard at sequences 51,200 differ in train.lr \(0.003, 0.01\)"):
        curve_points([first])
    again = sweep_folder("again", [("standard", 800, 0.003, s, 0.9) for s in range(2)])
    with pytest.raises(ModformerError, match="hold seed 0 more than once .from again, later."):
        curve_points([later, again])


def test_a_profile_sets_its_keys_before_the_overrides_and_an_unknown_one_is_refused(tmp_path, capsys):
    data = {**SWEEP, "profiles": {"budget": {"train.lr": 0.003, "sweep.grid": {"train.steps": [4, 8]}},
                                  "wide": {"model.d_model": 64}}}
    path = write(tmp_path, data)
    plain = load_sweep(path)
    assert plain.spec.grid == {"train.lr": [0.001, 0.01]} and plain.runs()[0].config.model.d_model == 32
    sweep = load_sweep(path, ["train.steps=5", "sweep.grid={train.steps: [6]}"], ["budget", "wide"])
    assert sweep.spec.grid == {"train.steps": [6]}  # the override comes after the profile
    assert {(r.config.train.lr, r.config.train.steps, r.config.model.d_model) for r in sweep.runs()} == {(0.003, 6, 64)}
    with pytest.raises(ConfigError, match=r"has no profile 'paper' \(its profiles: budget, wide\)"):
        load_sweep(path, profiles=["paper"])
    assert main(["sweep", str(path), "--profile", "paper", "--out", str(tmp_path / "out")]) == 2
    assert "no profile 'paper'" in capsys.readouterr().err and not (tmp_path / "out").exists()
    path.write_text(yaml.safe_dump({**SWEEP, "profiles": {"budget": [1, 2]}}))
    with pytest.raises(ConfigError, match="'profiles' must map each profile's name to its dotted keys"):
        load_sweep(path)


def finished_sweep(out, variants, seeds, runs, grid=None):
    """A sweep folder as a sweep leaves it, from (variant, lr, seed, validation accuracy, test
    accuracy) per finished run, written to results.jsonl in the order given (no run folders:
    the report says 'not recorded' for construction and budget, and draws no figure)."""
    out.mkdir()
    grid = grid or {"train.lr": sorted({lr for _, lr, _, _, _ in runs})}
    (out / "sweep.yaml").write_text(yaml.safe_dump({
        "format": RECORDS_FORMAT, "task": {"name": "retrieval"}, "sweep": {"experiment": "train", "variants": variants, "grid": grid,
                                                              "seeds": seeds, "metric": "accuracy", "mode": "max"}}))
    lines = []
    for variant, lr, seed, validation, test in runs:
        run_id = f"{variant}/train.lr={lr}/seed{seed}"
        lines.append({"run_id": run_id, "variant": variant, "point": {"train.lr": lr}, "seed": seed,
                      "status": "done", "run_dir": f"runs/{run_id}",
                      "summary": {"validation": {"accuracy": validation, "loss": 1 - validation},
                                  "test": {"accuracy": test, "loss": 1 - test},
                                  "parameters": {"trainable": 1000}, "tokens_per_s": 1.0, "model": variant}})
    (out / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


def table(report: str, heading: str) -> list[list[str]]:
    """The cells of each data row of the table under `heading` in a report."""
    lines = report.split(heading, 1)[1].split("\n## ", 1)[0].splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("|---")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]  # the header dropped


def test_the_whole_grids_test_accuracy_cells_are_the_runs_test_accuracies(tmp_path):
    """Every row of the report's whole grid shows, under 'test accuracy', the mean ± interval of
    its runs' TEST accuracies (validation and test differ in every run here), and under
    'validation accuracy' their validation ones."""
    from modformer.sweep.report import _cell

    runs = [("standard", lr, seed, 0.20 + 0.01 * seed + lr, 0.80 - 0.02 * seed - lr)
            for lr in (0.001, 0.01) for seed in (0, 1, 2)]
    report = write_report(finished_sweep(tmp_path / "out", ["standard"], [0, 1, 2], runs)).read_text()
    rows = table(report, "## The whole grid")
    assert [row[:3] for row in rows] == [["standard", "`train.lr=0.001`", "3"], ["standard", "`train.lr=0.01`", "3"]]
    for row, lr in zip(rows, (0.001, 0.01)):
        mine = [r for r in runs if r[1] == lr]
        assert row[3] == _cell([r[3] for r in mine], "accuracy")  # validation
        assert row[4] == _cell([r[4] for r in mine]) != row[3]  # test
    # The chosen setting's own row reads the test set too.
    [chosen] = table(report, "## Chosen setting per variant")
    assert chosen[4] == _cell([r[4] for r in runs if r[1] == 0.01])


@pytest.mark.parametrize("variants, seeds", [(["standard", "frozen_qk", "mixit"], [0, 1]),
                                             (["standard", "frozen_qk"], [0, 1, 2])])
def test_a_setting_is_complete_only_with_every_seed_of_the_sweep(tmp_path, variants, seeds):
    """A grid point counts as complete, and may be chosen, only when it holds EVERY seed of the
    sweep (not as many runs as the sweep has variants): here lr=0.01 lacks the last seed but has
    the best validation accuracy; lr=0.001 holds every seed and is chosen, for every variant."""
    runs = [(v, 0.001, s, 0.5, 0.5) for v in variants for s in seeds]
    runs += [(v, 0.01, s, 0.9, 0.9) for v in variants for s in seeds[:-1]]  # one seed short
    report = write_report(finished_sweep(tmp_path / "out", variants, seeds, runs)).read_text()
    chosen = table(report, "## Chosen setting per variant")
    assert [row[:3] for row in chosen] == [[v, "`train.lr=0.001`", str(len(seeds))] for v in variants]
    grid = table(report, "## The whole grid")
    assert {(row[0], row[1]) for row in grid if row[-1] == "yes"} == {(v, "`train.lr=0.001`") for v in variants}
    assert all(f"{v}/train.lr=0.01 ({len(seeds) - 1} of {len(seeds)} seeds)" in report for v in variants)


def test_the_report_states_the_sweeps_seeds_in_order_whatever_order_the_records_are_in(tmp_path):
    """results.jsonl lists runs as they finished (here seeds 1, 0, 2): the report names the
    sweep's seeds sorted, [0, 1, 2], and counts every one of them in each setting."""
    runs = [("standard", 0.001, s, 0.5, 0.5) for s in (1, 0, 2)]
    report = write_report(finished_sweep(tmp_path / "out", ["standard"], [0, 1, 2], runs)).read_text()
    assert "Seeds: [0, 1, 2]." in report
    assert table(report, "## Chosen setting per variant")[0][2] == "3"


def test_a_language_modelling_budget_is_counted_in_tokens_on_the_curve_and_the_reports_plot(tmp_path, monkeypatch):
    """For language modelling, x is what the runs trained on in TOKENS: steps x batch x seq_len
    (the reference's trainer.py unit), not steps x batch sequences; on `modformer curve` and on
    a sweep report's budget plot."""
    from modformer.sweep import budget_plot
    from modformer.sweep.curve import curve_points
    from modformer.sweep.report import point_label

    out = tmp_path / "lm"
    out.mkdir()
    (out / "sweep.yaml").write_text(f"format: {RECORDS_FORMAT}\n" "sweep: {experiment: train}\n")
    lines, groups = [], {}
    for steps in (10, 40):
        for seed in (0, 1):
            run_id = f"standard/train.steps={steps}/seed{seed}"
            (out / "runs" / run_id).mkdir(parents=True)
            config = {"model": {"d_model": 64}, "task": {"name": "lm", "seq_len": 32},
                      "train": {"steps": steps, "batch_size": 8, "lr": 0.001, "seed": seed}}
            (out / "runs" / run_id / "config.yaml").write_text(yaml.safe_dump(config))
            record = {"run_id": run_id, "variant": "standard", "point": {"train.steps": steps}, "status": "done",
                      "run_dir": f"runs/{run_id}", "summary": {"test": {"accuracy": 0.1, "loss": 5.0 - steps / 10}}}
            lines.append(record)
            groups.setdefault(("standard", point_label(record["point"])), []).append(record)
    (out / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    tokens = {10: 10 * 8 * 32, 40: 40 * 8 * 32}

    points = curve_points([out], metric="loss")["standard"]
    assert sorted(points) == [tokens[10], tokens[40]]
    assert sorted(v for v, _ in points[tokens[40]]) == [1.0, 1.0]

    drawn = {}
    monkeypatch.setattr(budget_plot, "draw_curves",
                        lambda lines, field, mark, path, metric: drawn.update(lines=lines, field=field, mark=mark))
    caption = budget_plot.plot_budget(out, tmp_path / "budget.png", {"train.steps": [10, 40]}, ["standard"], groups,
                                      "loss")
    assert "tokens trained on" in caption and drawn["field"] == "tokens" and drawn["mark"] is None  # no paper's
    # As one of the random-attention paper's experiments, trainer.py's budget in tokens is marked.
    budget_plot.plot_budget(out, tmp_path / "budget.png", {"train.steps": [10, 40]}, ["standard"], groups, "loss",
                            ["random_attention"])
    assert drawn["mark"][0] == 40_000 * 512 * 256 and "trainer.py's tokens" in drawn["mark"][1]
    assert {x: sorted(v) for x, v in drawn["lines"]["standard"].items()} == {tokens[10]: [4.0, 4.0],
                                                                            tokens[40]: [1.0, 1.0]}


def test_a_sweep_folder_of_an_older_records_format_is_refused_naming_the_command(tmp_path):
    """A sweep.yaml without today's `format` (written before 2026-12-06: no `experiment`, former
    task names) is neither continued nor read: one line names `modformer migrate` (which
    tests/test_migrate.py checks)."""
    out = tmp_path / "s"
    out.mkdir()
    runner = SweepRunner(load_sweep(write(tmp_path, SWEEP)), out)
    data = runner.sweep.to_dict()
    (out / "sweep.yaml").write_text(yaml.safe_dump({**data, "task": {**data["task"], "name": "condattend"}}))
    for read in (runner._check_same_sweep, lambda: read_results(out)):
        with pytest.raises(ModformerError, match=f"records of format 1, not this modformer's {RECORDS_FORMAT}: .*modformer migrate {out}"):
            read()

    (out / "sweep.yaml").unlink()
    runner._check_same_sweep()
    assert yaml.safe_load((out / "sweep.yaml").read_text())["format"] == RECORDS_FORMAT
    runner._check_same_sweep()  # not "holds a different sweep"


@pytest.mark.parametrize("override, message", [
    ("sweep.grid={train.lr: [0.001, 0.003, 0.001]}", "sweep.grid.train.lr names 0.001 twice"),
    ("sweep.grid={model.layers: [[standard, mixit], [standard, mixit]]}", "names ['standard', 'mixit'] twice"),
    ("sweep.variants=[standard, mixit, standard]", "sweep.variants names 'standard' twice"),
])
def test_a_value_or_variant_named_twice_is_refused_before_any_run(tmp_path, override, message):
    """Twice the same value would train one run folder twice (issue 51)."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_sweep(write(tmp_path, SWEEP), [override])


@pytest.mark.slow  # two tiny runs, each its own process
def test_a_sweeps_plan_is_fixed_at_its_first_launch_and_each_change_is_an_amendment(tmp_path, capsys):
    """The plan (arms, grid, seeds, metric) is recorded with the code version at the first
    launch; growing it later is refused without a reason, and with one is recorded and shown
    in the report; a folder whose runs predate plans says so."""
    from modformer.sweep.plan import read_plan

    out = tmp_path / "out"
    first = {**SWEEP, "sweep": {**SWEEP["sweep"], "variants": ["standard"], "seeds": [0], "grid": {"train.lr": [0.01]}}}
    SweepRunner(load_sweep(write(tmp_path, first)), out, echo=lambda m: None).run()
    plan = read_plan(out)
    assert plan["plan"]["seeds"] == [0] and plan["code_version"] and plan["amendments"] == []
    grown = {**first, "sweep": {**first["sweep"], "seeds": [0, 1]}}
    with pytest.raises(ModformerError, match=r"changes the sweep's plan \(seeds: \[0\] -> \[0, 1\]\).*--amend REASON"):
        SweepRunner(load_sweep(write(tmp_path, grown)), out, echo=lambda m: None).run()
    assert read_plan(out) == plan and len(read_results(out)) == 1  # nothing ran, nothing recorded
    SweepRunner(load_sweep(write(tmp_path, grown)), out, echo=lambda m: None, amend="a second seed, fixed now").run()
    (amendment,) = read_plan(out)["amendments"]
    assert amendment["changed"] == ["seeds: [0] -> [0, 1]"] and amendment["reason"] == "a second seed, fixed now"
    with pytest.raises(ModformerError, match="changes nothing of the plan"):
        SweepRunner(load_sweep(write(tmp_path, grown)), out, echo=lambda m: None, amend="again").run()
    report = write_report(out).read_text()
    assert f"Plan (plan.yaml): fixed {plan['fixed']}" in report
    assert "Amendment 1 (" in report and "seeds: [0] -> [0, 1]. Why: a second seed, fixed now" in report
    (out / "plan.yaml").unlink()  # as in a folder made before plans were recorded
    assert "Plan: none recorded (these runs were made before" in write_report(out).read_text()
