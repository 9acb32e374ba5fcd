"""Parts of the sweep a mutation sample found unchecked (results/mutation/sweep_survivors.txt):
the words its refusals and its plan's report lines use."""

import pytest
import yaml

from modformer.errors import ConfigError, ModformerError
from modformer.sweep.plan import plan_lines
from modformer.sweep.spec import SweepConfig


@pytest.mark.parametrize("seeds, message", [
    ([0, 0], r"^sweep\.seeds must be distinct and non-empty, got \[0, 0\]$"),
    ([], r"^sweep\.seeds must be distinct and non-empty, got \[\]$"),
    ([1, -2], r"^sweep\.seeds must be a seed >= 0, got \[1, -2\]$"),
])
def test_seeds_are_refused_by_name(seeds, message):
    with pytest.raises(ConfigError, match=message):
        SweepConfig(variants=["standard"], seeds=seeds)


def test_the_reports_plan_lines_say_when_it_was_fixed_and_every_amendment(tmp_path):
    assert plan_lines(tmp_path) == ["Plan: none recorded (these runs were made before sweeps recorded their plans).",
                                    ""]
    record = {"fixed": "2026-12-07T10:00:00+0000", "code_version": "0.1.0+abc", "plan": {"seeds": [0]},
              "amendments": [{"date": "2026-12-08", "code_version": "0.1.0+def", "changed": ["a: 1 -> 2", "b"],
                              "reason": "why", "plan": {"seeds": [0, 1]}}]}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(record))
    assert plan_lines(tmp_path) == ["Plan (plan.yaml): fixed 2026-12-07T10:00:00+0000 by 0.1.0+abc.",
                                    "Amendment 1 (2026-12-08, 0.1.0+def): a: 1 -> 2; b. Why: why", ""]
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump({"fixed": None, "code_version": None, "note": "transcribed",
                                                        "plan": {"seeds": [0]}}))
    assert plan_lines(tmp_path) == ["Plan (plan.yaml): not recorded at the first runs (they predate recorded plans). "
                                    "Note: transcribed.", ""]
    (tmp_path / "plan.yaml").write_text("[1, 2]\n")
    with pytest.raises(ModformerError, match=r"plan\.yaml holds no plan \(empty or damaged\)$"):
        plan_lines(tmp_path)


def _planned(tmp_path, *overrides):
    """A sweep folder of two tiny retrieval runs with its plan recorded and no run started."""
    from modformer.cli import main

    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"d_model": 16, "n_heads": 2}, "task": {"name": "retrieval", "n_pairs": 2, "test_size": 20,
                                                       "validation_size": 10},
        "train": {"steps": 2, "batch_size": 4}, "sweep": {"variants": ["standard", "mixit"], "seeds": [0]}}))
    out = tmp_path / "out"
    assert main(["sweep", str(config), *overrides, "--plan-only", "--out", str(out)]) == 0
    return config, out


def test_every_amendment_is_kept_beside_the_ones_before(tmp_path):
    from modformer.cli import main

    config, out = _planned(tmp_path)
    for threshold, reason in ((0.9, "first"), (0.8, "second")):
        assert main(["sweep", str(config), f"sweep.verdict.threshold={threshold}", "--plan-only", "--amend", reason,
                     "--out", str(out)]) == 0
    record = yaml.safe_load((out / "plan.yaml").read_text())
    assert [a["reason"] for a in record["amendments"]] == ["first", "second"]
    assert record["plan"]["verdict"] == {} and record["amendments"][-1]["plan"]["verdict"] == {"threshold": 0.8}


def test_the_status_words_of_finished_and_failed_runs_are_their_records(tmp_path):
    import json

    from modformer.sweep.status import run_statuses

    _, out = _planned(tmp_path)
    records = [{"run_id": "standard/default/seed0", "run_dir": "runs/standard/default/seed0", "variant": "standard",
                "point": {}, "seed": 0, "status": "failed", "error": "RuntimeError: the last line of its log"},
               {"run_id": "mixit/default/seed0", "run_dir": "runs/mixit/default/seed0", "variant": "mixit",
                "point": {}, "seed": 0, "status": "done", "summary": {"test": {"accuracy": 0.5, "loss": 1.0}}}]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    statuses = {run_id: (status, detail) for run_id, status, detail in run_statuses(out)}
    assert statuses["standard/default/seed0"] == ("failed", "RuntimeError: the last line of its log")
    assert statuses["mixit/default/seed0"] == ("done", "test accuracy 0.5000, loss 1.0000")


