"""The sweep report's and quotes' words off the straight path: failed runs named, a sweep
without a grid or a base model, a task without accuracy, the parts' own losses, plots' bars and
legends, a verdict at its exact boundary, `modformer quote`'s words. Each test was written for a
survivor of the sweep package's mutation sample (results/mutation/sweep_survivors.txt)."""

import json

import pytest
import yaml

from modformer.cli import main
from modformer.stats import summarize
from modformer.sweep import report
from modformer.sweep.report import write_report
from modformer.sweep.verdict import VerdictConfig, verdict
from modformer.train.records import read_records
from test_quote import RUNS, assert_refused, quoted, sweep_folder
from test_sweep import finished_sweep, table


def rewrite(out, change):
    """results.jsonl with `change(record)` applied to each record (and any it returns appended)."""
    lines, extra = list(read_records(out / "results.jsonl")), []
    for record in lines:
        extra += change(record) or []
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines + extra))


def test_the_reports_header_names_failed_runs_defaults_and_a_sweep_without_a_grid(tmp_path):
    out = finished_sweep(tmp_path / "out", ["standard"], [0, 1, 2], [("standard", 0.01, s, 0.5, 0.5) for s in range(3)])
    spec = yaml.safe_load((out / "sweep.yaml").read_text())
    spec["sweep"]["grid"] = {}
    (out / "sweep.yaml").write_text(yaml.safe_dump(spec))
    rewrite(out, lambda r: r.update(point={}) or ([{**r, "run_id": "standard/default/seed3", "status": "failed",
                                                    "error": "x"}] if r["seed"] == 0 else None))
    text = write_report(out).read_text()
    assert "base model defaults; training defaults." in text
    assert "The same grid for every variant: no grid (one setting)." in text
    assert "**1 run(s) failed and are left out:** standard/default/seed3" in text


def test_a_task_without_accuracy_shows_n_a_and_its_own_metrics(tmp_path):
    out = finished_sweep(tmp_path / "out", ["standard"], [0, 1, 2], [("standard", 0.01, s, 0.5, 0.5) for s in range(3)])
    rewrite(out, lambda r: r["summary"].update(test={"loss": 0.3, "mse": 0.1 * (1 + r["seed"])}))
    text = write_report(out).read_text()
    assert table(text, "## Chosen setting per variant")[0][4] == "n/a"
    assert table(text, "## The whole grid")[0][4] == "n/a"
    assert table(text, "## Other test metrics")[0] == ["standard", report._cell([0.1, 0.2, 0.3], "mse")]


def test_the_parts_own_losses_get_a_table_of_the_chosen_settings(tmp_path):
    out = finished_sweep(tmp_path / "out", ["standard", "mixit"], [0, 1, 2],
                         [(v, 0.01, s, 0.5, 0.5) for v in ("standard", "mixit") for s in range(3)])
    rewrite(out, lambda r: r["summary"].update(aux={"balance": -0.1 * r["seed"]}) if r["variant"] == "mixit" else None)
    text = write_report(out).read_text()
    assert "## Auxiliary losses (chosen settings; the last logged training window, unweighted)\n\n| variant |" in text
    rows = table(text, "## Auxiliary losses")
    assert rows == [["standard", "n/a"], ["mixit", report._cell([0.0, -0.1, -0.2], "term")]]
    assert "-0.1" in rows[1][1]  # a term's interval is not clipped at 0 as a loss's is


def test_slices_sort_numbers_by_value_before_words():
    keys = ["10", "abc", "2", "-1", "0.5", "X1", "-"]
    assert sorted(keys, key=report._sort_key) == ["-1", "0.5", "2", "10", "-", "X1", "abc"]


def test_two_seeds_draw_a_slices_bar_on_both_sides(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))
    runs = [{"summary": {"test": {"slices": {"k": {"1": {"accuracy": a}}}}}} for a in (0.4, 0.6)]
    report._plot_slices(tmp_path / "s.png", ["k"], ["standard"], {("standard", "default"): runs},
                        {"standard": "default"})
    [(bottom, top)] = [(s[0][1], s[1][1]) for s in drawn["fig"].axes[0].containers[0].lines[2][0].get_segments()]
    stats = summarize([0.4, 0.6])
    assert bottom == pytest.approx(max(stats.low, 0.0)) and top == pytest.approx(min(stats.high, 1.0))
    assert bottom < 0.5 < top


def test_curves_over_steps_name_each_variant_and_its_chosen_setting(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))
    groups = {}
    for variant, point in (("standard", "default"), ("mixit", "train.lr=0.01")):
        run_dir = tmp_path / variant
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(
            {"kind": "eval", "split": "validation", "step": s, "accuracy": s / 10}) + "\n" for s in (1, 2)))
        groups[(variant, point)] = [{"run_dir": variant}]
    assert report._plot_curves(tmp_path, tmp_path / "c.png", ["standard", "mixit"], groups,
                               {"standard": "default", "mixit": "train.lr=0.01"})
    ax = drawn["fig"].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["standard", "mixit (train.lr=0.01)"]


