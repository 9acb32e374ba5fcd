"""Verdicts as quotes (modformer/sweep/verdict.py): the word a page writes for a claim is computed
from the records by the stated rule, its parameters declared in the sweep file and planned;
a wrong word typed fails `modformer quote --check`."""

import json

import pytest
import yaml
from scipy.stats import binomtest

from modformer.cli import main
from modformer.errors import ModformerError
from modformer.sweep.quote import quote_file
from modformer.sweep.verdict import VerdictConfig, verdict
from modformer.version import RECORDS_FORMAT

PARAMS = VerdictConfig(threshold=0.9, margin=0.05)


@pytest.mark.parametrize("values, reference, word", [
    ([0.95, 0.99, 1.0], None, "agrees"),
    ([0.5, 0.49, 0.51], [1.0, 1.0, 0.99], "does not"),
    ([0.5, 0.49, 0.51], None, "does not"),
    ([0.99, 0.99, 0.99], [1.0, 0.5, 1.0], "unconverged"),  # the reference did not learn it: no test
    ([0.5, 0.49, 0.51], [0.5, 0.5, 0.5], "unconverged"),
])
def test_solves(values, reference, word):
    assert verdict("solves", values, PARAMS, "here", reference) == word


def test_split_seeds_give_the_success_rate_with_its_wilson_interval():
    low, high = binomtest(2, 3).proportion_ci(0.95, method="wilson")
    assert verdict("solves", [0.99, 0.5, 0.95], PARAMS, "here") == \
        f"2 of 3 seeds (67% [{100 * low:.0f}, {100 * high:.0f}])" == "2 of 3 seeds (67% [21, 94])"
    assert verdict("fails", [0.99, 0.5, 0.95], PARAMS, "here") == "2 of 3 seeds (67% [21, 94])"
    assert verdict("fails", [0.1, 0.5, 0.3], PARAMS, "here") == "agrees"
    assert verdict("fails", [0.91, 0.95, 0.99], PARAMS, "here") == "does not"


@pytest.mark.parametrize("rule, differences, word", [
    ("below", [-0.3, -0.31, -0.29], "agrees"),
    ("below", [0.3, 0.31, 0.29], "does not"),
    ("below", [-0.3, 0.2, 0.05], "no order at this budget"),
    ("above", [0.3, 0.31, 0.29], "agrees"),
    ("equal", [0.001, -0.002, 0.0], "agrees"),  # within +-0.05
    ("equal", [0.0, 0.0, 0.0], "agrees"),
    ("equal", [0.3, 0.31, 0.29], "does not"),
    ("equal", [-0.3, 0.2, 0.05], "no order at this budget"),  # includes 0, reaches past the margin
])
def test_paired_differences(rule, differences, word):
    assert verdict(rule, differences, PARAMS, "here") == word


def test_a_rule_whose_parameter_the_sweep_does_not_declare_is_refused_naming_it():
    with pytest.raises(ModformerError, match=r"^verdict=solves reads sweep\.verdict\.threshold, which folder does not "
                                             r"declare: .*--plan-only\)$"):
        verdict("solves", [1.0], VerdictConfig(), "folder")
    with pytest.raises(ModformerError, match=r"^verdict=equal reads sweep\.verdict\.margin, which folder does not"):
        verdict("equal", [0.0, 0.1], VerdictConfig(threshold=0.9), "folder")


@pytest.mark.parametrize("values, span, word", [
    ([0.48, 0.49, 0.5], None, "agrees"),  # within 0.486 +- 0.05
    ([0.25, 0.254, 0.256], None, "does not"),  # wholly below 0.436
    ([0.25, 0.254, 0.256], 16, "unconverged"),  # the same at one budget of a sweep that reads curves
    ([0.3, 0.5, 0.6], None, "no order at this budget"),  # straddles an edge
])
def test_near_reads_the_interval_against_the_claimed_value_and_the_margin(values, span, word):
    assert verdict("near", values, VerdictConfig(margin=0.05, span=span), "here", target=0.486) == word