def test_a_budget_curve_reads_only_its_own_variants_budgets(tmp_path):
    import json

    from modformer.sweep.quote import Records

    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "sweep.yaml").write_text(yaml.safe_dump({"format": 4, "sweep": {"variants": ["a", "b"], "seeds": [0],
                                                                               "grid": {"train.steps": [1, 2, 4]}}}))
    runs = [("a", 1), ("a", 2), ("b", 4)]
    (folder / "results.jsonl").write_text("".join(json.dumps(
        {"run_id": f"{v}/train.steps={s}/seed0", "run_dir": "x", "variant": v, "point": {"train.steps": s}, "seed": 0,
         "status": "done", "summary": {"test": {"accuracy": 0.5}}}) + "\n" for v, s in runs))
    assert Records(tmp_path).values_of("s", "a", {}, "train.steps") == [1, 2]
    with pytest.raises(ModformerError, match="no finished run of b along train.seeds"):
        Records(tmp_path).values_of("s", "b", {}, "train.seeds")


def test_a_run_starts_without_progress_bars_grouped_by_its_sweep_and_with_its_threads(tmp_path):
    """prepare() writes the config a run starts with: no progress bars in its log, a tracker's
    runs grouped under the sweep's folder name, the worker's thread count (or the one the run
    first started with, so that its resumption stays bit-identical)."""
    from modformer.sweep.runner import SweepRunner
    from modformer.sweep.spec import load_sweep

    _, out = _planned(tmp_path, "train.progress=true", "train.log_to=[tensorboard]")
    runner = SweepRunner(load_sweep(out / "sweep.yaml"), out, echo=lambda *_: None)
    run = runner.sweep.runs()[0]
    cmd, env, log = runner.prepare(run, threads=2)
    started = yaml.safe_load((out / "configs" / f"{run.run_id}.yaml").read_text())
    assert started["train"]["progress"] is False and started["train"]["log_group"] == "out"
    assert started["train"]["threads"] == 2 and env == {"OMP_NUM_THREADS": "2"} and log.exists()
    (out / "runs" / run.run_id).mkdir(parents=True)
    (out / "runs" / run.run_id / "config.yaml").write_text(yaml.safe_dump({"train": {"threads": 1}}))
    assert runner.prepare(run, threads=2)[1] == {"OMP_NUM_THREADS": "1"}  # as it first started


def test_a_budget_curve_draws_each_mean_with_its_interval_clipped_to_the_metrics_range(tmp_path, monkeypatch):
    """draw_curves: x on a log scale named by what was counted, each point the mean of its runs
    with its 95% t interval clipped to [0, 1] for an accuracy, the whole range shown, the
    paper's mark as a line of its own."""
    from modformer.stats import summarize
    from modformer.sweep import budget_plot

    drawn = {}
    monkeypatch.setattr(budget_plot, "save_figure", lambda fig, path: drawn.update(fig=fig))
    runs = {100: [0.2, 0.5, 0.8], 400: [0.9, 0.99, 1.0]}
    budget_plot.draw_curves({"mixit": runs}, "width", (200, "the paper's width"), tmp_path / "p.png")
    ax = drawn["fig"].axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "width (d_model)" and ax.get_ylabel() == "test accuracy"
    assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
    bars = [(segment[0][1], segment[1][1]) for segment in ax.containers[0].lines[2][0].get_segments()]
    for (bottom, top), values in zip(bars, runs.values(), strict=True):
        s = summarize(values)
        assert bottom == pytest.approx(max(s.low, 0.0)) and top == pytest.approx(min(s.high, 1.0))
    assert [line.get_label() for line in ax.get_lines()][-1] == "the paper's width"
    budget_plot.draw_curves({"mixit": runs}, "tokens", None, tmp_path / "p.png", metric="loss")
    assert drawn["fig"].axes[0].get_xlabel() == "tokens trained on"