def test_a_reference_exactly_at_the_threshold_has_not_solved_the_task():
    """`solves` compares a seed with its threshold strictly; the reference it is measured
    against is held to the same test."""
    params = VerdictConfig(threshold=0.9)
    assert verdict("solves", [0.5, 0.5, 0.5], params, "here", reference=[0.95, 0.9, 0.99]) == "unconverged"
    assert verdict("solves", [0.5, 0.5, 0.5], params, "here", reference=[0.95, 0.91, 0.99]) == "does not"


def test_an_interval_that_touches_the_margins_edge_is_not_outside_it():
    values, params = [0.4, 0.5, 0.6], VerdictConfig(margin=0.125)
    low, _ = summarize(values).interval(None)
    target = low - 0.125
    assert target + 0.125 == low  # exactly at the edge (0.125 is exact in binary)
    assert verdict("near", values, params, "here", target=target) == "no order at this budget"
    assert verdict("near", values, params, "here", target=target - 1e-9) == "does not"


def test_over_takes_exactly_one_axis(tmp_path):
    sweep_folder(tmp_path, RUNS)
    for spec in ("sweep mixit test.accuracy verdict=solves over", "sweep mixit test.accuracy verdict=solves over a b"):
        assert_refused(tmp_path, spec, rf"^quote '{spec}': 'over' takes one grid axis, the budget curve's "
                                       r"\(e\.g\. train\.steps\)$")


def test_quote_says_what_it_rewrote_or_that_every_figure_matches(tmp_path, capsys):
    sweep_folder(tmp_path, RUNS)
    page = tmp_path / "README.md"
    page.write_text(quoted("sweep mixit test.accuracy %2") + " " + quoted("sweep mixit test.loss .2") + "\n")
    assert main(["quote", str(page)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{page}: 2 figure(s) rewritten"
    assert main(["quote", str(page), "--check"]) == 0
    assert capsys.readouterr().out == f"{page}: every quoted figure matches its records\n"


def test_quotes_help_gives_the_syntax_and_an_example_page(capsys):
    with pytest.raises(SystemExit):
        main(["quote", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Every <!--q SPEC-->VALUE<!--/q--> is rewritten from the records SPEC names" in text
    assert "a Markdown file, e.g. results/random_attention/README.md" in text


def test_a_quote_of_too_few_words_is_refused_with_its_grammar(tmp_path):
    sweep_folder(tmp_path, RUNS)
    assert_refused(tmp_path, "sweep mixit %2", r"^quote 'sweep mixit %2': expected FOLDER VARIANT \[KEY=VALUE \.\.\.\] "
                                               r"METRIC FORMAT \[FLAG\]$")


def test_runs_beyond_the_saved_grid_and_variants_seeds_that_differ_are_named(tmp_path):
    runs = [("standard", 0.01, s, 0.5, 0.5) for s in range(3)] + [("mixit", 0.01, s, 0.5, 0.5) for s in range(2)]
    out = finished_sweep(tmp_path / "out", ["standard", "mixit"], [0, 1, 2], runs)
    rewrite(out, lambda r: [{**r, "run_id": r["run_id"].replace("0.01", "0.1"), "point": {"train.lr": 0.1}}]
            if r["seed"] == 0 else None)
    text = write_report(out).read_text()
    assert "Seeds: standard [0, 1, 2]; mixit [0, 1]." in text
    assert "Runs beyond that grid, from later commands (commands.txt): `train.lr=0.1` (standard, mixit)." in text


def test_slice_rows_run_in_numeric_order_and_an_induction_figure_is_captioned(tmp_path):
    out = finished_sweep(tmp_path / "out", ["standard"], [0, 1, 2], [("standard", 0.01, s, 0.5, 0.5) for s in range(3)])
    rewrite(out, lambda r: r["summary"]["test"].update(slices={"n_pairs": {k: {"accuracy": 0.5} for k in ("10", "2")}}))
    for r in read_records(out / "results.jsonl"):
        (out / r["run_dir"]).mkdir(parents=True)
        (out / r["run_dir"] / "metrics.jsonl").write_text(json.dumps({"kind": "induction", "step": 5,
                                                                      "scores": [[0.1, 0.7]]}) + "\n")
    text = write_report(out).read_text()
    assert [row[0] for row in table(text, "## Test accuracy per `n_pairs` (chosen settings)")] == ["2", "10"]
    assert "Strongest induction head (max over layers and heads) during training, chosen settings (mean over seeds, " \
           "band: min to max):\n\n![induction.png](induction.png)" in text


def test_each_slice_gets_a_panel_of_its_own_width(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))
    runs = [{"summary": {"test": {"slices": {"a": {"1": {"accuracy": 0.5}}, "b": {"1": {"accuracy": 0.5}}}}}}]
    report._plot_slices(tmp_path / "s.png", ["a", "b"], ["standard"], {("standard", "default"): runs},
                        {"standard": "default"})
    assert tuple(drawn["fig"].get_size_inches()) == (12.0, 4.0)