def test_near_names_its_value_in_the_quote(tmp_path):
    from modformer.sweep.quote import Records, render

    _sweep(tmp_path, {"margin": 0.1}, {"mixit": [0.5, 0.45, 0.52]})
    assert render("s mixit test.accuracy verdict=near=0.486", Records(tmp_path)) == "agrees"
    assert render("s mixit test.accuracy verdict=near=0.9", Records(tmp_path)) == "does not"
    for spec, says in [("s mixit test.accuracy verdict=near", "near=VALUE"),
                       ("s mixit test.accuracy verdict=solves=0.5", "near=VALUE"),
                       ("s mixit test.accuracy verdict=near=half", "expected a number, got 'half'")]:
        with pytest.raises(ModformerError, match=says):
            render(spec, Records(tmp_path))


def test_an_interval_reaching_exactly_the_margin_counts_as_within_it():
    from modformer.stats import summarize

    differences = [-0.01, 0.0, 0.01]
    low, high = summarize(differences).interval(None)
    assert verdict("equal", differences, VerdictConfig(margin=high), "here") == "agrees"  # -margin <= low, high <= margin
    assert verdict("equal", differences, VerdictConfig(margin=high * 0.999), "here") == "no order at this budget"


def _sweep(root, verdict_params, accuracies):
    """A sweep folder of two variants with the given per-seed test accuracies."""
    folder = root / "s"
    folder.mkdir()
    sweep = {"variants": list(accuracies), "grid": {}, "seeds": [0, 1, 2], "verdict": verdict_params}
    (folder / "sweep.yaml").write_text(yaml.safe_dump({"format": RECORDS_FORMAT, "sweep": sweep}))
    lines = [json.dumps({"run_id": f"{v}/default/seed{s}", "run_dir": f"runs/{v}/default/seed{s}", "variant": v,
                         "point": {}, "seed": s, "status": "done", "summary": {"test": {"accuracy": a}}})
             for v, values in accuracies.items() for s, a in enumerate(values)]
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_page_quotes_its_verdicts_and_a_planted_wrong_word_fails_the_check(tmp_path, capsys):
    _sweep(tmp_path, {"threshold": 0.9, "margin": 0.02}, {"standard": [1.0, 0.99, 1.0], "frozen_qk": [0.5, 0.48, 0.5]})
    page = tmp_path / "README.md"
    rows = ["<!--q s frozen_qk test.accuracy verdict=solves vs standard-->does not<!--/q-->",
            "<!--q s standard test.accuracy verdict=solves-->agrees<!--/q-->",
            "<!--q s frozen_qk test.accuracy verdict=below minus standard-->agrees<!--/q-->",
            "<!--q s frozen_qk test.accuracy verdict=equal minus standard-->does not<!--/q-->"]
    page.write_text("\n".join(rows) + "\n")
    assert quote_file(page, check=True) == []
    page.write_text("\n".join([rows[0].replace(">does not<", ">agrees<"), *rows[1:]]) + "\n")  # typed, not computed
    assert main(["quote", "--check", str(page)]) == 2
    out = capsys.readouterr()
    assert "'agrees' -> 'does not'" in out.out and "differ from their records" in out.err


@pytest.mark.parametrize("spec, says", [
    ("s frozen_qk test.accuracy verdict=below", "name the second with 'minus'"),
    ("s frozen_qk test.accuracy verdict=solves minus standard", "judges one setting"),
    ("s frozen_qk test.accuracy verdict=equal minus standard vs standard", "'vs' names the reference of verdict=solves"),
    ("s frozen_qk test.accuracy verdict=wins", "a rule of solves, fails, below, above, equal, near"),
    ("s frozen_qk test.accuracy .1 vs standard", "'vs' names the reference of a verdict"),
])
def test_a_malformed_verdict_is_refused_in_words(tmp_path, spec, says):
    from modformer.sweep.quote import Records, render

    _sweep(tmp_path, {"threshold": 0.9}, {"standard": [1.0, 0.99, 1.0], "frozen_qk": [0.5, 0.48, 0.5]})
    with pytest.raises(ModformerError, match=says.replace("(", r"\(")):
        render(spec, Records(tmp_path))