def test_the_slice_plot_orders_slices_by_number_and_names_each_variants_chosen_setting(tmp_path, monkeypatch):
    """_plot_slices: slices in numeric order (2 before 10), each point the mean over seeds with
    its interval clipped to [0, 1], the legend naming a variant's chosen setting unless the grid
    gave no choice."""
    from modformer.stats import summarize
    from modformer.sweep import report

    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))

    def run(accuracies):
        return {"summary": {"test": {"slices": {"n_pairs": {k: {"accuracy": a} for k, a in accuracies.items()}}}}}

    seeds = [{"10": 0.2, "2": 0.9}, {"10": 0.4, "2": 0.95}, {"10": 0.3, "2": 1.0}]
    groups = {("standard", "default"): [run(a) for a in seeds], ("mixit", "train.lr=0.01"): [run(a) for a in seeds]}
    chosen = {"standard": "default", "mixit": "train.lr=0.01"}
    report._plot_slices(tmp_path / "s.png", ["n_pairs"], ["standard", "mixit"], groups, chosen)
    ax = drawn["fig"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "10"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["standard", "mixit (train.lr=0.01)"]
    bars = [(segment[0][1], segment[1][1]) for segment in ax.containers[0].lines[2][0].get_segments()]
    for (bottom, top), key in zip(bars, ["2", "10"], strict=True):
        s = summarize([a[key] for a in seeds])
        assert bottom == pytest.approx(max(s.low, 0.0)) and top == pytest.approx(min(s.high, 1.0))


def test_gathering_ended_slurm_jobs_records_each_once_with_what_ended_it(tmp_path):
    """slurm.gather: a live job is left; an ended one is recorded done where its run wrote its
    summary, else failed with its Slurm state and, but for a job Slurm killed, its log's last
    line; a job already recorded, or a run already done, is not recorded again."""
    import json

    from modformer.sweep.kinds import run_kind
    from modformer.sweep.runner import read_results
    from modformer.sweep.slurm import gather

    out = tmp_path / "sweep"
    (out / "slurm").mkdir(parents=True)
    names = ["running", "finished", "failed", "cancelled", "recorded"]
    jobs = [{"run_id": f"standard/default/{n}", "job_id": f"7_{i}",
             "base": {"run_id": f"standard/default/{n}", "run_dir": f"runs/standard/default/{n}", "variant": "standard",
                      "point": {}, "seed": i}} for i, n in enumerate(names)]
    (out / "slurm" / "jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs))
    for n in names:
        (out / "runs" / "standard" / "default" / n).mkdir(parents=True)
    (out / "runs/standard/default/finished/summary.json").write_text(json.dumps({"test": {"accuracy": 0.5}}))
    (out / "logs" / "standard" / "default").mkdir(parents=True)
    (out / "logs/standard/default/failed.log").write_text("step 10\nRuntimeError: boom\n")
    (out / "logs/standard/default/cancelled.log").write_text("step 10\n")
    (out / "results.jsonl").write_text(json.dumps({**jobs[4]["base"], "status": "failed", "slurm_job": "7_4"}) + "\n")
    said = []
    states = {"standard/default/running": "RUNNING", "standard/default/finished": "COMPLETED",
              "standard/default/failed": "FAILED", "standard/default/cancelled": "CANCELLED",
              "standard/default/recorded": "FAILED"}
    gather(out, states, said.append, kind=run_kind("train"))
    results = read_results(out)
    assert "standard/default/running" not in results
    assert results["standard/default/finished"]["status"] == "done"
    assert results["standard/default/finished"]["summary"] == {"test": {"accuracy": 0.5}}
    assert results["standard/default/failed"]["error"] == (
        "Slurm job 7_2 ended FAILED: RuntimeError: boom; no checkpoint yet, kept: submit the sweep again to continue it")
    assert results["standard/default/cancelled"]["error"].startswith("Slurm job 7_3 ended CANCELLED; no checkpoint")
    assert results["standard/default/cancelled"]["slurm_state"] == "CANCELLED"
    lines = (out / "results.jsonl").read_text().splitlines()
    gather(out, states, said.append, kind=run_kind("train"))
    assert (out / "results.jsonl").read_text().splitlines() == lines and len(lines) == 4  # each recorded once
    assert len(said) == 3


def one_slurm_job_statuses(tmp_path, monkeypatch, state, accounting=None):
    """--status's (status, detail) per run of a planned sweep whose mixit run is Slurm job 9_1,
    reported in `state` (and `accounting`: what was recorded of the jobs' earlier states)."""
    import json

    from modformer.sweep import status

    _, out = _planned(tmp_path)
    (out / "slurm").mkdir()
    (out / "slurm" / "jobs.jsonl").write_text(json.dumps({"run_id": "mixit/default/seed0", "job_id": "9_1",
                                                          "base": {}}) + "\n")
    monkeypatch.setattr(status, "job_states", lambda out, jobs, **_: {run_id: state for run_id in jobs})
    monkeypatch.setattr(status, "read_accounting", lambda out: accounting or {})
    return {run_id: (s, detail) for run_id, s, detail in status.run_statuses(out)}


@pytest.mark.parametrize("state, word", [("PENDING", "queued"), ("REQUEUE_HOLD", "queued"), ("CONFIGURING", "queued"),
                                         ("RUNNING", "running"), ("COMPLETING", "running")])
def test_a_live_slurm_job_is_queued_or_running_by_its_state(tmp_path, monkeypatch, state, word):
    statuses = one_slurm_job_statuses(tmp_path, monkeypatch, state)
    assert statuses["mixit/default/seed0"] == (word, f"Slurm job 9_1 ({state})")
    assert statuses["standard/default/seed0"] == ("not started", "")


def test_an_unknown_profile_is_refused_naming_the_file_and_its_profiles(tmp_path):
    from modformer.sweep.spec import load_sweep

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"task": {"name": "retrieval"}, "sweep": {"variants": ["standard"]},
                                    "profiles": {"budget": {"train.steps": 800}, "wide": {"model.d_model": 256}}}))
    with pytest.raises(ConfigError, match=rf"^{path} has no profile 'long' \(its profiles: budget, wide\)$"):
        load_sweep(path, profiles=["long"])
    assert load_sweep(path, profiles=["budget"]).base["train"]["steps"] == 800


def test_a_folder_older_than_plans_compares_a_changed_sweep_with_its_saved_one(tmp_path, capsys):
    """Where no plan was recorded (runs made before plans), the sweep file saved at the first
    launch stands for it: a change of seeds is an amendment like any other."""
    from modformer.cli import main

    config, out = _planned(tmp_path)
    (out / "plan.yaml").unlink()
    capsys.readouterr()
    assert main(["sweep", str(config), "sweep.seeds=[0, 1]", "--plan-only", "--out", str(out)]) == 2
    assert "this changes the sweep's plan (seeds: [0] -> [0, 1])" in capsys.readouterr().err
    assert main(["sweep", str(config), "--plan-only", "--out", str(out)]) == 0  # unchanged: nothing to say


def test_a_papers_mark_is_drawn_at_the_axis_the_curve_has(monkeypatch):
    """sections.mark: the first paper that marks a run's config gives its mark for the curve's
    axis (a budget, or a width); a run without a config, or no paper, gives none."""
    from modformer.sweep import sections

    monkeypatch.setitem(sections.MARKS, "p", lambda config, axis: (512.0, "its width") if axis == "width" else None)
    monkeypatch.setitem(sections.MARKS, "q", lambda config, axis: (1e8, "its budget"))
    assert sections.mark(["p", "q"], {}, "width") == (512.0, "its width")
    assert sections.mark(["p", "q"], {}, "amount") == (1e8, "its budget")
    assert sections.mark(["p"], {}, "amount") is None and sections.mark(["p", "q"], None, "width") is None


def test_a_width_curve_reads_each_runs_width_and_the_papers_width_mark(tmp_path, monkeypatch):
    """plot_budget over a width grid: x is each run's width (from its summary's budget where its
    config is gone), one line per variant and other grid value, the paper's width mark asked
    for the width axis."""
    from modformer.sweep import budget_plot, sections

    drawn = {}
    monkeypatch.setattr(budget_plot, "draw_curves", lambda lines, field, mark, path, metric: drawn.update(
        lines=lines, field=field, mark=mark))
    monkeypatch.setitem(sections.MARKS, "p", lambda config, axis: (512.0, "the paper's width") if axis == "width"
                        else (1e8, "its budget"))

    def run(width, lr, seed, accuracy, config=True, variant="mixit"):
        run_dir = f"runs/{variant}/w{width}_{lr}/seed{seed}"
        if config:
            (tmp_path / run_dir).mkdir(parents=True)
            (tmp_path / run_dir / "config.yaml").write_text(yaml.safe_dump(
                {"model": {"d_model": width}, "task": {"name": "retrieval"}, "train": {"steps": 10, "batch_size": 2}}))
        return {"run_id": run_dir[5:], "run_dir": run_dir, "point": {"model.d_model": width, "train.lr": lr},
                "summary": {"budget": {"sequences": 20, "width": width}, "test": {"accuracy": accuracy}}}

    groups = {("mixit", "a"): [run(64, 0.01, 0, 0.5), run(64, 0.01, 1, 0.7, config=False)],
              ("mixit", "b"): [run(128, 0.01, 0, 0.9)], ("standard", "c"): [run(128, 0.01, 0, 1.0, variant="standard")]}
    caption = budget_plot.plot_budget(tmp_path, tmp_path / "b.png", {"model.d_model": [64, 128], "train.lr": [0.01]},
                                      ["mixit"], groups, papers=["p"])
    assert caption and drawn["field"] == "width" and drawn["mark"] == (512.0, "the paper's width")
    assert drawn["lines"] == {"mixit, train.lr=0.01": {64: [0.5, 0.7], 128: [0.9]}}