def test_the_verdicts_parameters_are_planned_an_amendment_after_the_runs(tmp_path, capsys):
    """Declared at the first launch they are the plan's; declared later (--plan-only, starting
    nothing) only as an amendment with its reason, which the report shows."""
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"d_model": 16, "n_heads": 2}, "task": {"name": "retrieval", "n_pairs": 2, "test_size": 20,
                                                       "validation_size": 10},
        "train": {"steps": 2, "batch_size": 4}, "sweep": {"variants": ["standard"], "seeds": [0]}}))
    out = tmp_path / "out"
    assert main(["sweep", str(config), "sweep.verdict.threshold=0.9", "--plan-only", "--out", str(out)]) == 0
    assert not (out / "runs").exists() and not (out / "results.jsonl").exists()  # nothing started
    plan = yaml.safe_load((out / "plan.yaml").read_text())
    assert plan["plan"]["verdict"] == {"threshold": 0.9} and plan["amendments"] == []
    capsys.readouterr()
    assert main(["sweep", str(config), "sweep.verdict.threshold=0.8", "--plan-only", "--out", str(out)]) == 2
    assert "--amend REASON" in capsys.readouterr().err
    assert main(["sweep", str(config), "sweep.verdict.threshold=0.8", "--plan-only", "--amend", "the page's rule",
                 "--out", str(out)]) == 0
    amendment = yaml.safe_load((out / "plan.yaml").read_text())["amendments"][0]
    assert amendment["reason"] == "the page's rule" and amendment["changed"] == ['verdict: {"threshold": 0.9} -> '
                                                                                 '{"threshold": 0.8}']
    assert "--plan-only" in (out / "commands.txt").read_text().splitlines()[-1]


def test_with_a_span_a_failure_needs_a_flat_budget_curve():
    """The random-attention page's rule: 'does not' only over a 16x curve that stays failed and
    flat; a failure at one budget, on a short curve or a rising one is 'unconverged'."""
    params = VerdictConfig(threshold=0.9, span=16, flat=0.02)
    flat = [(200, [0.5, 0.49, 0.5]), (800, [0.5, 0.5, 0.49]), (3200, [0.5, 0.49, 0.5])]
    assert verdict("solves", flat[-1][1], params, "here", curve=flat) == "does not"
    assert verdict("solves", flat[-1][1], params, "here") == "unconverged"  # no curve
    assert verdict("solves", flat[-1][1], params, "here", curve=flat[1:]) == "unconverged"  # 4x only
    rising = [*flat[:2], (3200, [0.6, 0.62, 0.61])]
    assert verdict("solves", rising[-1][1], params, "here", curve=rising) == "unconverged"
    assert verdict("solves", [1.0, 1.0, 0.99], params, "here", curve=flat) == "agrees"
    assert verdict("below", [0.3, 0.31, 0.29], params, "here") == "unconverged"  # against the claim, one budget
    assert verdict("fails", [0.99, 0.95, 0.97], params, "here") == "does not"  # solved: more budget would not undo it


def test_a_verdict_over_a_budget_axis_reads_the_curve_of_the_records(tmp_path):
    from modformer.sweep.quote import Records, render

    folder = tmp_path / "s"
    folder.mkdir()
    sweep = {"variants": ["frozen_qk"], "grid": {"train.steps": [200, 3200]}, "seeds": [0, 1],
             "verdict": {"threshold": 0.9, "span": 16}}
    (folder / "sweep.yaml").write_text(yaml.safe_dump({"format": RECORDS_FORMAT, "sweep": sweep}))
    lines = [json.dumps({"run_id": f"frozen_qk/train.steps={b}/seed{s}", "run_dir": "x", "variant": "frozen_qk",
                         "point": {"train.steps": b}, "seed": s, "status": "done",
                         "summary": {"test": {"accuracy": 0.5}}}) for b in (200, 3200) for s in (0, 1)]
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    assert render("s frozen_qk test.accuracy verdict=solves over train.steps", Records(tmp_path)) == "does not"
    assert render("s frozen_qk train.steps=3200 test.accuracy verdict=solves", Records(tmp_path)) == "unconverged"


def test_near_at_the_exact_edges_of_its_margin():
    """An interval that ends exactly on the margin's edge lies within it (agrees), and one that
    ends exactly on its lower edge from below is not outside it (no order)."""
    from modformer.stats import summarize

    values = [1.0, 2.0, 3.0]
    low, high = summarize(values).interval(None)  # -0.484..., 4.484...
    target = low + 4.0
    assert target - 4.0 == low and high <= target + 4.0  # the edges are exact in floating point
    assert verdict("near", values, VerdictConfig(margin=4.0), "here", target=target) == "agrees"
    target = high + 0.5
    assert target - 0.5 == high
    assert verdict("near", values, VerdictConfig(margin=0.5), "here", target=target) == "no order at this budget"
    assert verdict("near", values, VerdictConfig(margin=0.5), "here", target=target + 0.5) == "does not"