def test_budget_plot_draws_every_grid_point_and_only_for_budget_or_width_grids(tmp_path):
    from modformer.sweep.budget_plot import plot_budget

    def run(steps, seed, accuracy):
        return {"point": {"train.steps": steps}, "run_id": f"{steps}-{seed}", "run_dir": f"runs/{steps}-{seed}",
                "summary": {"budget": {"sequences": steps * 256, "fraction": 0.0, "width": 64, "width_fraction": 0.1},
                            "test": {"accuracy": accuracy}}}

    groups = {("mixit", "train.steps=200"): [run(200, s, 0.3 + 0.01 * s) for s in range(3)],
              ("mixit", "train.steps=800"): [run(800, s, 0.5) for s in range(3)]}
    caption = plot_budget(tmp_path, tmp_path / "budget.png", {"train.steps": [200, 800]}, ["mixit"], groups)
    assert caption and "sequences" in caption and (tmp_path / "budget.png").stat().st_size > 0
    assert plot_budget(tmp_path, tmp_path / "other.png", {"train.lr": [1e-3]}, ["mixit"], groups) is None
    assert not (tmp_path / "other.png").exists()


def test_a_grid_value_yaml_cannot_give_is_compared_by_its_repr():
    """A sweep built in Python may hold values JSON cannot write: duplicates are still refused
    in words, not by a TypeError."""
    from decimal import Decimal

    with pytest.raises(ConfigError, match=r"^sweep\.grid\.model\.d_model names Decimal\('64'\) twice: each value once$"):
        SweepConfig(variants=["standard"], grid={"model.d_model": [Decimal(64), Decimal(64)]})


def test_a_base_section_that_is_not_a_mapping_is_refused_where_the_variant_is_set(tmp_path):
    from modformer.sweep.spec import load_sweep

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": [1], "task": {"name": "retrieval"}, "sweep": {"variants": ["standard"]}}))
    with pytest.raises(ConfigError, match=r"^sweep\.variants: 'model' is not a section$"):
        load_sweep(path).runs()


def test_the_jobs_of_runs_recorded_done_are_not_asked_after(tmp_path, monkeypatch):
    import json

    from modformer.sweep import status

    _, out = _planned(tmp_path)
    (out / "slurm").mkdir()
    (out / "slurm" / "jobs.jsonl").write_text("".join(json.dumps({"run_id": f"{v}/default/seed0", "job_id": f"9_{i}",
                                                                  "base": {}}) + "\n"
                                                      for i, v in enumerate(["standard", "mixit"])))
    (out / "results.jsonl").write_text(json.dumps({"run_id": "mixit/default/seed0", "status": "done",
                                                         "summary": {"test": {"accuracy": 0.5, "loss": 1.0}}}) + "\n")
    asked = []
    monkeypatch.setattr(status, "job_states", lambda out, jobs, **_: asked.append(sorted(jobs)) or {})
    assert status.run_statuses(out)[1][:2] == ("mixit/default/seed0", "done")
    assert asked == [["standard/default/seed0"]]


@pytest.mark.parametrize("squeue, words", [((None, "squeue: timed out"), "; squeue too: squeue: timed out"),
                                           (({}, ""), "; squeue answers")])
def test_an_accounting_outage_says_whether_squeue_answers(tmp_path, monkeypatch, squeue, words):
    from modformer.sweep import slurm_states

    monkeypatch.setattr(slurm_states, "ask_sacct", lambda ids: (None, "sacct: connection refused"))
    monkeypatch.setattr(slurm_states, "ask_squeue", lambda ids: squeue)
    said = []
    states = slurm_states.query_states(tmp_path, {"r": {"job_id": "9_1", "submitted_s": 0}}, echo=said.append)
    assert states == {"r": "UNKNOWN"}
    assert said == [f"Slurm accounting unreachable (sacct: connection refused{words}): a job neither lists is unknown, "
                    f"never taken for ended, until accounting answers"]
